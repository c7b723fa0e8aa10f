package sdk_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sync"
	"testing"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
)

// seen is a request as the test server received it.
type seen struct {
	method, path, header, body string
	// fire is the X-Jobmesh-Trigger-Id and X-Jobmesh-Job-Id headers, space-separated.
	fire string
}

func httpParams(t *testing.T, req sdk.HTTPRequest) string {
	t.Helper()
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestHTTPHandler(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, seen{r.Method, r.URL.Path, r.Header.Get("X-Token"), string(b), r.Header.Get(sdk.HeaderTriggerID) + " " + r.Header.Get(sdk.HeaderJobID)})
		mu.Unlock()
		switch r.URL.Path {
		case "/created":
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "made\nit\n")
		case "/broken":
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, "oops")
		case "/away":
			// To a host not on the list: the same server under another name.
			http.Redirect(w, r, "http://localhost:"+r.Host[len("127.0.0.1:"):]+"/created", http.StatusFound)
		default:
			io.WriteString(w, "ok")
		}
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	h := start(t, func(cfg *sdk.Config) { cfg.HTTPAllowHosts = []string{u.Host} })
	deny := start(t, nil) // no allow-list: deny everything

	h.accept(t, bean("91-1-0-0", 91, sdk.HTTPHandler, httpParams(t, sdk.HTTPRequest{
		URL: srv.URL + "/created", Method: "PUT", Headers: map[string]string{"X-Token": "t1"}, Body: `{"a":1}`, ExpectStatus: 201,
	})))
	h.wantResult(t, "91-1-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	if lines, want := h.ingest.Texts("91-1-0-0"), []string{"PUT " + srv.URL + "/created", "status 201 Created", "made", "it"}; !slices.Equal(lines, want) {
		t.Errorf("lines: got %q, want %q", lines, want)
	}

	h.accept(t, bean("92-1-0-0", 92, sdk.HTTPHandler, httpParams(t, sdk.HTTPRequest{URL: srv.URL + "/broken"})))
	h.wantResult(t, "92-1-0-0", logsv1.RunStatus_RUN_STATUS_FAIL, "got status 500, want 2xx")
	h.accept(t, bean("93-1-0-0", 93, sdk.HTTPHandler, httpParams(t, sdk.HTTPRequest{URL: srv.URL + "/plain", ExpectStatus: 204})))
	h.wantResult(t, "93-1-0-0", logsv1.RunStatus_RUN_STATUS_FAIL, "got status 200, want 204")
	h.accept(t, bean("94-1-0-0", 94, sdk.HTTPHandler, httpParams(t, sdk.HTTPRequest{URL: srv.URL + "/away"})))
	h.wantResult(t, "94-1-0-0", logsv1.RunStatus_RUN_STATUS_FAIL, "is not in the executor's allowed hosts")
	h.accept(t, bean("95-1-0-0", 95, sdk.HTTPHandler, `{"url": "file:///etc/passwd"}`))
	h.wantResult(t, "95-1-0-0", logsv1.RunStatus_RUN_STATUS_FAIL, `scheme "file"`)
	h.accept(t, bean("96-1-0-0", 96, sdk.HTTPHandler, `{"url": "`+srv.URL+`", "bogus": 1}`))
	h.wantResult(t, "96-1-0-0", logsv1.RunStatus_RUN_STATUS_FAIL, "unknown field")

	deny.accept(t, bean("97-1-0-0", 97, sdk.HTTPHandler, httpParams(t, sdk.HTTPRequest{URL: srv.URL + "/plain"})))
	deny.wantResult(t, "97-1-0-0", logsv1.RunStatus_RUN_STATUS_FAIL, "this executor allows no hosts")

	mu.Lock()
	defer mu.Unlock()
	want := []seen{
		{"PUT", "/created", "t1", `{"a":1}`, "91-1-0-0 91"},
		{"GET", "/broken", "", "", "92-1-0-0 92"},
		{"GET", "/plain", "", "", "93-1-0-0 93"},
		{"GET", "/away", "", "", "94-1-0-0 94"}, // and not /created through localhost
	}
	if !slices.Equal(got, want) {
		t.Fatalf("server saw %q, want %q", got, want)
	}
}

func TestHTTPHandlerTimeouts(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() {
		close(release)
		srv.Close()
	})
	h := start(t, func(cfg *sdk.Config) { cfg.HTTPAllowHosts = []string{"127.0.0.1", "*.example.com"} })

	// The request's own timeout fails the fire; the fire's timeout ends it TIMEOUT.
	h.accept(t, bean("98-1-0-0", 98, sdk.HTTPHandler, httpParams(t, sdk.HTTPRequest{URL: srv.URL, TimeoutSeconds: 1})))
	h.wantResult(t, "98-1-0-0", logsv1.RunStatus_RUN_STATUS_FAIL, "no response within 1s")
	tr := bean("99-1-0-0", 99, sdk.HTTPHandler, httpParams(t, sdk.HTTPRequest{URL: srv.URL}))
	tr.TimeoutSeconds = 1
	h.accept(t, tr)
	h.wantResult(t, "99-1-0-0", logsv1.RunStatus_RUN_STATUS_TIMEOUT, "timed out after 1s")
}

// TestHTTPHandlerReusesConnections: sequential fires to one host share one connection (the
// executor keeps one transport with an idle pool), and a redirect to a host off the list is
// still refused through that shared client.
func TestHTTPHandlerReusesConnections(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	conns := 0
	const parallel = 8
	var meet sync.WaitGroup
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/meet" {
			meet.Done()
			meet.Wait()
		}
		if r.URL.Path == "/away" {
			http.Redirect(w, r, "http://localhost:"+r.Host[len("127.0.0.1:"):]+"/", http.StatusFound)
			return
		}
		io.WriteString(w, "ok\n")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			conns++
			mu.Unlock()
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	h := start(t, func(cfg *sdk.Config) { cfg.HTTPAllowHosts = []string{u.Host} })

	const fires = 20
	for i := range fires {
		id := fmt.Sprintf("190-%d-0-0", i+1)
		h.accept(t, bean(id, 190, sdk.HTTPHandler, httpParams(t, sdk.HTTPRequest{URL: srv.URL + "/"})))
		h.wantResult(t, id, logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	}
	mu.Lock()
	got := conns
	mu.Unlock()
	if got != 1 {
		t.Fatalf("%d sequential fires opened %d connections, want 1", fires, got)
	}

	// Two rounds of concurrent fires, each round meeting at the server: the first opens a
	// connection per fire, the second finds them all idle in the pool (more than the standard
	// library's default of 2 per host).
	for round := range 2 {
		meet.Add(parallel)
		var ids []string
		for i := range parallel {
			id := fmt.Sprintf("%d-%d-0-0", 200+i, round+1)
			ids = append(ids, id)
			h.accept(t, bean(id, int64(200+i), sdk.HTTPHandler, httpParams(t, sdk.HTTPRequest{URL: srv.URL + "/meet"})))
		}
		for _, id := range ids {
			h.wantResult(t, id, logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
		}
	}
	mu.Lock()
	got = conns
	mu.Unlock()
	if want := parallel; got != want { // the sequential fires' one, then 7 more
		t.Fatalf("after two rounds of %d concurrent fires: %d connections, want %d", parallel, got, want)
	}

	h.accept(t, bean("191-1-0-0", 191, sdk.HTTPHandler, httpParams(t, sdk.HTTPRequest{URL: srv.URL + "/away"})))
	h.wantResult(t, "191-1-0-0", logsv1.RunStatus_RUN_STATUS_FAIL, "is not in the executor's allowed hosts")
}
