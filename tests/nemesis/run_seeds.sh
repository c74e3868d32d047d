#!/bin/bash
# Plays several nemesis seeds at once (they mostly wait: one ctest slot for
# all of them) and fails if any fails; skipped (77) if every one skips.
#   run_seeds.sh NEMESIS_RUN "FLAGS" SEED...
set -u
run=$1 flags=$2
shift 2
dir=$(mktemp -d /tmp/dueq-nemesis-seeds-XXXXXX)
pids=()
for seed in "$@"; do
  # shellcheck disable=SC2086  # flags are words
  "$run" --seed "$seed" $flags >"$dir/$seed.log" 2>&1 &
  pids+=($!)
done
failed=0 skipped=0 i=0
for seed in "$@"; do
  wait "${pids[$i]}"
  code=$?
  i=$((i + 1))
  echo "=== seed $seed: exit $code"
  cat "$dir/$seed.log"
  if [ "$code" -eq 77 ]; then skipped=$((skipped + 1)); elif [ "$code" -ne 0 ]; then failed=1; fi
done
rm -rf "$dir"
[ "$failed" -eq 0 ] || exit 1
[ "$skipped" -lt "$#" ] || exit 77
exit 0
