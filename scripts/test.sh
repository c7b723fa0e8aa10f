#!/usr/bin/env bash
# The test command (make test, and CI through .ci/run): formatting, buf lint, the generation check,
# go vet and go build in every module alone and through go.work, and every module's tests with
# -race against a real Postgres. A missing dependency fails; nothing is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
step() { printf '\n== %s\n' "$*"; }

command -v go >/dev/null || { echo "go is not installed" >&2; exit 1; }

step "tools (pinned generators into ./bin)"
bash scripts/tools.sh

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' | grep -v '^gen/') 2>/dev/null || true)
if [ -n "$unformatted" ]; then echo "not gofmt'ed:"; echo "$unformatted"; exit 1; fi

step "buf lint"
./bin/buf lint

step "generation check (buf generate must reproduce gen/ and the OpenAPI document)"
bash scripts/gen.sh --check

step "go vet and go build: each module alone, then through go.work"
for m in gen services/executor-agent .; do
  (cd "$m" && GOWORK=off go build ./... && GOWORK=off go vet ./...)
done
go build ./... ./gen/... ./services/executor-agent/...
go vet ./... ./services/executor-agent/...

step "postgres"
source scripts/pg.sh
pg_ensure
echo "tests use $JOBMESH_TEST_DATABASE_URL"

step "go test -race"
go test -race -count=1 -timeout 20m ./... ./services/executor-agent/...

step "all checks passed"
