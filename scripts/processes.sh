# Sourced by the scripts that start dueq processes (scripts/demo.sh,
# tests/install/*.sh): PIDS collects what they start, stop_started stops it
# all (from their EXIT trap), free_port picks a loopback port nobody
# listens on.
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
