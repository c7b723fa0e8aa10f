package dockerlint_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/jobmesh/jobmesh/internal/dockerlint"
)

// TestRepositoryDockerfile: the images' Dockerfile parses as docker build parses it, breaks no
// rule, and has every target docker-compose.yml builds.
func TestRepositoryDockerfile(t *testing.T) {
	t.Parallel()
	f, err := os.Open("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := dockerlint.Lint(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range res.Findings {
		t.Errorf("Dockerfile %s", fd)
	}
	compose, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	targets := dockerlint.ComposeTargets(string(compose))
	if len(targets) == 0 {
		t.Error("docker-compose.yml names no build target")
	}
	for _, target := range targets {
		if !slices.Contains(res.Stages, target) {
			t.Errorf("docker-compose.yml builds target %q; the Dockerfile's stages are %v", target, res.Stages)
		}
	}
	t.Logf("Dockerfile: stages %v, no findings; docker-compose.yml targets %v", res.Stages, targets)
}

func TestRules(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, dockerfile, wantRule string
	}{
		{"unpinned base", "FROM debian\nUSER 1000\nCMD [\"true\"]\n", "UnpinnedBaseImage"},
		{"latest base", "FROM debian:latest\nUSER 1000\nCMD [\"true\"]\n", "UnpinnedBaseImage"},
		{"root runtime", "FROM debian:bookworm-slim\nCMD [\"true\"]\n", "RootUser"},
		{"root inherited", "FROM debian:bookworm-slim AS base\nUSER root\nFROM base AS app\nENTRYPOINT [\"true\"]\n", "RootUser"},
		{"shell-form entrypoint", "FROM debian:bookworm-slim\nUSER 1000\nENTRYPOINT run me\n", "ExecForm"},
		{"shell-form health check", "FROM debian:bookworm-slim\nUSER 1000\nHEALTHCHECK CMD curl -f localhost\nCMD [\"true\"]\n", "ExecForm"},
		{"copy from nowhere", "FROM debian:bookworm-slim\nCOPY --from=biuld /out /out\n", "CopyFromUnknownStage"},
		{"duplicate stage", "FROM debian:bookworm-slim AS a\nFROM debian:bookworm-slim AS a\n", "DuplicateStageName"},
		{"apt without -y", "FROM debian:bookworm-slim\nRUN apt-get update && apt-get install --no-install-recommends bash && rm -rf /var/lib/apt/lists/*\n", "AptGetYes"},
		{"apt with recommends", "FROM debian:bookworm-slim\nRUN apt-get update && apt-get install -y bash && rm -rf /var/lib/apt/lists/*\n", "AptGetNoRecommends"},
		{"apt lists kept", "FROM debian:bookworm-slim\nRUN apt-get update && apt-get install -y --no-install-recommends bash\n", "AptGetLists"},
		{"relative workdir", "FROM debian:bookworm-slim\nWORKDIR src\n", "WorkdirRelativePath"},
		{"lower-case instruction", "FROM debian:bookworm-slim\nrun true\n", "InstructionCasing"},
		{"BuildKit's own check", "FROM debian:bookworm-slim as build\n", "FromAsCasing"},
		{"empty continuation line", "FROM debian:bookworm-slim\nRUN true && \\\n\n  true\n", "parser"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			res, err := dockerlint.Lint(strings.NewReader(c.dockerfile))
			if err != nil {
				t.Fatal(err)
			}
			var rules []string
			for _, f := range res.Findings {
				rules = append(rules, f.Rule)
			}
			if !slices.Contains(rules, c.wantRule) {
				t.Errorf("findings %v, want %s", res.Findings, c.wantRule)
			}
		})
	}
}

func TestCleanDockerfile(t *testing.T) {
	t.Parallel()
	res, err := dockerlint.Lint(strings.NewReader(`FROM golang:1.26 AS build
WORKDIR /src
RUN go build -o /out/app .
FROM debian:bookworm-slim@sha256:0000000000000000000000000000000000000000000000000000000000000000
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/app /app
USER 10001
ENTRYPOINT ["/app"]
`))
	if err != nil || len(res.Findings) > 0 || !slices.Equal(res.Stages, []string{"build"}) {
		t.Errorf("Lint = %+v, %v; want stage build and no findings", res, err)
	}
}

func TestNotADockerfile(t *testing.T) {
	t.Parallel()
	if _, err := dockerlint.Lint(strings.NewReader("FROM debian:bookworm-slim\nFROBNICATE now\n")); err == nil {
		t.Error("an unknown instruction parsed")
	}
}
