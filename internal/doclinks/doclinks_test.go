package doclinks

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// repoRoot is the root module's directory: the nearest parent with a go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// TestRepositoryLinks checks every link of README.md and docs/ in this repository.
func TestRepositoryLinks(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	docs, err := Documents(root)
	if err != nil {
		t.Fatal(err)
	}
	var inDocs int
	for _, d := range docs {
		if strings.HasPrefix(d, "docs/") {
			inDocs++
		}
	}
	if !slices.Contains(docs, "README.md") || inDocs == 0 {
		t.Fatalf("Documents(%s) = %v: want README.md and the files of docs/", root, docs)
	}
	problems, err := Check(root, docs)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// writeFiles writes files (path relative to dir → content) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCheckFindsBrokenLinks runs the checker on a small repository with good and bad links: it
// must report exactly the bad ones.
func TestCheckFindsBrokenLinks(t *testing.T) {
	t.Parallel()
	outer := t.TempDir()
	root := filepath.Join(outer, "repo")
	writeFiles(t, outer, map[string]string{
		"shared/design.md": "# Design\n", // exists, but beside the repository
		"repo/README.md": strings.Join([]string{
			"# Repo",
			"Good: [docs](docs/guide.md), [anchor](docs/guide.md#the-ring), [dir](docs/),",
			"![pic](docs/pic.png), [self](#repo), [web](https://example.com/x), [mail](mailto:a@b.c),",
			"[root](/docs/guide.md#second-part), [spaces](docs/a%20b.md), <img src=\"docs/pic.png\">.",
			"Bad: [missing](docs/missing.md) and ![gone](docs/gone.png)",
			"[outside](../shared/design.md) [anchor](docs/guide.md#no-such-heading) [self](#nowhere)",
			"<a href=\"docs/nope.md\">html</a> [abs](/work/shared/design.md) [file](file:///etc/passwd)",
			"`[in code](docs/missing-in-code.md)` is not a link.",
			"```",
			"[in a fence](docs/missing-in-fence.md)",
			"```",
			"[ref]: docs/missing-ref.md",
		}, "\n"),
		"repo/docs/guide.md": strings.Join([]string{
			"# Guide",
			"## The ring",
			"Second part",
			"-----------",
			"```md",
			"## Not a heading",
			"```",
			"Back to [the top](#guide), [down](#not-a-heading), [up](../README.md#repo), [out](../../x.md).",
		}, "\n"),
		"repo/docs/a b.md":  "# A B\n",
		"repo/docs/pic.png": "png",
		// Build outputs: make release copies README.md into dist/, away from docs/.
		"repo/dist/jobmesh_v1_linux_amd64/README.md": "[broken here](docs/guide.md)\n",
		"repo/bin/notes.md":                          "[broken](nowhere.md)\n",
	})

	docs, err := Documents(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"README.md", "docs/a b.md", "docs/guide.md"}; !slices.Equal(docs, want) {
		t.Fatalf("Documents = %q, want %q", docs, want)
	}
	problems, err := Check(root, docs)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.File+" "+p.Dest)
	}
	want := []string{
		"README.md docs/missing.md",
		"README.md docs/gone.png",
		"README.md ../shared/design.md",
		"README.md docs/guide.md#no-such-heading",
		"README.md #nowhere",
		"README.md docs/nope.md",
		"README.md /work/shared/design.md",
		"README.md file:///etc/passwd",
		"README.md docs/missing-ref.md",
		"docs/guide.md #not-a-heading",
		"docs/guide.md ../../x.md",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, p := range problems {
		if p.Dest == "../shared/design.md" && !strings.Contains(p.Why, "outside the repository") {
			t.Errorf("%v: want it said to point outside the repository", p)
		}
		if p.Dest == "docs/missing.md" && p.Line != 5 {
			t.Errorf("%v: want line 5", p)
		}
	}
}

func TestSlug(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ heading, want string }{
		{"What mutual TLS costs", "what-mutual-tls-costs"},
		{"20,000 fires/s held (on a 2-core machine)", "20000-firess-held-on-a-2-core-machine"},
		{"`jobmesh bench`: the load tool", "jobmesh-bench-the-load-tool"},
		{"The path of one fire, step by step", "the-path-of-one-fire-step-by-step"},
		{"Ring and dispatch", "ring-and-dispatch"},
		{"A -- B", "a----b"},
		{"C++ & Go", "c--go"},
		{"job_state and _emphasis_ and __strong__", "job_state-and-emphasis-and-strong"},
		{"*Dispatch lead* in [scheduler.md](scheduler.md)", "dispatch-lead-in-schedulermd"},
		{"Ünïcode 中文界面", "ünïcode-中文界面"},
		{"`a_b` <em>c</em> &amp; d", "a_b-c--d"},
	} {
		if got := Slug(tt.heading); got != tt.want {
			t.Errorf("Slug(%q) = %q, want %q", tt.heading, got, tt.want)
		}
	}
}

func TestAnchors(t *testing.T) {
	t.Parallel()
	src := strings.Join([]string{
		"# Usage",
		"## Usage",
		"### Usage ###",
		"Setext one",
		"==========",
		"- a list item",
		"---",
		"~~~",
		"# fenced",
		"~~~",
		`<a name="kept"></a>`,
		"    # indented code",
		"#not-a-heading",
	}, "\n")
	got := Anchors(src)
	want := map[string]bool{"usage": true, "usage-1": true, "usage-2": true, "setext-one": true, "kept": true}
	if len(got) != len(want) {
		t.Errorf("Anchors = %v, want %v", got, want)
	}
	for a := range want {
		if !got[a] {
			t.Errorf("Anchors lacks %q: %v", a, got)
		}
	}
}

func TestLinks(t *testing.T) {
	t.Parallel()
	src := "a [x](one.md \"title\") b ![y](<two words.png>) [z](three.md#x(1)) `[no](code.md)`\n" +
		"[![badge](img.svg)](four.md)\n" +
		"   [label]: <five.md>\n"
	var got []string
	for _, l := range Links(src) {
		got = append(got, l.Dest)
	}
	want := []string{"one.md", "two words.png", "three.md#x(1)", "img.svg", "four.md", "five.md"}
	if !slices.Equal(got, want) {
		t.Errorf("Links = %q, want %q", got, want)
	}
}
