package devstack_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/internal/devstack"
	"github.com/jobmesh/jobmesh/internal/triggerid"
	"github.com/jobmesh/jobmesh/internal/xxl"
	"github.com/jobmesh/jobmesh/internal/xxltest"
	"github.com/jobmesh/jobmesh/services/scheduler"
)

// xxlRun is a run as GET /api/v1/logs answers it, with what the XXL-JOB checks look at.
type xxlRun struct {
	ID             string `json:"id"`
	Status         string `json:"status"`
	TriggerOutcome string `json:"trigger_outcome"`
	TriggerMessage string `json:"trigger_message"`
	TriggerType    string `json:"trigger_type"`
	HandleMessage  string `json:"handle_message"`
	ExecutorAddr   string `json:"executor_address"`
	ShardIndex     int    `json:"shard_index"`
	ShardTotal     int    `json:"shard_total"`
	ScheduledTime  string `json:"scheduled_time"`
	EndTime        string `json:"end_time"`
}

// TestXxlExecutorsEndToEnd runs faithful XXL-JOB executors (internal/xxltest) against `jobmesh
// dev`, configured as a real xxl-job-core executor is: only the admin address
// (http://gateway/xxl-job-admin) and their group's access token. They register themselves, and
// through REST the stack runs BEAN jobs (a manual trigger and a cron fire), a SHARDING_BROADCAST
// over both, a failing, a timing-out and a killed handler, and a GLUE_GROOVY job the executors
// cannot compile; every run ends in logsvc with XXL-JOB's status and message and the executor's
// output lines. A repeated callback changes nothing, a callback for a log id never sent stores
// nothing, and an executor that dies (SIGKILL-like, no registryRemove) with a run live leaves
// that run lost after the dead time, not RUNNING forever.
// It does not run in parallel with the package's other stacks: it waits on callbacks, live log
// pulls and the dead time of real HTTP executors, which crowded by a dozen stacks at once under
// -race took past its waits.
func TestXxlExecutorsEndToEnd(t *testing.T) {
	const deadTime = 10 * time.Second // the shortest the API takes
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	any0 := "127.0.0.1:0"
	st, err := devstack.Start(ctx, devstack.Config{
		DataDir: t.TempDir(), UnsafeEtcd: true,
		HTTPAddr: any0, SchedulerAddr: any0, RegistryAddr: any0, LogsAddr: any0, AuthAddr: any0, AgentAddr: any0, EtcdAddr: any0,
		XxlDeadTime: deadTime, LostAfter: deadTime + 2*time.Second,
		// A send to an XXL-JOB executor records the fire (the stack's SQLite) before its /run:
		// under the whole suite with -race on two cores, 3 s (the default) once did not suffice,
		// and the run ended lost rather than run. What this test checks is the protocol, not speed.
		Scheduler: scheduler.Config{DispatchTimeout: 10 * time.Second},
	})
	if err != nil {
		t.Fatalf("devstack.Start: %v", err)
	}
	t.Cleanup(st.Stop)
	tokens.Store(st.HTTPAddr, login(t, st, "admin", st.AdminPassword))
	t.Cleanup(func() { tokens.Delete(st.HTTPAddr) })
	base := "http://" + st.HTTPAddr + "/api/v1"
	admin := "http://" + st.HTTPAddr + "/xxl-job-admin"

	// Two groups with tokens: one for the jobs, one whose executor the test crashes.
	const app, token = "xxl-e2e", "xxl-e2e-group-token"
	const crashApp, crashToken = "xxl-e2e-crash", "xxl-e2e-crash-token"
	groupOf := map[string]string{}
	for _, g := range [][2]string{{app, token}, {crashApp, crashToken}} {
		var resp struct {
			Group struct {
				ID string `json:"id"`
			} `json:"group"`
		}
		if code := call(t, "POST", base+"/executor-groups", map[string]any{"app_name": g[0], "title": g[0], "access_token": g[1]}, &resp); code != http.StatusOK {
			t.Fatalf("create group %s = %d", g[0], code)
		}
		groupOf[g[0]] = resp.Group.ID
	}

	started := make(chan string, 16) // the params of runs of "block" and "hang" that started
	handlers := map[string]xxltest.Handler{
		"hello": func(_ context.Context, job *xxltest.Job) {
			job.Log("hello %s shard %d/%d", job.Param.ExecutorParams, job.Param.BroadcastIndex, job.Param.BroadcastTotal)
			job.Success("said hello")
		},
		"fail": func(_ context.Context, job *xxltest.Job) {
			job.Log("about to fail")
			job.Fail("boom: the handler failed")
		},
		"block": func(ctx context.Context, job *xxltest.Job) {
			job.Log("blocking until killed")
			started <- job.Param.ExecutorParams
			<-ctx.Done()
		},
	}
	newExecutor := func(appName, tok string, hs map[string]xxltest.Handler) *xxltest.Executor {
		t.Helper()
		e, err := xxltest.New(xxltest.Config{
			AppName: appName, AdminAddresses: []string{admin}, AccessToken: tok, LogDir: t.TempDir(),
			RegistryInterval: 2 * time.Second, CallbackRetryInterval: time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		for name, h := range hs {
			e.Handle(name, h)
		}
		if err := e.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Stop)
		return e
	}
	e1, e2 := newExecutor(app, token, handlers), newExecutor(app, token, handlers)
	crashy := newExecutor(crashApp, crashToken, map[string]xxltest.Handler{"block": handlers["block"]})
	byAddr := map[string]*xxltest.Executor{e1.Address(): e1, e2.Address(): e2, crashy.Address(): crashy}

	// They registered themselves: REST lists them with kind XXL_JOB.
	waitExecutors := func(appName string, want ...string) {
		t.Helper()
		slices.Sort(want)
		for deadline := time.Now().Add(30 * time.Second); ; {
			var list struct {
				Executors []struct {
					Kind    string `json:"kind"`
					Address string `json:"address"`
				} `json:"executors"`
			}
			call(t, "GET", base+"/executors?app_name="+appName, nil, &list)
			var got []string
			for _, e := range list.Executors {
				got = append(got, e.Kind+" "+e.Address)
			}
			slices.Sort(got)
			if slices.Equal(got, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("executors of %s = %v, want %v within 90s", appName, got, want)
			}
			pause(t, 100*time.Millisecond)
		}
	}
	waitExecutors(app, "EXECUTOR_KIND_XXL_JOB "+e1.Address(), "EXECUTOR_KIND_XXL_JOB "+e2.Address())
	waitExecutors(crashApp, "EXECUTOR_KIND_XXL_JOB "+crashy.Address())

	job := func(name string, fields map[string]any) string {
		t.Helper()
		j := map[string]any{"name": name, "group_id": groupOf[app], "schedule": map[string]any{"type": "SCHEDULE_TYPE_NONE"}}
		for k, v := range fields {
			j[k] = v
		}
		var resp struct {
			Job struct {
				ID string `json:"id"`
			} `json:"job"`
			Warnings []string `json:"warnings"`
		}
		if code := call(t, "POST", base+"/jobs", j, &resp); code != http.StatusOK || resp.Job.ID == "" {
			t.Fatalf("create job %s = %d", name, code)
		}
		if len(resp.Warnings) > 0 {
			t.Errorf("job %s saved with warnings %q, want none (its group has live XXL-JOB executors)", name, resp.Warnings)
		}
		return resp.Job.ID
	}
	trigger := func(id, params string) []string {
		t.Helper()
		var resp struct {
			TriggerIDs []string `json:"trigger_ids"`
		}
		if code := call(t, "POST", base+"/jobs/"+id+":trigger", map[string]any{"params": params}, &resp); code != http.StatusOK || len(resp.TriggerIDs) == 0 {
			t.Fatalf("trigger job %s = %d %v", id, code, resp.TriggerIDs)
		}
		return resp.TriggerIDs
	}
	// runs polls the job's runs until cond holds, for at most within.
	runs := func(id string, within time.Duration, cond func([]xxlRun) bool) []xxlRun {
		t.Helper()
		for deadline := time.Now().Add(within); ; {
			var list struct{ Runs []xxlRun }
			if code := call(t, "GET", base+"/logs?job_id="+id, nil, &list); code != http.StatusOK {
				t.Fatalf("GET /logs?job_id=%s = %d", id, code)
			}
			if cond(list.Runs) {
				return list.Runs
			}
			if time.Now().After(deadline) {
				t.Fatalf("runs of job %s = %+v; condition not met within %v", id, list.Runs, within)
			}
			pause(t, 100*time.Millisecond)
		}
	}
	ended := func(n int) func([]xxlRun) bool {
		return func(rs []xxlRun) bool {
			done := 0
			for _, r := range rs {
				if r.Status != "RUN_STATUS_RUNNING" && r.Status != "" {
					done++
				}
			}
			return done >= n
		}
	}
	lines := func(runID string) []string {
		t.Helper()
		var resp struct {
			Lines []struct {
				Text string `json:"text"`
			} `json:"lines"`
		}
		if code := call(t, "GET", base+"/logs/"+runID+"/lines", nil, &resp); code != http.StatusOK {
			t.Fatalf("GET /logs/%s/lines = %d", runID, code)
		}
		var out []string
		for _, l := range resp.Lines {
			out = append(out, l.Text)
		}
		return out
	}
	// checkRun checks a finished run's status, message and output in logsvc, and that its output
	// is the executor's log of it, line for line.
	checkRun := func(what string, r xxlRun, status, msg string, outputs ...string) {
		t.Helper()
		if r.Status != status || r.HandleMessage != msg {
			t.Errorf("%s: run %s ended %s %q, want %s %q", what, r.ID, r.Status, r.HandleMessage, status, msg)
		}
		got := lines(r.ID)
		all := strings.Join(got, "\n")
		for _, want := range outputs {
			if !strings.Contains(all, want) {
				t.Errorf("%s: output of run %s = %q, want it to contain %q", what, r.ID, all, want)
			}
		}
		e := byAddr[r.ExecutorAddr]
		if e == nil {
			t.Errorf("%s: run %s on %q, not one of the test's executors", what, r.ID, r.ExecutorAddr)
			return
		}
		p := sentParam(t, e, r)
		if p == nil {
			return
		}
		logID := p.LogID
		// The callback line comes after the callback: what logsvc has is what the log had then.
		exec := xxl.SplitLines(e.ReadLog(p.LogDateTime, logID, 1).LogContent)
		if len(got) == 0 || len(got) > len(exec) || !slices.Equal(got, exec[:len(got)]) {
			t.Errorf("%s: logsvc's lines of run %s =\n%q\nwant the executor's log of log id %d from its start:\n%q", what, r.ID, got, logID, exec)
		}
	}

	// waitLine polls a run's lines in logsvc until one contains want.
	waitLine := func(runID, want string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; {
			if slices.ContainsFunc(lines(runID), func(l string) bool { return strings.Contains(l, want) }) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %s: no line %q in logsvc within 90s (lines %q)", runID, want, lines(runID))
			}
			pause(t, 100*time.Millisecond)
		}
	}

	// killRun kills a live run through REST, once logsvc has its executor (from the trigger record).
	killRun := func(runID string) {
		t.Helper()
		id, _ := triggerid.Parse(runID)
		runs(strconv.FormatInt(id.Job, 10), 90*time.Second, func(rs []xxlRun) bool {
			return slices.ContainsFunc(rs, func(r xxlRun) bool { return r.ID == runID && r.ExecutorAddr != "" })
		})
		var kill struct {
			Killed  bool   `json:"killed"`
			Message string `json:"message"`
		}
		if code := call(t, "POST", base+"/logs/"+runID+":kill", map[string]any{}, &kill); code != http.StatusOK || !kill.Killed {
			t.Errorf("kill run %s = %d %+v, want killed", runID, code, kill)
		}
	}

	t.Run("BEAN, manual trigger", func(t *testing.T) {
		id := job("hello-manual", map[string]any{"handler": "hello", "params": "default"})
		trigger(id, "world")
		r := runs(id, 90*time.Second, ended(1))[0]
		checkRun("manual BEAN", r, "RUN_STATUS_SUCCESS", "said hello", "hello world shard 0/1", "xxl-job job execute start")
		if r.TriggerType != "TRIGGER_TYPE_MANUAL" {
			t.Errorf("trigger type %s, want TRIGGER_TYPE_MANUAL", r.TriggerType)
		}
		p := sentParam(t, byAddr[r.ExecutorAddr], r)
		if p.ExecutorHandler != "hello" || p.ExecutorParams != "world" || p.GlueType != "BEAN" || p.ExecutorBlockStrategy != "SERIAL_EXECUTION" ||
			p.BroadcastIndex != 0 || p.BroadcastTotal != 1 || p.LogDateTime == 0 || id != strconv.FormatInt(p.JobID, 10) {
			t.Errorf("TriggerParam sent = %+v, want job %s, handler hello, params world, BEAN, SERIAL_EXECUTION, shard 0 of 1", p, id)
		}
	})

	t.Run("BEAN, cron fire", func(t *testing.T) {
		id := job("hello-cron", map[string]any{"handler": "hello", "params": "cron", "status": "JOB_STATUS_RUNNING",
			"schedule": map[string]any{"type": "SCHEDULE_TYPE_CRON", "expression": "* * * * * ?"}})
		// A fire more than 5 s late is skipped by the job's misfire strategy (it happened under the
		// whole suite): wait for one that ran.
		rs := runs(id, 90*time.Second, func(rs []xxlRun) bool {
			return slices.ContainsFunc(rs, func(r xxlRun) bool { return r.Status == "RUN_STATUS_SUCCESS" })
		})
		if code := call(t, "POST", base+"/jobs/"+id+":stop", map[string]any{}, nil); code != http.StatusOK {
			t.Fatalf("stop = %d", code)
		}
		for _, r := range rs {
			if r.Status == "RUN_STATUS_SUCCESS" {
				checkRun("cron BEAN", r, "RUN_STATUS_SUCCESS", "said hello", "hello cron shard 0/1")
				if r.TriggerType != "TRIGGER_TYPE_CRON" {
					t.Errorf("trigger type %s, want TRIGGER_TYPE_CRON", r.TriggerType)
				}
				sched, err := time.Parse(time.RFC3339Nano, r.ScheduledTime)
				if p := sentParam(t, byAddr[r.ExecutorAddr], r); err != nil || p == nil || p.LogDateTime != sched.UnixMilli() {
					t.Errorf("TriggerParam %+v, want logDateTime the fire's scheduled time %s", p, r.ScheduledTime)
				}
				return
			}
		}
		t.Errorf("cron runs = %+v, want a success", rs)
	})

	t.Run("SHARDING_BROADCAST over both", func(t *testing.T) {
		id := job("hello-broadcast", map[string]any{"handler": "hello", "route_strategy": "ROUTE_STRATEGY_SHARDING_BROADCAST"})
		if n := len(trigger(id, "all")); n != 2 {
			t.Fatalf("broadcast fired %d shards, want 2", n)
		}
		rs := runs(id, 90*time.Second, ended(2))
		seen := map[string]int{}
		for _, r := range rs {
			want := "hello all shard " + strconv.Itoa(r.ShardIndex) + "/2"
			checkRun("broadcast shard", r, "RUN_STATUS_SUCCESS", "said hello", want)
			p := sentParam(t, byAddr[r.ExecutorAddr], r)
			if r.ShardTotal != 2 || p.BroadcastTotal != 2 || p.BroadcastIndex != int64(r.ShardIndex) {
				t.Errorf("shard run %+v was sent broadcast %d/%d", r, p.BroadcastIndex, p.BroadcastTotal)
			}
			seen[r.ExecutorAddr]++
		}
		if len(seen) != 2 {
			t.Errorf("shards ran on %v, want one on each executor", seen)
		}
	})

	t.Run("failing handler", func(t *testing.T) {
		id := job("fails", map[string]any{"handler": "fail"})
		trigger(id, "")
		r := runs(id, 90*time.Second, ended(1))[0]
		checkRun("handleFail", r, "RUN_STATUS_FAIL", "boom: the handler failed", "about to fail")
	})

	t.Run("timing out", func(t *testing.T) {
		id := job("times-out", map[string]any{"handler": "block", "timeout_seconds": 1})
		trigger(id, "timeout")
		<-started
		r := runs(id, 90*time.Second, ended(1))[0]
		checkRun("timeout", r, "RUN_STATUS_TIMEOUT", xxl.MsgTimeout, "xxl-job job execute timeout")
	})

	t.Run("killed through REST", func(t *testing.T) {
		id := job("killed", map[string]any{"handler": "block"})
		ids := trigger(id, "kill me")
		if got := <-started; got != "kill me" {
			t.Fatalf("started %q, want the killed job's run", got)
		}
		runs(id, 90*time.Second, func(rs []xxlRun) bool { return len(rs) == 1 && rs[0].ExecutorAddr != "" })
		waitLine(ids[0], "blocking until killed") // the live tail: pulled from /log while it runs
		var kill struct {
			Killed  bool   `json:"killed"`
			Message string `json:"message"`
		}
		if code := call(t, "POST", base+"/logs/"+ids[0]+":kill", map[string]any{}, &kill); code != http.StatusOK || !kill.Killed {
			t.Fatalf("kill = %d %+v, want killed", code, kill)
		}
		r := runs(id, 90*time.Second, ended(1))[0]
		checkRun("kill", r, "RUN_STATUS_KILLED", xxl.MsgKillReason+xxl.MsgKilledRunning, "blocking until killed")
		if got := byAddr[r.ExecutorAddr].RequestsTo("/kill"); len(got) != 1 || !strings.Contains(string(got[0].Body), `"jobId":`+id) {
			t.Errorf("/kill requests = %+v, want one for job %s", got, id)
		}
	})

	// Block strategies act on the executor: COVER_EARLY kills the running run (a callback with
	// XXL-JOB's message, KILLED), DISCARD_LATER refuses the new one (a failed trigger with it).
	t.Run("COVER_EARLY", func(t *testing.T) {
		id := job("cover-early", map[string]any{"handler": "block", "block_strategy": "BLOCK_STRATEGY_COVER_EARLY"})
		first := trigger(id, "cover 1")[0]
		if got := <-started; got != "cover 1" {
			t.Fatalf("started %q, want the first run", got)
		}
		second := trigger(id, "cover 2")[0]
		if got := <-started; got != "cover 2" {
			t.Fatalf("started %q, want the second run", got)
		}
		rs := runs(id, 90*time.Second, func(rs []xxlRun) bool {
			return slices.ContainsFunc(rs, func(r xxlRun) bool { return r.ID == first && r.Status != "RUN_STATUS_RUNNING" })
		})
		for _, r := range rs {
			if r.ID == first {
				checkRun("covered early", r, "RUN_STATUS_KILLED", xxl.MsgCoverEarly+xxl.MsgKilledRunning, "blocking until killed")
			}
		}
		killRun(second)
		runs(id, 90*time.Second, ended(2))
	})

	t.Run("DISCARD_LATER", func(t *testing.T) {
		id := job("discard-later", map[string]any{"handler": "block", "block_strategy": "BLOCK_STRATEGY_DISCARD_LATER"})
		first := trigger(id, "discard 1")[0]
		if got := <-started; got != "discard 1" {
			t.Fatalf("started %q, want the first run", got)
		}
		second := trigger(id, "discard 2")[0]
		rs := runs(id, 90*time.Second, func(rs []xxlRun) bool {
			return slices.ContainsFunc(rs, func(r xxlRun) bool { return r.ID == second && r.Status != "RUN_STATUS_RUNNING" })
		})
		for _, r := range rs {
			if r.ID == second && (r.Status != "RUN_STATUS_FAIL" || r.TriggerOutcome != "TRIGGER_OUTCOME_FAILED" || !strings.Contains(r.TriggerMessage, xxl.MsgDiscardLater)) {
				t.Errorf("discarded run = %+v, want a failed trigger with %q", r, xxl.MsgDiscardLater)
			}
		}
		killRun(first)
		runs(id, 90*time.Second, ended(2))
	})

	t.Run("GLUE_GROOVY on executors without a Groovy engine", func(t *testing.T) {
		const source = "package com.xxl.job.service.handler;\nclass DemoGlueJobHandler extends IJobHandler { void execute() { XxlJobHelper.log(\"hi\"); } }"
		id := job("groovy", map[string]any{"glue_type": "GLUE_TYPE_GLUE_GROOVY", "glue_source": source})
		trigger(id, "")
		rs := runs(id, 90*time.Second, ended(1))
		r := rs[0]
		// The executor refuses /run with code 500 (its GlueFactory cannot load the class): a failed
		// trigger with its message, as XXL-JOB's admin records it.
		if r.Status != "RUN_STATUS_FAIL" || r.TriggerOutcome != "TRIGGER_OUTCOME_FAILED" || !strings.Contains(r.TriggerMessage, "no Groovy engine") {
			t.Errorf("GLUE_GROOVY run = %+v, want a failed trigger with the executor's message", r)
		}
		var sent *xxl.TriggerParam
		for _, e := range []*xxltest.Executor{e1, e2} {
			for _, req := range e.RequestsTo("/run") {
				var p xxl.TriggerParam
				if err := xxl.Unmarshal(req.Body, &p); err == nil && strconv.FormatInt(p.JobID, 10) == id {
					sent = &p
				}
			}
		}
		if sent == nil || sent.GlueType != "GLUE_GROOVY" || sent.GlueSource != source || sent.ExecutorHandler != "" || sent.GlueUpdatetime == 0 {
			t.Errorf("TriggerParam of the GLUE_GROOVY job = %+v, want glueType GLUE_GROOVY, its source, no handler, an update time", sent)
		}
	})

	t.Run("a repeated callback changes nothing", func(t *testing.T) {
		id := job("repeat", map[string]any{"handler": "hello"})
		trigger(id, "once")
		r := runs(id, 90*time.Second, ended(1))[0]
		e := byAddr[r.ExecutorAddr]
		logID := logIDOf(t, e, r)
		// The executor records its call once it has the answer, which may be after logsvc has the result.
		var body []byte
		wctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		err := e.Wait(wctx, func() bool {
			for _, c := range e.AdminCalls() {
				if c.Endpoint == "api/callback" && c.OK && strings.Contains(string(c.Body), `"logId":`+strconv.FormatInt(logID, 10)+`,`) {
					body = c.Body
				}
			}
			return body != nil
		})
		if err != nil {
			t.Fatalf("no accepted callback of log id %d: %v", logID, err)
		}
		before := lines(r.ID)
		// The same list again, then the same item with another result (a retried callback must not
		// overturn the first).
		other := strings.Replace(string(body), `"handleCode":200`, `"handleCode":500,"handleMsg":"late"`, 1)
		for _, b := range []string{string(body), other} {
			if got := xxlPost(t, admin+"/api/callback", token, b); got != `{"code":200}` {
				t.Errorf("repeated callback %s = %s, want {\"code\":200}", b, got)
			}
		}
		after := runs(id, time.Second, ended(1))[0]
		if after != r {
			t.Errorf("run after repeated callbacks = %+v, want unchanged %+v", after, r)
		}
		if got := lines(r.ID); !slices.Equal(got, before) {
			t.Errorf("lines after repeated callbacks = %q, want unchanged %q", got, before)
		}
		// A callback for a log id never sent: code 500 naming it, nothing stored.
		if got := xxlPost(t, admin+"/api/callback", token, `[{"logId":987654321,"logDateTim":1,"handleCode":200}]`); !strings.Contains(got, `"code":500`) || !strings.Contains(got, "987654321") {
			t.Errorf("callback for an unknown log id = %s, want code 500 naming it", got)
		}
		// The wrong token: refused.
		if got := xxlPost(t, admin+"/api/callback", "not-the-token", string(body)); got != `{"code":500,"msg":"The access token is wrong."}` {
			t.Errorf("callback with a wrong token = %s, want the wrong-token answer", got)
		}
	})

	t.Run("an executor killed with a run live", func(t *testing.T) {
		var resp struct {
			Job struct {
				ID string `json:"id"`
			} `json:"job"`
		}
		if code := call(t, "POST", base+"/jobs", map[string]any{"name": "dies", "group_id": groupOf[crashApp], "handler": "block",
			"schedule": map[string]any{"type": "SCHEDULE_TYPE_NONE"}}, &resp); code != http.StatusOK {
			t.Fatalf("create = %d", code)
		}
		id := resp.Job.ID
		ids := trigger(id, "crash")
		if got := <-started; got != "crash" {
			t.Fatalf("started %q, want the crash job's run", got)
		}
		runs(id, 90*time.Second, func(rs []xxlRun) bool { return len(rs) == 1 && rs[0].ExecutorAddr == crashy.Address() })
		waitLine(ids[0], "blocking until killed")
		crashy.Crash()
		at := time.Now()
		// It leaves the view after the dead time, and its run is lost soon after, not RUNNING forever.
		waitExecutors(crashApp)
		r := runs(id, 60*time.Second, ended(1))[0]
		t.Logf("the dead executor left the view and its run ended %v after the crash: %s %q", time.Since(at).Round(time.Second), r.Status, r.HandleMessage)
		if r.Status != "RUN_STATUS_FAIL" || !strings.Contains(r.HandleMessage, "lost") {
			t.Errorf("run of the dead executor = %+v, want failed as lost", r)
		}
		// What was pulled while it ran outlives the executor.
		if got := strings.Join(lines(r.ID), "\n"); !strings.Contains(got, "blocking until killed") {
			t.Errorf("output of the dead executor's run = %q, want the lines pulled while it ran", got)
		}
	})
}

// logIDOf returns the log id under which the run was sent to e (from the /run requests it got,
// matched by job id, shard and scheduled time), or 0 after reporting an error.
func logIDOf(t *testing.T, e *xxltest.Executor, r xxlRun) int64 {
	t.Helper()
	if p := sentParam(t, e, r); p != nil {
		return p.LogID
	}
	return 0
}

// sentParam returns the TriggerParam of the run's accepted /run request on e, and ends the test
// when there is none. A run is found by its job id, shard index and scheduled time (logDateTime).
func sentParam(t *testing.T, e *xxltest.Executor, r xxlRun) *xxl.TriggerParam {
	t.Helper()
	if e == nil {
		t.Fatalf("run %s: no executor", r.ID)
	}
	id, ok := triggerid.Parse(r.ID)
	if !ok {
		t.Fatalf("run id %q is not a trigger id", r.ID)
	}
	for _, req := range e.RequestsTo("/run") {
		var p xxl.TriggerParam
		if err := xxl.Unmarshal(req.Body, &p); err != nil {
			t.Errorf("/run body %s: %v", req.Body, err)
			continue
		}
		if p.JobID == id.Job && p.LogDateTime == id.ScheduledMs && p.BroadcastIndex == int64(id.Shard) && req.Answer.Code == xxl.CodeSuccess {
			return &p
		}
	}
	t.Fatalf("run %s: no accepted /run on %s", r.ID, e.Address())
	return nil
}

// xxlPost POSTs body to an XXL-JOB admin API URL with the token and returns the answer.
func xxlPost(t *testing.T, url, token, body string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", url, strings.NewReader(body))
	req.Header.Set(xxl.TokenHeader, token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// pause waits d, or until the test ends.
func pause(t *testing.T, d time.Duration) {
	select {
	case <-time.After(d):
	case <-t.Context().Done():
	}
}
