#!/usr/bin/env bash
# `cmake --install` into a fresh prefix, then a worker and a producer of
# one's own built out of tree against it both ways (find_package(dueq), and
# pkg-config with g++), and jobs run through them by a broker started from
# the installed bin/ on its embedded store: the cmake-built worker with the
# pkg-config-built producer, then the other way round.
set -euo pipefail
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$(dirname "$0")" && pwd)/consumer
WORK=$(mktemp -d /tmp/dueq-install-XXXXXX)
# shellcheck source=scripts/processes.sh
. "$(dirname "$0")/../../scripts/processes.sh"
trap 'stop_started; rm -rf "$WORK"' EXIT
PREFIX=$WORK/prefix

cmake --install "$BUILD" --prefix "$PREFIX" >"$WORK/install.log"
for f in bin/dueq-broker bin/dueq-worker bin/dueq include/dueq/client.hpp include/dueq/worker.hpp include/dueq/job.hpp; do
  [ -e "$PREFIX/$f" ] || { echo "not installed: $f"; exit 1; }
done
PC=$(dirname "$(find "$PREFIX" -name dueq.pc)")
LIBDIR=$(dirname "$(find "$PREFIX" -name 'libdueq.so' | head -1)")

echo "== find_package(dueq)"
cmake -S "$SRC" -B "$WORK/by-cmake" -G Ninja -DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_BUILD_TYPE=Release >"$WORK/cmake.log"
cmake --build "$WORK/by-cmake" >>"$WORK/cmake.log"

echo "== pkg-config dueq"
export PKG_CONFIG_PATH=$PC
mkdir -p "$WORK/by-pkg"
for program in worker producer; do
  # shellcheck disable=SC2046
  g++ -std=c++23 -O1 "$SRC/$program.cpp" -o "$WORK/by-pkg/greet-$program" $(pkg-config --cflags --libs dueq) -Wl,-rpath,"$LIBDIR"
done

start_broker "$PREFIX/bin/dueq" "$WORK/broker.log" "$PREFIX/bin/dueq-broker" --data-dir "$WORK/data"
ENDPOINT=$BROKER_ENDPOINT

run_through() {  # worker build, producer build, payload
  "$WORK/$1/greet-worker" "$ENDPOINT" >"$WORK/worker-$1.log" 2>&1 &
  local worker=$!
  PIDS+=("$worker")
  local got
  got=$("$WORK/$2/greet-producer" "$ENDPOINT" "$3" "job-$3")
  kill -TERM "$worker"
  wait "$worker" || { echo "the $1 worker did not stop cleanly"; cat "$WORK/worker-$1.log"; exit 1; }
  [ "$got" = "hello $3" ] || { echo "the $2 producer got '$got', not 'hello $3'"; exit 1; }
  echo "$1 worker, $2 producer: $got"
}
run_through by-cmake by-pkg first
run_through by-pkg by-cmake second
"$PREFIX/bin/dueq" --broker "$ENDPOINT" job job-second --queue installed | grep -q "state:        done"
echo "an installed dueq runs jobs through programs built against it, both ways"
