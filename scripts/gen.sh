#!/usr/bin/env bash
# Regenerates gen/ and the merged OpenAPI document from proto/ with the pinned plugins in ./bin.
# With --check it generates into a scratch directory and fails if anything differs from what is
# committed. Needs no network once scripts/tools.sh has run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/tools.sh
if [ "${1:-}" = "--check" ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
  ./bin/buf generate -o "$out"
  diff -r "$out/gen/jobmesh" gen/jobmesh
  diff "$out/services/gateway/openapi/jobmesh.swagger.json" services/gateway/openapi/jobmesh.swagger.json
  echo "gen/ is up to date"
  exit 0
fi
rm -rf gen/jobmesh services/gateway/openapi/jobmesh.swagger.json
./bin/buf generate
