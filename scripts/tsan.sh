#!/usr/bin/env bash
# Runs the end-to-end and recovery suites on a ThreadSanitizer build. Every
# process they start (broker, workers, CLI) writes its reports to
# BUILD/tsan-reports/; the run fails if a test fails or any report exists.
#   scripts/tsan.sh BUILD_DIR
set -uo pipefail
build=$(cd "$1" && pwd)
reports=$build/tsan-reports
rm -rf "$reports" && mkdir -p "$reports"
# exitcode=0: a process with reports exits as it would have, so the tests
# judge its behaviour; the reports themselves fail the run below.
export TSAN_OPTIONS="log_path=$reports/report:exitcode=0:second_deadlock_stack=1:suppressions=$(cd "$(dirname "$0")" && pwd)/tsan.supp"
failed=0
for suite in e2e_tests recovery_tests; do
  start=$(date +%s)
  "$build/bin/$suite" --gtest_brief=1 >"$build/tsan-$suite.log" 2>&1 || failed=1
  echo "$suite: $(grep -E '^\[  (PASSED|FAILED)  \]' "$build/tsan-$suite.log" | tr '\n' ' ')($(($(date +%s) - start)) s)"
done
count=$(find "$reports" -type f | wc -l)
echo "ThreadSanitizer reports: $count (in $reports)"
if [ "$count" -gt 0 ]; then
  grep -h "^WARNING: ThreadSanitizer\|^SUMMARY" "$reports"/* | sort | uniq -c | sort -rn | head -20
  failed=1
fi
exit $failed
