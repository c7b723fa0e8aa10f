// Package buildinfo says which build a jobmesh binary is, for `jobmesh version` and
// `jobmesh-agent --version`: the version, commit and date the release build stamps into the
// program's main package (-ldflags -X), else what the Go toolchain recorded in the binary.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Info describes one build.
type Info struct {
	// Version is the release (`git describe --tags --always --dirty`, e.g. v0.4.0-3-gabc1234),
	// the module version of a `go install …@version`, else "devel".
	Version string
	// Commit is the source revision; empty when unknown.
	Commit string
	// Date is when the binary was built (RFC 3339) or, without a stamp, the commit's time;
	// empty when unknown.
	Date string
	// GoVersion is the toolchain that built the binary, and Platform its GOOS/GOARCH.
	GoVersion, Platform string
}

// Read returns the build's Info: the stamped values, with what the Go toolchain recorded
// (runtime/debug.ReadBuildInfo) filling the empty ones.
func Read(version, commit, date string) Info {
	i := Info{Version: version, Commit: commit, Date: date, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return i.defaults(false)
	}
	if bi.GoVersion != "" {
		i.GoVersion = bi.GoVersion
	}
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if i.Commit == "" {
				i.Commit = s.Value
			}
		case "vcs.time":
			if i.Date == "" {
				i.Date = s.Value
			}
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if v := bi.Main.Version; i.Version == "" && v != "" && v != "(devel)" {
		i.Version = v
	}
	return i.defaults(modified)
}

// defaults names an unstamped build "devel" (with its short commit, and "-dirty" for a build
// from a modified tree, when Go recorded them).
func (i Info) defaults(modified bool) Info {
	if i.Version != "" {
		return i
	}
	i.Version = "devel"
	if i.Commit != "" {
		i.Version += "-" + i.Commit[:min(12, len(i.Commit))]
	}
	if modified {
		i.Version += "-dirty"
	}
	return i
}

// Format is what `<program> version` prints: the program and version on the first line, then
// the commit, build date and Go version, one a line.
func (i Info) Format(program string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\n", program, i.Version)
	fmt.Fprintf(&b, "  commit:  %s\n", orUnknown(i.Commit))
	fmt.Fprintf(&b, "  built:   %s\n", orUnknown(i.Date))
	fmt.Fprintf(&b, "  go:      %s %s\n", i.GoVersion, i.Platform)
	return b.String()
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
