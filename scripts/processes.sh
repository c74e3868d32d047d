# Sourced by the scripts that start dueq processes (scripts/demo.sh,
# tests/install/*.sh, tests/node/*.sh): PIDS collects what they start,
# stop_started stops it all (from their EXIT trap), free_port picks a
# loopback port nobody listens on, start_broker starts a broker on one.
PIDS=()

stop_started() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  PIDS=()
}

free_port() {
  local port
  while true; do
    port=$((20000 + RANDOM % 20000))
    (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null || { echo "$port"; return; }
  done
}

# start_broker DUEQ LOG BROKER_COMMAND...: starts BROKER_COMMAND with
# `--listen tcp://127.0.0.1:PORT` on a free port, output to LOG, and waits
# until the dueq CLI (DUEQ) gets its stats; sets BROKER_ENDPOINT. A port
# free_port found can be taken before the broker binds it (tests run beside
# each other): a broker that exits is started again on another port, up to
# three times. Returns 1, printing the log, if none answers.
start_broker() {
  local dueq=$1 log=$2 attempt pid
  shift 2
  for attempt in 1 2 3; do
    BROKER_ENDPOINT=tcp://127.0.0.1:$(free_port)
    "$@" --listen "$BROKER_ENDPOINT" >"$log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    for _ in $(seq 600); do
      "$dueq" --broker "$BROKER_ENDPOINT" --timeout 200ms stats >/dev/null 2>&1 && return 0
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
    echo "the broker did not answer on $BROKER_ENDPOINT (attempt $attempt):"
    cat "$log"
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  return 1
}
