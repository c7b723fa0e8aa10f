package gateway_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/jobmesh/jobmesh/internal/memtest"
	"github.com/jobmesh/jobmesh/services/gateway"
)

// startDown starts a gateway whose services are not running (so nothing behind it answers).
func startDown(t *testing.T, cfg gateway.Config) string {
	t.Helper()
	down := "127.0.0.1:1"
	cfg.ListenAddr, cfg.SchedulerAddr, cfg.RegistryAddr, cfg.LogsAddr = "127.0.0.1:0", down, down, down
	g, err := gateway.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := g.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(g.Stop)
	return "http://" + g.Addr()
}

// endlessJSON is a job whose name never ends: n bytes of a JSON request body, generated as it is
// read, never held in memory.
type endlessJSON struct{ off, n int64 }

func (e *endlessJSON) Read(p []byte) (int, error) {
	if e.off >= e.n {
		return 0, io.EOF
	}
	head := `{"job":{"name":"`
	k := 0
	for k < len(p) && e.off < e.n {
		if e.off < int64(len(head)) {
			p[k] = head[e.off]
		} else {
			p[k] = 'a'
		}
		k++
		e.off++
	}
	return k, nil
}

// TestBodyOverTheLimitIs413: a 200 MB body without any token is refused with 413, whether it
// announces its length or comes chunked, and the gateway's process does not grow by anything
// like the body (unbounded, it reads and decodes all 200 MB).
func TestBodyOverTheLimitIs413(t *testing.T) {
	base := startDown(t, gateway.Config{})
	const size = 200 << 20
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) {
			runtime.GC()
			debug.FreeOSMemory()
			before := memtest.ResetPeak(t)
			req, err := http.NewRequestWithContext(t.Context(), "POST", base+"/api/v1/jobs", &endlessJSON{n: size})
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			if !chunked {
				req.ContentLength = size
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("POST 200 MB: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			growth := memtest.PeakKiB(t) - before
			t.Logf("POST 200 MB (chunked %v): %s %s; peak RSS +%d KiB", chunked, resp.Status, bytes.TrimSpace(body), growth)
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Errorf("POST 200 MB = %s, want 413", resp.Status)
			}
			// The limit is 4 MiB; decoding what was read may take a few times that.
			if bound := int64(memtest.Factor * 8 * gateway.DefaultMaxBodyBytes / 1024); growth > bound {
				t.Errorf("peak RSS grew by %d KiB, want at most %d KiB", growth, bound)
			}
		})
	}
}

// TestMaxBodyBytes: the limit is configurable; a body under it goes through to the service.
func TestMaxBodyBytes(t *testing.T) {
	t.Parallel()
	base := startDown(t, gateway.Config{MaxBodyBytes: 1024})
	post := func(n int64) (int, []byte) {
		resp, err := http.Post(base+"/api/v1/jobs", "application/json", io.LimitReader(&endlessJSON{n: n}, n))
		if err != nil {
			t.Fatalf("POST: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	code, body := post(2048)
	var e struct {
		Details []struct {
			Reason   string            `json:"reason"`
			Metadata map[string]string `json:"metadata"`
		} `json:"details"`
	}
	if err := json.Unmarshal(body, &e); err != nil || code != http.StatusRequestEntityTooLarge || len(e.Details) != 1 ||
		e.Details[0].Reason != "REQUEST_TOO_LARGE" || e.Details[0].Metadata["limit_bytes"] != "1024" {
		t.Errorf("POST of 2 KiB with a 1 KiB limit = %d %s (%v), want 413 with reason REQUEST_TOO_LARGE and the limit", code, body, err)
	}
	if code, _ := post(512); code == http.StatusRequestEntityTooLarge {
		t.Errorf("POST of 512 bytes with a 1 KiB limit = %d, want it to pass the limit", code)
	}
	if _, err := gateway.New(gateway.Config{ListenAddr: "127.0.0.1:0", SchedulerAddr: "a:1", RegistryAddr: "a:1", LogsAddr: "a:1", MaxBodyBytes: -1}); err == nil || !strings.Contains(err.Error(), "max body bytes") {
		t.Errorf("New with a negative limit = %v, want an error naming it", err)
	}
}

// TestSecurityHeaders: the console and the REST API send a CSP without inline scripts that
// forbids framing, X-Frame-Options, nosniff and no referrer.
func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	base := startDown(t, gateway.Config{})
	for _, path := range []string{"/", "/app.js", "/api/v1/jobs", "/api/openapi.json", "/healthz"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
			t.Errorf("GET %s: Content-Security-Policy %q, want script-src 'self', frame-ancestors 'none' and no unsafe-inline", path, csp)
		}
		for h, want := range map[string]string{"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"} {
			if got := resp.Header.Get(h); got != want {
				t.Errorf("GET %s: %s %q, want %q", path, h, got, want)
			}
		}
	}
}
