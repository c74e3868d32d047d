#!/bin/bash
# The Node.js package with CurveZMQ keys and several broker endpoints, the
# first a standby: a worker and a producer given the standby first find the
# leader (not_leader names it), the producer's jobs all run on the worker
# whose key the allow list names, and a worker with a key it does not name
# is never welcomed and runs nothing.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${DUEQ_BIN:-$root/build/bin}"
. "$root/scripts/processes.sh"
work="$(mktemp -d /tmp/dueq-node-keys-XXXXXX)"
trap 'stop_started; rm -rf "$work"' EXIT

for name in broker worker producer stranger; do "$bin/dueq" keygen "$work/$name" >/dev/null; done
public() { sed -n 's/^public = "\(.*\)"$/\1/p' "$work/$1.pub"; }
cat >"$work/allow.toml" <<TOML
[[key]]
name = "worker"
public = "$(public worker)"
role = "worker"
queues = ["*"]
[[key]]
name = "producer"
public = "$(public producer)"
role = "producer"
queues = ["*"]
TOML

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$work" --save '' --appendonly yes >"$work/redis.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.05; done
leader=tcp://127.0.0.1:$(free_port)
standby=tcp://127.0.0.1:$(free_port)
curve=(--redis "redis://127.0.0.1:$redis_port" --curve-key "$work/broker.key" --allow-list "$work/allow.toml" --log-level info)
"$bin/dueq-broker" "${curve[@]}" --listen "$leader" >"$work/leader.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 200); do grep -q "listening on" "$work/leader.log" && break; sleep 0.05; done
"$bin/dueq-broker" "${curve[@]}" --listen "$standby" >"$work/standby.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 200); do grep -q "standing by" "$work/standby.log" && break; sleep 0.05; done
grep -q "standing by" "$work/standby.log" || { echo "no standby:"; cat "$work/standby.log"; exit 1; }

worker_with() {  # KEY RECORD LOG
  node "$root/tests/node/record_worker.mjs" --broker "$standby" --broker "$leader" --queue q --record "$2" \
    --broker-pub "$work/broker.pub" --key "$work/$1.key" >"$3" 2>&1 &
  PIDS+=($!)
}
worker_with stranger "$work/stranger.rec" "$work/stranger.log"
worker_with worker "$work/worker.rec" "$work/worker.log"
node --input-type=module -e "
  import { Producer, curveKeysFromFiles } from '$root/clients/node/dist/index.js';
  const producer = new Producer(['$standby', '$leader'], { keys: curveKeysFromFiles('$work/broker.pub', '$work/producer.key'), timeoutMs: 20000 });
  const jobs = Array.from({ length: 20 }, (_, i) => ({ queue: 'q', type: 'noop', id: 'k-' + i }));
  const results = await producer.enqueueMany(jobs);
  producer.close();
  if (results.some((r) => r.status !== 0)) { console.error(JSON.stringify(results)); process.exit(1); }
"
for _ in $(seq 400); do [ "$(cat "$work/worker.rec" 2>/dev/null | wc -l)" -ge 20 ] && break; sleep 0.05; done
ran=$(cut -d' ' -f1 "$work/worker.rec" 2>/dev/null | sort -u | wc -l)
[ "$ran" -eq 20 ] || { echo "the keyed worker ran $ran of 20:"; cat "$work/worker.log"; exit 1; }
grep -q "welcomed by broker" "$work/worker.log" || { echo "the worker was not welcomed:"; cat "$work/worker.log"; exit 1; }
for _ in $(seq 200); do grep -q "no WELCOME" "$work/stranger.log" && break; sleep 0.05; done
grep -q "no WELCOME" "$work/stranger.log" || { echo "the stranger was not refused:"; cat "$work/stranger.log"; exit 1; }
[ ! -s "$work/stranger.rec" ] || { echo "the stranger ran jobs:"; cat "$work/stranger.rec"; exit 1; }
echo "keys and endpoints: 20 jobs from the standby-first producer ran on the keyed worker; the stranger got nothing"
