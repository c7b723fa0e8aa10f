package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// completionScript writes `jobmesh completion <shell>` to a file and returns its path.
func completionScript(t *testing.T, shell string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(t.Context(), []string{"completion", shell}, nil, &out, &errOut); code != 0 {
		t.Fatalf("jobmesh completion %s = exit %d: %s", shell, code, errOut.String())
	}
	p := filepath.Join(t.TempDir(), "jobmesh."+shell)
	if err := os.WriteFile(p, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// completionCases are command lines (the last word being completed) and candidates each
// shell must offer for them, or must not.
var completionCases = []struct {
	line       []string
	want, dont []string
}{
	{[]string{"jobmesh", "jo"}, []string{"jobs"}, []string{"dev"}},
	{[]string{"jobmesh", ""}, []string{"dev", "jobs", "completion", "version"}, nil},
	{[]string{"jobmesh", "jobs", ""}, []string{"list", "get", "trigger"}, []string{"tail"}},
	{[]string{"jobmesh", "jobs", "list", "--li"}, []string{"--limit"}, nil},
	{[]string{"jobmesh", "jobs", "list", "--status", "running", "--"}, []string{"--endpoint", "--group"}, []string{"--data-dir"}},
	{[]string{"jobmesh", "dev", "--data"}, []string{"--data-dir", "--database-url"}, nil},
	{[]string{"jobmesh", "dev", "--etcd-p"}, []string{"--etcd-peer-addr"}, nil},
	{[]string{"jobmesh", "completion", ""}, []string{"bash", "zsh", "fish"}, nil},
	{[]string{"jobmesh", "tls", "init", "--h"}, []string{"--hosts"}, nil},
}

func checkCandidates(t *testing.T, shell string, line []string, got []string, want, dont []string) {
	t.Helper()
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("%s: %q offers %q, want %q among them", shell, strings.Join(line, " "), got, w)
		}
	}
	for _, d := range dont {
		if slices.Contains(got, d) {
			t.Errorf("%s: %q offers %q, which it must not", shell, strings.Join(line, " "), d)
		}
	}
}

func TestCompletionBash(t *testing.T) {
	t.Parallel()
	script := completionScript(t, "bash")
	for _, c := range completionCases {
		cmd := exec.Command("bash", append([]string{"-c", `source "$0"; COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); _jobmesh; printf '%s\n' "${COMPREPLY[@]}"`,
			script}, c.line...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v: %s", err, out)
		}
		checkCandidates(t, "bash", c.line, strings.Fields(string(out)), c.want, c.dont)
	}
}

func TestCompletionZsh(t *testing.T) {
	t.Parallel()
	script := completionScript(t, "zsh")
	// Outside a completion widget, the completion system's functions are stand-ins that print
	// the candidates they are given; words, CURRENT and PREFIX are set as zsh would.
	const harness = `compdef() { :; }
_describe() { local arr=${@[-1]}; print -rl -- ${${(P)arr}%%:*} }
_files() { print -r -- '<files>' }
source "$1"; shift
words=("$@"); CURRENT=$#; PREFIX=$words[CURRENT]
_jobmesh`
	for _, c := range completionCases {
		cmd := exec.Command("zsh", append([]string{"-f", "-c", harness, "zsh", script}, c.line...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("zsh: %v: %s", err, out)
		}
		var got []string
		for _, w := range strings.Fields(string(out)) {
			if strings.HasPrefix(w, c.line[len(c.line)-1]) { // zsh filters by the prefix itself
				got = append(got, strings.ReplaceAll(w, `\:`, ":"))
			}
		}
		checkCandidates(t, "zsh", c.line, got, c.want, c.dont)
	}
}

func TestCompletionFish(t *testing.T) {
	t.Parallel()
	script := completionScript(t, "fish")
	for _, c := range completionCases {
		cmd := exec.Command("fish", "--no-config", "-c", `source $argv[1]; complete -C $argv[2]`, script, strings.Join(c.line, " "))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("fish: %v: %s", err, out)
		}
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			got = append(got, strings.SplitN(l, "\t", 2)[0])
		}
		checkCandidates(t, "fish", c.line, got, c.want, c.dont)
	}
}

func TestCompletionNamesAShell(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"completion", "tcsh"}, {"completion"}} {
		var out, errOut bytes.Buffer
		if code := run(t.Context(), args, nil, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "bash, zsh or fish") {
			t.Errorf("%q = exit %d, %q; want 2 (usage) naming the shells", args, code, errOut.String())
		}
	}
}

// TestEveryCommandIsKnown: each first word completion offers runs (none is an unknown
// command), and each has a summary.
func TestEveryCommandIsKnown(t *testing.T) {
	t.Parallel()
	about := commandSummaries()
	for _, name := range commandNames {
		if about[name] == "" {
			t.Errorf("%s: no summary for completion", name)
		}
		if isClient(name) {
			continue
		}
		args := []string{name, "-h"}
		if subs := subcommandNames[name]; len(subs) > 0 {
			args = []string{name, subs[0], "-h"}
		}
		if name == "version" || name == "help" {
			args = []string{name}
		}
		var out, errOut bytes.Buffer
		if code := run(t.Context(), args, nil, &out, &errOut); code != 0 {
			t.Errorf("jobmesh %s = exit %d: %s", strings.Join(args, " "), code, errOut.String())
		}
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var out, errOut bytes.Buffer
		if code := run(t.Context(), args, nil, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "jobmesh ") ||
			!strings.Contains(out.String(), "commit:") || !strings.Contains(out.String(), "built:") || !strings.Contains(out.String(), "go:      go1.") {
			t.Errorf("jobmesh %s = exit %d, %q", args[0], code, out.String()+errOut.String())
		}
	}
}
