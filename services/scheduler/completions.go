package scheduler

import (
	"context"
	"errors"
	"fmt"
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
		ok := c.GetStatus() == logsv1.RunStatus_RUN_STATUS_SUCCESS
		retry := !ok && c.GetStatus() != logsv1.RunStatus_RUN_STATUS_KILLED && c.GetAttempt() < j.RetryCount
		switch {
		case retry:
			f := pendingRetry(j, c)
			due := s.clk.Now().Add(retryWait(j, c.GetAttempt())).UnixMilli()
			if err := s.jobs.addPending(ctx, tx, f, due); err != nil {
				return err
			}
			after = append(after, func() { s.armPending(l, f, due) })
		case ok:
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
					// Linked before it moved (or written around the API): a parent's
					// success runs only its own group's jobs.
					s.log.Warn("child job not fired: it is in another executor group", "job_id", j.ID,
						"group_id", j.GroupID, "child_job_id", childID, "child_group_id", child.GroupID)
					continue
				}
				// The child's scheduled time is the parent's, so its trigger id is the same
				// however often this completion is handled.
				f := &fire{job: child, fireMs: c.GetScheduledUnixMs(), trigType: schedulerv1.TriggerType_TRIGGER_TYPE_PARENT}
				due := s.clk.Now().UnixMilli()
				if err := s.jobs.addPending(ctx, tx, f, due); err != nil {
					return err
				}
				after = append(after, func() { s.armPending(l, f, due) })
			}
		}
		if !retry && j.ScheduleType == schedulerv1.ScheduleType_SCHEDULE_TYPE_FIX_DELAY &&
			j.Status == schedulerv1.JobStatus_JOB_STATUS_RUNNING && c.GetTriggerType() != schedulerv1.TriggerType_TRIGGER_TYPE_MANUAL &&
			c.GetTriggerType() != schedulerv1.TriggerType_TRIGGER_TYPE_API && c.GetTriggerType() != schedulerv1.TriggerType_TRIGGER_TYPE_PARENT {
			sch, err := parseSchedule(j)
			if err == nil {
				next := max(c.GetEndUnixMs(), s.clk.Now().UnixMilli()) + sch.Interval().Milliseconds()
				if _, err := tx.ExecContext(ctx, s.store.Q(`UPDATE job_state SET next_fire_ms = $2 WHERE job_id = $1 AND next_fire_ms IS NULL
					AND EXISTS (SELECT 1 FROM jobs WHERE jobs.id = $1 AND jobs.status = 2)`), j.ID, next); err != nil {
					return fmt.Errorf("schedule next FIX_DELAY fire of job %d: %w", j.ID, err)
				}
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
