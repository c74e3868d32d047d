#!/bin/bash
# The fixture of the Node.js tests: clients/node's dependencies as its
# lockfile pins them, and dist/ built by `tsc --strict` (a finding fails
# it). `make test` runs npm ci (whose prepare script builds) while it
# compiles, so this installs only what is missing or other than the
# lockfile says (npm ls), and builds only when a source is newer than dist/.
set -euo pipefail
cd "$(dirname "$0")/../../clients/node"
npm ls --all >/dev/null 2>&1 || npm ci --no-audit --no-fund
if [ ! -f dist/index.js ] || [ -n "$(find src tsconfig.json package.json -newer dist/index.js)" ]; then
  npm run --silent build
fi
echo "installed from the lockfile; dist/ built by tsc --strict"
