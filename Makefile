# jobmesh: the two commands are `make dev` (run everything) and `make test` (every check CI runs).
.PHONY: dev test gen gen-check lint build release tools

# The version `jobmesh version` reports: the checkout's tag or commit (scripts/release.sh stamps the same).
STAMP = -X main.version=$(shell git describe --tags --always --dirty 2>/dev/null || echo devel) -X main.commit=$(shell git rev-parse HEAD 2>/dev/null)

dev: ## run every service in one process; UI and REST at http://127.0.0.1:8080
	go build -ldflags "$(STAMP)" -o bin/jobmesh ./cmd/jobmesh && exec ./bin/jobmesh dev

test: ## everything CI checks: gofmt, buf lint, generation check, vet/build per module, go test -race on Postgres
	bash scripts/test.sh

gen: ## regenerate gen/ and the OpenAPI document from proto/
	bash scripts/gen.sh

gen-check: ## fail if gen/ differs from what proto/ generates
	bash scripts/gen.sh --check

lint: tools
	./bin/buf lint
	go vet ./... ./services/executor-agent/...

build:
	go build -ldflags "$(STAMP)" -o bin/jobmesh ./cmd/jobmesh
	go build -ldflags "$(STAMP)" -o bin/jobmesh-agent ./services/executor-agent/cmd/jobmesh-agent

release: ## static, version-stamped jobmesh and jobmesh-agent for linux/amd64 and arm64, and SHA256SUMS, into dist/
	bash scripts/release.sh

tools:
	bash scripts/tools.sh
