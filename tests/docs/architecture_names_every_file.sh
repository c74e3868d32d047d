#!/bin/bash
# Rule: docs/architecture.md names every source file of the product and the
# bench, with its folder, so that a reader finds a responsibility by its
# file name. A header is named through its .cpp when it has one.
set -u
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
doc="$root/docs/architecture.md"
missing=0
cd "$root" || exit 2
for file in $(find broker common worker clients/cpp cli bench include/dueq lua/lib -name '*.cpp' -o -name '*.hpp' -o -name '*.lua' | sort); do
  case "$file" in
    *.hpp) [ -e "${file%.hpp}.cpp" ] && continue ;;
  esac
  if ! grep -qF "\`$file\`" "$doc"; then
    echo "docs/architecture.md does not name $file"
    missing=$((missing + 1))
  fi
done
[ "$missing" -eq 0 ] || { echo "$missing files unnamed"; exit 1; }
echo "every source file is named"
