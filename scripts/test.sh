#!/usr/bin/env bash
# The test command (make test, and CI through .ci/run): formatting, buf lint, the generation check,
# go vet and go build in every module alone and through go.work, and every module's tests with
# -race against a real Postgres (and MariaDB for the XXL-JOB importer). A missing dependency fails;
# nothing is skipped.
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
# gen and the root module build alone as they are (the root module's replace directives name the
# working tree). The agent module requires gen at its release version, which go would fetch from
# the module proxy: modrun serves the working tree's gen at that version from a local module
# proxy, without go.work or replace directives, as a user's go get sees the tagged modules
# (docs/releasing.md).
for m in gen .; do
  (cd "$m" && GOWORK=off go build ./... && GOWORK=off go vet ./...)
done
go run ./internal/modproxy/modrun services/executor-agent bash -c 'go build ./... && go vet ./...'
go build ./... ./gen/... ./services/executor-agent/...
go vet ./... ./services/executor-agent/...
# The container images hold static binaries (Dockerfile): they must build without cgo.
CGO_ENABLED=0 go build -o /dev/null ./cmd/jobmesh
CGO_ENABLED=0 go build -o /dev/null ./services/executor-agent/cmd/jobmesh-agent

step "postgres"
source scripts/pg.sh
pg_ensure
echo "tests use $JOBMESH_TEST_DATABASE_URL"

step "mariadb (the XXL-JOB importer's test loads XXL-JOB's MySQL schema)"
source scripts/mariadb.sh
mariadb_ensure
echo "tests use $JOBMESH_TEST_MYSQL_DSN"

step "test dependencies (Chromium, node, e2e/ npm packages; zsh and fish for the completion tests)"
# internal/uitest drives the web console in Debian's Chromium through playwright-core; install
# what is missing, so a missing browser fails as a setup error here rather than being skipped.
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v zsh >/dev/null || missing+=(zsh)
command -v fish >/dev/null || missing+=(fish)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  as_root apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
(cd e2e && npm ci --no-audit --no-fund --loglevel=error)

step "docker-compose.yml validates (images cannot be pulled here; see docs/deployment.md)"
# `docker compose` (the v2 plugin) when the machine has it, else Debian's docker-compose.
if docker compose version >/dev/null 2>&1; then compose=(docker compose); else
  command -v docker-compose >/dev/null || {
    as_root apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker-compose
  }
  compose=(docker-compose)
fi
JOBMESH_INTERNAL_TOKEN=ci-placeholder-internal-token-0000000000 JOBMESH_DEMO_GROUP_TOKEN=ci-placeholder-group-token-000000000000 \
  POSTGRES_PASSWORD=ci-placeholder "${compose[@]}" -f docker-compose.yml config -q

step "Dockerfile lint (BuildKit's parser and build checks, pinned bases, exec form, non-root, compose targets)"
go test -count=1 -run 'TestRepositoryDockerfile$' -v ./internal/dockerlint | grep -E '^(ok|FAIL|---|\s+dockerlint_test)'

step "docker build of every image target"
if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  version=$(git describe --tags --always --dirty 2>/dev/null || echo devel)
  for target in scheduler registry logsvc gateway agent dev; do
    echo "docker build --target $target"
    docker build -q --target "$target" --build-arg VERSION="$version" --build-arg COMMIT="$(git rev-parse HEAD)" \
      --build-arg DATE="$(date -u +%Y-%m-%dT%H:%M:%SZ)" -t "jobmesh/$target:test" .
  done
  docker run --rm jobmesh/dev:test version
else
  echo "docker build: NOT RUN: no Docker engine is reachable here (docker info failed); the Dockerfile was only linted above"
fi

step "go test -race"
# internal/failover runs alone, after the rest: its replicas hold 1 s etcd sessions and it counts
# every fire, so beside the browser and devstack tests on two cores a replica starved of CPU loses
# its session, and the test measures the starvation rather than the takeovers.
go test -race -count=1 -timeout 20m $(go list ./... | grep -v '/internal/failover$') ./services/executor-agent/...

step "go test -race ./internal/failover (alone)"
go test -race -count=1 -timeout 20m ./internal/failover

step "all checks passed"
