#!/usr/bin/env bash
# make demo: one broker on its embedded store (its own redis-server, AOF on),
# three workers; a few dozen jobs due over the next ~10 s; each one's due
# time and start time shown as it runs. Everything started here is stopped
# on exit.
set -euo pipefail
BIN=$(cd "${1:-build/bin}" && pwd)
WORK=$(mktemp -d /tmp/dueq-demo-XXXXXX)
# shellcheck source=scripts/processes.sh
. "$(dirname "$0")/processes.sh"
trap 'stop_started; rm -rf "$WORK"' EXIT

BROKER_PORT=$(free_port)
export DUEQ_BROKER=tcp://127.0.0.1:$BROKER_PORT

echo "== starting dueq-broker on $DUEQ_BROKER, with its embedded store (redis-server, AOF everysec) in $WORK/data"
"$BIN/dueq-broker" --data-dir "$WORK/data" --listen "$DUEQ_BROKER" >"$WORK/broker.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do "$BIN/dueq" --timeout 200ms stats >/dev/null 2>&1 && break; sleep 0.05; done

# The demo handler prints when the job was due, when its worker received it
# from the broker (the broker's dispatch lateness, plus a loopback hop) and
# when the handler started (starting a shell script takes a few ms more).
cat >"$WORK/job.sh" <<'JOB'
#!/bin/sh
started=$(date +%s%3N)
printf '%-10s %-8s due %s  received +%d ms  started +%d ms  (worker %s)\n' "$(cat)" "$DUEQ_JOB_TYPE" \
  "$(date -u -d @$((DUEQ_DUE_AT_MS / 1000)) +%H:%M:%S).$(printf %03d $((DUEQ_DUE_AT_MS % 1000)))" \
  $((DUEQ_RECEIVED_AT_MS - DUEQ_DUE_AT_MS)) $((started - DUEQ_DUE_AT_MS)) "$WORKER" >>"$OUT"
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
echo "== jobs as they start: 'received' is when the worker got the job from the broker, 'started' when the"
echo "   handler (a shell script) began, both after the due time"
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
summary() {  # summary FIELD: min, median and max of the ms after FIELD
  awk -v f="$1" '{ for (i = 1; i <= NF; i++) if ($i == f) { v = $(i + 1); sub(/^\+/, "", v); print v } }' "$WORK/runs.txt" |
    sort -n | awk -v f="$1" '{ v[NR] = $1 } END { printf "%s min %d ms, median %d ms, max %d ms", f, v[1], v[int((NR + 1) / 2)], v[NR] }'
}
early=$(awk '{ for (i = 1; i <= NF; i++) if (($i == "received" || $i == "started") && $(i + 1) ~ /^\+?-/) { n++; break } } END { print n + 0 }' "$WORK/runs.txt")
echo "== all $shown jobs ran, $([ "$early" = 0 ] && echo "none before its due time" || echo "$early BEFORE THEIR DUE TIME"): $(summary received); $(summary started)"
echo "== stopping everything"
