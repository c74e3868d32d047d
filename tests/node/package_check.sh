#!/bin/bash
# The Node.js package (clients/node), built with `tsc --strict` by the
# fixture node.InstallsFromItsLockfileAndBuilds (a finding fails it): `npm pack`
# makes a package that installs into a new project as a user installs it
# (its dependencies at the versions package.json pins, from npm's cache
# where `make test`'s npm ci left them; on a fresh machine the registry's
# metadata of each, which npm ci never fetches, comes from the network), and the
# README's worker and producer run as printed against a real broker: the
# producer's jobs reach the worker's handler, and SIGTERM drains it; then a
# job's trace context reaches a Node handler (trace_check.mjs).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${DUEQ_BIN:-$root/build/bin}"
. "$root/scripts/processes.sh"
work="$(mktemp -d /tmp/dueq-node-XXXXXX)"
trap 'stop_started; rm -rf "$work"' EXIT

cd "$root/clients/node"
npm pack --ignore-scripts --silent --pack-destination "$work" >/dev/null  # dist/ is the fixture's build
mkdir "$work/app" && cd "$work/app"
npm init -y >/dev/null && npm pkg set type=module
npm install --prefer-offline --no-audit --no-fund --silent "$work"/dueq-*.tgz
test -f node_modules/dueq/dist/index.d.ts || { echo "the package has no type declarations"; exit 1; }
test ! -e node_modules/dueq/src || { echo "the package ships its sources"; exit 1; }

start_broker "$bin/dueq" "$work/broker.log" "$bin/dueq-broker" --data-dir "$work/data"
endpoint=$BROKER_ENDPOINT

# The README's two ```js blocks, with the names they leave to the reader.
python3 - "$root/clients/node/README.md" "$endpoint" "$work" <<'PY'
import re, sys
readme, endpoint, work = sys.argv[1:]
worker, producer = re.findall(r"```js\n(.*?)```", open(readme).read(), re.S)[:2]
sent = f"{work}/sent"
open(f"{work}/app/worker.js", "w").write(
    'import { appendFileSync } from "node:fs";\n'
    f'const smtpSend = async (message) => appendFileSync({sent!r}, message.to + "\\n");\n'
    + worker.replace("tcp://broker.internal:7600", endpoint))
open(f"{work}/app/producer.js", "w").write(
    'const bodies = [\'{"to": "first@example.com"}\', \'{"to": "second@example.com"}\'];\n'
    + producer.replace("tcp://broker.internal:7600", endpoint))
PY
node worker.js >"$work/worker.log" 2>&1 &
worker=$!
PIDS+=($worker)
node producer.js >"$work/producer.out"
grep -q "s: 'scheduled'" "$work/producer.out" || { echo "the producer printed:"; cat "$work/producer.out"; exit 1; }
for _ in $(seq 200); do
  [ "$(sort "$work/sent" 2>/dev/null | tr '\n' ' ')" = "first@example.com second@example.com " ] && break
  sleep 0.05
done
[ "$(sort "$work/sent" 2>/dev/null | tr '\n' ' ')" = "first@example.com second@example.com " ] ||
  { echo "the worker did not send both:"; cat "$work/sent" "$work/worker.log" 2>&1; exit 1; }
kill -TERM "$worker"
code=0; wait "$worker" || code=$?
[ "$code" -eq 0 ] || { echo "the worker exited $code after SIGTERM:"; cat "$work/worker.log"; exit 1; }
grep -q "draining" "$work/worker.log" || { echo "no drain in the worker's log:"; cat "$work/worker.log"; exit 1; }
echo "README example: both jobs sent, drained on SIGTERM"
cp "$root/tests/node/trace_check.mjs" .
node trace_check.mjs "$endpoint"
cp "$root/tests/node/flow_check.mjs" .
node flow_check.mjs "$endpoint"
