package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/jobmesh/jobmesh/services/gateway"
)

// TestServesDocsHealthAndUI starts a gateway whose services are not running: the routes that do
// not reach a service still answer, and an API call fails as Unavailable, not a hang.
func TestServesDocsHealthAndUI(t *testing.T) {
	t.Parallel()
	down := "127.0.0.1:1"
	g, err := gateway.New(gateway.Config{ListenAddr: "127.0.0.1:0", SchedulerAddr: down, RegistryAddr: down, LogsAddr: down, Version: "v9.8.7"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := g.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(g.Stop)
	base := "http://" + g.Addr()
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("GET /healthz = %d %q, want 200 ok", code, body)
	}
	code, body := get("/api/openapi.json")
	var doc struct {
		OpenAPI string `json:"openapi"`
		Info    struct {
			Title, Version string
		} `json:"info"`
		Paths map[string]any `json:"paths"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &doc) != nil {
		t.Fatalf("GET /api/openapi.json = %d, want 200 and JSON", code)
	}
	if doc.OpenAPI != "3.0.3" || doc.Info.Title != "jobmesh API" || doc.Info.Version != "v9.8.7" {
		t.Errorf("document: openapi %q, info %+v; want 3.0.3, jobmesh API at the configured version v9.8.7", doc.OpenAPI, doc.Info)
	}
	for _, p := range []string{"/api/v1/jobs", "/api/v1/jobs/{id}:trigger", "/api/v1/schedules:preview", "/api/v1/logs/{id}/lines", "/api/v1/executor-groups", "/api/v1/auth/login"} {
		if _, ok := doc.Paths[p]; !ok {
			t.Errorf("OpenAPI document has no path %s", p)
		}
	}
	if code, body := get("/"); code != 200 || !strings.Contains(body, "<title>jobmesh</title>") {
		t.Errorf("GET / = %d, want the UI", code)
	}
	for _, f := range []string{"/app.js", "/js/views/apiref.js", "/apiref.css"} {
		if code, _ := get(f); code != 200 {
			t.Errorf("GET %s = %d, want 200", f, code)
		}
	}
	// The gateway's own errors carry a reason too.
	for path, want := range map[string]struct {
		code   int
		reason string
	}{
		"/api/v1/jobs":    {http.StatusServiceUnavailable, "UNAVAILABLE"},
		"/api/v1/nothing": {http.StatusNotFound, "NOT_FOUND"},
	} {
		code, body := get(path)
		var e struct {
			Details []struct {
				Type   string `json:"@type"`
				Reason string `json:"reason"`
				Domain string `json:"domain"`
			} `json:"details"`
		}
		_ = json.Unmarshal([]byte(body), &e)
		if code != want.code || len(e.Details) == 0 || e.Details[0].Type != "type.googleapis.com/google.rpc.ErrorInfo" || e.Details[0].Reason != want.reason || e.Details[0].Domain != "jobmesh.dev" {
			t.Errorf("GET %s = %d %s, want %d with ErrorInfo reason %s", path, code, body, want.code, want.reason)
		}
	}
}

func TestConfigNamesTheMissingField(t *testing.T) {
	t.Parallel()
	_, err := gateway.New(gateway.Config{ListenAddr: "127.0.0.1:0", SchedulerAddr: "a:1", RegistryAddr: "b:1"})
	if err == nil || !strings.Contains(err.Error(), "logs addr") {
		t.Errorf("New without a logs address = %v, want an error naming it", err)
	}
}

// TestTraceURLTemplate: the web UI reads the configured template from /api/ui-config; a template
// that is not an http(s) URL with {trace_id} in it is refused by name.
func TestTraceURLTemplate(t *testing.T) {
	t.Parallel()
	down := "127.0.0.1:1"
	cfg := gateway.Config{ListenAddr: "127.0.0.1:0", SchedulerAddr: down, RegistryAddr: down, LogsAddr: down}
	for _, bad := range []string{"grafana:3000/explore?q={trace_id}", "http://grafana:3000/explore", "ftp://grafana/{trace_id}"} {
		c := cfg
		c.TraceURLTemplate = bad
		if _, err := gateway.New(c); err == nil || !strings.Contains(err.Error(), "trace url template") {
			t.Errorf("template %q: got %v, want an error naming the trace url template", bad, err)
		}
	}
	for _, tpl := range []string{"", "http://localhost:3000/explore?left=%7B%22datasource%22:%22tempo%22,%22queries%22:%5B%7B%22query%22:%22{trace_id}%22%7D%5D%7D"} {
		c := cfg
		c.TraceURLTemplate = tpl
		g, err := gateway.New(c)
		if err != nil {
			t.Fatalf("template %q: %v", tpl, err)
		}
		if err := g.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		resp, err := http.Get("http://" + g.Addr() + "/api/ui-config")
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]string
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		g.Stop()
		if err != nil || resp.StatusCode != 200 || got["trace_url_template"] != tpl {
			t.Errorf("GET /api/ui-config = %d %v (%v), want trace_url_template %q", resp.StatusCode, got, err, tpl)
		}
	}
}
