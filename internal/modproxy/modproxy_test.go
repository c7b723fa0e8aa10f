package modproxy_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jobmesh/jobmesh/internal/modproxy"
)

// repo writes a repository's three go.mod files into a temporary directory and returns it.
func repo(t *testing.T, root, gen, agent string) string {
	t.Helper()
	dir := t.TempDir()
	for path, data := range map[string]string{"go.mod": root, "gen/go.mod": gen, "services/executor-agent/go.mod": agent} {
		path = filepath.Join(dir, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const (
	rootMod = "module github.com/jobmesh/jobmesh\n\ngo 1.26.0\n\nrequire (\n\tgithub.com/jobmesh/jobmesh/gen v0.1.0\n\tgithub.com/jobmesh/jobmesh/services/executor-agent v0.2.0\n)\n\n" +
		"replace (\n\tgithub.com/jobmesh/jobmesh/gen => ./gen\n\tgithub.com/jobmesh/jobmesh/services/executor-agent => ./services/executor-agent\n)\n"
	genMod   = "module github.com/jobmesh/jobmesh/gen\n\ngo 1.26.0\n"
	agentMod = "module github.com/jobmesh/jobmesh/services/executor-agent\n\ngo 1.26.0\n\nrequire github.com/jobmesh/jobmesh/gen v0.1.0\n"
)

func TestPublished(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name             string
		root, gen, agent string
		want             string // the modules as path@version, or a part of the error
	}{
		{"versions from the requirements", rootMod, genMod, agentMod,
			"github.com/jobmesh/jobmesh/gen@v0.1.0 github.com/jobmesh/jobmesh/services/executor-agent@v0.2.0"},
		{"a replace in the agent module", rootMod, genMod, agentMod + "replace github.com/jobmesh/jobmesh/gen => ../../gen\n",
			"replace github.com/jobmesh/jobmesh/gen: a published module must build without replace directives"},
		{"another gen in the root module", strings.Replace(rootMod, "gen v0.1.0", "gen v0.1.1", 1), genMod, agentMod,
			"go.mod requires github.com/jobmesh/jobmesh/gen v0.1.1, but the agent module requires v0.1.0"},
		{"gen at a pseudo-version", strings.Replace(rootMod, "gen v0.1.0", "gen v0.0.0-00010101000000-000000000000", 1), genMod,
			strings.Replace(agentMod, "gen v0.1.0", "gen v0.0.0-00010101000000-000000000000", 1),
			"github.com/jobmesh/jobmesh/gen v0.0.0-00010101000000-000000000000: a pseudo-version names no tag"},
		{"no gen requirement", rootMod, genMod, "module github.com/jobmesh/jobmesh/services/executor-agent\n", "requires no github.com/jobmesh/jobmesh/gen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mods, err := modproxy.Published(repo(t, tc.root, tc.gen, tc.agent))
			var got string
			if err != nil {
				got = err.Error()
			}
			for _, m := range mods {
				got = strings.TrimSpace(got + " " + m.Path + "@" + m.Version)
			}
			if !strings.Contains(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestBuildServesTheWorkingTree: the proxy holds each module's list, info, go.mod and a zip of
// its directory whose hash Sum returns.
func TestBuildServesTheWorkingTree(t *testing.T) {
	t.Parallel()
	dir := repo(t, rootMod, genMod, agentMod)
	if err := os.WriteFile(filepath.Join(dir, "gen", "gen.go"), []byte("package gen\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mods, err := modproxy.Published(dir)
	if err != nil {
		t.Fatal(err)
	}
	proxy := t.TempDir()
	if err := modproxy.Build(proxy, mods); err != nil {
		t.Fatal(err)
	}
	at := filepath.Join(proxy, "github.com", "jobmesh", "jobmesh", "gen", "@v")
	for name, want := range map[string]string{"list": "v0.1.0\n", "v0.1.0.mod": genMod, "v0.1.0.info": `{"Version":"v0.1.0"`} {
		got, err := os.ReadFile(filepath.Join(at, name))
		if err != nil || !strings.HasPrefix(string(got), want) {
			t.Errorf("%s: got %q %v, want it to start with %q", name, got, err, want)
		}
	}
	before, err := modproxy.Sum(proxy, mods[0])
	if err != nil || !strings.HasPrefix(before, "h1:") {
		t.Fatalf("Sum: got %q %v, want an h1: hash", before, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "gen", "gen.go"), []byte("package gen // changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := modproxy.Build(proxy, mods); err != nil {
		t.Fatal(err)
	}
	if after, err := modproxy.Sum(proxy, mods[0]); err != nil || after == before {
		t.Errorf("Sum after a change to gen: got %q %v, want a hash other than %q", after, err, before)
	}
}
