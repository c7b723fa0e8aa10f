package scheduler

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/clock"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/triggerid"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/ring"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/schedule"
)

// completionRig is a leader's completion handling over a real store, with a ring that is not
// running (so what is armed stays there to be looked at) and a fake clock.
type completionRig struct {
	s   *Service
	l   *engine
	clk *clock.Fake
}

func newCompletionRig(t *testing.T) *completionRig {
	t.Helper()
	d := dbtest.Open(t, db.Config{URL: dbtest.NewPostgres(t)}, "scheduler", MigrationsFS())
	clk := clock.NewFake(time.UnixMilli(1_700_000_000_000))
	s := &Service{cfg: Config{ReplicaID: "r1"}, log: slog.New(slog.DiscardHandler), clk: clk, jobs: store{d}}
	if err := s.jobs.raiseFence(t.Context(), 0, 1, "r1"); err != nil {
		t.Fatal(err)
	}
	// One partition, led here.
	l := &engine{s: s, epoch: 1, ring: ring.New(clk, func([]ringEntry) {}), owed: newOwed(), deposed: make(chan struct{})}
	s.engines, s.completions = map[int]*engine{0: l}, newCompletionFollower()
	s.count.Store(1)
	return &completionRig{s: s, clk: clk, l: l}
}

// job creates a job that retries once after 10 s, with the given schedule and children.
func (r *completionRig) job(t *testing.T, st schedule.Type, expr string, children ...int64) int64 {
	t.Helper()
	var ids string
	for i, c := range children {
		if i > 0 {
			ids += ","
		}
		ids += strconv.FormatInt(c, 10)
	}
	id, err := r.s.jobs.insert(t.Context(), &jobRow{GroupID: 1, Name: "j", ScheduleType: st, ScheduleExpr: expr, Misfire: 1, Route: 1,
		Block: 1, RetryCount: 1, RetryBackoff: retryFixed, RetryIntervalMs: 10_000, GlueType: 1,
		Handler: "h", Status: jobRunning, ChildJobIDs: ids}, 1)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// handle hands the leader completions of job's fire scheduled at fireMs, one batch each, with
// increasing cursors: a status, or a status correcting another ("SUCCESS<RUNNING").
func (r *completionRig) handle(t *testing.T, job, fireMs int64, chain ...[2]logsv1.RunStatus) {
	t.Helper()
	for _, c := range chain {
		comp := &logsv1.Completion{Cursor: r.clk.Now().UnixMilli(), TriggerId: TriggerID(job, fireMs, 0, 0), JobId: job,
			Status: c[0], ReplacesStatus: c[1], ScheduledUnixMs: fireMs, EndUnixMs: fireMs + 50,
			TriggerType: schedulerv1.TriggerType_TRIGGER_TYPE_CRON, Params: "p"}
		if err := applyCompletions(t.Context(), r.s, []*logsv1.Completion{comp}); err != nil {
			t.Fatal(err)
		}
		r.clk.Advance(time.Millisecond)
	}
}

// pendingDue returns the due time of a pending fire, or false when there is none.
func (r *completionRig) pendingDue(t *testing.T, job, fireMs int64, attempt int32) (int64, bool) {
	t.Helper()
	var due int64
	err := storeDB(r.s).QueryRowContext(t.Context(), storeDB(r.s).Q(`SELECT due_ms FROM pending_fires WHERE job_id = $1 AND fire_ms = $2 AND attempt = $3`),
		job, fireMs, attempt).Scan(&due)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return due, true
}

// armed lists the fires armed in the ring for job, as (trigger type, attempt, due ms).
func (r *completionRig) armed(job int64) []string {
	var out []string
	for _, e := range r.l.ring.RemoveJob(job) {
		out = append(out, e.Value.trigType.String()+"/"+strconv.Itoa(int(e.Value.attempt))+"@"+strconv.FormatInt(e.FireAt, 10))
		r.l.ring.Add(e)
	}
	return out
}

func (r *completionRig) nextFire(t *testing.T, job int64) int64 {
	t.Helper()
	var next sql.NullInt64
	if err := storeDB(r.s).QueryRowContext(context.Background(), storeDB(r.s).Q(`SELECT next_fire_ms FROM job_state WHERE job_id = $1`), job).Scan(&next); err != nil {
		t.Fatal(err)
	}
	return next.Int64
}

var (
	stFail    = logsv1.RunStatus_RUN_STATUS_FAIL
	stTimeout = logsv1.RunStatus_RUN_STATUS_TIMEOUT
	stRunning = logsv1.RunStatus_RUN_STATUS_RUNNING
	stSuccess = logsv1.RunStatus_RUN_STATUS_SUCCESS
	stNone    = logsv1.RunStatus_RUN_STATUS_UNSPECIFIED
)

// TestCorrectionsDecideTheRetry: logsvc corrects a FAIL the executor's report overruled. The
// retry the FAIL stored is held while the run runs, dropped when it succeeded (its children fire
// then, once), and released after the backoff when it failed after all; a FAIL corrected by a
// failure keeps its retry as it was.
func TestCorrectionsDecideTheRetry(t *testing.T) {
	t.Parallel()
	r := newCompletionRig(t)
	child := r.job(t, schedule.None, "")
	parent := r.job(t, schedule.None, "", child)
	const fireMs = 1_699_999_000_000
	retryDue := r.clk.Now().Add(10 * time.Second).UnixMilli()

	// The false FAIL stores and arms the retry.
	r.handle(t, parent, fireMs, [2]logsv1.RunStatus{stFail, stNone})
	if due, ok := r.pendingDue(t, parent, fireMs, 1); !ok || due != retryDue {
		t.Fatalf("retry after the FAIL: due %d %v, want %d", due, ok, retryDue)
	}
	if got := r.armed(parent); len(got) != 1 {
		t.Fatalf("armed after the FAIL: %v, want the retry", got)
	}
	// The executor reports it running: the retry is held, out of the ring.
	r.handle(t, parent, fireMs, [2]logsv1.RunStatus{stRunning, stFail})
	if due, ok := r.pendingDue(t, parent, fireMs, 1); !ok || due != heldDueMs {
		t.Fatalf("retry after the RUNNING correction: due %d %v, want held", due, ok)
	}
	if got := r.armed(parent); len(got) != 0 {
		t.Fatalf("armed after the RUNNING correction: %v, want nothing", got)
	}
	// It succeeded: the retry is dropped and the child fires, once however often the
	// correction is handled (a new leader handles it again).
	r.handle(t, parent, fireMs, [2]logsv1.RunStatus{stSuccess, stRunning}, [2]logsv1.RunStatus{stSuccess, stRunning})
	if _, ok := r.pendingDue(t, parent, fireMs, 1); ok {
		t.Errorf("retry after the SUCCESS correction: still pending, want dropped")
	}
	if got := r.armed(parent); len(got) != 0 {
		t.Errorf("armed for the parent after the SUCCESS correction: %v, want nothing", got)
	}
	if _, ok := r.pendingDue(t, child, fireMs, 0); !ok {
		t.Errorf("child fire after the SUCCESS correction: none pending, want one")
	}
	if got := r.armed(child); len(got) != 1 || !strings.HasPrefix(got[0], "PARENT/") {
		t.Errorf("armed for the child: %v, want its PARENT fire", got)
	}

	// Held, then a failure after all: released, due after the backoff from now, and armed.
	const fire2 = fireMs + 1000
	r.handle(t, parent, fire2, [2]logsv1.RunStatus{stFail, stNone}, [2]logsv1.RunStatus{stRunning, stFail})
	r.clk.Advance(time.Minute)
	r.handle(t, parent, fire2, [2]logsv1.RunStatus{stTimeout, stRunning})
	want := r.clk.Now().Add(-time.Millisecond).Add(10 * time.Second).UnixMilli()
	if due, ok := r.pendingDue(t, parent, fire2, 1); !ok || due != want {
		t.Errorf("retry after the TIMEOUT correction: due %d %v, want %d", due, ok, want)
	}
	if got := r.armed(parent); len(got) != 1 || got[0] != "RETRY/1@"+strconv.FormatInt(want, 10) {
		t.Errorf("armed after the TIMEOUT correction: %v, want the retry at %d", got, want)
	}

	// A FAIL corrected straight to another failure: the retry stands as the FAIL stored it.
	const fire3 = fireMs + 2000
	r.handle(t, parent, fire3, [2]logsv1.RunStatus{stFail, stNone})
	due3, _ := r.pendingDue(t, parent, fire3, 1)
	r.handle(t, parent, fire3, [2]logsv1.RunStatus{stTimeout, stFail})
	if due, ok := r.pendingDue(t, parent, fire3, 1); !ok || due != due3 {
		t.Errorf("retry after a TIMEOUT correcting the FAIL: due %d %v, want %d as stored", due, ok, due3)
	}
	if _, ok := r.pendingDue(t, child, fire3, 0); ok {
		t.Errorf("child of a run that failed: pending, want none")
	}
}

// TestChildFireRetryLeavesTheFixDelaySchedule: a FIX_DELAY job fired as a child does not move its
// schedule, nor does the retry of that child fire, whose trigger type is RETRY.
func TestChildFireRetryLeavesTheFixDelaySchedule(t *testing.T) {
	t.Parallel()
	r := newCompletionRig(t)
	child := r.job(t, schedule.FixDelay, "30s")
	parent := r.job(t, schedule.None, "", child)
	const fireMs = 1_699_999_000_000
	r.handle(t, parent, fireMs, [2]logsv1.RunStatus{stSuccess, stNone})
	for attempt, tt := range []schedulerv1.TriggerType{schedulerv1.TriggerType_TRIGGER_TYPE_PARENT, schedulerv1.TriggerType_TRIGGER_TYPE_RETRY} {
		c := &logsv1.Completion{Cursor: r.clk.Now().UnixMilli(), JobId: child, Status: stFail, ScheduledUnixMs: fireMs, EndUnixMs: fireMs + 50,
			TriggerId: triggerid.ID{Job: child, ScheduledMs: fireMs, Attempt: int32(attempt), Parent: parent}.String(),
			Attempt:   int32(attempt), TriggerType: tt}
		if err := applyCompletions(t.Context(), r.s, []*logsv1.Completion{c}); err != nil {
			t.Fatal(err)
		}
		r.clk.Advance(time.Millisecond)
	}
	if next := r.nextFire(t, child); next != 0 {
		t.Errorf("next fire after the child fire's retry ended: %d, want none (its own schedule plans it)", next)
	}
	// The child's own run plans it (so the check above can fail).
	r.handle(t, child, fireMs+1000, [2]logsv1.RunStatus{stSuccess, stNone})
	if next := r.nextFire(t, child); next == 0 {
		t.Errorf("next fire after the child's own run: none, want one")
	}
}

// TestCorrectionPlansFixDelayOnce: a FIX_DELAY job's next fire is planned by the completion
// that ends its run without a retry: not by a FAIL that stores a retry, but by the correction
// that drops it; and not again by a correction after a FAIL that planned it.
func TestCorrectionPlansFixDelayOnce(t *testing.T) {
	t.Parallel()
	r := newCompletionRig(t)
	j := r.job(t, schedule.FixDelay, "30s")
	fireMs := r.clk.Now().UnixMilli() - 50 // its runs end now (handle: 50 ms after their fire)
	r.handle(t, j, fireMs, [2]logsv1.RunStatus{stFail, stNone})
	if next := r.nextFire(t, j); next != 0 {
		t.Fatalf("next fire after a FAIL with a retry: %d, want none (the retry's completion plans it)", next)
	}
	r.handle(t, j, fireMs, [2]logsv1.RunStatus{stSuccess, stFail})
	want := fireMs + 50 + 30_000 // 30 s after the run ended
	if next := r.nextFire(t, j); next != want {
		t.Errorf("next fire after the SUCCESS correction: %d, want %d", next, want)
	}
	if _, ok := r.pendingDue(t, j, fireMs, 1); ok {
		t.Errorf("retry after the SUCCESS correction: pending, want dropped")
	}
}

// TestChildFireHasAnIDOfItsOwn: a child fire takes its parent's scheduled time, which the child's
// own schedule has too. Its trigger id, pending row and ring entry name the parent, so it is not
// the child's own fire at that time, nor is its retry the retry of the child's own fire; the
// parent's completion handled twice (a new leader handles it again) gives the same child fire,
// armed once; a correction acts on the child fire's retry alone.
func TestChildFireHasAnIDOfItsOwn(t *testing.T) {
	t.Parallel()
	r := newCompletionRig(t)
	child := r.job(t, schedule.None, "")
	parent := r.job(t, schedule.None, "", child)
	const fireMs = 1_699_999_000_000
	own := func(attempt int32) string { return TriggerID(child, fireMs, 0, attempt) }
	ofParent := func(attempt int32) string {
		return triggerid.ID{Job: child, ScheduledMs: fireMs, Attempt: attempt, Parent: parent}.String()
	}
	pending := func() []string {
		t.Helper()
		rows, err := storeDB(r.s).QueryContext(t.Context(), storeDB(r.s).Q(`SELECT job_id, fire_ms, shard, attempt, parent_job_id
			FROM pending_fires WHERE job_id = $1 ORDER BY parent_job_id, attempt`), child)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var ids []string
		for rows.Next() {
			var k pendingKey
			if err := rows.Scan(&k.job, &k.fireMs, &k.shard, &k.attempt, &k.parent); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, k.triggerID())
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	armed := func() []string {
		var ids []string
		for _, e := range r.l.ring.RemoveJob(child) {
			ids = append(ids, e.Value.triggerID(0))
			r.l.ring.Add(e)
		}
		slices.Sort(ids)
		return ids
	}

	// The child's own fire at fireMs fails: its retry is stored.
	r.handle(t, child, fireMs, [2]logsv1.RunStatus{stFail, stNone})
	// The parent's run at fireMs succeeds, and its completion is handled twice.
	r.handle(t, parent, fireMs, [2]logsv1.RunStatus{stSuccess, stNone}, [2]logsv1.RunStatus{stSuccess, stNone})
	if got, want := pending(), []string{own(1), ofParent(0)}; !slices.Equal(got, want) {
		t.Fatalf("pending after the parent's success: %v, want %v", got, want)
	}
	// The child fire fails: its retry keeps the child fire's id form.
	childFail := func(st, replaces logsv1.RunStatus) {
		t.Helper()
		c := &logsv1.Completion{Cursor: r.clk.Now().UnixMilli(), TriggerId: ofParent(0), JobId: child, Status: st, ReplacesStatus: replaces,
			ScheduledUnixMs: fireMs, EndUnixMs: fireMs + 50, TriggerType: schedulerv1.TriggerType_TRIGGER_TYPE_PARENT}
		if err := applyCompletions(t.Context(), r.s, []*logsv1.Completion{c}); err != nil {
			t.Fatal(err)
		}
		r.clk.Advance(time.Millisecond)
	}
	childFail(stFail, stNone)
	if got, want := pending(), []string{own(1), ofParent(0), ofParent(1)}; !slices.Equal(got, want) {
		t.Fatalf("pending after the child fire failed: %v, want %v", got, want)
	}
	want := []string{own(1), ofParent(0), ofParent(1)}
	slices.Sort(want)
	if got := armed(); !slices.Equal(got, want) {
		t.Errorf("armed: %v, want %v, each once", got, want)
	}
	// The child fire succeeded after all: its retry is dropped, the child's own retry stays.
	childFail(stSuccess, stFail)
	if got, want := pending(), []string{own(1), ofParent(0)}; !slices.Equal(got, want) {
		t.Errorf("pending after the child fire's SUCCESS correction: %v, want %v", got, want)
	}
	want = []string{own(1), ofParent(0)}
	slices.Sort(want)
	if got := armed(); !slices.Equal(got, want) {
		t.Errorf("armed after the child fire's SUCCESS correction: %v, want %v", got, want)
	}
}

// TestCompletionsActOnlyForLedPartitions: a replica acts on the completions of the partitions
// it leads, under each one's fence, and advances only their cursors; a partition whose fence a
// newer leader holds is deposed and the batch is applied without it.
func TestCompletionsActOnlyForLedPartitions(t *testing.T) {
	t.Parallel()
	r := newCompletionRig(t)
	ctx := t.Context()
	// Two partitions; this replica leads partition 0 only (the rig's engine).
	r.s.count.Store(2)
	even, odd := r.evenAndOddJobs(t)
	fireMs := r.clk.Now().UnixMilli()
	failed := func(job int64, cursor int64) *logsv1.Completion { return failedCompletion(job, fireMs, cursor) }
	if err := applyCompletions(ctx, r.s, []*logsv1.Completion{failed(even, 10), failed(odd, 11)}); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.pendingDue(t, even, fireMs, 1); !ok {
		t.Error("partition 0's failed fire got no retry")
	}
	if _, ok := r.pendingDue(t, odd, fireMs, 1); ok {
		t.Error("partition 1's failed fire got a retry from a replica that does not lead it")
	}
	cursors := func() map[int]int64 { return storedCursors(t, r.s) }
	if got := cursors(); len(got) != 1 || got[0] != 11 {
		t.Errorf("cursors %v, want partition 0 at 11 only", got)
	}

	// A newer leader raises partition 0's fence: the next batch deposes the engine, writes
	// nothing, and returns.
	if err := r.s.jobs.raiseFence(ctx, 0, 2, "r2"); err != nil {
		t.Fatal(err)
	}
	if err := applyCompletions(ctx, r.s, []*logsv1.Completion{failed(even, 12)}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.l.deposed:
	default:
		t.Error("the engine of a partition whose fence a newer leader holds was not deposed")
	}
	if got := cursors(); got[0] != 11 {
		t.Errorf("partition 0's cursor %d after it was deposed, want 11", got[0])
	}
}

// TestBusyFenceHoldsBackOnlyItsPartition: a batch does not wait for a partition whose fence
// another transaction holds (a pre-read): it acts on the others' completions and carries that
// partition's to the next batch, leaving its cursor where it was.
func TestBusyFenceHoldsBackOnlyItsPartition(t *testing.T) {
	t.Parallel()
	r := newCompletionRig(t)
	ctx := t.Context()
	r.s.count.Store(2)
	odd := &engine{s: r.s, part: 1, epoch: 1, ring: ring.New(r.clk, func([]ringEntry) {}), owed: newOwed(), deposed: make(chan struct{})}
	r.s.engines[1] = odd
	if err := r.s.jobs.raiseFence(ctx, 1, 1, "r1"); err != nil {
		t.Fatal(err)
	}
	evenJob, oddJob := r.evenAndOddJobs(t)
	fireMs := r.clk.Now().UnixMilli()
	failed := func(job int64, cursor int64) *logsv1.Completion { return failedCompletion(job, fireMs, cursor) }
	// Another transaction holds partition 1's fence, as a pre-read does while it runs.
	busy, err := storeDB(r.s).BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Rollback()
	if _, err := busy.ExecContext(ctx, `SELECT 1 FROM partition_fence WHERE part = 1 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	carry, err := r.s.handleCompletions(ctx, []*logsv1.Completion{failed(evenJob, 10), failed(oddJob, 11)}, 0, 11)
	if err != nil {
		t.Fatal(err)
	}
	if len(carry) != 1 || carry[0].GetJobId() != oddJob {
		t.Fatalf("carried %v; want the busy partition's one completion", carry)
	}
	if _, ok := r.pendingDue(t, evenJob, fireMs, 1); !ok {
		t.Error("partition 0's failed fire got no retry while partition 1's fence was busy")
	}
	if _, ok := r.pendingDue(t, oddJob, fireMs, 1); ok {
		t.Error("partition 1's failed fire got a retry while its fence was held by another transaction")
	}
	// Its cursor stays before the carried completion (so a restarted stream reads it again),
	// and its stored cursor is not written.
	if c, held := odd.cursor.Load(), odd.streamPos(); c != 10 || held != 11 {
		t.Errorf("partition 1 at cursor %d, stream position %d; want 10 and 11", c, held)
	}
	if c := r.l.cursor.Load(); c != 11 {
		t.Errorf("partition 0 at cursor %d; want 11", c)
	}
	if got := storedCursors(t, r.s); got[0] != 11 || got[1] != 0 {
		t.Errorf("stored cursors %v; want partition 0 at 11, none for partition 1", got)
	}

	// The fence is free again: the carried completion is acted on.
	if err := busy.Rollback(); err != nil {
		t.Fatal(err)
	}
	if carry, err = r.s.handleCompletions(ctx, carry, 11, 11); err != nil || len(carry) != 0 {
		t.Fatalf("applying the carried completion: carried %v, %v", carry, err)
	}
	if _, ok := r.pendingDue(t, oddJob, fireMs, 1); !ok {
		t.Error("partition 1's failed fire got no retry once its fence was free")
	}
	if c, held := odd.cursor.Load(), odd.streamPos(); c != 11 || held != 11 {
		t.Errorf("partition 1 at cursor %d, stream position %d; want 11 and 11", c, held)
	}

	// A busy partition whose batch has nothing to act on, only a cursor to save, is not written
	// either: a cursor is written only under its partition's fence.
	lock := func() *sql.Tx {
		t.Helper()
		tx, err := storeDB(r.s).BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback() })
		if _, err := tx.ExecContext(ctx, `SELECT 1 FROM partition_fence WHERE part = 1 FOR UPDATE`); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	busy = lock()
	odd.cursorSavedMs.Store(0) // due a save
	if carry, err = r.s.handleCompletions(ctx, []*logsv1.Completion{failed(evenJob, 12)}, 11, 12); err != nil || len(carry) != 0 {
		t.Fatalf("a batch with partition 1's cursor to save: carried %v, %v", carry, err)
	}
	if got := storedCursors(t, r.s); got[0] != 12 || got[1] != 11 {
		t.Errorf("stored cursors %v; want partition 0 at 12, partition 1 still at 11", got)
	}
	if c := odd.cursor.Load(); c != 12 {
		t.Errorf("partition 1 at cursor %d; want 12 (nothing of it was held back)", c)
	}

	// A partition held back for maxCarry waits for its fence: a partition scanned again at
	// once leaves its fence free for a moment only.
	r.clk.Advance(time.Minute)
	fireMs = r.clk.Now().UnixMilli()
	if carry, err = r.s.handleCompletions(ctx, []*logsv1.Completion{failed(oddJob, 13)}, 12, 13); err != nil || len(carry) != 1 {
		t.Fatalf("partition 1's fence busy: carried %v, %v; want its completion", carry, err)
	}
	odd.carriedSince.Store(time.Now().Add(-maxCarry).UnixNano()) // held back that long
	type result struct {
		carry []*logsv1.Completion
		err   error
	}
	done := make(chan result, 1)
	go func() {
		c, err := r.s.handleCompletions(ctx, carry, 13, 13)
		done <- result{c, err}
	}()
	waitForLockWait(t, storeDB(r.s))
	if err := busy.Rollback(); err != nil {
		t.Fatal(err)
	}
	if res := <-done; res.err != nil || len(res.carry) != 0 {
		t.Fatalf("after waiting for the fence: carried %v, %v; want nothing", res.carry, res.err)
	}
	if _, ok := r.pendingDue(t, oddJob, fireMs, 1); !ok {
		t.Error("partition 1's failed fire got no retry after its batch waited for the fence")
	}
	if c, held := odd.cursor.Load(), odd.streamPos(); c != 13 || held != 13 || odd.carriedSince.Load() != 0 {
		t.Errorf("partition 1 at cursor %d, stream position %d, held back since %d; want 13, 13, 0", c, held, odd.carriedSince.Load())
	}
}

// TestEngineBehindTheStreamIsLeftOut: an engine whose cursor is below where the stream was
// before a batch (it became ready with the stream past it) is left out of the batch, rather
// than moved past the completions the stream gave before it joined: the stream restarts for it.
func TestEngineBehindTheStreamIsLeftOut(t *testing.T) {
	t.Parallel()
	r := newCompletionRig(t)
	ctx := t.Context()
	job := r.job(t, schedule.FixRate, "1m")
	fireMs := r.clk.Now().UnixMilli()
	r.l.cursor.Store(5)
	if carry, err := r.s.handleCompletions(ctx, []*logsv1.Completion{failedCompletion(job, fireMs, 20)}, 10, 20); err != nil || len(carry) != 0 {
		t.Fatalf("carried %v, %v", carry, err)
	}
	if _, ok := r.pendingDue(t, job, fireMs, 1); ok {
		t.Error("an engine behind the stream acted on a batch that does not hold its earlier completions")
	}
	if got := r.l.cursor.Load(); got != 5 {
		t.Errorf("cursor %d; want 5, where it was", got)
	}
	if !r.s.behindStream(20) {
		t.Error("behindStream(20) with an engine at 5: want true (the stream restarts for it)")
	}

	// A stream whose start logsvc did not say (at -1) is followed only by engines that never
	// followed completions: one with a cursor restarts it from there.
	if carry, err := r.s.handleCompletions(ctx, []*logsv1.Completion{failedCompletion(job, fireMs, 20)}, -1, 20); err != nil || len(carry) != 0 {
		t.Fatalf("carried %v, %v", carry, err)
	}
	if got := r.l.cursor.Load(); got != 5 {
		t.Errorf("cursor %d after a batch of a stream that started somewhere unknown; want 5", got)
	}
	r.l.cursor.Store(0)
	if carry, err := r.s.handleCompletions(ctx, []*logsv1.Completion{failedCompletion(job, fireMs, 20)}, -1, 20); err != nil || len(carry) != 0 {
		t.Fatalf("carried %v, %v", carry, err)
	}
	if _, ok := r.pendingDue(t, job, fireMs, 1); !ok || r.l.cursor.Load() != 20 {
		t.Errorf("an engine that never followed completions, on a stream from logsvc's newest: retry stored %v, cursor %d; want true, 20",
			ok, r.l.cursor.Load())
	}
}

// evenAndOddJobs creates jobs (FIX_RATE, one retry) until it has one of an even id and one of
// an odd id: with two partitions, one of each.
func (r *completionRig) evenAndOddJobs(t *testing.T) (even, odd int64) {
	t.Helper()
	for even == 0 || odd == 0 {
		id := r.job(t, schedule.FixRate, "1m")
		if id%2 == 0 {
			even = id
		} else {
			odd = id
		}
	}
	return even, odd
}

// failedCompletion is the FAIL of job's CRON fire at fireMs, at cursor.
func failedCompletion(job, fireMs, cursor int64) *logsv1.Completion {
	return &logsv1.Completion{Cursor: cursor, TriggerId: TriggerID(job, fireMs, 0, 0), JobId: job,
		Status: logsv1.RunStatus_RUN_STATUS_FAIL, ScheduledUnixMs: fireMs, EndUnixMs: fireMs + 50,
		TriggerType: schedulerv1.TriggerType_TRIGGER_TYPE_CRON}
}

// storedCursors reads partition_cursor: each partition's saved completion cursor.
func storedCursors(t *testing.T, s *Service) map[int]int64 {
	t.Helper()
	rows, err := storeDB(s).QueryContext(t.Context(), `SELECT part, cursor FROM partition_cursor`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int]int64{}
	for rows.Next() {
		var p int
		var c int64
		if err := rows.Scan(&p, &c); err != nil {
			t.Fatal(err)
		}
		out[p] = c
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// waitForLockWait returns once a session of the test's database waits for a lock.
func waitForLockWait(t *testing.T, d *db.DB) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		var n int
		if err := d.QueryRowContext(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		select {
		case <-t.Context().Done():
			t.Fatal("no session waits for a lock")
		case <-tick.C:
		}
	}
}

// storeDB is the database under s's store, for tests that look at its tables.
func storeDB(s *Service) *db.DB { return s.jobs.(store).db }

// TestEngineLeftOutOfABatchRestartsTheStream: a partition's engine that becomes ready while a
// batch is applied (its takeover read its cursor after the batch took the engines it concerns)
// is left out of that batch, and the stream has moved past it: behindStream says so, the
// stream restarts from the engine's cursor, and the batch applied again acts on the
// partition's completion once. An ending engine left behind restarts nothing.
func TestEngineLeftOutOfABatchRestartsTheStream(t *testing.T) {
	t.Parallel()
	r := newCompletionRig(t)
	ctx := t.Context()
	r.s.count.Store(2)
	var odd int64
	for odd == 0 {
		if id := r.job(t, schedule.FixRate, "1m"); id%2 == 1 {
			odd = id
		}
	}
	if err := r.s.jobs.raiseFence(ctx, 1, 1, "r1"); err != nil {
		t.Fatal(err)
	}
	// Partition 1's engine is taking over: its cursor is not read yet.
	l1 := &engine{s: r.s, part: 1, epoch: 1, ring: ring.New(r.clk, func([]ringEntry) {}), owed: newOwed(), deposed: make(chan struct{})}
	l1.cursor.Store(-1)
	r.s.mu.Lock()
	r.s.engines[1] = l1
	r.s.mu.Unlock()
	fireMs := r.clk.Now().UnixMilli()
	batch := []*logsv1.Completion{{Cursor: 10, TriggerId: TriggerID(odd, fireMs, 0, 0), JobId: odd,
		Status: logsv1.RunStatus_RUN_STATUS_FAIL, ScheduledUnixMs: fireMs, EndUnixMs: fireMs + 50,
		TriggerType: schedulerv1.TriggerType_TRIGGER_TYPE_CRON}}
	if err := applyCompletions(ctx, r.s, batch); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.pendingDue(t, odd, fireMs, 1); ok {
		t.Fatal("a partition whose engine was not ready got a retry")
	}
	if r.s.behindStream(10) {
		t.Fatal("behindStream with no engine behind the stream")
	}
	// Its takeover ends during the batch: its stored cursor is before the batch.
	l1.cursor.Store(5)
	if !r.s.behindStream(10) {
		t.Fatal("an engine left out of the batch does not restart the stream")
	}
	if err := applyCompletions(ctx, r.s, batch); err != nil { // the restarted stream's first batch
		t.Fatal(err)
	}
	if _, ok := r.pendingDue(t, odd, fireMs, 1); !ok {
		t.Error("the batch applied again did not retry partition 1's failed fire")
	}
	if r.s.behindStream(10) {
		t.Error("behindStream once every engine has applied the batch")
	}
	// An ending engine behind the stream restarts nothing.
	l1.cursor.Store(5)
	close(l1.deposed)
	if r.s.behindStream(10) {
		t.Error("a deposed engine behind the stream restarts it")
	}
}

// TestCompletionStartPassesOverPartitionsThatNeverActed: the completion stream starts at the
// lowest cursor of the ready engines, but an engine at cursor 0 (its partition never acted on
// a completion) does not send it to logsvc's newest completion past what the others have yet
// to act on; only engines all at 0 start it there. An engine whose 0 means every completion
// (its partition began following when logsvc had none) starts it at the oldest.
func TestCompletionStartPassesOverPartitionsThatNeverActed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		cursors []int64
		all     int // index of the engine whose 0 is every completion; -1 for none
		from    int64
		oldest  bool
		ok      bool
	}{
		{"none ready", []int64{-1, -1}, -1, 0, false, false},
		{"all never acted", []int64{0, -1, 0}, -1, 0, false, true},
		{"lowest acted", []int64{700, 0, 500, -1}, -1, 500, false, true},
		{"never acted first", []int64{0, 900}, -1, 900, false, true},
		{"every completion among others", []int64{700, 0, 500}, 1, 0, true, true},
		{"every completion alone", []int64{0}, 0, 0, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Service{engines: map[int]*engine{}}
			for p, c := range tc.cursors {
				l := &engine{part: p, all: p == tc.all}
				l.cursor.Store(c)
				s.engines[p] = l
			}
			// Map order varies: ask often enough to meet every order of a few engines.
			for range 20 {
				if from, oldest, ok := s.completionStart(false); from != tc.from || oldest != tc.oldest || ok != tc.ok {
					t.Fatalf("completionStart(false) = %d, %v, %v; want %d, %v, %v", from, oldest, ok, tc.from, tc.oldest, tc.ok)
				}
			}
		})
	}
}

// TestCompletionsCarriedCountInALiveStream: a partition whose completions the follower holds
// back (its fence was busy) is not behind the live stream, but a new session starts from its
// cursor, which has not moved.
func TestCompletionsCarriedCountInALiveStream(t *testing.T) {
	s := &Service{engines: map[int]*engine{}}
	for p, c := range []int64{500, 900} {
		l := &engine{part: p, deposed: make(chan struct{})}
		l.cursor.Store(c)
		s.engines[p] = l
	}
	s.engines[0].carriedTo.Store(900)
	if from, _, _ := s.completionStart(false); from != 500 {
		t.Errorf("a new session starts after %d; want 500, the carried partition's cursor", from)
	}
	if from, _, _ := s.completionStart(true); from != 900 {
		t.Errorf("the live stream's engines are at %d; want 900", from)
	}
	if s.behindStream(900) {
		t.Error("behindStream(900) with the partition at 500 carried to 900: want false")
	}
	s.dropCarried()
	if !s.behindStream(900) {
		t.Error("behindStream(900) once the carried completions are dropped: want true")
	}
}

// TestGatherCompletionsTakesWhatArrived: the completion messages that arrived while a batch was
// applied make the next batch, in order, up to the cap; none is waited for.
func TestGatherCompletionsTakesWhatArrived(t *testing.T) {
	t.Parallel()
	msg := func(from, n int64) []*logsv1.Completion {
		var cs []*logsv1.Completion
		for c := from; c < from+n; c++ {
			cs = append(cs, &logsv1.Completion{Cursor: c})
		}
		return cs
	}
	cursors := func(cs []*logsv1.Completion) []int64 {
		var out []int64
		for _, c := range cs {
			out = append(out, c.GetCursor())
		}
		return out
	}
	msgs := make(chan []*logsv1.Completion, 4)
	msgs <- msg(3, 2)
	msgs <- msg(5, 3)
	msgs <- msg(8, 1)
	got := gatherCompletions(msg(1, 2), msgs, 6)
	if want := []int64{1, 2, 3, 4, 5, 6, 7}; !slices.Equal(cursors(got), want) {
		t.Fatalf("gathered %v, want %v (messages up to the cap of 6, whole)", cursors(got), want)
	}
	if got := gatherCompletions(nil, msgs, 6); !slices.Equal(cursors(got), []int64{8}) {
		t.Fatalf("next gather %v, want [8]", cursors(got))
	}
	if got := gatherCompletions(msg(9, 1), msgs, 6); !slices.Equal(cursors(got), []int64{9}) {
		t.Fatalf("with nothing queued: %v, want [9] at once", cursors(got))
	}
}

// applyCompletions applies a batch of completions as the follower does, carrying what a busy
// fence held back into the next batch until nothing is held back.
// (A partition held back for maxCarry waits for its fence, so this ends.)
func applyCompletions(ctx context.Context, s *Service, cs []*logsv1.Completion) error {
	at, upTo := int64(0), cs[len(cs)-1].GetCursor()
	for round := 0; len(cs) > 0; round++ {
		if round == 1000 {
			return fmt.Errorf("completions still held back after %d batches: %d", round, len(cs))
		}
		carry, err := s.handleCompletions(ctx, cs, at, upTo)
		if err != nil {
			return err
		}
		cs, at = carry, upTo
	}
	return nil
}
