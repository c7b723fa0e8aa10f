// Package metricstest checks the metrics endpoints end to end: the whole stack of `jobmesh dev`
// in this process with its one /metrics endpoint, plus a real jobmesh-agent process with its own,
// scraped over HTTP while jobs fire. It is a package of its own because the endpoint installs
// the process's global MeterProvider: no other stack may share the test binary.
package metricstest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/devstack"
	"github.com/jobmesh/jobmesh/internal/hostport"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
)

// wait bounds every wait for something to happen.
const wait = 60 * time.Second

// TestMetricsEndpointsMove starts the dev stack on Postgres with its metrics endpoint and a
// jobmesh-agent process with its own, fires a 1 s job on each executor, and checks that the
// main series are there and move between two scrapes: fires by outcome, lateness at dispatch
// and at the executor, pre-read, ring, pools, leadership, executors online, logsvc ingest,
// connection pools, and the agent's runs and spool; and that an app whose executor left shows 0.
func TestMetricsEndpointsMove(t *testing.T) {
	dbURL := dbtest.NewPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	any0 := "127.0.0.1:0"
	st, err := devstack.Start(ctx, devstack.Config{
		DataDir: t.TempDir(), DatabaseURL: dbURL, UnsafeEtcd: true, MetricsAddr: any0,
		HTTPAddr: any0, SchedulerAddr: any0, RegistryAddr: any0, LogsAddr: any0, AuthAddr: any0, AgentAddr: any0, EtcdAddr: any0,
		AgentHandlers: map[string]sdk.HandlerFunc{"metrics-noop": func(_ context.Context, j *sdk.Job) error {
			j.Logf("fire %s", j.TriggerID)
			return nil
		}},
	})
	if err != nil {
		t.Fatalf("devstack.Start: %v", err)
	}
	t.Cleanup(st.Stop)
	if st.MetricsAddr == "" {
		t.Fatal("the stack serves no metrics endpoint although MetricsAddr was set")
	}

	// A real agent process of its own app and group, with its own endpoint.
	api := newAPI(t, st)
	var grp struct {
		Group struct {
			ID string `json:"id"`
		} `json:"group"`
	}
	const agentToken = "metrics-agent-group-token"
	api.call("POST", "/executor-groups", map[string]any{"app_name": "metrics-agent", "title": "Metrics agent",
		"address_type": "ADDRESS_TYPE_AUTO", "access_token": agentToken}, &grp)
	agentAddr, agentMetrics := freeAddr(t), freeAddr(t)
	stopAgent := startAgent(t, "--app-name", "metrics-agent", "--instance-id", "a1", "--listen-addr", agentAddr,
		"--registry-addr", st.RegistryAddr, "--logsvc-addr", st.LogsAddr, "--access-token", agentToken,
		"--log-dir", t.TempDir(), "--metrics-addr", agentMetrics,
		"--tls-cert", st.TLSFiles.Cert, "--tls-key", st.TLSFiles.Key, "--tls-ca", st.TLSFiles.CA)
	every := map[string]any{"type": "SCHEDULE_TYPE_FIX_RATE", "expression": "1s"}
	api.call("POST", "/jobs", map[string]any{"name": "in-process", "group_id": st.GroupID, "handler": "metrics-noop",
		"glue_type": "GLUE_TYPE_BEAN", "schedule": every, "status": "JOB_STATUS_RUNNING"}, nil)
	api.call("POST", "/jobs", map[string]any{"name": "on-the-agent", "group_id": grp.Group.ID, "glue_type": "GLUE_TYPE_GLUE_SHELL",
		"glue_source": "echo hello from the agent", "schedule": every, "status": "JOB_STATUS_RUNNING"}, nil)

	dev := endpoint{t: t, addr: st.MetricsAddr}
	agent := endpoint{t: t, addr: agentMetrics}
	accepted := series{"jobmesh_scheduler_fires_total", map[string]string{"jobmesh_fire_outcome": "accepted"}}
	devDone := series{"jobmesh_executor_runs_finished_total", map[string]string{"jobmesh_executor_app": devstack.DevApp, "jobmesh_run_status": "success"}}
	agentDone := series{"jobmesh_executor_runs_finished_total", map[string]string{"jobmesh_executor_app": "metrics-agent", "jobmesh_run_status": "success"}}
	scans := series{"jobmesh_scheduler_preread_duration_seconds", nil}
	ingested := func(stream string) series {
		return series{"jobmesh_logsvc_ingest_batch_size", map[string]string{"jobmesh_ingest_stream": stream}}
	}

	// First scrape once both executors have finished a run and it was recorded.
	d1 := dev.waitFor("a run finished on each executor and stored", func(s scrape) bool {
		return s.value(accepted) >= 2 && s.value(devDone) >= 1 && s.value(ingested("results")) >= 1 &&
			s.value(ingested("log_lines")) >= 1 && s.value(series{"jobmesh_registry_executors_online", map[string]string{"jobmesh_executor_app": "metrics-agent"}}) == 1
	})
	a1 := agent.waitFor("a run finished on the agent process", func(s scrape) bool { return s.value(agentDone) >= 1 })

	// Counters and histogram counts move between two scrapes.
	d2 := dev.waitFor("more fires, runs, scans and batches", func(s scrape) bool {
		return s.value(accepted) > d1.value(accepted) && s.value(devDone) > d1.value(devDone) && s.value(scans) > d1.value(scans) &&
			s.value(ingested("trigger_records")) > d1.value(ingested("trigger_records"))
	})
	a2 := agent.waitFor("more runs on the agent process", func(s scrape) bool { return s.value(agentDone) > a1.value(agentDone) })

	// The in-process stack: scheduler, registry, logsvc, executor and stores.
	d2.want(t, "fire lateness at dispatch, cron fires", series{"jobmesh_scheduler_fire_lateness_seconds", map[string]string{"jobmesh_trigger_type": "cron"}}, atLeast(2))
	d2.want(t, "fire lateness on the in-process executor", series{"jobmesh_executor_fire_lateness_seconds", map[string]string{"jobmesh_executor_app": devstack.DevApp}}, atLeast(1))
	d2.want(t, "pre-read batch size", series{"jobmesh_scheduler_preread_jobs", nil}, atLeast(1))
	d2.want(t, "leader", series{"jobmesh_scheduler_leader", nil}, equal(1))
	d2.want(t, "partitions led (all of them, in one process)", series{"jobmesh_scheduler_partitions_led", nil}, equal(64))
	d2.want(t, "partition 0's epoch", series{"jobmesh_scheduler_partition_epoch", map[string]string{"jobmesh_partition": "0"}}, atLeast(1))
	d2.want(t, "partition hand-overs", series{"jobmesh_scheduler_partition_handovers_total", nil}, atLeast(0))
	d2.want(t, "peer sessions revoked (one replica: none)", series{"jobmesh_scheduler_peer_revocations_total", nil}, equal(0))
	d2.want(t, "ring size (a 1 s job keeps the 5 s window armed)", series{"jobmesh_scheduler_ring_size", nil}, atLeast(1))
	d2.want(t, "fast pool queue", series{"jobmesh_scheduler_pool_queue_size", map[string]string{"jobmesh_pool_name": "fast"}}, atLeast(0))
	d2.want(t, "fires awaiting their executors' answers", series{"jobmesh_scheduler_dispatch_inflight", nil}, atLeast(0))
	d2.want(t, "slow pool queue limit", series{"jobmesh_scheduler_pool_queue_limit", map[string]string{"jobmesh_pool_name": "slow"}}, equal(20000))
	d2.want(t, "executors online, dev app", series{"jobmesh_registry_executors_online", map[string]string{"jobmesh_executor_app": devstack.DevApp}}, equal(1))
	d2.want(t, "ingest latency of results", series{"jobmesh_logsvc_ingest_duration_seconds", map[string]string{"jobmesh_ingest_stream": "results"}}, atLeast(1))
	d2.want(t, "ingest lag of log lines", series{"jobmesh_logsvc_ingest_lag_seconds", map[string]string{"jobmesh_ingest_stream": "log_lines"}}, atLeast(1))
	d2.want(t, "ingest queue limit", series{"jobmesh_logsvc_ingest_queued_limit", nil}, equal(50000))
	d2.want(t, "in-process executor's running handlers", series{"jobmesh_executor_runs", map[string]string{"jobmesh_executor_app": devstack.DevApp, "jobmesh_run_state": "running"}}, atLeast(0))
	d2.want(t, "in-process executor's undelivered items", series{"jobmesh_executor_delivery_pending", map[string]string{"jobmesh_executor_app": devstack.DevApp}}, atLeast(0))
	for _, pool := range []string{"scheduler", "registry", "logs", "auth"} {
		d2.want(t, pool+" pool size", series{"db_client_connection_max", map[string]string{"db_client_connection_pool_name": pool, "db_system_name": "postgresql"}}, equal(10))
		d2.want(t, pool+" pool connections", series{"db_client_connection_count", map[string]string{"db_client_connection_pool_name": pool}}, atLeast(1))
	}
	d2.want(t, "service name", series{"target_info", map[string]string{"service_name": "jobmesh"}}, equal(1))

	// The agent process.
	a2.want(t, "fire lateness on the agent", series{"jobmesh_executor_fire_lateness_seconds", map[string]string{"jobmesh_trigger_type": "cron"}}, atLeast(2))
	a2.want(t, "agent's running handlers", series{"jobmesh_executor_runs", map[string]string{"jobmesh_run_state": "running"}}, atLeast(0))
	a2.want(t, "agent's queued fires", series{"jobmesh_executor_runs", map[string]string{"jobmesh_run_state": "queued"}}, atLeast(0))
	a2.want(t, "agent's spool", series{"jobmesh_executor_spool_size_bytes", map[string]string{"jobmesh_executor_app": "metrics-agent"}}, atLeast(0))
	a2.want(t, "agent's undelivered items", series{"jobmesh_executor_delivery_pending", nil}, atLeast(0))
	a2.want(t, "agent's service name", series{"target_info", map[string]string{"service_name": "jobmesh-agent"}}, equal(1))
	a2.want(t, "Go runtime", series{"go_goroutines", nil}, atLeast(1))

	// The Grafana dashboard shows only series the processes really export.
	labels := map[string]bool{}
	for _, sc := range []scrape{d2, a2} {
		for _, f := range sc {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = true
				}
			}
		}
	}
	for _, name := range dashboardMetrics(t) {
		if labels[name] {
			continue // a label the query groups or filters by
		}
		family := name // a histogram's series are named after its family
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if f := strings.TrimSuffix(name, suffix); f != name && (d2[f] != nil || a2[f] != nil) {
				family = f
			}
		}
		if d2[family] == nil && a2[family] == nil {
			t.Errorf("deploy/grafana/dashboards/jobmesh.json queries %s, which no endpoint exports", name)
		}
	}

	// An app whose last executor left is reported as 0, not dropped.
	stopAgent()
	dev.waitFor("the agent's app at 0 executors online after it stopped", func(s scrape) bool {
		return s.value(series{"jobmesh_registry_executors_online", map[string]string{"jobmesh_executor_app": "metrics-agent"}}) == 0
	})
}

// series names one metric family and the labels its series must carry (others may follow).
type series struct {
	name   string
	labels map[string]string
}

func (s series) String() string { return fmt.Sprintf("%s%v", s.name, s.labels) }

// scrape is one parsed /metrics answer.
type scrape map[string]*dto.MetricFamily

// value sums the matching series: counters and gauges by value, histograms by sample count.
// A family or series that is missing is -1.
func (s scrape) value(q series) float64 {
	f, ok := s[q.name]
	if !ok {
		return -1
	}
	sum, found := 0.0, false
	for _, m := range f.GetMetric() {
		if !hasLabels(m, q.labels) {
			continue
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		case m.Untyped != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	if !found {
		return -1
	}
	return sum
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
			n++
		}
	}
	return n == len(want)
}

// want checks one series' value.
func (s scrape) want(t *testing.T, what string, q series, check func(float64) bool) {
	t.Helper()
	if v := s.value(q); v < 0 || !check(v) {
		t.Errorf("%s: %s = %v (-1: missing)", what, q, v)
	}
}

func atLeast(n float64) func(float64) bool { return func(v float64) bool { return v >= n } }
func equal(n float64) func(float64) bool   { return func(v float64) bool { return v == n } }

// endpoint is a /metrics endpoint.
type endpoint struct {
	t    *testing.T
	addr string
}

func (e endpoint) get() scrape {
	e.t.Helper()
	resp, err := http.Get("http://" + e.addr + "/metrics")
	if err != nil {
		e.t.Fatalf("GET %s/metrics: %v", e.addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("GET %s/metrics = %d", e.addr, resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		e.t.Fatalf("GET %s/metrics: not the Prometheus text format: %v", e.addr, err)
	}
	return fams
}

// waitFor scrapes until ok holds, for at most wait.
func (e endpoint) waitFor(what string, ok func(scrape) bool) scrape {
	e.t.Helper()
	deadline := time.Now().Add(wait)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		s := e.get()
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			var names []string
			for n := range s {
				names = append(names, n)
			}
			e.t.Fatalf("%s: not seen on %s within %v; families: %v", what, e.addr, wait, names)
		}
		<-tick.C
	}
}

// api calls the stack's REST API as its first admin.
type api struct {
	t     *testing.T
	base  string
	token string
}

func newAPI(t *testing.T, st *devstack.Stack) *api {
	a := &api{t: t, base: "http://" + st.HTTPAddr + "/api/v1"}
	var resp struct {
		Token string `json:"token"`
	}
	a.call("POST", "/auth/login", map[string]any{"username": "admin", "password": st.AdminPassword}, &resp)
	a.token = resp.Token
	return a
}

// call makes a REST call that must answer 200 and decodes the answer into out (when not nil).
func (a *api) call(method, path string, body, out any) {
	a.t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		a.t.Fatal(err)
	}
	req, err := http.NewRequest(method, a.base+path, bytes.NewReader(b))
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		a.t.Fatalf("%s %s = %d %s, want 200", method, path, resp.StatusCode, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			a.t.Fatalf("%s %s: decode %q: %v", method, path, raw, err)
		}
	}
}

// freeAddr returns a loopback address with a port free at the time of the call.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := hostport.ListenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startAgent builds jobmesh-agent and runs it with args until the test ends or the returned
// function stops it (SIGINT: it deregisters and exits).
func startAgent(t *testing.T, args ...string) (stop func()) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "jobmesh-agent")
	build := exec.Command("go", "build", "-o", bin, "./cmd/jobmesh-agent")
	build.Dir = filepath.Join("..", "..", "services", "executor-agent") // its own module: works with and without go.work
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/jobmesh-agent: %v\n%s", err, out)
	}
	logPath := filepath.Join(t.TempDir(), "agent.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start jobmesh-agent: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop = sync.OnceFunc(func() {
		_ = cmd.Process.Signal(os.Interrupt) // this test's own process, by pid
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("jobmesh-agent output (pid %d):\n%s", cmd.Process.Pid, b)
		}
	})
	return stop
}

// dashboardMetrics returns the jobmesh_* and db_client_* names in the provisioned Grafana
// dashboard's queries: metrics, histogram series (_bucket…) and labels.
func dashboardMetrics(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile("../../deploy/grafana/dashboards/jobmesh.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	names := map[string]bool{}
	re := regexp.MustCompile(`\b(?:jobmesh|db_client)_[a-z0-9_]+`)
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			for _, n := range re.FindAllString(q.Expr, -1) {
				names[n] = true
			}
		}
	}
	var out []string
	for n := range names {
		out = append(out, n)
	}
	sort.Strings(out)
	if len(out) < 10 {
		t.Errorf("dashboard queries only %v", out)
	}
	return out
}
