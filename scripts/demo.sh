#!/usr/bin/env bash
# make demo: one broker on its embedded store (its own redis-server, AOF on),
# three workers; a few dozen jobs due over the next ~10 s; each one's due
# time and start time shown as it runs. Everything started here is stopped
# on exit.
set -euo pipefail
BIN=$(cd "${1:-build/bin}" && pwd)
WORK=$(mktemp -d /tmp/dueq-demo-XXXXXX)
PIDS=()

cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() {
  local port
  while true; do
    port=$((20000 + RANDOM % 20000))
    (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null || { echo "$port"; return; }
  done
}

BROKER_PORT=$(free_port)
export DUEQ_BROKER=tcp://127.0.0.1:$BROKER_PORT

echo "== starting dueq-broker on $DUEQ_BROKER, with its embedded store (redis-server, AOF everysec) in $WORK/data"
"$BIN/dueq-broker" --data-dir "$WORK/data" --listen "$DUEQ_BROKER" >"$WORK/broker.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do "$BIN/dueq" --timeout 200ms stats >/dev/null 2>&1 && break; sleep 0.05; done

# The demo handler prints when it started against when the job was due.
cat >"$WORK/job.sh" <<'JOB'
#!/bin/sh
started=$(date +%s%3N)
printf '%-10s %-8s due %s  started %s  late %3d ms  (worker %s)\n' "$(cat)" "$DUEQ_JOB_TYPE" \
  "$(date -u -d @$((DUEQ_DUE_AT_MS / 1000)) +%H:%M:%S).$(printf %03d $((DUEQ_DUE_AT_MS % 1000)))" \
  "$(date -u -d @$((started / 1000)) +%H:%M:%S).$(printf %03d $((started % 1000)))" \
  $((started - DUEQ_DUE_AT_MS)) "$WORKER" >>"$OUT"
JOB
chmod +x "$WORK/job.sh"

echo "== starting 3 workers"
for w in 1 2 3; do
  WORKER=w$w OUT="$WORK/runs.txt" "$BIN/dueq-worker" --queue demo --concurrency 4 --exec "*=$WORK/job.sh" \
    >"$WORK/worker$w.log" 2>&1 &
  PIDS+=($!)
done
sleep 0.5

JOBS=36
echo "== scheduling $JOBS jobs due over the next 10 s"
for i in $(seq 1 $JOBS); do
  printf '{"queue":"demo","type":"%s","payload":"job-%02d","delay_ms":%d}\n' \
    "$([ $((i % 3)) = 0 ] && echo report || echo email)" "$i" $((i * 10000 / JOBS))
done >"$WORK/jobs.jsonl"
"$BIN/dueq" enqueue --from "$WORK/jobs.jsonl"
"$BIN/dueq" stats
echo
echo "== jobs as they start (the handler is a shell script, so 'late' includes starting it)"
touch "$WORK/runs.txt"
shown=0
for _ in $(seq 300); do
  lines=$(wc -l <"$WORK/runs.txt")
  if [ "$lines" -gt "$shown" ]; then
    tail -n +$((shown + 1)) "$WORK/runs.txt" | head -n $((lines - shown))
    shown=$lines
  fi
  [ "$shown" -ge "$JOBS" ] && break
  sleep 0.1
done
echo
"$BIN/dueq" stats
if [ "$shown" -lt "$JOBS" ]; then
  echo "demo FAILED: only $shown of $JOBS jobs ran; logs:"; tail -n 20 "$WORK"/*.log
  exit 1
fi
awk '{ for (i = 1; i <= NF; i++) if ($i == "late") print $(i + 1) }' "$WORK/runs.txt" | sort -n |
  awk '{ v[NR] = $1 } END { printf "== all %d jobs ran, %s; lateness min %d ms, median %d ms, max %d ms\n", NR,
        (v[1] >= 0 ? "none before its due time" : "SOME BEFORE THEIR DUE TIME"), v[1], v[int((NR + 1) / 2)], v[NR] }'
echo "== stopping everything"
