package scheduler

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/triggerid"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/partition"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/schedule"
)

// maxBackoff caps exponential retry backoff.
const maxBackoff = time.Hour

// completionFollower is the replica's one stream of logsvc's completions, shared by its
// engines: each partition's completions are acted on under that partition's fence and advance
// that partition's cursor, so a partition's next leader resumes where its previous one stopped.
// The stream starts at the lowest cursor of the engines led; an engine that joins with a lower
// one (a partition just taken over) restarts it from there, and the completions an engine has
// acted on already are passed over.
type completionFollower struct {
	wakeC chan struct{}
	// at is the cursor of the last batch received (0 before the first).
	at atomic.Int64
}

func newCompletionFollower() *completionFollower {
	return &completionFollower{wakeC: make(chan struct{}, 1)}
}

// wake tells the follower that the set of engines, or a cursor, changed.
func (f *completionFollower) wake() {
	select {
	case f.wakeC <- struct{}{}:
	default:
	}
}

// errRestart: an engine needs completions from before the stream's position.
var errRestart = errors.New("completion stream restarts for a partition taken over")

// followCompletions follows logsvc's completion stream while this replica leads any partition,
// and acts on every run that ends: retries, child jobs and the next FIX_DELAY fire.
func (s *Service) followCompletions(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		from, ok := s.completionStart()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-s.completions.wakeC:
			}
			continue
		}
		err := s.completionSession(ctx, from)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, errRestart):
			backoff = 100 * time.Millisecond
			continue
		}
		s.log.Warn("completion stream broken; reconnecting", "error", err)
		if s.wait(ctx, backoff) != nil {
			return
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// completionStart returns the lowest cursor of the engines ready for completions; false when
// there are none.
func (s *Service) completionStart() (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	from, ok := int64(0), false
	for _, l := range s.engines {
		if c := l.cursor.Load(); c >= 0 && (!ok || c < from) {
			from, ok = c, true
		}
	}
	return from, ok
}

func (s *Service) completionSession(ctx context.Context, from int64) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	st, err := s.logs.WatchCompletions(ctx, &logsv1.WatchCompletionsRequest{AfterCursor: from})
	if err != nil {
		return err
	}
	s.completions.at.Store(from)
	go func() { // an engine that needs older completions restarts the stream
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.completions.wakeC:
				if c, ok := s.completionStart(); ok && c < s.completions.at.Load() {
					cancel(errRestart)
					return
				}
			}
		}
	}()
	for {
		resp, err := st.Recv()
		if err != nil {
			if cause := context.Cause(ctx); errors.Is(cause, errRestart) {
				return cause
			}
			return err
		}
		cs := resp.GetCompletions()
		if len(cs) == 0 {
			continue
		}
		if err := s.handleCompletions(ctx, cs); err != nil {
			return err
		}
		s.completions.at.Store(cs[len(cs)-1].GetCursor())
	}
}

// handleCompletions applies one batch for the partitions this replica leads, in one transaction
// fenced by each of them: schedule changes, the retries and child fires it decides on (as pending
// fires) and the partitions' cursors. After the commit it arms those fires; if this replica
// loses a partition first, its next leader finds them in pending_fires. A partition whose fence a
// newer leader holds is deposed, and the batch applied again without it. A batch that lost a
// race with another transaction (errRetryable) is applied again, up to maxCompletionRetries
// times, rather than restart the completion stream.
func (s *Service) handleCompletions(ctx context.Context, cs []*logsv1.Completion) error {
	retries := 0
	for {
		err := s.handleCompletionsOnce(ctx, cs)
		if errors.Is(err, errRetryable) && retries < maxCompletionRetries && ctx.Err() == nil {
			retries++
			s.log.Warn("completion batch lost a race with another transaction; applying it again", "error", err)
			continue
		}
		var d deposedError
		if !errors.As(err, &d) {
			return err
		}
		for _, l := range d.engines {
			l.depose()
		}
	}
}

// maxCompletionRetries is how often handleCompletions applies a batch again that lost a race.
const maxCompletionRetries = 3

// deposedError names the engines a completion batch found deposed.
type deposedError struct{ engines []*engine }

func (e deposedError) Error() string {
	return fmt.Sprintf("%d partitions: %v", len(e.engines), errDeposed)
}
func (e deposedError) Unwrap() error { return errDeposed }

func (s *Service) handleCompletionsOnce(ctx context.Context, cs []*logsv1.Completion) error {
	last := cs[len(cs)-1].GetCursor()
	// The engines this batch concerns: ready (the takeover read their cursor) and behind it.
	s.mu.Lock()
	byPart := make(map[int]*engine, len(s.engines))
	from := make(map[int]int64, len(s.engines))
	var terms []term
	for p, l := range s.engines {
		if c := l.cursor.Load(); c >= 0 && c < last && !l.ending() {
			byPart[p], from[p] = l, c
			terms = append(terms, l.term())
		}
	}
	s.mu.Unlock()
	if len(terms) == 0 {
		return nil
	}
	var mine []*logsv1.Completion
	for _, c := range cs {
		p := partition.PartitionOf(c.GetJobId(), s.partCount())
		if l := byPart[p]; l != nil && c.GetCursor() > from[p] {
			mine = append(mine, c)
		}
	}
	tx, err := s.jobs.begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	// One read of the batch's jobs that act on a completion (children, retries, FIX_DELAY): most
	// completions ask nothing, and a batch that asks nothing writes nothing. Reads need no fence.
	ids := make([]int64, 0, len(mine))
	for _, c := range mine {
		ids = append(ids, c.GetJobId())
	}
	acting, err := s.jobs.getActing(ctx, tx, ids)
	if err != nil {
		return err
	}
	// The partitions to fence: those whose completions ask something (their cursors are saved
	// with what they ask, so a next leader never acts on them twice), and those whose saved
	// cursor is older than cursorSaveEvery (so that a next leader reads back little).
	now := s.clk.Now().UnixMilli()
	fenced := map[int]bool{}
	var act []*logsv1.Completion
	for _, c := range mine {
		if acting[c.GetJobId()] != nil {
			act = append(act, c)
			fenced[partition.PartitionOf(c.GetJobId(), s.partCount())] = true
		}
	}
	terms = terms[:0]
	for p, l := range byPart {
		if fenced[p] || now-l.cursorSavedMs.Load() >= cursorSaveEvery.Milliseconds() {
			fenced[p] = true
			terms = append(terms, l.term())
		}
	}
	if len(terms) > 0 {
		if deposed, err := s.jobs.fenceAll(ctx, tx, terms, s.cfg.ReplicaID); err != nil {
			if !errors.Is(err, errDeposed) {
				return err
			}
			var d deposedError
			for _, p := range deposed {
				d.engines = append(d.engines, byPart[p])
			}
			return d
		}
	}
	after, err := s.actOnCompletions(ctx, tx, byPart, act, acting)
	if err != nil {
		return err
	}
	if len(terms) > 0 {
		if err := s.jobs.saveCursors(ctx, tx, terms, last); err != nil {
			return err
		}
	}
	if err := s.jobs.commit(tx); err != nil {
		return fmt.Errorf("completions: %w", err)
	}
	for p, l := range byPart {
		l.cursor.Store(last)
		if fenced[p] {
			l.cursorSavedMs.Store(now)
		}
	}
	for _, f := range after {
		f()
	}
	return nil
}

// cursorSaveEvery bounds how long a partition's saved completion cursor may lag the completions
// its leader has read when none of them asked anything: a next leader reads those again and
// finds nothing to do in them.
const cursorSaveEvery = 5 * time.Second

// actOnCompletions decides, inside the fenced tx, what each completion asks of the scheduler,
// and returns what arms or disarms fires after the commit. byPart are the engines of the
// completions' partitions, jobs the completions' jobs that act on completions.
func (s *Service) actOnCompletions(ctx context.Context, tx *sql.Tx, byPart map[int]*engine, cs []*logsv1.Completion,
	jobs map[int64]*jobRow) ([]func(), error) {
	if len(cs) == 0 {
		return nil, nil
	}
	// jobs are the batch's jobs that act on a completion, read in one query (a completion per
	// fire: one query each cost a round trip per fire); their child jobs are read after it. A
	// job that is not among them (no children, no retries, not FIX_DELAY; or deleted) asks
	// nothing.
	var childIDs []int64
	for _, c := range cs {
		if j := jobs[c.GetJobId()]; j != nil && c.GetStatus() == logsv1.RunStatus_RUN_STATUS_SUCCESS {
			for _, id := range splitIDs(j.ChildJobIDs) {
				if jobs[id] == nil {
					childIDs = append(childIDs, id)
				}
			}
		}
	}
	children, err := s.jobs.getMany(ctx, tx, childIDs)
	if err != nil {
		return nil, err
	}
	var after []func()
	for _, c := range cs {
		j := jobs[c.GetJobId()]
		if j == nil {
			continue // nothing to do for its completions, or deleted meanwhile
		}
		l := byPart[partition.PartitionOf(j.ID, s.partCount())]
		if c.GetReplacesStatus() != logsv1.RunStatus_RUN_STATUS_UNSPECIFIED {
			then, err := s.correct(ctx, tx, l, j, c, jobs, children)
			if err != nil {
				return nil, err
			}
			after = append(after, then...)
			continue
		}
		ok := c.GetStatus() == logsv1.RunStatus_RUN_STATUS_SUCCESS
		// A killed run is not retried, nor a skipped misfire (it did not run: its strategy said so).
		retry := !ok && c.GetStatus() != logsv1.RunStatus_RUN_STATUS_KILLED && c.GetStatus() != logsv1.RunStatus_RUN_STATUS_SKIPPED &&
			c.GetAttempt() < j.RetryCount
		switch {
		case retry:
			f := pendingRetry(j, c)
			due := s.clk.Now().Add(retryWait(j, c.GetAttempt())).UnixMilli()
			if err := s.jobs.addPending(ctx, tx, f, due); err != nil {
				return nil, err
			}
			after = append(after, func() { s.armPending(l, f, due) })
		case ok:
			then, err := s.fireChildren(ctx, tx, l, j, c, jobs, children)
			if err != nil {
				return nil, err
			}
			after = append(after, then...)
		}
		if !retry {
			if err := s.planFixDelay(ctx, tx, j, c); err != nil {
				return nil, err
			}
		}
	}
	return after, nil
}

// planFixDelay schedules the next fire of a running FIX_DELAY job one interval after its
// scheduled run c ended (a manual, API or parent-job run does not move its schedule, nor does
// the retry of a parent-job run: its trigger id names the parent). The next fire is planned
// once: only while none is.
func (s *Service) planFixDelay(ctx context.Context, tx *sql.Tx, j *jobRow, c *logsv1.Completion) error {
	if j.ScheduleType != schedule.FixDelay || j.Status != jobRunning ||
		c.GetTriggerType() == schedulerv1.TriggerType_TRIGGER_TYPE_MANUAL || c.GetTriggerType() == schedulerv1.TriggerType_TRIGGER_TYPE_API ||
		c.GetTriggerType() == schedulerv1.TriggerType_TRIGGER_TYPE_PARENT {
		return nil
	}
	if id, _ := triggerid.Parse(c.GetTriggerId()); id.Parent != 0 {
		return nil
	}
	sch, err := parseSchedule(j)
	if err != nil {
		return nil
	}
	next := max(c.GetEndUnixMs(), s.clk.Now().UnixMilli()) + sch.Interval().Milliseconds()
	return s.jobs.planNextFire(ctx, tx, j.ID, next)
}

// fireChildren stores the PARENT fires of j's child jobs for its successful completion c, and
// returns what arms them after the commit. jobs and children are the batch's jobs read.
func (s *Service) fireChildren(ctx context.Context, tx *sql.Tx, l *engine, j *jobRow, c *logsv1.Completion,
	jobs, children map[int64]*jobRow) ([]func(), error) {
	var after []func()
	for _, childID := range splitIDs(j.ChildJobIDs) {
		if childID == j.ID {
			continue
		}
		child := jobs[childID]
		if child == nil {
			child = children[childID]
		}
		if child == nil {
			s.log.Warn("child job not fired: it no longer exists", "job_id", j.ID, "child_job_id", childID)
			continue
		}
		if child.GroupID != j.GroupID {
			// Linked before it moved (or written around the API): a parent's success runs only
			// its own group's jobs.
			s.log.Warn("child job not fired: it is in another executor group", "job_id", j.ID,
				"group_id", j.GroupID, "child_job_id", childID, "child_group_id", child.GroupID)
			continue
		}
		// The child's scheduled time is the parent's and its id names the parent, so its trigger
		// id is the same however often this completion is handled, and not the id of the child's
		// own fire at that time.
		f := &fire{job: child, fireMs: c.GetScheduledUnixMs(), parent: j.ID, trigType: schedulerv1.TriggerType_TRIGGER_TYPE_PARENT}
		due := s.clk.Now().UnixMilli()
		if err := s.jobs.addPending(ctx, tx, f, due); err != nil {
			return nil, err
		}
		after = append(after, func() { s.armOnLeader(f, due) })
	}
	return after, nil
}

// heldDueMs is the due time of a retry held back: never due, so no pre-read or takeover arms it.
const heldDueMs = math.MaxInt64

// correct acts on a completion that corrects the run's previous one (logsvc reopened a run it
// had ended without the executor's word, once): the previous was a FAIL, or the RUNNING that
// retracted it. The FAIL may have stored a retry (attempt+1, in pending_fires); the truth
// decides it, as far as it has not been dispatched yet:
//   - RUNNING: the run runs after all. Its retry is held back (never due) until the run ends.
//   - SUCCESS: its retry is dropped, and its child jobs fire (their trigger ids are
//     deterministic, so a child is fired once however often this is handled).
//   - KILLED: its retry is dropped (a killed run is not retried).
//   - FAIL or TIMEOUT: a failure after all. A retry held back is due after the job's backoff
//     from now; one never held stands as the FAIL stored it.
//
// A retry already dispatched when the correction comes has run: the executor's report came too
// late to stop it. A FIX_DELAY job's next fire is planned by the run's last completion that
// calls for no retry: the FAIL when it had none to call for, else the retry's own completion,
// or the correction that drops the retry. It returns what arms or disarms fires after the
// commit.
func (s *Service) correct(ctx context.Context, tx *sql.Tx, l *engine, j *jobRow, c *logsv1.Completion,
	jobs, children map[int64]*jobRow) ([]func(), error) {
	retry := pendingRetry(j, c)
	k := retry.key()
	disarm := func() { s.disarmPending(l, k) }
	switch st := c.GetStatus(); st {
	case logsv1.RunStatus_RUN_STATUS_RUNNING:
		held, err := s.jobs.setPendingDue(ctx, tx, k, heldDueMs, 0)
		if err != nil || !held {
			return nil, err
		}
		s.log.Info("retry held back: the executor reports the run it was for as running", "trigger_id", c.GetTriggerId(),
			"retry_trigger_id", k.triggerID())
		return []func(){disarm}, nil
	case logsv1.RunStatus_RUN_STATUS_SUCCESS, logsv1.RunStatus_RUN_STATUS_KILLED:
		dropped, err := s.jobs.dropPending(ctx, tx, k)
		if err != nil {
			return nil, err
		}
		var after []func()
		if dropped {
			s.log.Info("retry dropped: the executor's report corrects the failure it was for", "trigger_id", c.GetTriggerId(),
				"retry_trigger_id", k.triggerID(), "status", st.String())
			after = append(after, disarm)
			if err := s.planFixDelay(ctx, tx, j, c); err != nil { // the retry would have
				return nil, err
			}
		}
		if st == logsv1.RunStatus_RUN_STATUS_SUCCESS {
			then, err := s.fireChildren(ctx, tx, l, j, c, jobs, children)
			if err != nil {
				return nil, err
			}
			after = append(after, then...)
		}
		return after, nil
	default:
		if c.GetReplacesStatus() != logsv1.RunStatus_RUN_STATUS_RUNNING {
			return nil, nil // the FAIL's retry stands
		}
		due := s.clk.Now().Add(retryWait(j, c.GetAttempt())).UnixMilli()
		released, err := s.jobs.setPendingDue(ctx, tx, k, due, heldDueMs)
		if err != nil || !released {
			return nil, err
		}
		return []func(){func() { s.armPending(l, retry, due) }}, nil
	}
}

// disarmPending takes a pending fire out of this leadership's ring, if it is armed there.
func (s *Service) disarmPending(l *engine, k pendingKey) {
	for _, e := range l.ring.RemoveJob(k.job) {
		if e.Value.pending && e.Value.key() == k {
			l.disarmEntry(e)
			continue
		}
		l.ring.Add(e)
	}
}

// retryWait is how long the retry after the given (failed) attempt waits: the job's backoff.
func retryWait(j *jobRow, attempt int32) time.Duration {
	wait := time.Duration(j.RetryIntervalMs) * time.Millisecond
	switch j.RetryBackoff {
	case schedulerv1.RetryBackoff_RETRY_BACKOFF_FIXED:
	case schedulerv1.RetryBackoff_RETRY_BACKOFF_EXPONENTIAL:
		for range attempt {
			if wait = 2 * wait; wait >= maxBackoff {
				return maxBackoff
			}
		}
	default:
		return 0
	}
	return wait
}
