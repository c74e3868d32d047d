#!/bin/bash
# Rule: the README's first screen after the quick start works when pasted in
# order: its shell blocks between the first-screen markers run as one script
# in a fresh directory, with the build's programs on the PATH; the worker
# prints each job's payload, and stats answer the admin key only.
set -u
root=$1
bin=$2
work=$(mktemp -d /tmp/dueq-readme-XXXXXX)
trap 'pkill -P $$ 2>/dev/null; rm -rf "$work"' EXIT
awk '/<!-- first-screen/ { on = 1; next } /<!-- end of first-screen/ { on = 0 }
     on && /^```sh$/ { code = 1; next } on && /^```$/ { code = 0; next } on && code' "$root/README.md" > "$work/screen.sh"
[ -s "$work/screen.sh" ] || { echo "no first-screen blocks in README.md"; exit 1; }
cd "$work" && mkdir build && ln -s "$bin" build/bin
timeout 120 bash -e screen.sh > out.txt 2>&1
code=$?
cat out.txt
[ "$code" = 0 ] || { echo "FAILED: the first screen exited $code"; exit 1; }
for expected in "hello in 2 s" "hello with keys" "refused (exit 77)" "emails"; do
  grep -qF "$expected" out.txt || { echo "FAILED: no '$expected' in its output"; exit 1; }
done
echo "the first screen runs as written"
