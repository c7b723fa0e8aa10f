package scheduler

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	"github.com/jobmesh/jobmesh/internal/clock"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"

	"github.com/jobmesh/jobmesh/services/scheduler/internal/route"
)

// TestSlowJobsMoveToTheSlowPool: more than ten dispatches over 500 ms within a minute move a job
// to the slow pool (XXL-JOB's rule); the next minute starts afresh.
func TestSlowJobsMoveToTheSlowPool(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC))
	st := newSlowTracker(clk)
	for range 10 {
		st.observe(1, 600*time.Millisecond)
		st.observe(2, 100*time.Millisecond) // fast dispatches never count
	}
	if st.isSlow(1) {
		t.Error("job 1 slow after 10 slow dispatches, want fast until more than 10")
	}
	st.observe(1, 501*time.Millisecond)
	if !st.isSlow(1) || st.isSlow(2) {
		t.Errorf("isSlow(1) = %v, isSlow(2) = %v; want true, false", st.isSlow(1), st.isSlow(2))
	}
	clk.Advance(time.Minute)
	if st.isSlow(1) {
		t.Error("job 1 still slow in the next minute")
	}
}

// TestFullPoolRefuses: a pool never blocks the ring; a full queue refuses the fire.
func TestFullPoolRefuses(t *testing.T) {
	t.Parallel()
	p := newPool("fast", 1, 1)
	if !p.trySubmit(&fire{}) {
		t.Fatal("first fire refused by an empty pool")
	}
	if p.trySubmit(&fire{}) {
		t.Error("second fire accepted by a full pool (no worker started)")
	}
	p.start(func(*fire) {})
	p.stop()
	if p.trySubmit(&fire{}) {
		t.Error("fire accepted by a stopped pool")
	}
}

// TestDropReportLogsAnOverloadOnceInAWhile: the first dropped record is reported at once, later
// ones are counted and reported at most every dropReportEvery, with the count since.
func TestDropReportLogsAnOverloadOnceInAWhile(t *testing.T) {
	var d dropReport
	t0 := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	if n, ok := d.add(t0); !ok || n != 1 {
		t.Fatalf("first drop: %d, %v; want reported with 1", n, ok)
	}
	for i := range 999 {
		if _, ok := d.add(t0.Add(time.Duration(i) * time.Millisecond)); ok {
			t.Fatalf("drop %d within %v of the report was reported", i+2, dropReportEvery)
		}
	}
	if n, ok := d.add(t0.Add(dropReportEvery)); !ok || n != 1000 {
		t.Fatalf("drop after %v: %d, %v; want reported with 1000", dropReportEvery, n, ok)
	}
}

// TestBroadcastShardsGoOutTogether: the shards of a broadcast are sent at once, so an executor
// that holds its Run does not keep the others from theirs: both executors hold their call here,
// and both calls must arrive.
func TestBroadcastShardsGoOutTogether(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	a := &gatedExecutor{gate: gate, arrived: make(chan struct{}, 1)}
	b := &gatedExecutor{gate: gate, arrived: make(chan struct{}, 1)}
	addrA, addrB := serveExecutor(t, a), serveExecutor(t, b)
	s := dispatchService(t, Config{ReplicaID: "t", DispatchTimeout: time.Minute, Logger: slog.New(slog.DiscardHandler)})
	const group = 7
	s.groups.groups[group] = groupEntry{fetched: time.Now(), g: &registryv1.ExecutorGroup{Id: group,
		AddressType: registryv1.AddressType_ADDRESS_TYPE_MANUAL, Addresses: []string{addrA, addrB}}}
	f := &fire{job: &jobRow{ID: 1, GroupID: group, Handler: "h", Route: route.ShardingBroadcast},
		fireMs: time.Now().UnixMilli(), kind: kindScheduled, trigType: triggerCron}
	done := make(chan []string, 1)
	s.dispatch(f, trace.Link{}, func(ids []string) { done <- ids })
	for _, e := range []*gatedExecutor{a, b} {
		select {
		case <-e.arrived:
		case <-time.After(20 * time.Second):
			close(gate)
			t.Fatal("one shard did not arrive while the other executor held its Run")
		}
	}
	close(gate)
	ids := <-done
	if len(ids) != 2 || ids[0] == ids[1] {
		t.Fatalf("dispatch returned %v, want the two shards' trigger ids", ids)
	}
	for _, e := range []*gatedExecutor{a, b} {
		if calls, _ := e.snapshot(); len(calls) != 1 || len(calls[0]) != 1 {
			t.Errorf("executor calls %v, want one call of one shard", calls)
		}
	}
}

// TestHeldRunDoesNotHoldAWorker: a trigger pool's worker hands a fire to its executor's lane and
// goes on; with one worker, a fire to another executor goes out while the first executor holds
// its Run, and each fire settles when its own answer comes.
func TestHeldRunDoesNotHoldAWorker(t *testing.T) {
	t.Parallel()
	held := &gatedExecutor{gate: make(chan struct{}), arrived: make(chan struct{}, 1)}
	free := &gatedExecutor{arrived: make(chan struct{}, 1)}
	addrHeld, addrFree := serveExecutor(t, held), serveExecutor(t, free)
	s := dispatchService(t, Config{ReplicaID: "t", DispatchTimeout: time.Minute, FastWorkers: 1, Logger: slog.New(slog.DiscardHandler)})
	s.fast.start(s.dispatchScheduled)
	t.Cleanup(s.fast.stop)
	for group, addr := range map[int64]string{1: addrHeld, 2: addrFree} {
		s.groups.groups[group] = groupEntry{fetched: time.Now(), g: &registryv1.ExecutorGroup{Id: group,
			AddressType: registryv1.AddressType_ADDRESS_TYPE_MANUAL, Addresses: []string{addr}}}
	}
	lead := &engine{owed: newOwed()}
	fireTo := func(group int64) *fire {
		f := &fire{job: &jobRow{ID: group, GroupID: group, Handler: "h", Route: route.First},
			fireMs: time.Now().UnixMilli(), kind: kindScheduled, trigType: triggerCron, lead: lead}
		lead.owed.arm(f.job.ID, f.fireMs)
		return f
	}
	arrived := func(e *gatedExecutor, what string) {
		t.Helper()
		select {
		case <-e.arrived:
		case <-time.After(20 * time.Second):
			t.Fatal(what)
		}
	}
	owes := func(job int64) bool { _, ok := lead.owed.min(job); return ok }

	s.submit(fireTo(1))
	arrived(held, "the first fire did not reach its executor")
	s.submit(fireTo(2))
	arrived(free, "a fire to another executor waited for the held Run: the only worker was held")
	for deadline := time.Now().Add(20 * time.Second); owes(2); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the answered fire was not settled")
		}
	}
	if !owes(1) {
		t.Fatal("the held fire was settled before its executor answered")
	}
	close(held.gate)
	for deadline := time.Now().Add(20 * time.Second); owes(1); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the held fire was not settled after its executor answered")
		}
	}
}

// TestLostLeadershipKeepsQueuedFiresOwed: a fire waiting in its executor's lane when its
// leadership is lost is not sent and stays owed, for the next leader; the one already in flight
// settles when answered; the leadership's stop returns once both are through.
func TestLostLeadershipKeepsQueuedFiresOwed(t *testing.T) {
	t.Parallel()
	e := &gatedExecutor{gate: make(chan struct{}), arrived: make(chan struct{}, 1)}
	addr := serveExecutor(t, e)
	s := dispatchService(t, Config{ReplicaID: "t", DispatchTimeout: time.Minute, Logger: slog.New(slog.DiscardHandler)})
	const group = 1
	s.groups.groups[group] = groupEntry{fetched: time.Now(), g: &registryv1.ExecutorGroup{Id: group,
		AddressType: registryv1.AddressType_ADDRESS_TYPE_MANUAL, Addresses: []string{addr}}}
	lead := &engine{owed: newOwed()}
	fireOf := func(job int64) *fire {
		f := &fire{job: &jobRow{ID: job, GroupID: group, Handler: "h", Route: route.First},
			fireMs: time.Now().UnixMilli(), kind: kindScheduled, trigType: triggerCron, lead: lead}
		lead.owed.arm(job, f.fireMs)
		return f
	}
	inFlight, queued := fireOf(1), fireOf(2)
	s.dispatch(inFlight, trace.Link{}, nil)
	select {
	case <-e.arrived:
	case <-time.After(20 * time.Second):
		t.Fatal("the first fire did not reach its executor")
	}
	s.dispatch(queued, trace.Link{}, nil)
	waitQueued(t, s.execs, addr, 1)
	lead.mu.Lock()
	lead.lost = true // as stop does first; stop then waits for the dispatches in flight
	lead.mu.Unlock()
	stopped := make(chan struct{})
	go func() { lead.stop(nil); close(stopped) }()
	close(e.gate)
	select {
	case <-stopped:
	case <-time.After(20 * time.Second):
		t.Fatal("the leadership's stop did not return: a dispatch never ended")
	}
	if _, owed := lead.owed.min(1); owed {
		t.Error("the fire in flight was not settled after its answer")
	}
	if _, owed := lead.owed.min(2); !owed {
		t.Error("the queued fire was settled: the next leader would not send it")
	}
	calls, _ := e.snapshot()
	for _, c := range calls {
		if slices.Contains(c, TriggerID(2, queued.fireMs, 0, 0)) {
			t.Fatalf("the queued fire was sent after the leadership was lost: calls %v", calls)
		}
	}
}

// dispatchService is a scheduler on a scratch store whose dispatch tests drive by hand: no
// registry, logsvc or etcd behind it (the tests fill its group view themselves).
func dispatchService(t *testing.T, cfg Config) *Service {
	t.Helper()
	d := dbtest.Open(t, db.Config{DataDir: t.TempDir()}, "scheduler", MigrationsFS())
	s, err := New(cfg, Deps{
		Store: d, Etcd: &clientv3.Client{}, Registry: registryv1.NewRegistryServiceClient(nil),
		Ingest: logsv1.NewIngestServiceClient(nil), Logs: logsv1.NewLogServiceClient(nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.execs.close)
	return s
}
