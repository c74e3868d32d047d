#!/usr/bin/env bash
# Runs each libFuzzer target for SECONDS, starting from its committed corpus
# (tests/fuzz/corpus/NAME) and keeping what it finds in BUILD/fuzz-corpus/NAME.
# Prints the executions per target; fails if any target crashed.
#   scripts/fuzz.sh BUILD_DIR SECONDS [MERGE]
# MERGE=1 adds the new inputs that cover new code to the committed corpus
# (minimised by libFuzzer's -merge), for `make test`'s replay.
set -euo pipefail
build=$1 seconds=$2 merge=${3:-0}
source_dir=$(cd "$(dirname "$0")/.." && pwd)
failed=0
printf '%-14s %14s %10s %s\n' target executions exec/s result
for name in frame_decoder job_record config redis_url cluster_reply cron; do
  corpus=$build/fuzz-corpus/$name artifacts=$build/fuzz-artifacts/$name/
  mkdir -p "$corpus" "$artifacts"
  log=$build/fuzz-$name.log
  status=ok
  "$build/bin/${name}_fuzz" -max_total_time="$seconds" -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$artifacts" "$corpus" "$source_dir/tests/fuzz/corpus/$name" >"$log" 2>&1 || status="CRASH (see $log, $artifacts)"
  [ "$status" = ok ] || failed=1
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  printf '%-14s %14s %10s %s\n' "$name" "${execs:-?}" "${rate:-?}" "$status"
  if [ "$merge" = 1 ] && [ "$status" = ok ]; then
    "$build/bin/${name}_fuzz" -merge=1 "$source_dir/tests/fuzz/corpus/$name" "$corpus" >>"$log" 2>&1
  fi
done
exit $failed
