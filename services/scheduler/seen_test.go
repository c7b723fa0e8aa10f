package scheduler_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/logtest"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk/sdktest"
	"github.com/jobmesh/jobmesh/services/scheduler"
)

// TestTakeoverAsksExecutorsWhatLogsvcDoesNotKnow: a leader died right after its last fires
// reached an executor, and logsvc has heard of none of them (its trigger records and the
// executors' reports lag under load; here the executors report to no logsvc at all). The new
// leader must not re-fire what an executor of the job's group has accepted, though its FIRST
// route would send the re-fire to the other executor, which would run it a second time. That
// holds for scheduled fires (armed_from_ms marks) and for pending retries. What no executor
// has seen is re-fired, once. An executor that answers Seen with Unimplemented (an older
// agent) or not at all may hold what it was asked about: the takeover goes on without it, and a
// fire two such executors of a group may hold is not re-fired but recorded UNKNOWN once the
// misfire threshold has passed.
//
// Every owed fire here is later than the misfire threshold, so the jobs are FIRE_ONCE_NOW: the
// latest late fire of each is the one still owed (re-fired as MISFIRE, or doubted), and the
// earlier ones, which the strategy would skip, are found on an executor: they ran, and are
// rebuilt, not recorded SKIPPED.
func TestTakeoverAsksExecutorsWhatLogsvcDoesNotKnow(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	reg := registryv1.NewRegistryServiceClient(c.regConn)
	ctx := t.Context()

	// Group 1: two SDK executors that present the group's access token, and report to no logsvc.
	const token = "group-one-token"
	g1, err := reg.CreateExecutorGroup(ctx, &registryv1.CreateExecutorGroupRequest{Group: &registryv1.ExecutorGroup{
		AppName: "seen-app", Title: "seen-app", AccessToken: token,
	}})
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]*counter{}
	var addrs []string
	for _, inst := range []string{"seen-0", "seen-1"} {
		ex, err := sdk.New(sdk.Config{AppName: "seen-app", InstanceID: inst, ListenAddr: "127.0.0.1:0", AccessToken: token,
			RegistryAddr: c.regConn.Target(), LogDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		var cnt counter
		ex.Handle("count", func(_ context.Context, j *sdk.Job) error { cnt.add(j); return nil })
		if err := ex.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sdktest.Stop(ex) })
		runs[ex.AdvertiseAddr()] = &cnt
		addrs = append(addrs, ex.AdvertiseAddr())
	}
	slices.Sort(addrs)
	first, other := addrs[0], addrs[1] // FIRST routes every fire to first
	eventually(t, 15*time.Second, "both executors of group 1 online", func() bool {
		g, err := reg.GetExecutorGroup(ctx, &registryv1.GetExecutorGroupRequest{Id: g1.Group.Id})
		return err == nil && len(g.Group.Addresses) == 2
	})

	// Group 2: a MANUAL group of an executor without Seen and one that never answers.
	old := grpc.NewServer()
	executorv1.RegisterExecutorServiceServer(old, struct {
		executorv1.UnimplementedExecutorServiceServer
	}{})
	oldLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go old.Serve(oldLn)
	t.Cleanup(old.Stop)
	mute := muteListener(t)
	g2, err := reg.CreateExecutorGroup(ctx, &registryv1.CreateExecutorGroupRequest{Group: &registryv1.ExecutorGroup{
		AppName: "seen-manual", Title: "seen-manual", AddressType: registryv1.AddressType_ADDRESS_TYPE_MANUAL,
		ManualAddresses: []string{oldLn.Addr().String(), mute},
	}})
	if err != nil {
		t.Fatal(err)
	}

	// The jobs, created stopped through a leader that then leaves.
	a := c.replica(t, "a")
	waitLeader(t, a)
	newJob := func(group int64, every string) int64 {
		t.Helper()
		j, err := a.CreateJob(ctx, &schedulerv1.CreateJobRequest{Job: &schedulerv1.Job{
			GroupId: group, Name: "seen-" + every, Handler: "count", GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN,
			Schedule:        &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_FIX_RATE, Expression: every},
			RouteStrategy:   schedulerv1.RouteStrategy_ROUTE_STRATEGY_FIRST,
			MisfireStrategy: schedulerv1.MisfireStrategy_MISFIRE_STRATEGY_FIRE_ONCE_NOW, Status: schedulerv1.JobStatus_JOB_STATUS_STOPPED,
		}})
		if err != nil {
			t.Fatal(err)
		}
		return j.Job.Id
	}
	job1, job2 := newJob(g1.Group.Id, "1m"), newJob(g2.Group.Id, "1h")
	a.Stop()

	// What a leader killed after dispatching leaves in the store: running jobs whose
	// armed_from_ms marks lie before fires it sent, and pending retries it may have sent.
	// All of them are later than the 2 s misfire threshold: f2 is the latest of job 1's, and
	// g2fire job 2's only one, so FIRE_ONCE_NOW keeps them (as MISFIRE) and would skip f0 and f1.
	now := time.Now().UnixMilli()
	f0, f1, f2 := now-150_000, now-90_000, now-30_000 // job 1's fires in [armed_from_ms, next_fire_ms)
	g2fire := now - 60_000                            // job 2's only one
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`UPDATE jobs SET status = $1 WHERE id IN ($2, $3)`, []any{int32(schedulerv1.JobStatus_JOB_STATUS_RUNNING), job1, job2}},
		{`UPDATE job_state SET armed_from_ms = $2, next_fire_ms = $3 WHERE job_id = $1`, []any{job1, f0, f2 + 60_000}},
		{`UPDATE job_state SET armed_from_ms = $2, next_fire_ms = $3 WHERE job_id = $1`, []any{job2, g2fire, g2fire + 3_600_000}},
		{`INSERT INTO pending_fires (job_id, fire_ms, shard, shard_total, attempt, trigger_type, fire_params, due_ms)
			VALUES ($1, $2, -1, 0, 1, $4, NULL, $5), ($1, $3, -1, 0, 1, $4, NULL, $5 + 1)`,
			// Due a millisecond apart: the ring holds one fire per job and millisecond.
			[]any{job1, f0, f1, int32(schedulerv1.TriggerType_TRIGGER_TYPE_RETRY), now - 1000}},
	} {
		if _, err := c.store.ExecContext(ctx, q.sql, q.args...); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}
	// The dead leader's Run reached the other executor with f0, f1 and f0's retry.
	sent := []string{scheduler.TriggerID(job1, f0, 0, 0), scheduler.TriggerID(job1, f1, 0, 0), scheduler.TriggerID(job1, f0, 0, 1)}
	var trigs []*executorv1.Trigger
	for i, id := range sent {
		ms, attempt := []int64{f0, f1, f0}[i], int32(i/2)
		trigs = append(trigs, &executorv1.Trigger{TriggerId: id, JobId: job1, GroupId: g1.Group.Id, Handler: "count",
			GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN, ShardTotal: 1, ScheduledUnixMs: ms, Attempt: attempt})
	}
	resp, err := sdktest.Client(t, other, token).Run(ctx, &executorv1.RunRequest{Triggers: trigs})
	if err != nil {
		t.Fatal(err)
	}
	for _, ack := range resp.GetAcks() {
		if ack.GetOutcome() != executorv1.RunOutcome_RUN_OUTCOME_ACCEPTED {
			t.Fatalf("the dead leader's fire %s: %v %q, want ACCEPTED", ack.GetTriggerId(), ack.GetOutcome(), ack.GetMessage())
		}
	}

	// The new leader.
	rec := logtest.New()
	b := c.replicaWith(t, scheduler.Config{ReplicaID: "b", Logger: rec.Logger(), MisfireThreshold: 2 * time.Second})
	waitLeader(t, b)
	rec.Wait(t, 30*time.Second, "took over pending retries and child fires",
		"pending=2 already_dispatched=1 found_on_executors=1 executors_skipped=0 pinned=0 in_doubt=0")
	rec.Wait(t, 30*time.Second, "took over from the previous leader", "jobs_marked=2",
		"fires_checked=4 fires_on_executors=2 executors_skipped=0 fires_refired=1 fires_pinned=0 fires_in_doubt=1 records_rebuilt=2 misfires_skipped=0")
	rec.Wait(t, time.Second, "WARN executor does not implement Seen", "executor="+oldLn.Addr().String())
	rec.Wait(t, time.Second, "WARN executor did not say which fires it has seen", "executor="+mute, "DeadlineExceeded")
	// Job 2's fire: both executors of its group may hold it, and neither says.
	rec.Wait(t, 30*time.Second, "WARN fire left unknown", "trigger_id="+scheduler.TriggerID(job2, g2fire, 0, 0),
		"did not say within 2s")

	// What no executor had seen runs, once, where FIRST sends it: f2 (job 1's run now for its
	// late fires, MISFIRE) and f1's retry (a pending retry, not a misfire).
	refired := []string{scheduler.TriggerID(job1, f2, 0, 0), scheduler.TriggerID(job1, f1, 0, 1)}
	eventually(t, 30*time.Second, "f2 and f1's retry re-fired on the first executor", func() bool {
		_, got := runs[first].snapshot()
		return got[refired[0]] == 1 && got[refired[1]] == 1
	})
	ranFirst, onFirst := runs[first].snapshot()
	for _, j := range ranFirst {
		want := map[string]string{refired[0]: "MISFIRE", refired[1]: "RETRY"}[j.TriggerID]
		if want != "" && j.TriggerType != want {
			t.Errorf("fire %s ran as %s, want %s", j.TriggerID, j.TriggerType, want)
		}
	}
	_, onOther := runs[other].snapshot()
	for _, id := range sent {
		if onFirst[id] != 0 || onOther[id] != 1 {
			t.Errorf("fire %s ran %d times on the first executor and %d on the other, want 0 and 1 (it was not re-fired)",
				id, onFirst[id], onOther[id])
		}
	}
	for id, n := range onFirst {
		if n+onOther[id] != 1 {
			t.Errorf("fire %s ran %d times on the first executor and %d on the other, want once in all", id, n, onOther[id])
		}
	}
	// One pending fire was found on an executor, the other was dispatched.
	eventually(t, 10*time.Second, "pending fires deleted", func() bool { return c.pendingRows(t) == 0 })

	// The fires found on the other executor had no record in logsvc (the dead leader's were
	// lost with it): the new leader rebuilt them, naming the executor that holds them.
	logs := logsv1.NewLogServiceClient(c.logsConn)
	for i, id := range sent {
		var r *logsv1.Run
		eventually(t, 30*time.Second, "the rebuilt record of "+id+" in logsvc", func() bool {
			resp, err := logs.GetRun(ctx, &logsv1.GetRunRequest{Id: id})
			r = resp.GetRun()
			return err == nil
		})
		tt := []schedulerv1.TriggerType{schedulerv1.TriggerType_TRIGGER_TYPE_CRON, schedulerv1.TriggerType_TRIGGER_TYPE_CRON,
			schedulerv1.TriggerType_TRIGGER_TYPE_RETRY}[i]
		if r.GetGroupId() != g1.Group.Id || r.GetTriggerType() != tt || r.GetExecutorAddress() != other ||
			r.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK || r.GetStatus() != logsv1.RunStatus_RUN_STATUS_RUNNING ||
			!strings.Contains(r.GetTriggerMessage(), "rebuilt by the new leader at takeover") {
			t.Errorf("run %s: got %v, want group %d, %s, at %s, OK, RUNNING (its executor reports to no logsvc), rebuilt", id, r, g1.Group.Id, tt, other)
		}
	}
	// f2's run is the misfire's run now, sent where FIRST routes.
	var r2 *logsv1.Run
	eventually(t, 30*time.Second, "the record of "+refired[0]+" in logsvc", func() bool {
		resp, err := logs.GetRun(ctx, &logsv1.GetRunRequest{Id: refired[0]})
		r2 = resp.GetRun()
		return err == nil && r2.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_UNSPECIFIED
	})
	if r2.GetTriggerType() != schedulerv1.TriggerType_TRIGGER_TYPE_MISFIRE || r2.GetExecutorAddress() != first ||
		r2.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK {
		t.Errorf("run %s: got %v, want MISFIRE, at %s, OK", refired[0], r2, first)
	}
}

// muteListener accepts TCP connections and never answers on them, as a hung executor would; it
// returns its address.
func muteListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// slowSeenProxy stands in front of an executor (the address it registers) and passes every call
// on, except Seen, which it answers only once the caller has stopped waiting: an executor too
// busy to say which fires it holds, however long the deadline.
type slowSeenProxy struct {
	executorv1.UnimplementedExecutorServiceServer
	mu sync.Mutex
	to executorv1.ExecutorServiceClient
}

func (p *slowSeenProxy) target() executorv1.ExecutorServiceClient {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.to
}

func (p *slowSeenProxy) Run(ctx context.Context, req *executorv1.RunRequest) (*executorv1.RunResponse, error) {
	return p.target().Run(ctx, req)
}

func (p *slowSeenProxy) Beat(ctx context.Context, req *executorv1.BeatRequest) (*executorv1.BeatResponse, error) {
	return p.target().Beat(ctx, req)
}

func (p *slowSeenProxy) Seen(ctx context.Context, _ *executorv1.SeenRequest) (*executorv1.SeenResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestTakeoverWhoseSeenIsNeverAnsweredRunsNothingTwice: executors that never answer Seen in time
// hold fires the dead leader sent them, and logsvc knows none of those fires. Where one executor
// of a group is silent, every fire in doubt goes to it alone, under its trigger id: the fire it
// holds is answered DUPLICATE there and not run again, though routing would send a re-fire to the
// other executor; the fire it does not hold runs there once. Where two are silent, the fire is
// not re-fired anywhere: once the misfire threshold has passed it is recorded UNKNOWN.
//
// Every owed fire here is later than the misfire threshold, so the jobs are FIRE_ONCE_NOW: the
// latest late fire of each is the one still owed (re-fired as MISFIRE, or doubted), and an
// earlier one is skipped by the strategy: recorded SKIPPED, and sent to no executor, silent or
// not.
func TestTakeoverWhoseSeenIsNeverAnsweredRunsNothingTwice(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	reg := registryv1.NewRegistryServiceClient(c.regConn)
	ctx := t.Context()

	type executor struct {
		addr string // as registered: a slow-Seen proxy's for the silent ones
		real string
		runs *counter
	}
	group := func(app string, silent ...bool) (int64, []*executor) {
		token := app + "-token"
		g, err := reg.CreateExecutorGroup(ctx, &registryv1.CreateExecutorGroupRequest{Group: &registryv1.ExecutorGroup{
			AppName: app, Title: app, AccessToken: token,
		}})
		if err != nil {
			t.Fatal(err)
		}
		var exs []*executor
		for i, slow := range silent {
			cfg := sdk.Config{AppName: app, InstanceID: fmt.Sprintf("%s-%d", app, i), ListenAddr: "127.0.0.1:0", AccessToken: token,
				RegistryAddr: c.regConn.Target(), LogDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)}
			var proxy *slowSeenProxy
			if slow {
				proxy = &slowSeenProxy{}
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				g := grpc.NewServer()
				executorv1.RegisterExecutorServiceServer(g, proxy)
				go g.Serve(ln)
				t.Cleanup(g.Stop)
				cfg.AdvertiseAddr = ln.Addr().String()
			}
			ex, err := sdk.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			x := &executor{runs: &counter{}}
			ex.Handle("count", func(_ context.Context, j *sdk.Job) error { x.runs.add(j); return nil })
			if err := ex.Start(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sdktest.Stop(ex) })
			x.addr, x.real = ex.AdvertiseAddr(), ex.Addr()
			if proxy != nil {
				proxy.mu.Lock()
				proxy.to = sdktest.Client(t, x.real, token)
				proxy.mu.Unlock()
			}
			exs = append(exs, x)
		}
		eventually(t, 15*time.Second, app+" executors online", func() bool {
			got, err := reg.GetExecutorGroup(ctx, &registryv1.GetExecutorGroupRequest{Id: g.Group.Id})
			return err == nil && len(got.Group.Addresses) == len(silent)
		})
		return g.Group.Id, exs
	}
	g1, one := group("silent-one", false, true) // one[1] never answers Seen
	g2, two := group("silent-two", true, true)  // neither does

	// Group 1 routes to its answering executor (FIRST or LAST, by the address order), so a
	// re-fire that went by routing would run there a second time.
	routeTo := schedulerv1.RouteStrategy_ROUTE_STRATEGY_FIRST
	if one[0].addr > one[1].addr {
		routeTo = schedulerv1.RouteStrategy_ROUTE_STRATEGY_LAST
	}
	a := c.replica(t, "a")
	waitLeader(t, a)
	newJob := func(group int64, every string, rs schedulerv1.RouteStrategy) int64 {
		t.Helper()
		j, err := a.CreateJob(ctx, &schedulerv1.CreateJobRequest{Job: &schedulerv1.Job{
			GroupId: group, Name: "silent-" + every, Handler: "count", GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN,
			Schedule:      &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_FIX_RATE, Expression: every},
			RouteStrategy: rs, MisfireStrategy: schedulerv1.MisfireStrategy_MISFIRE_STRATEGY_FIRE_ONCE_NOW,
			Status: schedulerv1.JobStatus_JOB_STATUS_STOPPED,
		}})
		if err != nil {
			t.Fatal(err)
		}
		return j.Job.Id
	}
	// Job 1 and job 3 in group 1, job 2 in group 2.
	job1, job3 := newJob(g1, "1m", routeTo), newJob(g1, "2m", routeTo)
	job2 := newJob(g2, "1h", schedulerv1.RouteStrategy_ROUTE_STRATEGY_FIRST)
	a.Stop()

	// What the dead leader owed, all of it later than the 2 s misfire threshold: job 1 its fire
	// f1, job 3 its fires k0 and k1 (FIRE_ONCE_NOW skips k0 and runs k1 as MISFIRE), job 2 h0.
	now := time.Now().UnixMilli()
	f1, k0, k1, h0 := now-30_000, now-150_000, now-30_000, now-60_000
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`UPDATE jobs SET status = $1 WHERE id IN ($2, $3, $4)`, []any{int32(schedulerv1.JobStatus_JOB_STATUS_RUNNING), job1, job2, job3}},
		{`UPDATE job_state SET armed_from_ms = $2, next_fire_ms = $3 WHERE job_id = $1`, []any{job1, f1, f1 + 60_000}},
		{`UPDATE job_state SET armed_from_ms = $2, next_fire_ms = $3 WHERE job_id = $1`, []any{job3, k0, k1 + 120_000}},
		{`UPDATE job_state SET armed_from_ms = $2, next_fire_ms = $3 WHERE job_id = $1`, []any{job2, h0, h0 + 3_600_000}},
	} {
		if _, err := c.store.ExecContext(ctx, q.sql, q.args...); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}
	// The dead leader's Run reached the silent executors: f1 on group 1's, h0 on group 2's second.
	held := map[*executor]*executorv1.Trigger{
		one[1]: {TriggerId: scheduler.TriggerID(job1, f1, 0, 0), JobId: job1, GroupId: g1, Handler: "count",
			GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN, ShardTotal: 1, ScheduledUnixMs: f1},
		two[1]: {TriggerId: scheduler.TriggerID(job2, h0, 0, 0), JobId: job2, GroupId: g2, Handler: "count",
			GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN, ShardTotal: 1, ScheduledUnixMs: h0},
	}
	for x, tr := range held {
		token := map[int64]string{g1: "silent-one-token", g2: "silent-two-token"}[tr.GetGroupId()]
		resp, err := sdktest.Client(t, x.real, token).Run(ctx, &executorv1.RunRequest{Triggers: []*executorv1.Trigger{tr}})
		if err != nil || resp.GetAcks()[0].GetOutcome() != executorv1.RunOutcome_RUN_OUTCOME_ACCEPTED {
			t.Fatalf("the dead leader's fire %s: %v, %v", tr.GetTriggerId(), resp, err)
		}
	}

	rec := logtest.New()
	b := c.replicaWith(t, scheduler.Config{ReplicaID: "b", Logger: rec.Logger(), MisfireThreshold: 2 * time.Second})
	waitLeader(t, b)
	rec.Wait(t, 30*time.Second, "took over from the previous leader", "jobs_marked=3",
		"fires_checked=4 fires_on_executors=0 executors_skipped=0 fires_refired=2 fires_pinned=2 fires_in_doubt=1 records_rebuilt=0 misfires_skipped=1")
	id1, kid0, kid1, hid := scheduler.TriggerID(job1, f1, 0, 0), scheduler.TriggerID(job3, k0, 0, 0), scheduler.TriggerID(job3, k1, 0, 0),
		scheduler.TriggerID(job2, h0, 0, 0)
	rec.Wait(t, 30*time.Second, "WARN fire left unknown", "trigger_id="+hid, "did not say within 2s")

	logs := logsv1.NewLogServiceClient(c.logsConn)
	runOf := func(id, what string, done func(*logsv1.Run) bool) *logsv1.Run {
		t.Helper()
		var r *logsv1.Run
		eventually(t, 30*time.Second, what, func() bool {
			resp, err := logs.GetRun(ctx, &logsv1.GetRunRequest{Id: id})
			r = resp.GetRun()
			return err == nil && done(r)
		})
		return r
	}
	// f1's re-fire went to the silent executor that holds it, which answered DUPLICATE.
	dup := "executor " + one[1].addr + ": DUPLICATE"
	if r := runOf(id1, "f1 re-fired to the silent executor of group 1 and answered DUPLICATE", func(r *logsv1.Run) bool {
		return strings.Contains(r.GetTriggerMessage(), dup)
	}); r.GetTriggerType() != schedulerv1.TriggerType_TRIGGER_TYPE_MISFIRE || r.GetExecutorAddress() != one[1].addr {
		t.Errorf("run %s: got %v, want MISFIRE at %s", id1, r, one[1].addr)
	}
	// k1's ran there, once, as the misfire's run now; k0 was skipped.
	eventually(t, 30*time.Second, "k1 run on the silent executor of group 1", func() bool {
		_, got := one[1].runs.snapshot()
		return got[kid1] == 1
	})
	if r := runOf(kid0, "k0 recorded", func(r *logsv1.Run) bool { return r.GetGroupId() != 0 }); r.GetStatus() != logsv1.RunStatus_RUN_STATUS_SKIPPED ||
		r.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_SKIPPED || !strings.Contains(r.GetTriggerMessage(), "misfire") {
		t.Errorf("run %s: %s/%s %q, want SKIPPED as a misfire", kid0, r.GetStatus(), r.GetTriggerOutcome(), r.GetTriggerMessage())
	}
	if r := runOf(hid, "h0 recorded", func(r *logsv1.Run) bool { return r.GetGroupId() != 0 }); r.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_UNKNOWN {
		t.Errorf("run %s: %s, want UNKNOWN", hid, r.GetTriggerOutcome())
	}
	want := map[*executor]map[string]int{
		one[0]: {id1: 0, kid0: 0, kid1: 0}, one[1]: {id1: 1, kid0: 0, kid1: 1},
		two[0]: {hid: 0}, two[1]: {hid: 1},
	}
	for x, ids := range want {
		ran, got := x.runs.snapshot()
		for id, n := range ids {
			if got[id] != n {
				t.Errorf("fire %s ran %d times on %s, want %d", id, got[id], x.addr, n)
			}
		}
		for _, j := range ran {
			if j.TriggerID == kid1 && j.TriggerType != "MISFIRE" {
				t.Errorf("fire %s ran as %s, want MISFIRE", kid1, j.TriggerType)
			}
		}
	}
}

// TestTakeoverRebuildsLostTriggerRecords: a leader was killed with the trigger records of fires
// it had dispatched still queued, so logsvc knows those runs from their executor's results
// alone, without group or trigger type. The new leader does not re-fire them, and rebuilds
// their records from the trigger id and the job: the scheduled fire's as CRON, the pending
// retry's as RETRY. logsvc fills the runs from them and keeps the status and the executor
// address the results gave.
func TestTakeoverRebuildsLostTriggerRecords(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	reg := registryv1.NewRegistryServiceClient(c.regConn)
	ctx := t.Context()
	g, err := reg.CreateExecutorGroup(ctx, &registryv1.CreateExecutorGroupRequest{Group: &registryv1.ExecutorGroup{
		AppName: "rebuild-app", Title: "rebuild-app",
	}})
	if err != nil {
		t.Fatal(err)
	}
	a := c.replica(t, "a")
	waitLeader(t, a)
	j, err := a.CreateJob(ctx, &schedulerv1.CreateJobRequest{Job: &schedulerv1.Job{
		GroupId: g.Group.Id, Name: "rebuild", Handler: "count", GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN, Params: "job-params",
		Schedule:      &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_FIX_RATE, Expression: "1m"},
		RouteStrategy: schedulerv1.RouteStrategy_ROUTE_STRATEGY_FIRST, Status: schedulerv1.JobStatus_JOB_STATUS_STOPPED,
	}})
	if err != nil {
		t.Fatal(err)
	}
	job := j.Job.Id
	a.Stop()

	// The dead leader's store: f0 armed and dispatched, and f0's retry pending and dispatched.
	now := time.Now().UnixMilli()
	f0 := now - 90_000
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`UPDATE jobs SET status = $1 WHERE id = $2`, []any{int32(schedulerv1.JobStatus_JOB_STATUS_RUNNING), job}},
		{`UPDATE job_state SET armed_from_ms = $2, next_fire_ms = $3 WHERE job_id = $1`, []any{job, f0, f0 + 60_000}},
		{`INSERT INTO pending_fires (job_id, fire_ms, shard, shard_total, attempt, trigger_type, fire_params, due_ms)
			VALUES ($1, $2, -1, 0, 1, $3, NULL, $4)`, []any{job, f0, int32(schedulerv1.TriggerType_TRIGGER_TYPE_RETRY), now - 1000}},
	} {
		if _, err := c.store.ExecContext(ctx, q.sql, q.args...); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}
	// Their executor's results reached logsvc; their trigger records did not.
	const at = "10.9.9.9:9999"
	first, retry := scheduler.TriggerID(job, f0, 0, 0), scheduler.TriggerID(job, f0, 0, 1)
	st, err := logsv1.NewIngestServiceClient(c.logsConn).IngestResults(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&logsv1.IngestResultsRequest{BatchId: 1, Results: []*logsv1.RunResult{
		{TriggerId: first, JobId: job, Status: logsv1.RunStatus_RUN_STATUS_FAIL, Message: "exit 1", StartUnixMs: f0, EndUnixMs: f0 + 10, ExecutorAddress: at},
		{TriggerId: retry, JobId: job, Status: logsv1.RunStatus_RUN_STATUS_SUCCESS, Message: "ok", StartUnixMs: f0 + 20, EndUnixMs: f0 + 30, ExecutorAddress: at},
	}}); err != nil {
		t.Fatal(err)
	}
	if ack, err := st.Recv(); err != nil || ack.GetBatchId() != 1 {
		t.Fatalf("results ack: %v, %v", ack, err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}

	rec := logtest.New()
	b := c.replicaWith(t, scheduler.Config{ReplicaID: "b", Logger: rec.Logger()})
	waitLeader(t, b)
	rec.Wait(t, 30*time.Second, "took over pending retries and child fires", "pending=1 already_dispatched=1", "records_rebuilt=1")
	rec.Wait(t, 30*time.Second, "took over from the previous leader", "fires_checked=1", "fires_refired=0", "records_rebuilt=1")

	logs := logsv1.NewLogServiceClient(c.logsConn)
	runOf := func(id string) *logsv1.Run {
		resp, err := logs.GetRun(ctx, &logsv1.GetRunRequest{Id: id})
		if err != nil {
			t.Fatalf("GetRun(%s): %v", id, err)
		}
		return resp.GetRun()
	}
	for id, tt := range map[string]schedulerv1.TriggerType{first: schedulerv1.TriggerType_TRIGGER_TYPE_CRON, retry: schedulerv1.TriggerType_TRIGGER_TYPE_RETRY} {
		eventually(t, 30*time.Second, "the rebuilt record of "+id+" in logsvc", func() bool { return runOf(id).GetGroupId() != 0 })
		r := runOf(id)
		if r.GetGroupId() != g.Group.Id || r.GetTriggerType() != tt || r.GetParams() != "job-params" || r.GetScheduledTime().AsTime().UnixMilli() != f0 ||
			r.GetExecutorAddress() != at || r.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK ||
			!strings.Contains(r.GetTriggerMessage(), "rebuilt by the new leader at takeover") {
			t.Errorf("run %s: got %v, want group %d, %s, the job's params, scheduled at %d, at %s, OK, rebuilt", id, r, g.Group.Id, tt, f0, at)
		}
	}
	// The executor's word stands.
	if got := runOf(first).GetStatus(); got != logsv1.RunStatus_RUN_STATUS_FAIL {
		t.Errorf("first attempt: %s, want FAIL as its executor said", got)
	}
	if got := runOf(retry).GetStatus(); got != logsv1.RunStatus_RUN_STATUS_SUCCESS {
		t.Errorf("retry: %s, want SUCCESS as its executor said", got)
	}
}
