package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/etcdembed/etcdtest"
	"github.com/jobmesh/jobmesh/internal/xxl"
	"github.com/jobmesh/jobmesh/internal/xxltest"
	"github.com/jobmesh/jobmesh/services/registry"
	"github.com/jobmesh/jobmesh/services/scheduler"
)

// xxlRig is a cluster with one scheduler replica, XXL-JOB test executors registered in one AUTO
// group of the registry's view (kind XXL_JOB), and a minimal admin API in front of the
// scheduler that passes the executors' callbacks to XxlCallback as the gateway does.
type xxlRig struct {
	c     *cluster
	s     *scheduler.Service
	group int64
	token string
	exs   []*xxltest.Executor
	logs  logsv1.LogServiceClient
	// callbackErrs counts the callbacks the admin answered with code 500.
	callbackErrs atomic.Int32
}

func newXxlRig(t *testing.T, app string, n int, setup func(*xxltest.Executor)) *xxlRig {
	t.Helper()
	r := &xxlRig{c: newCluster(t), token: app + "-token"}
	r.s = r.c.replicaWith(t, scheduler.Config{ReplicaID: "a", XxlLogPoll: 50 * time.Millisecond})
	r.logs = logsv1.NewLogServiceClient(r.c.logsConn)
	reg := registryv1.NewRegistryServiceClient(r.c.regConn)
	g, err := reg.CreateExecutorGroup(t.Context(), &registryv1.CreateExecutorGroupRequest{Group: &registryv1.ExecutorGroup{
		AppName: app, Title: app, AccessToken: r.token,
	}})
	if err != nil {
		t.Fatal(err)
	}
	r.group = g.GetGroup().GetId()
	admin := httptest.NewServer(http.HandlerFunc(r.admin))
	t.Cleanup(admin.Close)
	cli := etcdtest.Client(t)
	for i := range n {
		ex, err := xxltest.New(xxltest.Config{AppName: app, AdminAddresses: []string{admin.URL + "/xxl-job-admin"},
			AccessToken: r.token, LogDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		if setup != nil {
			setup(ex)
		}
		if err := ex.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ex.Stop)
		r.exs = append(r.exs, ex)
		putXxl(t, cli, app, fmt.Sprintf("xxl-%d", i), ex.Address())
	}
	eventually(t, 15*time.Second, "the XXL-JOB executors are online", func() bool {
		got, err := reg.GetExecutorGroup(t.Context(), &registryv1.GetExecutorGroupRequest{Id: r.group})
		return err == nil && len(got.GetGroup().GetAddresses()) == n
	})
	return r
}

// putXxl puts an XXL-JOB executor's registration into the view, as RegisterXxlExecutor does.
func putXxl(t *testing.T, cli *clientv3.Client, app, inst, addr string) {
	t.Helper()
	lease, err := cli.Grant(t.Context(), 90)
	if err != nil {
		t.Fatal(err)
	}
	key, val, err := registry.Registration(testSealSecret, &registryv1.Executor{AppName: app, InstanceId: inst, Address: addr,
		Kind: registryv1.ExecutorKind_EXECUTOR_KIND_XXL_JOB}, lease.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(t.Context(), key, val, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Revoke(context.Background(), lease.ID) })
}

// admin answers POST /xxl-job-admin/api/{registry,registryRemove,callback} as the gateway's
// XXL-JOB admin API does: callbacks go to XxlCallback with the presented token.
func (r *xxlRig) admin(w http.ResponseWriter, req *http.Request) {
	answer := func(rt xxl.ReturnT) {
		b, _ := xxl.Marshal(rt)
		w.Write(b)
	}
	if !strings.HasSuffix(req.URL.Path, "/api/callback") {
		answer(xxl.ReturnT{Code: xxl.CodeSuccess})
		return
	}
	body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	var items []xxl.HandleCallbackParam
	if err := xxl.Unmarshal(body, &items); err != nil {
		answer(xxl.ReturnT{Code: xxl.CodeFail, Msg: err.Error()})
		return
	}
	in := &schedulerv1.XxlCallbackRequest{AccessToken: req.Header.Get(xxl.TokenHeader)}
	for _, it := range items {
		in.Items = append(in.Items, &schedulerv1.XxlCallbackItem{LogId: it.LogID, LogDateTime: it.LogDateTim,
			HandleCode: int32(it.HandleCode), HandleMsg: it.HandleMsg})
	}
	resp, err := r.s.XxlCallback(req.Context(), in)
	switch {
	case err != nil:
		r.callbackErrs.Add(1)
		answer(xxl.ReturnT{Code: xxl.CodeFail, Msg: status.Convert(err).Message()})
	case len(resp.GetUnknownLogIds()) > 0:
		r.callbackErrs.Add(1)
		answer(xxl.ReturnT{Code: xxl.CodeFail, Msg: fmt.Sprintf("unknown log ids %v", resp.GetUnknownLogIds())})
	default:
		answer(xxl.ReturnT{Code: xxl.CodeSuccess})
	}
}

// job creates a job of the rig's group.
func (r *xxlRig) job(t *testing.T, j *schedulerv1.Job) *schedulerv1.Job {
	t.Helper()
	j.GroupId = r.group
	if j.Name == "" {
		j.Name = "xxl " + j.Handler
	}
	if j.GlueType == schedulerv1.GlueType_GLUE_TYPE_UNSPECIFIED {
		j.GlueType = schedulerv1.GlueType_GLUE_TYPE_BEAN
	}
	j.Schedule = &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_NONE}
	resp, err := r.s.CreateJob(t.Context(), &schedulerv1.CreateJobRequest{Job: j})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetJob()
}

// fire triggers a job by hand and returns its trigger ids.
func (r *xxlRig) fire(t *testing.T, jobID int64, params string) []string {
	t.Helper()
	resp, err := r.s.TriggerJob(t.Context(), &schedulerv1.TriggerJobRequest{Id: jobID, Params: params})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetTriggerIds()
}

// ended waits for a run to end in logsvc and returns it.
func (r *xxlRig) ended(t *testing.T, id string) *logsv1.Run {
	t.Helper()
	var run *logsv1.Run
	eventually(t, 20*time.Second, "run "+id+" ends in logsvc", func() bool {
		resp, err := r.logs.GetRun(t.Context(), &logsv1.GetRunRequest{Id: id})
		if err != nil {
			return false
		}
		run = resp.GetRun()
		return run.GetStatus() != logsv1.RunStatus_RUN_STATUS_RUNNING && run.GetStatus() != logsv1.RunStatus_RUN_STATUS_UNSPECIFIED &&
			run.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_UNSPECIFIED
	})
	return run
}

// lines returns the text of a run's lines in logsvc.
func (r *xxlRig) lines(t *testing.T, id string) []string {
	t.Helper()
	resp, err := r.logs.ListRunLines(t.Context(), &logsv1.ListRunLinesRequest{Id: id, Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i, l := range resp.GetLines() {
		if l.GetLineNo() != int64(i+1) {
			t.Errorf("line %d has number %d", i+1, l.GetLineNo())
		}
		out = append(out, l.GetText())
	}
	return out
}

// logIDOf reads the XXL-JOB log id a fire was sent under.
func (r *xxlRig) logIDOf(t *testing.T, id string) (logID, logDate int64) {
	t.Helper()
	if err := r.c.store.QueryRowContext(t.Context(), `SELECT log_id, log_date_time FROM xxl_runs WHERE trigger_id = $1`, id).Scan(&logID, &logDate); err != nil {
		t.Fatalf("xxl_runs row of %s: %v", id, err)
	}
	return logID, logDate
}

// TestXxlBeanRun: a BEAN job runs on an XXL-JOB executor: /run carries TriggerParam exactly as
// XXL-JOB's admin fills it, with the group's token; the callback becomes the run's result in
// logsvc with the executor's output in order; a repeated callback, a callback with a wrong
// token and one for an unknown log id change nothing.
func TestXxlBeanRun(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	r := newXxlRig(t, "xxl-bean", 1, func(ex *xxltest.Executor) {
		ex.Handle("demoJobHandler", func(ctx context.Context, job *xxltest.Job) {
			job.Log("first line param=%s", job.Param.ExecutorParams)
			select {
			case <-release:
			case <-ctx.Done():
			}
			job.Log("second line")
			job.Success("done <ok>")
		})
	})
	ex := r.exs[0]
	j := r.job(t, &schedulerv1.Job{Handler: "demoJobHandler", Params: "x", TimeoutSeconds: 30,
		BlockStrategy: schedulerv1.BlockStrategy_BLOCK_STRATEGY_DISCARD_LATER})
	ids := r.fire(t, j.GetId(), "hello-jobmesh")
	if len(ids) != 1 {
		t.Fatalf("trigger ids %v", ids)
	}
	id := ids[0]
	// The live output reaches logsvc while the run runs.
	eventually(t, 15*time.Second, "the live line reaches logsvc", func() bool {
		resp, err := r.logs.ListRunLines(t.Context(), &logsv1.ListRunLinesRequest{Id: id})
		if status.Code(err) == codes.NotFound {
			return false
		}
		var ls []string
		for _, l := range resp.GetLines() {
			ls = append(ls, l.GetText())
		}
		return slices.ContainsFunc(ls, func(l string) bool { return strings.Contains(l, "first line param=hello-jobmesh") })
	})
	eventually(t, 15*time.Second, "logsvc shows the run RUNNING", func() bool {
		run, err := r.logs.GetRun(t.Context(), &logsv1.GetRunRequest{Id: id})
		return err == nil && run.GetRun().GetStatus() == logsv1.RunStatus_RUN_STATUS_RUNNING &&
			run.GetRun().GetTriggerOutcome() == logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK
	})
	close(release)
	run := r.ended(t, id)
	if run.GetStatus() != logsv1.RunStatus_RUN_STATUS_SUCCESS || run.GetHandleMessage() != "done <ok>" || run.GetExecutorAddress() != ex.Address() {
		t.Errorf("run = %v %q on %s, want SUCCESS \"done <ok>\" on %s", run.GetStatus(), run.GetHandleMessage(), run.GetExecutorAddress(), ex.Address())
	}

	runs := ex.RequestsTo("/run")
	if len(runs) != 1 {
		t.Fatalf("%d /run requests, want 1", len(runs))
	}
	logID, logDate := r.logIDOf(t, id)
	glueMs := int64(0)
	if j.GetGlueUpdatedTime() != nil {
		glueMs = j.GetGlueUpdatedTime().AsTime().UnixMilli()
	}
	want := fmt.Sprintf(`{"jobId":%d,"executorHandler":"demoJobHandler","executorParams":"hello-jobmesh","executorBlockStrategy":"DISCARD_LATER",`+
		`"executorTimeout":30,"logId":%d,"logDateTime":%d,"glueType":"BEAN","glueSource":"","glueUpdatetime":%d,"broadcastIndex":0,"broadcastTotal":1}`,
		j.GetId(), logID, logDate, glueMs)
	if got := string(runs[0].Body); got != want {
		t.Errorf("/run body\n got %s\nwant %s", got, want)
	}
	if runs[0].Token != r.token {
		t.Errorf("/run token %q, want the group's %q", runs[0].Token, r.token)
	}
	if got := run.GetScheduledTime().AsTime().UnixMilli(); got != logDate {
		t.Errorf("logDateTime %d, want the fire's scheduled time %d", logDate, got)
	}

	lines := r.lines(t, id)
	first := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "first line param=hello-jobmesh") })
	second := slices.IndexFunc(lines, func(l string) bool { return strings.HasSuffix(l, "] second line") })
	end := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "execute end(finish)") })
	if !strings.Contains(lines[0], "xxl-job job execute start") || first < 0 || second <= first || end <= second {
		t.Errorf("lines in logsvc out of order or missing:\n%s", strings.Join(lines, "\n"))
	}
	var pulled int64
	if err := r.c.store.QueryRowContext(t.Context(), `SELECT pulled_line FROM xxl_runs WHERE trigger_id = $1`, id).Scan(&pulled); err != nil || pulled != int64(len(lines)) {
		t.Errorf("pulled_line %d (%v), want %d", pulled, err, len(lines))
	}

	// A repeated callback (even one that says otherwise) changes nothing.
	again, err := r.s.XxlCallback(t.Context(), &schedulerv1.XxlCallbackRequest{AccessToken: r.token, Items: []*schedulerv1.XxlCallbackItem{
		{LogId: logID, LogDateTime: logDate, HandleCode: 500, HandleMsg: "late repeat"}, {LogId: 987654321, HandleCode: 200}}})
	if err != nil || !slices.Equal(again.GetAppliedLogIds(), []int64{logID}) || !slices.Equal(again.GetUnknownLogIds(), []int64{987654321}) {
		t.Fatalf("repeat: %v %v, want %d applied and 987654321 unknown", again, err, logID)
	}
	if got := r.ended(t, id); got.GetStatus() != logsv1.RunStatus_RUN_STATUS_SUCCESS || got.GetHandleMessage() != "done <ok>" {
		t.Errorf("after a repeated callback: %v %q, want SUCCESS \"done <ok>\"", got.GetStatus(), got.GetHandleMessage())
	}
	// A wrong token is refused, naming the log id.
	_, err = r.s.XxlCallback(t.Context(), &schedulerv1.XxlCallbackRequest{AccessToken: "wrong", Items: []*schedulerv1.XxlCallbackItem{
		{LogId: logID, HandleCode: 500}}})
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), fmt.Sprint(logID)) {
		t.Errorf("wrong token: %v, want Unauthenticated naming %d", err, logID)
	}
	if r.callbackErrs.Load() != 0 {
		t.Errorf("the executor's own callbacks were refused %d times", r.callbackErrs.Load())
	}
}

// TestXxlShardingBroadcast: a broadcast gives each XXL-JOB executor one /run with its own index.
func TestXxlShardingBroadcast(t *testing.T) {
	t.Parallel()
	r := newXxlRig(t, "xxl-shard", 3, func(ex *xxltest.Executor) {
		ex.Handle("shardingJobHandler", func(_ context.Context, job *xxltest.Job) {
			job.Success(fmt.Sprintf("shard %d/%d", job.Param.BroadcastIndex, job.Param.BroadcastTotal))
		})
	})
	j := r.job(t, &schedulerv1.Job{Handler: "shardingJobHandler", RouteStrategy: schedulerv1.RouteStrategy_ROUTE_STRATEGY_SHARDING_BROADCAST})
	ids := r.fire(t, j.GetId(), "")
	if len(ids) != 3 {
		t.Fatalf("trigger ids %v, want 3", ids)
	}
	var msgs []string
	for _, id := range ids {
		run := r.ended(t, id)
		if run.GetStatus() != logsv1.RunStatus_RUN_STATUS_SUCCESS {
			t.Errorf("shard run %s: %v", id, run.GetStatus())
		}
		msgs = append(msgs, run.GetHandleMessage())
	}
	slices.Sort(msgs)
	if want := []string{"shard 0/3", "shard 1/3", "shard 2/3"}; !slices.Equal(msgs, want) {
		t.Errorf("results %v, want %v", msgs, want)
	}
	indices := map[int64]bool{}
	for _, ex := range r.exs {
		runs := ex.RequestsTo("/run")
		if len(runs) != 1 {
			t.Fatalf("executor %s got %d /run, want 1", ex.Address(), len(runs))
		}
		var p xxl.TriggerParam
		if err := json.Unmarshal(runs[0].Body, &p); err != nil {
			t.Fatal(err)
		}
		if p.BroadcastTotal != 3 || indices[p.BroadcastIndex] {
			t.Errorf("executor %s: index %d of %d", ex.Address(), p.BroadcastIndex, p.BroadcastTotal)
		}
		indices[p.BroadcastIndex] = true
	}
}

// TestXxlFailTimeoutKillReject: a failing handler, a timeout, a kill and an unknown handler end
// as XXL-JOB reports them.
func TestXxlFailTimeoutKillReject(t *testing.T) {
	t.Parallel()
	r := newXxlRig(t, "xxl-fail", 1, func(ex *xxltest.Executor) {
		ex.Handle("failJobHandler", func(_ context.Context, job *xxltest.Job) { job.Fail("boom") })
		ex.Handle("sleepJobHandler", func(ctx context.Context, job *xxltest.Job) {
			job.Log("sleeping")
			<-ctx.Done()
		})
	})
	ex := r.exs[0]
	failJob := r.job(t, &schedulerv1.Job{Handler: "failJobHandler"})
	timeoutJob := r.job(t, &schedulerv1.Job{Name: "timeout", Handler: "sleepJobHandler", TimeoutSeconds: 1})
	killJob := r.job(t, &schedulerv1.Job{Name: "kill", Handler: "sleepJobHandler"})
	rejectJob := r.job(t, &schedulerv1.Job{Handler: "noSuchHandler"})

	failID := r.fire(t, failJob.GetId(), "")[0]
	timeoutID := r.fire(t, timeoutJob.GetId(), "")[0]
	killID := r.fire(t, killJob.GetId(), "")[0]
	rejectID := r.fire(t, rejectJob.GetId(), "")[0]

	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	if err := ex.Wait(ctx, func() bool { return ex.Running(killJob.GetId()) }); err != nil {
		t.Fatal(err)
	}
	resp, err := r.s.KillTrigger(t.Context(), &schedulerv1.KillTriggerRequest{TriggerId: killID, JobId: killJob.GetId(), Address: ex.Address()})
	if err != nil || !resp.GetKilled() {
		t.Fatalf("kill: %v %v", resp, err)
	}
	for _, tc := range []struct {
		id     string
		status logsv1.RunStatus
		msg    string
	}{
		{failID, logsv1.RunStatus_RUN_STATUS_FAIL, "boom"},
		{timeoutID, logsv1.RunStatus_RUN_STATUS_TIMEOUT, "job execute timeout "},
		{killID, logsv1.RunStatus_RUN_STATUS_KILLED, "scheduling center kill job. [job running, killed]"},
	} {
		run := r.ended(t, tc.id)
		if run.GetStatus() != tc.status || run.GetHandleMessage() != tc.msg {
			t.Errorf("run %s: %v %q, want %v %q", tc.id, run.GetStatus(), run.GetHandleMessage(), tc.status, tc.msg)
		}
	}
	if kills := ex.RequestsTo("/kill"); len(kills) != 1 || string(kills[0].Body) != fmt.Sprintf(`{"jobId":%d}`, killJob.GetId()) {
		t.Errorf("/kill requests %v", kills)
	}
	run := r.ended(t, rejectID)
	if run.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED || run.GetStatus() != logsv1.RunStatus_RUN_STATUS_FAIL ||
		!strings.Contains(run.GetTriggerMessage(), "job handler [noSuchHandler] not found.") {
		t.Errorf("rejected run: %v %v %q", run.GetTriggerOutcome(), run.GetStatus(), run.GetTriggerMessage())
	}
	var n int
	if err := r.c.store.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM xxl_runs WHERE trigger_id = $1`, rejectID).Scan(&n); err != nil || n != 0 {
		t.Errorf("the rejected fire keeps %d xxl_runs rows (%v), want none: it was not taken", n, err)
	}
}

// TestXxlRouteStrategies: every routing strategy routes over XXL-JOB executors; FAILOVER probes
// with /beat and BUSYOVER with /idleBeat.
func TestXxlRouteStrategies(t *testing.T) {
	t.Parallel()
	r := newXxlRig(t, "xxl-route", 2, func(ex *xxltest.Executor) {
		ex.Handle("demoJobHandler", func(context.Context, *xxltest.Job) {})
	})
	var ids []string
	for v := range schedulerv1.RouteStrategy_name {
		s := schedulerv1.RouteStrategy(v)
		if s == schedulerv1.RouteStrategy_ROUTE_STRATEGY_UNSPECIFIED {
			continue
		}
		j := r.job(t, &schedulerv1.Job{Name: s.String(), Handler: "demoJobHandler", RouteStrategy: s})
		ids = append(ids, r.fire(t, j.GetId(), "")...)
	}
	if len(ids) != 9+2 { // nine strategies with one fire, a broadcast of two
		t.Errorf("%d fires, want 11", len(ids))
	}
	for _, id := range ids {
		if run := r.ended(t, id); run.GetStatus() != logsv1.RunStatus_RUN_STATUS_SUCCESS {
			t.Errorf("run %s (%v): %v %q", id, run.GetRouteStrategy(), run.GetStatus(), run.GetTriggerMessage())
		}
	}
	beats, idle := 0, 0
	for _, ex := range r.exs {
		beats += len(ex.RequestsTo("/beat"))
		idle += len(ex.RequestsTo("/idleBeat"))
		for _, b := range ex.RequestsTo("/beat") {
			if string(b.Body) != `""` || b.Token != r.token {
				t.Errorf("/beat body %s token %q", b.Body, b.Token)
			}
		}
	}
	if beats == 0 || idle == 0 {
		t.Errorf("%d /beat and %d /idleBeat probes, want FAILOVER's and BUSYOVER's", beats, idle)
	}
}
