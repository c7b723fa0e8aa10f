package scheduler_test

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
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
// agent) or not at all is skipped, and the takeover goes on without it.
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
			Schedule:      &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_FIX_RATE, Expression: every},
			RouteStrategy: schedulerv1.RouteStrategy_ROUTE_STRATEGY_FIRST, Status: schedulerv1.JobStatus_JOB_STATUS_STOPPED,
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
	b := c.replicaWith(t, scheduler.Config{ReplicaID: "b", Logger: rec.Logger()})
	waitLeader(t, b)
	rec.Wait(t, 30*time.Second, "took over pending retries and child fires",
		"pending=2 already_dispatched=1 found_on_executors=1 executors_skipped=0")
	rec.Wait(t, 30*time.Second, "took over from the previous leader", "jobs_marked=2",
		"fires_checked=4 fires_on_executors=2 executors_skipped=2 fires_refired=2")
	rec.Wait(t, time.Second, "WARN executor does not implement Seen", "executor="+oldLn.Addr().String())
	rec.Wait(t, time.Second, "WARN executor did not say which fires it has seen", "executor="+mute, "DeadlineExceeded")

	// What no executor had seen runs, once, where FIRST sends it: f2 and f1's retry.
	refired := []string{scheduler.TriggerID(job1, f2, 0, 0), scheduler.TriggerID(job1, f1, 0, 1)}
	eventually(t, 30*time.Second, "f2 and f1's retry re-fired on the first executor", func() bool {
		_, got := runs[first].snapshot()
		return got[refired[0]] == 1 && got[refired[1]] == 1
	})
	_, onFirst := runs[first].snapshot()
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
