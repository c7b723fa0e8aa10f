#!/usr/bin/env bash
# Regenerates gen/ and the OpenAPI 3 document from proto/ with the pinned plugins in ./bin:
# buf makes gen/ and a Swagger 2.0 document (bin/openapiv2, not committed), which
# services/gateway/openapi/openapigen converts and completes into
# services/gateway/openapi/openapi.json. With --check it generates into a scratch directory and
# fails if anything differs from what is committed. Needs no network once scripts/tools.sh has
# run and the Go module cache holds the root module's dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/tools.sh
SWAGGER=bin/openapiv2/jobmesh.swagger.json
OPENAPI=services/gateway/openapi/openapi.json
openapigen() { go run ./services/gateway/openapi/openapigen -in "$1" -out "$2"; }
if [ "${1:-}" = "--check" ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
  ./bin/buf generate -o "$out"
  diff -r "$out/gen/jobmesh" gen/jobmesh
  openapigen "$out/$SWAGGER" "$out/openapi.json"
  diff "$out/openapi.json" "$OPENAPI"
  echo "gen/ and $OPENAPI are up to date"
  exit 0
fi
rm -rf gen/jobmesh bin/openapiv2
./bin/buf generate
openapigen "$SWAGGER" "$OPENAPI"
