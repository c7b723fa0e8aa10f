package tracetest

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
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/jobmesh/jobmesh/internal/devstack"
	"github.com/jobmesh/jobmesh/services/executor-agent/telemetry"
	"github.com/jobmesh/jobmesh/services/executor-agent/telemetry/telemetrytest"
	"github.com/jobmesh/jobmesh/services/scheduler"
)

// wait bounds every wait on a condition.
const wait = 60 * time.Second

// TestOneFireIsOneTrace follows fires through the real services with tracing on, the way a
// deployment runs: the in-process stack exports over OTLP/gRPC, a jobmesh-agent process over
// OTLP/HTTP, both to a receiver in this test.
//
// A scheduled fire of a bash job on the agent must be one trace:
//
//	jobmesh.fire (root: job, trigger id, scheduled time, lateness, routing, outcome)
//	└─ jobmesh.dispatch (trigger id, executor, its answer)
//	   ├─ ExecutorService/Run client span → ExecutorService/Run server span (agent)
//	   ├─ jobmesh.run (agent: handler, status, exit code) → the script's TRACEPARENT
//	   │  └─ jobmesh.ingest result (SUCCESS, logsvc), linked to its batch's span
//	   ├─ jobmesh.ingest result (RUNNING; none when the fire ended before it left the agent)
//	   └─ jobmesh.ingest trigger_record (logsvc), linked to its batch's span
//
// and the run stored in logsvc carries the trace id. A manual fire that reaches no executor is a
// failed root span linked to the API call that caused it, and the warning it logs carries its
// trace and span ids.
func TestOneFireIsOneTrace(t *testing.T) {
	recv := telemetrytest.Start(t)
	for k, v := range map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": recv.GRPCEndpoint(), "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "",
		"OTEL_SDK_DISABLED": "", "OTEL_TRACES_EXPORTER": "", "OTEL_TRACES_SAMPLER": "", "OTEL_TRACES_SAMPLER_ARG": "",
		"OTEL_BSP_SCHEDULE_DELAY": "100",
	} {
		t.Setenv(k, v)
	}
	prev := otel.GetTracerProvider()
	shutdown, err := telemetry.StartTracing(context.Background(), "jobmesh")
	if err != nil {
		t.Fatalf("StartTracing: %v", err)
	}
	t.Cleanup(func() {
		_ = shutdown(context.Background())
		otel.SetTracerProvider(prev)
	})

	logs := &syncBuffer{}
	log, err := telemetry.NewLogger(telemetry.Config{Format: "json", Level: "debug", Output: logs})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	any0 := "127.0.0.1:0"
	st, err := devstack.Start(ctx, devstack.Config{
		DataDir: t.TempDir(), UnsafeEtcd: true, Logger: log,
		HTTPAddr: any0, SchedulerAddr: any0, RegistryAddr: any0, LogsAddr: any0, AuthAddr: any0, AgentAddr: any0, EtcdAddr: any0,
	})
	if err != nil {
		t.Fatalf("devstack.Start: %v", err)
	}
	t.Cleanup(st.Stop)
	api := newAPI(t, st)

	t.Run("scheduled fire on an agent process", func(t *testing.T) {
		const app = "traced"
		gid := api.createGroup(t, app)
		agentAddr, agentLog := startAgent(t, st, app, recv.HTTPEndpoint())
		api.waitOnline(t, gid, agentAddr)

		sched := time.Now().Add(3 * time.Second).UTC().Truncate(time.Millisecond)
		jobID := api.createJob(t, map[string]any{
			"name": "traced", "group_id": gid, "status": "JOB_STATUS_RUNNING",
			"schedule":  map[string]any{"type": "SCHEDULE_TYPE_ONCE", "expression": sched.Format(time.RFC3339Nano)},
			"glue_type": "GLUE_TYPE_GLUE_SHELL", "glue_source": "echo \"traceparent=$TRACEPARENT\"\n",
		})
		r := api.waitRun(t, jobID, "RUN_STATUS_SUCCESS")
		if len(r.TraceID) != 32 {
			t.Fatalf("run %s stored in logsvc with trace id %q, want 32 hex digits", r.ID, r.TraceID)
		}
		traceID := r.TraceID

		// The script saw the agent's run span as its parent, in the fire's trace.
		var scriptParent string
		for _, l := range api.lines(t, r.ID) {
			if v, ok := strings.CutPrefix(l, "traceparent="); ok {
				scriptParent = v
			}
		}
		parts := strings.Split(scriptParent, "-")
		if len(parts) != 4 || parts[0] != "00" || parts[1] != traceID {
			t.Fatalf("script's TRACEPARENT %q: want 00-%s-<span>-<flags>", scriptParent, traceID)
		}

		want := []string{"jobmesh.fire", "jobmesh.dispatch", "jobmesh.run", "jobmesh.ingest trigger_record", "jobmesh.ingest result"}
		spans := recv.Wait(t, wait, func(ss []telemetrytest.Span) bool {
			tr := inTrace(ss, traceID)
			for _, name := range want {
				if len(tr.named(name)) == 0 {
					return false
				}
			}
			// The final result's; a RUNNING one, if the agent sent it, was in the same batch or
			// an earlier one.
			final := false
			for _, res := range tr.named("jobmesh.ingest result") {
				final = final || res.Attrs["jobmesh.run_status"] == "SUCCESS"
			}
			return final && len(tr.suffixed("ExecutorService/Run")) == 2 &&
				len(linkTargets(ss, tr.named("jobmesh.ingest trigger_record")[0])) == 1
		})
		tr := inTrace(spans, traceID)
		fire, dispatch, run := tr.one(t, "jobmesh.fire"), tr.one(t, "jobmesh.dispatch"), tr.one(t, "jobmesh.run")

		if roots := tr.roots(); len(roots) != 1 || roots[0].Name != "jobmesh.fire" {
			t.Errorf("roots of the trace: got %v, want only jobmesh.fire", names(roots))
		}
		wantAttrs(t, fire, map[string]any{
			"jobmesh.job_id": mustInt(t, jobID), "jobmesh.group_id": gid, "jobmesh.trigger_id": r.ID,
			"jobmesh.scheduled_time": sched.Format(time.RFC3339Nano), "jobmesh.route_strategy": "FIRST",
			"jobmesh.executor_address": agentAddr, "jobmesh.trigger_outcome": "OK", "jobmesh.attempt": int64(0),
		})
		// A scheduled fire is dispatched up to the dispatch lead ahead of its time: lateness at
		// dispatch is then negative, and never more so than the lead.
		if late, ok := fire.Attrs["jobmesh.lateness_ms"].(float64); !ok || late < -float64(scheduler.DefaultDispatchLead.Milliseconds()) {
			t.Errorf("fire lateness: got %v, want milliseconds since the scheduled time, at least -%v", fire.Attrs["jobmesh.lateness_ms"], scheduler.DefaultDispatchLead)
		}
		if fire.Service != "jobmesh" || run.Service != "jobmesh-agent" {
			t.Errorf("services: fire from %q, run from %q; want jobmesh and jobmesh-agent", fire.Service, run.Service)
		}

		wantParent(t, dispatch, fire)
		wantAttrs(t, dispatch, map[string]any{
			"jobmesh.trigger_id": r.ID, "jobmesh.executor_address": agentAddr, "jobmesh.trigger_outcome": "OK", "jobmesh.executor_answer": "ACCEPTED",
		})
		var client, server telemetrytest.Span
		for _, s := range tr.suffixed("ExecutorService/Run") {
			if s.Kind == "SPAN_KIND_CLIENT" {
				client = s
			} else {
				server = s
			}
		}
		wantParent(t, client, dispatch)
		wantParent(t, server, client)
		if server.Service != "jobmesh-agent" {
			t.Errorf("Run server span from %q, want jobmesh-agent", server.Service)
		}

		wantParent(t, run, dispatch)
		wantAttrs(t, run, map[string]any{
			"jobmesh.trigger_id": r.ID, "jobmesh.run_status": "SUCCESS", "process.exit.code": int64(0), "jobmesh.glue_type": "GLUE_SHELL",
		})
		if parts[2] != run.SpanID {
			t.Errorf("script's TRACEPARENT names span %s, want the run span %s", parts[2], run.SpanID)
		}
		b, _ := os.ReadFile(agentLog)
		wantLogged(t, string(b), "fire ended", r.ID, run)

		// logsvc: each item is a child of its sender, linked to its batch's root span, which
		// links back to the item's sender.
		rec := tr.one(t, "jobmesh.ingest trigger_record")
		wantParent(t, rec, dispatch)
		wantAttrs(t, rec, map[string]any{"jobmesh.trigger_id": r.ID, "jobmesh.trigger_outcome": "OK"})
		wantBatchLink(t, spans, rec, dispatch)
		for _, res := range tr.named("jobmesh.ingest result") {
			switch res.Attrs["jobmesh.run_status"] {
			case "RUNNING":
				wantParent(t, res, dispatch)
			case "SUCCESS":
				wantParent(t, res, run)
				wantAttrs(t, res, map[string]any{"jobmesh.trigger_id": r.ID, "jobmesh.refused": false})
				wantBatchLink(t, spans, res, run)
			default:
				t.Errorf("ingest result span with status %v", res.Attrs["jobmesh.run_status"])
			}
		}
	})

	t.Run("manual fire that reaches no executor", func(t *testing.T) {
		gid := api.createGroup(t, "nobody-home")
		jobID := api.createJob(t, map[string]any{
			"name": "unrouted", "group_id": gid, "schedule": map[string]any{"type": "SCHEDULE_TYPE_NONE"},
			"glue_type": "GLUE_TYPE_GLUE_SHELL", "glue_source": "true\n",
		})
		ids := api.trigger(t, jobID)
		if len(ids) != 1 {
			t.Fatalf("trigger ids: got %v, want 1", ids)
		}
		r := api.waitRun(t, jobID, "RUN_STATUS_FAIL")
		spans := recv.Wait(t, wait, func(ss []telemetrytest.Span) bool {
			tr := inTrace(ss, r.TraceID)
			return len(tr.named("jobmesh.fire")) == 1 && len(tr.named("jobmesh.ingest trigger_record")) == 1
		})
		tr := inTrace(spans, r.TraceID)
		fire := tr.one(t, "jobmesh.fire")
		if fire.ParentSpanID != "" || fire.StatusCode != "STATUS_CODE_ERROR" || !strings.Contains(fire.StatusMessage, "route") {
			t.Errorf("failed fire span: parent %q status %s %q, want a root with an error naming the routing", fire.ParentSpanID, fire.StatusCode, fire.StatusMessage)
		}
		wantAttrs(t, fire, map[string]any{"jobmesh.trigger_id": ids[0], "jobmesh.trigger_outcome": "FAILED", "jobmesh.trigger_type": "MANUAL"})
		wantParent(t, tr.one(t, "jobmesh.ingest trigger_record"), fire)
		// Linked to the TriggerJob call, which is in the HTTP request's trace, not the fire's.
		if len(fire.Links) != 1 {
			t.Fatalf("failed fire links: got %d, want 1 (the TriggerJob call)", len(fire.Links))
		}
		cause := find(spans, fire.Links[0].SpanID)
		if cause == nil || !strings.HasSuffix(cause.Name, "JobService/TriggerJob") || cause.TraceID == fire.TraceID {
			t.Errorf("fire's link names %+v, want the TriggerJob server span of another trace", cause)
		}

		// The warning logged inside the fire carries its ids.
		wantLogged(t, logs.String(), "trigger failed", ids[0], fire)
	})
}

// wantLogged checks that the JSON log lines msg about triggerID carry span's trace and span ids.
func wantLogged(t *testing.T, logs, msg, triggerID string, span telemetrytest.Span) {
	t.Helper()
	var found bool
	for _, line := range strings.Split(logs, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m["msg"] != msg || m["trigger_id"] != triggerID {
			continue
		}
		found = true
		if m["trace_id"] != span.TraceID || m["span_id"] != span.SpanID {
			t.Errorf("log line %s: want trace_id %s and span_id %s (%s)", line, span.TraceID, span.SpanID, span.Name)
		}
	}
	if !found {
		t.Errorf("no %q log line for %s", msg, triggerID)
	}
}

// trace is the spans of one trace.
type trace []telemetrytest.Span

func inTrace(ss []telemetrytest.Span, traceID string) trace {
	var out trace
	for _, s := range ss {
		if s.TraceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

func (tr trace) named(name string) []telemetrytest.Span {
	var out []telemetrytest.Span
	for _, s := range tr {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func (tr trace) suffixed(suffix string) []telemetrytest.Span {
	var out []telemetrytest.Span
	for _, s := range tr {
		if strings.HasSuffix(s.Name, suffix) {
			out = append(out, s)
		}
	}
	return out
}

func (tr trace) roots() []telemetrytest.Span {
	var out []telemetrytest.Span
	for _, s := range tr {
		if s.ParentSpanID == "" {
			out = append(out, s)
		}
	}
	return out
}

func (tr trace) one(t *testing.T, name string) telemetrytest.Span {
	t.Helper()
	ss := tr.named(name)
	if len(ss) != 1 {
		t.Fatalf("spans named %s in the trace: got %d, want 1", name, len(ss))
	}
	return ss[0]
}

func names(ss []telemetrytest.Span) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Name
	}
	return out
}

func find(ss []telemetrytest.Span, spanID string) *telemetrytest.Span {
	for i := range ss {
		if ss[i].SpanID == spanID {
			return &ss[i]
		}
	}
	return nil
}

// linkTargets returns the received spans s links to.
func linkTargets(ss []telemetrytest.Span, s telemetrytest.Span) []telemetrytest.Span {
	var out []telemetrytest.Span
	for _, l := range s.Links {
		if x := find(ss, l.SpanID); x != nil && x.TraceID == l.TraceID {
			out = append(out, *x)
		}
	}
	return out
}

func wantParent(t *testing.T, child, parent telemetrytest.Span) {
	t.Helper()
	if child.ParentSpanID != parent.SpanID || child.TraceID != parent.TraceID {
		t.Errorf("%s (%s): parent %s, want %s (%s)", child.Name, child.Service, child.ParentSpanID, parent.Name, parent.SpanID)
	}
}

func wantAttrs(t *testing.T, s telemetrytest.Span, want map[string]any) {
	t.Helper()
	for k, v := range want {
		if got := s.Attrs[k]; got != v {
			t.Errorf("%s: attribute %s = %v (%T), want %v (%T)", s.Name, k, got, got, v, v)
		}
	}
}

// wantBatchLink checks that item links to a root "jobmesh.ingest batch" span of its own trace
// that links back to sender.
func wantBatchLink(t *testing.T, ss []telemetrytest.Span, item, sender telemetrytest.Span) {
	t.Helper()
	batches := linkTargets(ss, item)
	if len(batches) != 1 {
		t.Errorf("%s links to %d received spans, want its batch", item.Name, len(batches))
		return
	}
	b := batches[0]
	if b.Name != "jobmesh.ingest batch" || b.ParentSpanID != "" || b.TraceID == item.TraceID {
		t.Errorf("%s's batch span: %s parent %q trace %s, want a root jobmesh.ingest batch of its own trace", item.Name, b.Name, b.ParentSpanID, b.TraceID)
	}
	for _, l := range b.Links {
		if l.SpanID == sender.SpanID && l.TraceID == sender.TraceID {
			return
		}
	}
	t.Errorf("batch span %s does not link to %s %s", b.SpanID, sender.Name, sender.SpanID)
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// syncBuffer is a bytes.Buffer safe for the stack's concurrent log writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// restAPI calls the stack's REST API as its first admin.
type restAPI struct {
	base, token string
}

func newAPI(t *testing.T, st *devstack.Stack) *restAPI {
	t.Helper()
	a := &restAPI{base: "http://" + st.HTTPAddr + "/api/v1"}
	var login struct{ Token string }
	a.call(t, "POST", "/auth/login", map[string]any{"username": "admin", "password": st.AdminPassword}, &login)
	if login.Token == "" {
		t.Fatal("login: no token")
	}
	a.token = login.Token
	return a
}

func (a *restAPI) call(t *testing.T, method, path string, body, out any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, a.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s = %d: %s", method, path, resp.StatusCode, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, raw, err)
		}
	}
}

// groupToken is the access token createGroup gives app's group, and its agent presents.
func groupToken(app string) string { return app + "-group-token" }

func (a *restAPI) createGroup(t *testing.T, app string) int64 {
	t.Helper()
	var resp struct {
		Group struct {
			ID string `json:"id"`
		} `json:"group"`
	}
	a.call(t, "POST", "/executor-groups", map[string]any{"app_name": app, "title": app, "address_type": "ADDRESS_TYPE_AUTO",
		"access_token": groupToken(app)}, &resp)
	return mustInt(t, resp.Group.ID)
}

// waitOnline waits until the group routes to addr.
func (a *restAPI) waitOnline(t *testing.T, gid int64, addr string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		var resp struct {
			Group struct {
				Addresses []string `json:"addresses"`
			} `json:"group"`
		}
		a.call(t, "GET", fmt.Sprintf("/executor-groups/%d", gid), nil, &resp)
		for _, got := range resp.Group.Addresses {
			if got == addr {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %d addresses %v: %s not online within %v", gid, resp.Group.Addresses, addr, wait)
		}
		time.Sleep(50 * time.Millisecond) // the registry follows etcd asynchronously
	}
}

func (a *restAPI) createJob(t *testing.T, j map[string]any) string {
	t.Helper()
	var resp struct {
		Job struct {
			ID string `json:"id"`
		} `json:"job"`
	}
	a.call(t, "POST", "/jobs", j, &resp)
	return resp.Job.ID
}

func (a *restAPI) trigger(t *testing.T, jobID string) []string {
	t.Helper()
	var resp struct {
		TriggerIDs []string `json:"trigger_ids"`
	}
	a.call(t, "POST", "/jobs/"+jobID+":trigger", map[string]any{}, &resp)
	return resp.TriggerIDs
}

// run is a run as the log API returns it.
type run struct {
	ID      string `json:"id"`
	Status  string `json:"status"`
	TraceID string `json:"trace_id"`
}

// waitRun waits for the job's only run to end with status and returns it.
func (a *restAPI) waitRun(t *testing.T, jobID, status string) run {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		var list struct {
			Runs []run `json:"runs"`
		}
		a.call(t, "GET", "/logs?job_id="+jobID, nil, &list)
		if len(list.Runs) == 1 && list.Runs[0].Status == status {
			return list.Runs[0]
		}
		if len(list.Runs) > 1 || time.Now().After(deadline) {
			t.Fatalf("runs of job %s: %+v, want one ending %s within %v", jobID, list.Runs, status, wait)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (a *restAPI) lines(t *testing.T, id string) []string {
	t.Helper()
	var resp struct {
		Lines []struct {
			Text string `json:"text"`
		} `json:"lines"`
	}
	a.call(t, "GET", "/logs/"+id+"/lines", nil, &resp)
	out := make([]string, len(resp.Lines))
	for i, l := range resp.Lines {
		out[i] = l.Text
	}
	return out
}

// startAgent runs a jobmesh-agent process of app on the stack, exporting its spans over
// OTLP/HTTP to otlpHTTP, and returns the address it registered and the file of its JSON logs.
func startAgent(t *testing.T, st *devstack.Stack, app, otlpHTTP string) (addr, logFile string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "jobmesh-agent")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/jobmesh/jobmesh/services/executor-agent/cmd/jobmesh-agent").CombinedOutput(); err != nil {
		t.Fatalf("go build jobmesh-agent: %v\n%s", err, out)
	}
	out := filepath.Join(t.TempDir(), "agent.log")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(bin, "--app-name", app, "--instance-id", "a1", "--listen-addr", "127.0.0.1:0",
		"--registry-addr", st.RegistryAddr, "--logsvc-addr", st.LogsAddr, "--log-dir", t.TempDir(),
		"--log-format", "json", "--log-level", "debug",
		"--tls-cert", st.TLSFiles.Cert, "--tls-key", st.TLSFiles.Key, "--tls-ca", st.TLSFiles.CA)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "JOBMESH_ACCESS_TOKEN=" + groupToken(app),
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + otlpHTTP, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf", "OTEL_BSP_SCHEDULE_DELAY=100",
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatalf("start jobmesh-agent: %v", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt) // this test's own process, by pid: a clean stop flushes its spans
		select {
		case <-done:
		case <-time.After(wait):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(out)
			t.Logf("agent output (pid %d):\n%s", cmd.Process.Pid, b)
		}
	})
	// The agent logs its advertised address once it has started.
	deadline := time.Now().Add(wait)
	for {
		b, _ := os.ReadFile(out)
		for _, line := range strings.Split(string(b), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "executor started" {
				if a, _ := m["advertise_addr"].(string); a != "" {
					return a, out
				}
			}
		}
		select {
		case <-done:
			t.Fatalf("jobmesh-agent exited:\n%s", b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("jobmesh-agent did not start within %v:\n%s", wait, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
