package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jobmesh/jobmesh/services/executor-agent/meshtls"
)

// TestTLSInit: `jobmesh tls init` makes a CA and a loadable certificate per host plus the
// client's, and a second run reuses the CA.
func TestTLSInit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	args := []string{"init", "--dir", dir, "--hosts", "scheduler, registry", "--etcd-hosts", "etcd1"}
	if err := runTLS(t.Context(), args, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"scheduler", "registry", "client"} {
		f := meshtls.Files{Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem"), CA: filepath.Join(dir, "ca.pem")}
		if _, err := meshtls.Load(f); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, name := range []string{"server", "client"} {
		e := filepath.Join(dir, "etcd")
		if _, err := meshtls.Load(meshtls.Files{Cert: filepath.Join(e, name+".pem"), Key: filepath.Join(e, name+"-key.pem"), CA: filepath.Join(e, "ca.pem")}); err != nil {
			t.Errorf("etcd %s: %v", name, err)
		}
	}
	if err := runTLS(t.Context(), args, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(filepath.Join(dir, "ca.pem")); string(again) != string(ca) {
		t.Error("a second run made a new CA, want the first one reused")
	}
	for flag, bad := range map[string][]string{
		"--owner": {"init", "--dir", dir, "--hosts", "a", "--owner", "nobody"},
		"--hosts": {"init", "--dir", dir},
		"--dir":   {"init", "--hosts", "a"},
	} {
		if err := runTLS(t.Context(), bad, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%v: error = %v, want one naming %s", bad, err, flag)
		}
	}
}
