// Package modproxy serves this repository's published Go modules, gen and the agent module (the
// Go SDK), from a directory laid out as a Go module proxy, at the versions the repository's
// go.mod files require. A go command given GOPROXY=file://DIR then resolves, say,
// github.com/jobmesh/jobmesh/gen@v0.1.0 to the working tree's gen/ before that version is
// tagged, and so builds a module the way a user's `go get` would: without go.work and without
// replace directives. scripts/test.sh builds the agent module alone this way (cmd/modrun), and a
// test builds a program outside the repository that imports the SDK.
package modproxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/sumdb/dirhash"
	"golang.org/x/mod/zip"
)

// The module paths of the repository: the root (the services), and the two that users import.
const (
	RootPath  = "github.com/jobmesh/jobmesh"
	GenPath   = RootPath + "/gen"
	AgentPath = RootPath + "/services/executor-agent"
)

// Module is a module the proxy serves.
type Module struct {
	// Path and Version name it.
	Path, Version string
	// Dir is its directory in the repository.
	Dir string
}

// Published returns the modules users depend on, read from the repository at root: gen at the
// version the agent module requires, and the agent module at the version the root module
// requires. It refuses a replace directive in either (a user's build ignores it, so a module
// that needs one cannot be imported), a pseudo-version (v0.0.0-…, which no tag provides) and a
// root module that requires another gen than the agent module does.
func Published(root string) ([]Module, error) {
	rootMod, err := readModFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	genDir, agentDir := filepath.Join(root, "gen"), filepath.Join(root, "services", "executor-agent")
	agentMod, err := readModFile(filepath.Join(agentDir, "go.mod"))
	if err != nil {
		return nil, err
	}
	genMod, err := readModFile(filepath.Join(genDir, "go.mod"))
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, f := range []*modfile.File{genMod, agentMod} {
		for _, r := range f.Replace {
			errs = append(errs, fmt.Errorf("%s: replace %s: a published module must build without replace directives (users' builds ignore them)",
				f.Module.Mod.Path, r.Old.Path))
		}
	}
	if genMod.Module.Mod.Path != GenPath || agentMod.Module.Mod.Path != AgentPath || rootMod.Module.Mod.Path != RootPath {
		errs = append(errs, fmt.Errorf("module paths %s, %s, %s: want %s, %s, %s", rootMod.Module.Mod.Path, genMod.Module.Mod.Path,
			agentMod.Module.Mod.Path, RootPath, GenPath, AgentPath))
	}
	genVersion, agentVersion := required(agentMod, GenPath), required(rootMod, AgentPath)
	switch {
	case genVersion == "":
		errs = append(errs, fmt.Errorf("%s/go.mod requires no %s", agentDir, GenPath))
	case required(rootMod, GenPath) != genVersion:
		errs = append(errs, fmt.Errorf("go.mod requires %s %s, but the agent module requires %s: require the same version in both",
			GenPath, required(rootMod, GenPath), genVersion))
	}
	if agentVersion == "" {
		errs = append(errs, fmt.Errorf("%s/go.mod requires no %s", root, AgentPath))
	}
	for path, v := range map[string]string{GenPath: genVersion, AgentPath: agentVersion} {
		if module.IsPseudoVersion(v) {
			errs = append(errs, fmt.Errorf("%s %s: a pseudo-version names no tag, so users could never fetch it: require a release version (docs/releasing.md)", path, v))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return []Module{
		{Path: GenPath, Version: genVersion, Dir: genDir},
		{Path: AgentPath, Version: agentVersion, Dir: agentDir},
	}, nil
}

// readModFile parses a go.mod file.
func readModFile(path string) (*modfile.File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := modfile.Parse(path, data, nil)
	if err != nil {
		return nil, err
	}
	if f.Module == nil {
		return nil, fmt.Errorf("%s: no module line", path)
	}
	return f, nil
}

// required is the version f requires of path, empty when it requires none.
func required(f *modfile.File, path string) string {
	for _, r := range f.Require {
		if r.Mod.Path == path {
			return r.Mod.Version
		}
	}
	return ""
}

// Build writes a module proxy serving mods into dir, as `go mod download` would find them on a
// proxy once tagged: for each module, <path>/@v/list, <version>.info, <version>.mod and
// <version>.zip (made by golang.org/x/mod/zip from its directory, which leaves out nested
// modules and what a module zip may not hold).
func Build(dir string, mods []Module) error {
	for _, m := range mods {
		mv := module.Version{Path: m.Path, Version: m.Version}
		if err := module.Check(m.Path, m.Version); err != nil {
			return err
		}
		at, err := versionDir(dir, m.Path)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(at, 0o755); err != nil {
			return err
		}
		base, err := module.EscapeVersion(m.Version)
		if err != nil {
			return err
		}
		base = filepath.Join(at, base)
		gomod, err := os.ReadFile(filepath.Join(m.Dir, "go.mod"))
		if err != nil {
			return err
		}
		info, err := json.Marshal(struct {
			Version string
			Time    time.Time
		}{m.Version, time.Now().UTC().Truncate(time.Second)})
		if err != nil {
			return err
		}
		if err := os.WriteFile(base+".mod", gomod, 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(base+".info", info, 0o644); err != nil {
			return err
		}
		if err := writeZip(base+".zip", mv, m.Dir); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(at, "list"), []byte(m.Version+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// writeZip writes the module zip of mv, from dir, to path.
func writeZip(path string, mv module.Version, dir string) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	if err := zip.CreateFromDir(f, mv, dir); err != nil {
		return fmt.Errorf("zip %s@%s from %s: %w", mv.Path, mv.Version, dir, err)
	}
	return nil
}

// versionDir is the @v directory of module path in the proxy at dir.
func versionDir(dir, path string) (string, error) {
	esc, err := module.EscapePath(path)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, filepath.FromSlash(esc), "@v"), nil
}

// Sum returns the go.sum hash ("h1:…") of m's zip in the proxy at dir: a go.sum line naming it
// proves the go command took m from this proxy.
func Sum(dir string, m Module) (string, error) {
	at, err := versionDir(dir, m.Path)
	if err != nil {
		return "", err
	}
	v, err := module.EscapeVersion(m.Version)
	if err != nil {
		return "", err
	}
	return dirhash.HashZip(filepath.Join(at, v+".zip"), dirhash.Hash1)
}

// Env returns the environment (os.Environ with overrides) of go commands that must take the
// repository's modules from the proxy at proxyDir, as a user's go takes them from the public
// proxy: no go.work; GOPROXY lists the proxy, then the local module cache's download directory
// (so that other modules need no network when cached), then the GOPROXY in force, and
// GONOPROXY=none makes it apply even to modules GOPRIVATE names; the checksum database is off
// (the proxy's versions are not published); -mod=mod lets go.mod and go.sum be
// completed; modCache is the module cache, which must be a fresh directory: a shared one would
// keep the first content it saw of a version that the working tree changes later. -trimpath
// keeps the build cache's entries independent of that directory, so later runs reuse them, and
// -modcacherw lets modCache be deleted. goflags are added to GOFLAGS.
func Env(proxyDir, modCache string, goflags ...string) ([]string, error) {
	out, err := exec.Command("go", "env", "-json", "GOPROXY", "GOMODCACHE", "GOFLAGS").Output()
	if err != nil {
		return nil, fmt.Errorf("go env: %w", err)
	}
	var goenv struct{ GOPROXY, GOMODCACHE, GOFLAGS string }
	if err := json.Unmarshal(out, &goenv); err != nil {
		return nil, fmt.Errorf("go env: %w", err)
	}
	proxyDir, err = filepath.Abs(proxyDir)
	if err != nil {
		return nil, err
	}
	proxies := []string{fileURL(proxyDir)}
	if goenv.GOMODCACHE != "" {
		proxies = append(proxies, fileURL(filepath.Join(goenv.GOMODCACHE, "cache", "download")))
	}
	if goenv.GOPROXY != "" {
		proxies = append(proxies, goenv.GOPROXY)
	}
	return append(os.Environ(),
		"GOWORK=off",
		"GOPROXY="+strings.Join(proxies, ","),
		"GONOPROXY=none",
		"GOSUMDB=off",
		"GOMODCACHE="+modCache,
		"GOFLAGS="+strings.TrimSpace(strings.Join(append([]string{goenv.GOFLAGS, "-mod=mod -modcacherw -trimpath"}, goflags...), " ")),
		"GOTOOLCHAIN=local",
	), nil
}

// fileURL is the file:// URL of the absolute path p.
func fileURL(p string) string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(p)}).String()
}
