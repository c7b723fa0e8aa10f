package scheduler

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
)

// maxBackoff caps exponential retry backoff.
const maxBackoff = time.Hour

// followCompletions follows logsvc's completion stream while this replica leads, and acts on
// every run that ends: retries, child jobs and the next FIX_DELAY fire. The cursor of the last
// completion handled is saved, fenced, so a new leader resumes there.
func (s *Service) followCompletions(ctx context.Context, l *leadership) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := s.completionSession(ctx, l)
		if ctx.Err() != nil || errors.Is(err, errDeposed) {
			return
		}
		s.log.Warn("completion stream broken; reconnecting", "error", err)
		if s.wait(ctx, backoff) != nil {
			return
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func (s *Service) completionSession(ctx context.Context, l *leadership) error {
	var cursor int64
	if err := s.store.QueryRowContext(ctx, `SELECT cursor FROM completion_cursor WHERE id = 1`).Scan(&cursor); err != nil {
		return fmt.Errorf("read completion cursor: %w", err)
	}
	st, err := s.logs.WatchCompletions(ctx, &logsv1.WatchCompletionsRequest{AfterCursor: cursor})
	if err != nil {
		return err
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		if err := s.handleCompletions(ctx, l, resp.GetCompletions()); err != nil {
			return err
		}
	}
}

// handleCompletions applies one batch in one fenced transaction: schedule changes, the retries
// and child fires it decides on (as pending fires) and the cursor. After the commit it arms those
// fires; if this leader dies first, the next one finds them in pending_fires.
func (s *Service) handleCompletions(ctx context.Context, l *leadership, cs []*logsv1.Completion) error {
	if len(cs) == 0 {
		return nil
	}
	tx, err := s.store.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := s.jobs.fence(ctx, tx, l.epoch, s.cfg.ReplicaID); err != nil {
		return err
	}
	// One query for the batch's jobs that act on a completion (a completion per fire: one query
	// each cost a round trip per fire), and their child jobs after it. A job that is not read
	// (no children, no retries, not FIX_DELAY; or deleted) asks nothing.
	ids := make([]int64, 0, len(cs))
	for _, c := range cs {
		ids = append(ids, c.GetJobId())
	}
	jobs, err := s.jobs.getActing(ctx, tx, ids)
	if err != nil {
		return err
	}
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
		return err
	}
	var after []func()
	for _, c := range cs {
		j := jobs[c.GetJobId()]
		if j == nil {
			continue // nothing to do for its completions, or deleted meanwhile
		}
		if c.GetReplacesStatus() != logsv1.RunStatus_RUN_STATUS_UNSPECIFIED {
			then, err := s.correct(ctx, tx, l, j, c, jobs, children)
			if err != nil {
				return err
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
				return err
			}
			after = append(after, func() { s.armPending(l, f, due) })
		case ok:
			then, err := s.fireChildren(ctx, tx, l, j, c, jobs, children)
			if err != nil {
				return err
			}
			after = append(after, then...)
		}
		if !retry {
			if err := s.planFixDelay(ctx, tx, j, c); err != nil {
				return err
			}
		}
	}
	if _, err := tx.ExecContext(ctx, s.store.Q(`UPDATE completion_cursor SET cursor = $1 WHERE id = 1`), cs[len(cs)-1].GetCursor()); err != nil {
		return fmt.Errorf("save completion cursor: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit completions: %w", err)
	}
	for _, f := range after {
		f()
	}
	return nil
}

// planFixDelay schedules the next fire of a running FIX_DELAY job one interval after its
// scheduled run c ended (a manual, API or parent-job run does not move its schedule). The next
// fire is planned once: only while none is.
func (s *Service) planFixDelay(ctx context.Context, tx *sql.Tx, j *jobRow, c *logsv1.Completion) error {
	if j.ScheduleType != schedulerv1.ScheduleType_SCHEDULE_TYPE_FIX_DELAY || j.Status != schedulerv1.JobStatus_JOB_STATUS_RUNNING ||
		c.GetTriggerType() == schedulerv1.TriggerType_TRIGGER_TYPE_MANUAL || c.GetTriggerType() == schedulerv1.TriggerType_TRIGGER_TYPE_API ||
		c.GetTriggerType() == schedulerv1.TriggerType_TRIGGER_TYPE_PARENT {
		return nil
	}
	sch, err := parseSchedule(j)
	if err != nil {
		return nil
	}
	next := max(c.GetEndUnixMs(), s.clk.Now().UnixMilli()) + sch.Interval().Milliseconds()
	if _, err := tx.ExecContext(ctx, s.store.Q(`UPDATE job_state SET next_fire_ms = $2 WHERE job_id = $1 AND next_fire_ms IS NULL
		AND EXISTS (SELECT 1 FROM jobs WHERE jobs.id = $1 AND jobs.status = 2)`), j.ID, next); err != nil {
		return fmt.Errorf("schedule next FIX_DELAY fire of job %d: %w", j.ID, err)
	}
	return nil
}

// fireChildren stores the PARENT fires of j's child jobs for its successful completion c, and
// returns what arms them after the commit. jobs and children are the batch's jobs read.
func (s *Service) fireChildren(ctx context.Context, tx *sql.Tx, l *leadership, j *jobRow, c *logsv1.Completion,
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
		// The child's scheduled time is the parent's, so its trigger id is the same however
		// often this completion is handled.
		f := &fire{job: child, fireMs: c.GetScheduledUnixMs(), trigType: schedulerv1.TriggerType_TRIGGER_TYPE_PARENT}
		due := s.clk.Now().UnixMilli()
		if err := s.jobs.addPending(ctx, tx, f, due); err != nil {
			return nil, err
		}
		after = append(after, func() { s.armPending(l, f, due) })
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
func (s *Service) correct(ctx context.Context, tx *sql.Tx, l *leadership, j *jobRow, c *logsv1.Completion,
	jobs, children map[int64]*jobRow) ([]func(), error) {
	retry := pendingRetry(j, c)
	k := retry.key()
	where := ` WHERE job_id = $1 AND fire_ms = $2 AND shard = $3 AND attempt = $4`
	args := []any{k.job, k.fireMs, k.shard, k.attempt}
	exec := func(what, q string, args ...any) (bool, error) {
		res, err := tx.ExecContext(ctx, s.store.Q(q), args...)
		if err != nil {
			return false, fmt.Errorf("%s retry %s of a corrected completion: %w", what, k.triggerID(), err)
		}
		n, err := res.RowsAffected()
		return n > 0, err
	}
	disarm := func() { s.disarmPending(l, k) }
	switch st := c.GetStatus(); st {
	case logsv1.RunStatus_RUN_STATUS_RUNNING:
		held, err := exec("hold", `UPDATE pending_fires SET due_ms = $5`+where, append(args, int64(heldDueMs))...)
		if err != nil || !held {
			return nil, err
		}
		s.log.Info("retry held back: the executor reports the run it was for as running", "trigger_id", c.GetTriggerId(),
			"retry_trigger_id", k.triggerID())
		return []func(){disarm}, nil
	case logsv1.RunStatus_RUN_STATUS_SUCCESS, logsv1.RunStatus_RUN_STATUS_KILLED:
		dropped, err := exec("drop", `DELETE FROM pending_fires`+where, args...)
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
		released, err := exec("release", `UPDATE pending_fires SET due_ms = $5`+where+` AND due_ms = $6`,
			append(args, due, int64(heldDueMs))...)
		if err != nil || !released {
			return nil, err
		}
		return []func(){func() { s.armPending(l, retry, due) }}, nil
	}
}

// disarmPending takes a pending fire out of this leadership's ring, if it is armed there.
func (s *Service) disarmPending(l *leadership, k pendingKey) {
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
