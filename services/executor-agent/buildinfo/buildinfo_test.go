package buildinfo_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/jobmesh/jobmesh/services/executor-agent/buildinfo"
)

func TestStampsWin(t *testing.T) {
	t.Parallel()
	i := buildinfo.Read("v1.2.3-4-gabcdef0", "abcdef0123456789", "2026-11-22T10:00:00Z")
	if i.Version != "v1.2.3-4-gabcdef0" || i.Commit != "abcdef0123456789" || i.Date != "2026-11-22T10:00:00Z" {
		t.Errorf("Read with stamps = %+v, want the stamps", i)
	}
	got := i.Format("jobmesh")
	want := "jobmesh v1.2.3-4-gabcdef0\n  commit:  abcdef0123456789\n  built:   2026-11-22T10:00:00Z\n  go:      " +
		runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	if got != want {
		t.Errorf("Format = %q, want %q", got, want)
	}
}

func TestUnstamped(t *testing.T) {
	t.Parallel()
	// A test binary is built without stamps and, here, without VCS information.
	i := buildinfo.Read("", "", "")
	if !strings.HasPrefix(i.Version, "devel") || i.GoVersion != runtime.Version() {
		t.Errorf("Read without stamps = %+v, want a devel version and %s", i, runtime.Version())
	}
	if f := i.Format("jobmesh-agent"); !strings.HasPrefix(f, "jobmesh-agent devel") || (i.Commit == "" && !strings.Contains(f, "commit:  unknown")) {
		t.Errorf("Format = %q", f)
	}
}
