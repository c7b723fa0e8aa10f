package scheduler

import (
	"context"
	"errors"
	"time"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/workflow"
)

// A workflow instance that ends FAILED raises an alarm to its workflow's alarm emails and the
// webhook, which logsvc delivers (LogService.SendWorkflowAlarm) as it does runs' alarms. The
// failure is stored in workflow_alarms by the transaction that decides it. Any replica's sender
// leases a stored failure (next_try_ms moved past the call's deadline, in a statement of its
// own: no transaction is held across the call), has logsvc deliver it and deletes it; a failed
// try puts the failure off with a growing backoff (the others are sent meanwhile), and after
// wfAlarmAttempts tries it is given up, logged. So an alarm survives the replica that decided
// it and is sent at least once, as the alarm of a run.

// wfAlarmPoll is how often a replica looks for failures stored by the others, or due again.
const wfAlarmPoll = 5 * time.Second

// wfAlarmCall bounds one delivery (logsvc tries each channel for up to a minute); wfAlarmLease
// is how long a replica holds a failure it is sending, longer than the call.
const (
	wfAlarmCall  = 3 * time.Minute
	wfAlarmLease = 5 * time.Minute
)

// wfAlarmAttempts is how many tries a failure's alarm gets; wfAlarmBackoff the wait after the
// first failed one, doubled after each, up to wfAlarmBackoffMax.
const (
	wfAlarmAttempts   = 10
	wfAlarmBackoff    = 30 * time.Second
	wfAlarmBackoffMax = time.Hour
)

// wfAlarmSender wakes the replica's alarm loop when this replica stores a failure.
type wfAlarmSender struct{ wakeC chan struct{} }

func newWfAlarmSender() *wfAlarmSender { return &wfAlarmSender{wakeC: make(chan struct{}, 1)} }

// wake asks the loop to look now.
func (a *wfAlarmSender) wake() {
	if a == nil {
		return // a Service built without its loops (tests)
	}
	select {
	case a.wakeC <- struct{}{}:
	default:
	}
}

// wfAlarmLoop sends the stored failures' alarms until ctx ends.
func (s *Service) wfAlarmLoop(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wfAlarms.wakeC:
		case <-t.C:
		}
		if err := s.sendWorkflowAlarms(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("workflow alarms not read; trying again later", "error", err)
		}
		t.Reset(wfAlarmPoll)
	}
}

// sendWorkflowAlarms sends the alarms of the stored failures that are due, oldest first, each
// leased for its try. A failed try puts that failure off and the pass goes on; only a store
// that cannot be read stops it.
func (s *Service) sendWorkflowAlarms(ctx context.Context) error {
	st := s.wfStore()
	due, err := st.dueWorkflowAlarms(ctx, s.clk.Now().UnixMilli(), 100)
	if err != nil {
		return err
	}
	for _, a := range due {
		if ctx.Err() != nil {
			return nil
		}
		nowMs := s.clk.Now().UnixMilli()
		leased, err := st.leaseWorkflowAlarm(ctx, a, nowMs, nowMs+wfAlarmLease.Milliseconds())
		if err != nil {
			return err
		}
		if !leased {
			continue // another replica is sending it
		}
		cctx, cancel := context.WithTimeout(ctx, wfAlarmCall)
		err = s.deliverWorkflowAlarm(cctx, a)
		cancel()
		if err == nil {
			if err := st.deleteWorkflowAlarm(ctx, a); err != nil {
				return err
			}
			continue
		}
		if a.attempts+1 >= wfAlarmAttempts {
			s.log.Error("workflow instance's alarm given up", "instance_id", a.instanceID, "attempts", a.attempts+1, "error", err)
			if err := st.deleteWorkflowAlarm(ctx, a); err != nil {
				return err
			}
			continue
		}
		wait := min(wfAlarmBackoff<<a.attempts, wfAlarmBackoffMax)
		s.log.Warn("workflow instance's alarm not delivered; trying again later", "instance_id", a.instanceID,
			"attempt", a.attempts+1, "retry_in", wait, "error", err)
		if err := st.retryWorkflowAlarm(ctx, a, s.clk.Now().Add(wait).UnixMilli()); err != nil {
			return err
		}
	}
	return nil
}

// deliverWorkflowAlarm has logsvc deliver the failure's alarm.
func (s *Service) deliverWorkflowAlarm(ctx context.Context, a storedAlarm) error {
	req, err := s.workflowAlarm(ctx, s.wfStore().db, a.instanceID, a.endMs)
	if err != nil || req == nil {
		return err
	}
	resp, err := s.logs.SendWorkflowAlarm(ctx, req)
	if err != nil {
		return err
	}
	s.log.Info("workflow instance failed: alarm handed to logsvc", "instance_id", a.instanceID, "sent", resp.GetSent())
	return nil
}

// workflowAlarm builds, from q, the alarm of the instance's failure; nil when the instance is
// gone.
func (s *Service) workflowAlarm(ctx context.Context, q queryer, instanceID string, endMs int64) (*logsv1.SendWorkflowAlarmRequest, error) {
	st := s.wfStore()
	in, err := st.instanceIn(ctx, q, `SELECT `+instanceColumns+` FROM workflow_instances WHERE id = $1`, instanceID)
	if errors.Is(err, apierr.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	req := &logsv1.SendWorkflowAlarmRequest{InstanceId: in.ID, WorkflowId: in.WorkflowID, ScheduledUnixMs: in.ScheduledMs,
		EndUnixMs: endMs}
	w, err := st.getWorkflowIn(ctx, q, in.WorkflowID)
	switch {
	case err == nil:
		req.WorkflowName, req.GroupId, req.AlarmEmails = w.Name, w.GroupID, splitEmails(w.AlarmEmails)
	case errors.Is(err, apierr.ErrNotFound): // deleted since: the webhook alone
	default:
		return nil, err
	}
	g, err := s.graphOf(ctx, q, in.WorkflowID, in.Version)
	if err != nil {
		return nil, err
	}
	for i, ns := range in.Nodes {
		if ns.Status == workflow.Failed {
			req.FailedNodes = append(req.FailedNodes, g.Nodes[i].ID+": "+ns.Msg)
		}
	}
	return req, nil
}

// storedAlarm is a failure in workflow_alarms.
type storedAlarm struct {
	instanceID string
	endMs      int64
	attempts   int
}

// addWorkflowAlarms queues to b the store of the failures of instances that ended FAILED.
func (s store) addWorkflowAlarms(b *db.Batch, ins []*instanceRow) {
	for _, in := range ins {
		b.Queue(func(err error) error { return storeErr(err, "store the alarm of workflow instance %s", in.ID) },
			s.db.Q(`INSERT INTO workflow_alarms (instance_id, end_ms) VALUES ($1, $2) ON CONFLICT DO NOTHING`), in.ID, in.EndMs)
	}
}

// dueWorkflowAlarms reads up to limit stored failures due at nowMs, oldest first.
func (s store) dueWorkflowAlarms(ctx context.Context, nowMs int64, limit int) ([]storedAlarm, error) {
	rows, err := s.db.QueryContext(ctx, s.db.Q(`SELECT instance_id, end_ms, attempts FROM workflow_alarms
		WHERE next_try_ms <= $1 ORDER BY end_ms LIMIT $2`), nowMs, limit)
	if err != nil {
		return nil, storeErr(err, "read workflow alarms")
	}
	defer rows.Close()
	var out []storedAlarm
	for rows.Next() {
		var a storedAlarm
		if err := rows.Scan(&a.instanceID, &a.endMs, &a.attempts); err != nil {
			return nil, storeErr(err, "read workflow alarms")
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, storeErr(err, "read workflow alarms")
	}
	return out, nil
}

// leaseWorkflowAlarm takes a failure for a try until untilMs, if it is still due at nowMs
// (false: another replica took it).
func (s store) leaseWorkflowAlarm(ctx context.Context, a storedAlarm, nowMs, untilMs int64) (bool, error) {
	res, err := s.db.ExecContext(ctx, s.db.Q(`UPDATE workflow_alarms SET next_try_ms = $3
		WHERE instance_id = $1 AND end_ms = $2 AND next_try_ms <= $4`), a.instanceID, a.endMs, untilMs, nowMs)
	if err != nil {
		return false, storeErr(err, "lease the alarm of workflow instance %s", a.instanceID)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, storeErr(err, "lease the alarm of workflow instance %s", a.instanceID)
	}
	return n > 0, nil
}

// retryWorkflowAlarm counts a failed try of a failure's alarm and puts the next off to atMs.
func (s store) retryWorkflowAlarm(ctx context.Context, a storedAlarm, atMs int64) error {
	if _, err := s.db.ExecContext(ctx, s.db.Q(`UPDATE workflow_alarms SET attempts = attempts + 1, next_try_ms = $3
		WHERE instance_id = $1 AND end_ms = $2`), a.instanceID, a.endMs, atMs); err != nil {
		return storeErr(err, "put off the alarm of workflow instance %s", a.instanceID)
	}
	return nil
}

// deleteWorkflowAlarm forgets a failure whose alarm was delivered (or given up).
func (s store) deleteWorkflowAlarm(ctx context.Context, a storedAlarm) error {
	if _, err := s.db.ExecContext(ctx, s.db.Q(`DELETE FROM workflow_alarms WHERE instance_id = $1 AND end_ms = $2`),
		a.instanceID, a.endMs); err != nil {
		return storeErr(err, "delete the alarm of workflow instance %s", a.instanceID)
	}
	return nil
}
