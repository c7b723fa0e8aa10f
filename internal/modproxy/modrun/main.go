// Command modrun runs a command in one of the repository's modules as a user's go would build
// it: alone (GOWORK=off), with the repository's published modules taken from a module proxy made
// from the working tree (package modproxy) at the versions the go.mod files require, and with
// go.mod and go.sum copied aside (-modfile), so the committed files are not changed.
//
//	go run ./internal/modproxy/modrun services/executor-agent go build ./...
//
// It runs from the repository's root and exits with the command's status.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/jobmesh/jobmesh/internal/modproxy"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: modrun MODULE_DIR COMMAND [ARG...]  (from the repository's root)")
		os.Exit(2)
	}
	code, err := run(os.Args[1], os.Args[2:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "modrun:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// run runs argv in moduleDir and returns its exit status.
func run(moduleDir string, argv []string) (int, error) {
	mods, err := modproxy.Published(".")
	if err != nil {
		return 1, err
	}
	tmp, err := os.MkdirTemp("", "jobmesh-modrun-")
	if err != nil {
		return 1, err
	}
	defer os.RemoveAll(tmp)
	proxy, modDir := filepath.Join(tmp, "proxy"), filepath.Join(tmp, "mod")
	if err := modproxy.Build(proxy, mods); err != nil {
		return 1, err
	}
	if err := copyModFiles(moduleDir, modDir, mods); err != nil {
		return 1, err
	}
	env, err := modproxy.Env(proxy, filepath.Join(tmp, "modcache"), "-modfile="+filepath.Join(modDir, "go.mod"))
	if err != nil {
		return 1, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = moduleDir, env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err = cmd.Run()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	return 0, err
}

// copyModFiles copies moduleDir's go.mod and go.sum into dir, leaving out the go.sum lines of
// the served modules: the proxy's zips are the working tree's, not the published versions'.
func copyModFiles(moduleDir, dir string, served []modproxy.Module) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	gomod, err := os.ReadFile(filepath.Join(moduleDir, "go.mod"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), gomod, 0o644); err != nil {
		return err
	}
	gosum, err := os.ReadFile(filepath.Join(moduleDir, "go.sum"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var kept bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(gosum))
	for sc.Scan() {
		path, _, _ := strings.Cut(sc.Text(), " ")
		if !isServed(path, served) {
			kept.WriteString(sc.Text() + "\n")
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "go.sum"), kept.Bytes(), 0o644)
}

func isServed(path string, served []modproxy.Module) bool {
	for _, m := range served {
		if m.Path == path {
			return true
		}
	}
	return false
}
