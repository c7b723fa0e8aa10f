package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/triggerid"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk/sdktest"
	"github.com/jobmesh/jobmesh/services/scheduler"
)

// counter counts a handler's executions per trigger id.
type counter struct {
	mu   sync.Mutex
	runs map[string]int
	seen []*sdk.Job
}

func (c *counter) add(j *sdk.Job) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runs == nil {
		c.runs = map[string]int{}
	}
	c.runs[j.TriggerID]++
	c.seen = append(c.seen, j)
}

// snapshot returns the executions so far, in order.
func (c *counter) snapshot() ([]*sdk.Job, map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	runs := make(map[string]int, len(c.runs))
	for k, v := range c.runs {
		runs[k] = v
	}
	return append([]*sdk.Job(nil), c.seen...), runs
}

// executor starts an SDK executor in a new AUTO group of the cluster, with one handler, and
// returns the group id.
func (c *cluster) executor(t *testing.T, app, handler string, h sdk.HandlerFunc) int64 {
	t.Helper()
	return c.executors(t, app, 1, handler, h)
}

// executors starts n SDK executors in a new AUTO group of the cluster, with one handler, and
// returns the group id once all are online.
func (c *cluster) executors(t *testing.T, app string, n int, handler string, h sdk.HandlerFunc) int64 {
	t.Helper()
	reg := registryv1.NewRegistryServiceClient(c.regConn)
	g, err := reg.CreateExecutorGroup(t.Context(), &registryv1.CreateExecutorGroupRequest{Group: &registryv1.ExecutorGroup{
		AppName: app, Title: app, AccessToken: app + "-token",
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		ex, err := sdk.New(sdk.Config{AppName: app, InstanceID: fmt.Sprintf("%s-%d", app, i), ListenAddr: "127.0.0.1:0",
			RegistryAddr: c.regConn.Target(), AccessToken: app + "-token", LogsvcAddr: c.logsConn.Target(), LogDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		ex.Handle(handler, h)
		if err := ex.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sdktest.Stop(ex) })
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		got, err := reg.GetExecutorGroup(t.Context(), &registryv1.GetExecutorGroupRequest{Id: g.Group.Id})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Group.Addresses) == n {
			return g.Group.Id
		}
		if time.Now().After(deadline) {
			t.Fatalf("executor of %s not online within 15s", app)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// eventually polls cond every 20 ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
	}
}

func (c *cluster) pendingRows(t *testing.T) int {
	t.Helper()
	var n int
	if err := c.store.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM pending_fires`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRetryWaitingOutItsBackoffSurvivesFailover: a fire fails, its retry waits 3 s of backoff,
// and the leader stops meanwhile. The new leader sends the retry, once, after the backoff.
func TestRetryWaitingOutItsBackoffSurvivesFailover(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	var runs counter
	group := c.executor(t, "flaky-app", "flaky", func(ctx context.Context, j *sdk.Job) error {
		runs.add(j)
		if j.Attempt == 0 {
			return errors.New("first attempt fails")
		}
		return nil
	})
	a, b := c.replica(t, "a"), c.replica(t, "b")
	lead, _ := waitLeader(t, a, b)
	other := b
	if lead == b {
		other = a
	}
	const backoff = 3 * time.Second
	job, err := other.CreateJob(t.Context(), &schedulerv1.CreateJobRequest{Job: &schedulerv1.Job{
		GroupId: group, Name: "flaky", Handler: "flaky", GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN,
		Schedule:   &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_NONE},
		RetryCount: 1, RetryBackoff: schedulerv1.RetryBackoff_RETRY_BACKOFF_FIXED, RetryIntervalMs: backoff.Milliseconds(),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lead.TriggerJob(t.Context(), &schedulerv1.TriggerJobRequest{Id: job.Job.Id}); err != nil {
		t.Fatal(err)
	}
	// The failure reaches the leader through logsvc's completions; the retry is then stored.
	eventually(t, 30*time.Second, "retry stored as a pending fire", func() bool { return c.pendingRows(t) == 1 })
	failedAt := time.Now()
	lead.Stop()
	eventually(t, 20*time.Second, "retry run by the new leader", func() bool {
		seen, _ := runs.snapshot()
		return len(seen) >= 2
	})
	seen, byID := runs.snapshot()
	if gap := time.Since(failedAt); gap < backoff-time.Second {
		t.Errorf("retry ran %v after the failure was stored, want after the %v backoff", gap, backoff)
	}
	if seen[1].Attempt != 1 || seen[1].TriggerType != "RETRY" {
		t.Errorf("second run = attempt %d, %s; want attempt 1, RETRY", seen[1].Attempt, seen[1].TriggerType)
	}
	if want := scheduler.TriggerID(job.Job.Id, seen[0].ScheduledTime.UnixMilli(), 0, 1); seen[1].TriggerID != want {
		t.Errorf("retry trigger id %s, want %s", seen[1].TriggerID, want)
	}
	eventually(t, 10*time.Second, "pending fire deleted once dispatched", func() bool { return c.pendingRows(t) == 0 })
	time.Sleep(time.Second) // anything sent twice would have arrived by now
	seen, byID = runs.snapshot()
	for id, n := range byID {
		if n != 1 {
			t.Errorf("trigger %s ran %d times, want once", id, n)
		}
	}
	if len(seen) != 2 {
		t.Errorf("%d runs, want 2 (the fire and one retry)", len(seen))
	}
}

// TestDeleteThroughAFollowerDisarms: a job deleted through a replica that does not lead stops
// firing within a pre-read, though the leader had armed its next fires.
func TestDeleteThroughAFollowerDisarms(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	var runs counter
	group := c.executor(t, "tick-app", "tick", func(ctx context.Context, j *sdk.Job) error {
		runs.add(j)
		return nil
	})
	a, b := c.replica(t, "a"), c.replica(t, "b")
	lead, _ := waitLeader(t, a, b)
	follower := b
	if lead == b {
		follower = a
	}
	job, err := follower.CreateJob(t.Context(), &schedulerv1.CreateJobRequest{Job: &schedulerv1.Job{
		GroupId: group, Name: "tick", Handler: "tick", GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN,
		Schedule: &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_FIX_RATE, Expression: "200ms"},
		Status:   schedulerv1.JobStatus_JOB_STATUS_RUNNING,
	}})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "job firing", func() bool {
		seen, _ := runs.snapshot()
		return len(seen) >= 3
	})
	if _, err := follower.DeleteJob(t.Context(), &schedulerv1.DeleteJobRequest{Id: job.Job.Id}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // one pre-read (1 s) and the fires already in flight
	before, _ := runs.snapshot()
	time.Sleep(3 * time.Second) // the leader had armed fires up to 5 s ahead
	after, _ := runs.snapshot()
	if len(after) != len(before) {
		t.Errorf("deleted job ran %d more times", len(after)-len(before))
	}
}

// TestShardedRetryRerunsOnlyTheFailedShard: a broadcast over two executors where shard 1 fails
// once; the retry runs shard 1 of 2 again, and shard 0 runs once.
func TestShardedRetryRerunsOnlyTheFailedShard(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	var runs counter
	group := c.executors(t, "shard-app", 2, "sharded", func(ctx context.Context, j *sdk.Job) error {
		runs.add(j)
		if j.ShardIndex == 1 && j.Attempt == 0 {
			return errors.New("shard 1 fails once")
		}
		return nil
	})
	s := c.replica(t, "a")
	waitLeader(t, s)
	job, err := s.CreateJob(t.Context(), &schedulerv1.CreateJobRequest{Job: &schedulerv1.Job{
		GroupId: group, Name: "sharded", Handler: "sharded", GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN,
		Schedule:      &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_NONE},
		RouteStrategy: schedulerv1.RouteStrategy_ROUTE_STRATEGY_SHARDING_BROADCAST, RetryCount: 2,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TriggerJob(t.Context(), &schedulerv1.TriggerJobRequest{Id: job.Job.Id}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "retry of shard 1", func() bool {
		seen, _ := runs.snapshot()
		return len(seen) >= 3
	})
	eventually(t, 10*time.Second, "pending fire deleted once dispatched", func() bool { return c.pendingRows(t) == 0 })
	time.Sleep(time.Second) // a wrong extra retry would have arrived by now
	seen, byID := runs.snapshot()
	got := map[string]bool{}
	for _, j := range seen {
		if j.ShardTotal != 2 {
			t.Errorf("run %s has shard total %d, want 2", j.TriggerID, j.ShardTotal)
		}
		got[fmt.Sprintf("shard %d attempt %d", j.ShardIndex, j.Attempt)] = true
	}
	for _, want := range []string{"shard 0 attempt 0", "shard 1 attempt 0", "shard 1 attempt 1"} {
		if !got[want] {
			t.Errorf("no run of %s; runs: %v", want, got)
		}
	}
	if len(seen) != 3 {
		t.Errorf("%d runs (%v), want 3", len(seen), byID)
	}
}

// TestEveryFailedShardIsRetried: when every shard of a broadcast fails, their retries are due in
// the same millisecond (no retry interval, one completion batch); each is its own fire and runs.
func TestEveryFailedShardIsRetried(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	var runs counter
	group := c.executors(t, "shards-fail-app", 3, "allfail", func(ctx context.Context, j *sdk.Job) error {
		runs.add(j)
		if j.Attempt == 0 {
			return errors.New("every shard fails once")
		}
		return nil
	})
	s := c.replica(t, "a")
	waitLeader(t, s)
	job, err := s.CreateJob(t.Context(), &schedulerv1.CreateJobRequest{Job: &schedulerv1.Job{
		GroupId: group, Name: "allfail", Handler: "allfail", GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN,
		Schedule:      &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_NONE},
		RouteStrategy: schedulerv1.RouteStrategy_ROUTE_STRATEGY_SHARDING_BROADCAST, RetryCount: 1,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TriggerJob(t.Context(), &schedulerv1.TriggerJobRequest{Id: job.Job.Id}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "a retry of every shard", func() bool {
		seen, _ := runs.snapshot()
		return len(seen) >= 6
	})
	eventually(t, 10*time.Second, "pending fires deleted once dispatched", func() bool { return c.pendingRows(t) == 0 })
	seen, byID := runs.snapshot()
	got := map[string]bool{}
	for _, j := range seen {
		got[fmt.Sprintf("shard %d attempt %d", j.ShardIndex, j.Attempt)] = true
	}
	for sh := range 3 {
		for a := range 2 {
			if want := fmt.Sprintf("shard %d attempt %d", sh, a); !got[want] {
				t.Errorf("no run of %s; runs: %v", want, byID)
			}
		}
	}
}

// TestChildFireRunsBesideTheChildsOwnFire: parent and child fire every second, so each of the
// parent's runs fires the child at a millisecond the child's own schedule fires too. Both run,
// under two trigger ids: the child's own, and the child fire's, which names the parent.
func TestChildFireRunsBesideTheChildsOwnFire(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	var runs counter
	group := c.executor(t, "child-app", "tick", func(ctx context.Context, j *sdk.Job) error {
		runs.add(j)
		return nil
	})
	s := c.replica(t, "a")
	waitLeader(t, s)
	create := func(name string, children ...int64) int64 {
		t.Helper()
		j, err := s.CreateJob(t.Context(), &schedulerv1.CreateJobRequest{Job: &schedulerv1.Job{
			GroupId: group, Name: name, Handler: "tick", GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN,
			Schedule: &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_CRON, Expression: "* * * * * ?"},
			Status:   schedulerv1.JobStatus_JOB_STATUS_RUNNING, ChildJobIds: children,
		}})
		if err != nil {
			t.Fatal(err)
		}
		return j.Job.Id
	}
	child := create("child")
	parent := create("parent", child)

	// both returns a scheduled time at which the child's own fire and a child fire both ran, with
	// the trigger ids of the child's runs then by trigger type; 0 while there is none.
	both := func() (ms int64, byType map[string][]string) {
		seen, _ := runs.snapshot()
		at := map[int64]map[string][]string{}
		for _, j := range seen {
			if j.ID != child {
				continue
			}
			ms := j.ScheduledTime.UnixMilli()
			if at[ms] == nil {
				at[ms] = map[string][]string{}
			}
			at[ms][j.TriggerType] = append(at[ms][j.TriggerType], j.TriggerID)
		}
		for ms, byType := range at {
			if len(byType["CRON"]) > 0 && len(byType["PARENT"]) > 0 {
				return ms, byType
			}
		}
		return 0, nil
	}
	eventually(t, 30*time.Second, "the child's own fire and its child fire at one time both run", func() bool {
		ms, _ := both()
		return ms != 0
	})
	ms, byType := both()
	if want := scheduler.TriggerID(child, ms, 0, 0); !slices.Equal(byType["CRON"], []string{want}) {
		t.Errorf("child's own runs at %d: %v, want one, %s", ms, byType["CRON"], want)
	}
	if want := (triggerid.ID{Job: child, ScheduledMs: ms, Parent: parent}).String(); !slices.Equal(byType["PARENT"], []string{want}) {
		t.Errorf("child fires at %d: %v, want one, %s", ms, byType["PARENT"], want)
	}
	_, byID := runs.snapshot()
	for id, n := range byID {
		if n != 1 {
			t.Errorf("trigger %s ran %d times, want once", id, n)
		}
	}
}
