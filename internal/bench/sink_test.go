package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/internal/cluster"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/firecheck"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
)

// TestSink: an http handler's request is recorded as the fire its trigger id header names, however
// late it arrives (a retry and a child fire apart by their ids); a script's request names its fire
// in its query; a request that names no fire is refused, naming the header.
func TestSink(t *testing.T) {
	t.Parallel()
	s := newSink()
	mux := http.NewServeMux()
	s.routes(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := newAgentClient("sink", strings.TrimPrefix(srv.URL, "http://"))
	get := func(path string, header map[string]string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	fire := func(trigger, job string) map[string]string {
		return map[string]string{sdk.HeaderTriggerID: trigger, sdk.HeaderJobID: job}
	}
	var params sdk.HTTPRequest // what the http jobs get, with a hold
	if err := json.Unmarshal([]byte(httpParams(c.addr, time.Millisecond)), &params); err != nil {
		t.Fatal(err)
	}
	held, ok := strings.CutPrefix(params.URL, srv.URL)
	if !ok || held != "/fire?hold_ms=1" {
		t.Fatalf("http params %+v: want a GET of the sink's /fire holding 1 ms", params)
	}
	before := time.Now()
	// Job 41's fire at 5 s after the epoch arrives decades late: it is still that fire, once
	// (its first attempt and a retry), and a child fire of job 9 at the same time is apart.
	for _, tc := range []struct {
		path    string
		trigger string
	}{
		{"/fire", "41-5000-0-0"},
		{held, "41-5000-0-1"},
		{"/fire", "41-5000-0-0-p9"},
	} {
		if code, body := get(tc.path, fire(tc.trigger, "41")); code != http.StatusOK || body != "" {
			t.Fatalf("GET %s, trigger %s: %d %q, want 200 and no body", tc.path, tc.trigger, code, body)
		}
	}
	if code, body := get("/fire?job=9&sched=5000&trigger=9-5000-0-0", nil); code != http.StatusOK {
		t.Fatalf("a script's fire: %d %q", code, body)
	}
	after := time.Now()
	for _, bad := range []struct {
		path   string
		header map[string]string
		want   string
	}{
		{"/fire", nil, sdk.HeaderTriggerID},
		{"/fire?job=9&sched=5000", nil, sdk.HeaderTriggerID},
		{"/fire", fire("not-an-id", "41"), sdk.HeaderTriggerID},
		{"/fire", fire("41-5000-0-0", "42"), sdk.HeaderJobID},
		{"/fire?hold_ms=-1", fire("41-5000-0-0", "41"), "hold_ms"},
	} {
		if code, body := get(bad.path, bad.header); code != http.StatusBadRequest || !strings.Contains(body, bad.want) {
			t.Errorf("GET %s %v: %d %q, want 400 naming %s", bad.path, bad.header, code, body, bad.want)
		}
	}
	got, err := c.executions(t.Context(), 0, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, func(a, b firecheck.Execution) int { return strings.Compare(a.TriggerID, b.TriggerID) })
	want := []firecheck.Execution{
		{JobID: 41, TriggerID: "41-5000-0-0", ScheduledMs: 5000},
		{JobID: 41, TriggerID: "41-5000-0-0-p9", ScheduledMs: 5000},
		{JobID: 41, TriggerID: "41-5000-0-1", ScheduledMs: 5000},
		{JobID: 9, TriggerID: "9-5000-0-0", ScheduledMs: 5000},
	}
	if len(got) != len(want) {
		t.Fatalf("executions = %+v, want %+v", got, want)
	}
	for i, e := range got {
		w := want[i]
		if e.JobID != w.JobID || e.TriggerID != w.TriggerID || e.ScheduledMs != w.ScheduledMs ||
			e.Arrived().Before(before) || e.Arrived().After(after) {
			t.Errorf("execution %d = %+v, want %+v arriving between %v and %v", i, e, w, before, after)
		}
	}
	if st, err := c.stats(t.Context()); err != nil || st.Executions != len(want) {
		t.Errorf("stats = %+v, %v; want %d executions", st, err, len(want))
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestSinkScripts runs the shell and python jobs' scripts as the agent would (the fire in
// JOBMESH_* variables) against a sink: each reports its fire, waits for the answer and prints
// "hi"; a fire the sink refuses fails the script.
func TestSinkScripts(t *testing.T) {
	t.Parallel()
	s := newSink()
	mux := http.NewServeMux()
	s.routes(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	if !strings.Contains(shellScript(addr, 500*time.Millisecond), "\nsleep 0.5\n") || strings.Contains(shellScript(addr, 0), "sleep") {
		t.Errorf("shell script's hold:\n%s", shellScript(addr, 500*time.Millisecond))
	}
	if !strings.Contains(pythonScript(addr, 250*time.Millisecond), "time.sleep(0.25)") {
		t.Errorf("python script's hold:\n%s", pythonScript(addr, 250*time.Millisecond))
	}
	dir := t.TempDir()
	for i, sc := range []struct{ interp, source string }{{"bash", shellScript(addr, 0)}, {"python3", pythonScript(addr, 0)}} {
		path, err := exec.LookPath(sc.interp)
		if err != nil {
			t.Fatalf("the %s jobs need %s: %v", sc.interp, sc.interp, err)
		}
		file := filepath.Join(dir, sc.interp)
		if err := os.WriteFile(file, []byte(sc.source), 0o600); err != nil {
			t.Fatal(err)
		}
		run := func(trigger string) (string, error) {
			cmd := exec.Command(path, file)
			cmd.Env = append(os.Environ(), "JOBMESH_JOB_ID=7", "JOBMESH_SCHEDULED_UNIX_MS="+itoa(int64(1000*(i+1))), "JOBMESH_TRIGGER_ID="+trigger)
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		before := time.Now()
		out, err := run("7-" + itoa(int64(1000*(i+1))) + "-0-0")
		after := time.Now()
		if err != nil || out != "hi\n" {
			t.Fatalf("%s script: %v, output %q; want hi", sc.interp, err, out)
		}
		got := s.tally.Snapshot(int64(1000*(i+1)), int64(1000*(i+1)))
		if len(got) != 1 || got[0].JobID != 7 || got[0].TriggerID != "7-"+itoa(int64(1000*(i+1)))+"-0-0" ||
			got[0].Arrived().Before(before) || got[0].Arrived().After(after) {
			t.Errorf("%s script's fire at the sink = %+v, want one arriving between %v and %v", sc.interp, got, before, after)
		}
		if out, err := run(""); err == nil || !strings.Contains(out, "sink answered: HTTP/1.0 400") {
			t.Errorf("%s script refused by the sink: %v, output %q; want a failure naming the answer", sc.interp, err, out)
		}
	}
}

// TestHandlers runs short benches with the http and shell handlers: every fire of the window
// reaches the sink once, its lateness is measured there, and every result is stored. Like
// TestSmoke it checks the guarantees only, never the speed.
func TestHandlers(t *testing.T) {
	if testing.Short() {
		t.Skip("about a minute of processes; CI runs it (without -short)")
	}
	t.Parallel()
	bin, err := cluster.BuildJobmesh(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, handler := range []string{HandlerHTTP, HandlerShell} {
		t.Run(handler, func(t *testing.T) {
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			rep, err := Run(ctx, Config{Scenario: "rate", Handler: handler, Rate: 50, Duration: 3 * time.Second, Warmup: time.Second,
				Agents: 1, UnsafeEtcd: true, Bin: bin, AdminURL: dbtest.AdminURL(), WorkDir: dir,
				Log: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))})
			t.Cleanup(func() {
				if t.Failed() {
					dumpLogs(t, filepath.Join(dir, "logs"))
				}
			})
			if err != nil {
				t.Fatalf("bench: %v", err)
			}
			var md bytes.Buffer
			if err := rep.WriteMarkdown(&md); err != nil {
				t.Fatal(err)
			}
			t.Logf("report:\n%s", md.String())
			if len(rep.Problems) > 0 {
				t.Errorf("problems: %v", rep.Problems)
			}
			if len(rep.Steps) != 1 {
				t.Fatalf("%d steps, want 1", len(rep.Steps))
			}
			st := rep.Steps[0]
			f := st.Fires
			if f.Expected < 100 {
				t.Errorf("only %d fires expected in the window", f.Expected)
			}
			if f.Executed != f.Expected || f.Lost != 0 || f.Doubled != 0 || f.OffSchedule != 0 {
				t.Errorf("at the sink: expected %d, executed %d, lost %d, doubled %d, off schedule %d; samples %v %v %v",
					f.Expected, f.Executed, f.Lost, f.Doubled, f.OffSchedule, st.LostSamples, st.DoubledSamples, st.OffGridSamples)
			}
			if f.Stored != f.Executed || f.Completed != f.Executed {
				t.Errorf("executed %d, stored %d, complete %d: want all stored", f.Executed, f.Stored, f.Completed)
			}
			if c := st.Store; c == nil || c.OK != f.Expected || c.LinesPerRun == 0 || c.LinesShort != 0 {
				t.Errorf("stored against executed: %+v, want every fire stored OK with its output lines", c)
			}
			if l := st.LatenessMs; l.P50 <= 0 || l.Max < l.P99 || l.P99 < l.P50 {
				t.Errorf("lateness at the sink %+v: want it measured", l)
			}
			// The sink's share is reported apart (the row is checked below); CPU time comes in clock
			// ticks of 10 ms, more than a few seconds of 50 requests/s cost the sink, so it may be 0.
			if st.SinkCPUMicrosPerFire < 0 {
				t.Errorf("the sink's CPU per fire is %.1f µs", st.SinkCPUMicrosPerFire)
			}
			if scripts := st.ScriptCPUMicrosPerFire > 0; scripts != (handler == HandlerShell) {
				t.Errorf("the scripts' CPU per fire is %.1f µs with handler %s", st.ScriptCPUMicrosPerFire, handler)
			}
			if rep.Setup.Handler != handler || !strings.Contains(md.String(), "lateness at the sink") ||
				!strings.Contains(md.String(), "| sink (the fires' target, not in all) |") {
				t.Errorf("the report does not show handler %s and the sink apart", handler)
			}
		})
	}
}
