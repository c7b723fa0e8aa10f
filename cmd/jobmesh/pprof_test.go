package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestPprofIsLoopbackAndTokenOnly: --pprof-addr must be a loopback address, and the endpoint
// answers only callers with the internal token (the command line it serves may carry secrets).
func TestPprofIsLoopbackAndTokenOnly(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"0.0.0.0:6060", ":6060", "10.1.2.3:6060", "[::]:6060", "example.com:6060", "6060"} {
		if err := checkPprofAddr(bad); err == nil || !strings.Contains(err.Error(), "--pprof-addr") {
			t.Errorf("--pprof-addr %s: %v, want refused by name", bad, err)
		}
	}
	for _, ok := range []string{"127.0.0.1:0", "[::1]:0", "localhost:0", "127.0.0.2:6060"} {
		if err := checkPprofAddr(ok); err != nil {
			t.Errorf("--pprof-addr %s: %v, want accepted", ok, err)
		}
	}
	// The service commands refuse it before starting anything.
	err := runRegistry(context.Background(), []string{"--etcd-endpoints", "http://127.0.0.1:1", "--database-url", "postgres://x@127.0.0.1:1/x",
		"--scheduler-addr", "127.0.0.1:1", "--logs-addr", "127.0.0.1:1", "--internal-token", strings.Repeat("s", 32), "--pprof-addr", "0.0.0.0:6060"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--pprof-addr") {
		t.Errorf("jobmesh registry --pprof-addr 0.0.0.0:6060: %v, want refused by name", err)
	}

	token := strings.Repeat("t", 32)
	mesh := meshConfig{InternalToken: token, PprofAddr: "127.0.0.1:0", LogLevel: "error", LogFormat: "text", Insecure: true}
	p, err := newProcess(t.Context(), "pprof-test", mesh, io.Discard)
	if err != nil {
		t.Fatalf("newProcess: %v", err)
	}
	t.Cleanup(p.close)
	addr := p.pprofAddr
	for _, c := range []struct {
		auth string
		want int
	}{{"", http.StatusUnauthorized}, {"Bearer wrong-token", http.StatusUnauthorized}, {token, http.StatusUnauthorized}, {"Bearer " + token, http.StatusOK}} {
		req, _ := http.NewRequest("GET", "http://"+addr+"/debug/pprof/cmdline", nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET cmdline: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("GET /debug/pprof/cmdline with Authorization %.12q… = %d, want %d", c.auth, resp.StatusCode, c.want)
		}
	}
}
