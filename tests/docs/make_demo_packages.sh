#!/usr/bin/env bash
# `make demo` installs what building and the demo need and nothing only the
# tests use; `make test` installs both. Read from the recipes make would run
# (make -n prints the install loop with its whole package list, whatever
# this machine has installed already).
set -euo pipefail
cd "$(dirname "$0")/../.."
packages_of() {
  make -n "$1" 2>/dev/null | tr ' ;"' '\n\n\n' | grep -E '^[a-z0-9][a-z0-9.+-]+$' | sort -u
}
demo=$(packages_of demo)
test=$(packages_of test)
fail=0
for tool in chromium prometheus mypy tmux redis-sentinel libgtest-dev python3-websocket iptables; do
  if grep -qx "$tool" <<<"$demo"; then echo "make demo would install $tool, which only the tests need"; fail=1; fi
  if ! grep -qx "$tool" <<<"$test"; then echo "make test would not install $tool"; fail=1; fi
done
for needed in cmake libzmq3-dev libhiredis-dev redis-server; do
  if ! grep -qx "$needed" <<<"$demo"; then echo "make demo would not install $needed"; fail=1; fi
done
[ $fail -eq 0 ] && echo "make demo installs only what building and the demo need"
exit $fail
