#!/bin/bash
# The Python package installs with pip from the repo (into a venv that sees
# Debian's python3-zmq, python3-msgpack and python3-xxhash, its dependencies
# resolved from them; nothing fetched),
# imports from outside the repo with its py.typed marker, and passes
# `mypy --strict`.
set -euo pipefail
src="$(cd "$(dirname "$0")/../../clients/python" && pwd)"
work="$(mktemp -d /tmp/dueq-pip-XXXXXX)"
trap 'rm -rf "$work"' EXIT
cp -r "$src" "$work/src"  # pip builds in the source tree: keep the repo's clean
rm -rf "$work/src/build" "$work/src/"*.egg-info
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
# As the README says, dependencies resolved (not --no-deps): Debian's
# modules must satisfy them, since no index can be reached (--no-index, and
# PIP_INDEX_URL pointing nowhere should pip try one anyway).
PIP_INDEX_URL=http://127.0.0.1:9/ "$work/venv/bin/pip" install --quiet --no-build-isolation --no-index "$work/src"
cd "$work"
"$work/venv/bin/python" - <<'PY'
import pathlib
import dueq
where = pathlib.Path(dueq.__file__).parent
assert "site-packages" in str(where), where
assert (where / "py.typed").exists(), "py.typed is not installed"
assert dueq.Worker and dueq.Producer
print("installed", dueq.__version__, "at", where)
PY
mypy --strict --no-error-summary "$src/dueq"
echo "mypy --strict: clean"
