package logsvc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/smtp"
	"strings"
	"time"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
)

// JobInfo is what logsvc needs to know about a job: for its alarms, and for runs whose trigger
// record is missing or that may be lost.
type JobInfo struct {
	// Name is the job's name.
	Name string
	// AlarmEmails get its failure alarms.
	AlarmEmails []string
	// GroupID is its executor group.
	GroupID int64
	// Timeout is how long a run of it may take (0: no limit).
	Timeout time.Duration
}

// Jobs reads jobs from the scheduler, which owns them.
type Jobs interface {
	// Job returns the job; an error when it cannot be read (a deleted job is an error too).
	Job(ctx context.Context, id int64) (JobInfo, error)
	// CountJobs counts the jobs defined in the groups (all jobs when groups is empty), for the
	// dashboard.
	CountJobs(ctx context.Context, groups []int64) (int64, error)
}

// SchedulerJobs reads jobs through the scheduler's JobService.
type SchedulerJobs struct {
	// Client reaches the scheduler.
	Client schedulerv1.JobServiceClient
}

// SchedulerKiller kills runs through the scheduler's SchedulerService.
type SchedulerKiller struct {
	// Client reaches the scheduler.
	Client schedulerv1.SchedulerServiceClient
}

// KillTrigger implements Killer.
func (k SchedulerKiller) KillTrigger(ctx context.Context, triggerID string, jobID int64, address string) (bool, string, error) {
	resp, err := k.Client.KillTrigger(ctx, &schedulerv1.KillTriggerRequest{TriggerId: triggerID, JobId: jobID, Address: address})
	if err != nil {
		return false, "", err
	}
	return resp.GetKilled(), resp.GetMessage(), nil
}

// Job implements Jobs.
func (j SchedulerJobs) Job(ctx context.Context, id int64) (JobInfo, error) {
	resp, err := j.Client.GetJob(ctx, &schedulerv1.GetJobRequest{Id: id})
	if err != nil {
		return JobInfo{}, err
	}
	job := resp.GetJob()
	return JobInfo{Name: job.GetName(), AlarmEmails: job.GetAlarmEmails(), GroupID: job.GetGroupId(),
		Timeout: time.Duration(job.GetTimeoutSeconds()) * time.Second}, nil
}

// CountJobs implements Jobs: one ListJobs per group (one in all without groups).
func (j SchedulerJobs) CountJobs(ctx context.Context, groups []int64) (int64, error) {
	if len(groups) == 0 {
		groups = []int64{0}
	}
	var n int64
	for _, g := range groups {
		resp, err := j.Client.ListJobs(ctx, &schedulerv1.ListJobsRequest{GroupId: g, PageSize: 1})
		if err != nil {
			return 0, err
		}
		n += resp.GetTotalSize()
	}
	return n, nil
}

// Alarm is one failed run to tell people about.
type Alarm struct {
	// Run is the run as stored when it ended.
	Run *logsv1.Run
	// Job is its job; Name is empty when the scheduler could not be asked.
	Job JobInfo
}

// AlarmChannel delivers alarms one way. Add a channel by implementing it and listing it in
// Config.AlarmChannels.
type AlarmChannel interface {
	// Name names the channel in logs and errors.
	Name() string
	// Send delivers the alarm. sent is false when the channel has nothing to do for it (an
	// email channel and a job without alarm emails); an error means delivery failed.
	Send(ctx context.Context, a Alarm) (sent bool, err error)
}

// EmailChannel sends alarms by SMTP to the job's alarm emails (XXL-JOB's EmailJobAlarm).
type EmailChannel struct {
	// Addr is the SMTP server, "host:port".
	Addr string
	// From is the sender address.
	From string
	// Username and Password authenticate with PLAIN when Username is set (net/smtp allows it
	// only over TLS or to localhost).
	Username, Password string
}

// Name implements AlarmChannel.
func (c *EmailChannel) Name() string { return "email" }

// Send implements AlarmChannel.
func (c *EmailChannel) Send(ctx context.Context, a Alarm) (bool, error) {
	to := make([]string, 0, len(a.Job.AlarmEmails))
	for _, e := range a.Job.AlarmEmails {
		if e = strings.TrimSpace(e); e != "" && !strings.ContainsAny(e, "\r\n") {
			to = append(to, e)
		}
	}
	if len(to) == 0 {
		return false, nil
	}
	var auth smtp.Auth
	if c.Username != "" {
		host, _, _ := strings.Cut(c.Addr, ":")
		auth = smtp.PlainAuth("", c.Username, c.Password, host)
	}
	r := a.Run
	subject := fmt.Sprintf("jobmesh alarm: job %d %s failed (%s)", r.GetJobId(), oneLine(a.Job.Name), r.GetStatus())
	var b strings.Builder
	fmt.Fprintf(&b, "From: %s\r\nTo: %s\r\nSubject: %s\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n",
		c.From, strings.Join(to, ", "), subject)
	fmt.Fprintf(&b, "Job:            %d %s\r\nRun:            %s\r\nStatus:         %s\r\nTrigger:        %s\r\nExecutor:       %s\r\nScheduled:      %s\r\nAttempt:        %d\r\n\r\nTrigger message:\r\n%s\r\n\r\nHandle message:\r\n%s\r\n",
		r.GetJobId(), oneLine(a.Job.Name), r.GetId(), r.GetStatus(), r.GetTriggerOutcome(), r.GetExecutorAddress(),
		r.GetScheduledTime().AsTime().UTC().Format(time.RFC3339), r.GetAttempt(), crlf(r.GetTriggerMessage()), crlf(r.GetHandleMessage()))
	// net/smtp takes no context: bound it by running it aside.
	done := make(chan error, 1)
	go func() { done <- smtp.SendMail(c.Addr, auth, c.From, to, []byte(b.String())) }()
	select {
	case err := <-done:
		if err != nil {
			return true, fmt.Errorf("smtp %s: %w", c.Addr, err)
		}
		return true, nil
	case <-ctx.Done():
		return true, fmt.Errorf("smtp %s: %w", c.Addr, ctx.Err())
	}
}

func oneLine(s string) string { return strings.NewReplacer("\r", " ", "\n", " ").Replace(s) }

func crlf(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\n", "\r\n")
}

// WebhookChannel POSTs every alarm as JSON (WebhookPayload) to one URL, retrying failures.
type WebhookChannel struct {
	// URL receives the POST.
	URL string
	// Client sends it; nil means a client with a 10 s timeout.
	Client *http.Client
	// Attempts is how many times a delivery is tried; 0 means 3.
	Attempts int
	// Backoff is the wait before the second attempt, doubled after each; 0 means 500 ms.
	Backoff time.Duration
}

// WebhookPayload is the JSON body of a webhook alarm.
type WebhookPayload struct {
	// TriggerID is the run's id.
	TriggerID string `json:"trigger_id"`
	// JobID and JobName name the job.
	JobID   int64  `json:"job_id"`
	JobName string `json:"job_name"`
	// GroupID is the executor group.
	GroupID int64 `json:"group_id"`
	// Status is the run's final status (RUN_STATUS_FAIL, …).
	Status string `json:"status"`
	// TriggerOutcome says whether the fire reached an executor.
	TriggerOutcome string `json:"trigger_outcome"`
	// ExecutorAddress ran it.
	ExecutorAddress string `json:"executor_address"`
	// ScheduledTime and EndTime are RFC 3339.
	ScheduledTime string `json:"scheduled_time"`
	EndTime       string `json:"end_time"`
	// Attempt is 0 for the first fire.
	Attempt int32 `json:"attempt"`
	// TriggerMessage and HandleMessage say what happened.
	TriggerMessage string `json:"trigger_message"`
	HandleMessage  string `json:"handle_message"`
}

// Name implements AlarmChannel.
func (c *WebhookChannel) Name() string { return "webhook" }

// Send implements AlarmChannel: a 2xx answer is success; anything else is retried.
func (c *WebhookChannel) Send(ctx context.Context, a Alarm) (bool, error) {
	r := a.Run
	body, err := json.Marshal(WebhookPayload{
		TriggerID: r.GetId(), JobID: r.GetJobId(), JobName: a.Job.Name, GroupID: r.GetGroupId(), Status: r.GetStatus().String(),
		TriggerOutcome: r.GetTriggerOutcome().String(), ExecutorAddress: r.GetExecutorAddress(),
		ScheduledTime: rfc3339(r.GetScheduledTime().AsTime(), r.GetScheduledTime() != nil),
		EndTime:       rfc3339(r.GetEndTime().AsTime(), r.GetEndTime() != nil), Attempt: r.GetAttempt(),
		TriggerMessage: r.GetTriggerMessage(), HandleMessage: r.GetHandleMessage(),
	})
	if err != nil {
		return true, fmt.Errorf("webhook payload: %w", err)
	}
	client, attempts, backoff := c.Client, c.Attempts, c.Backoff
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	if attempts <= 0 {
		attempts = 3
	}
	if backoff <= 0 {
		backoff = 500 * time.Millisecond
	}
	var last error
	for i := range attempts {
		if i > 0 {
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return true, fmt.Errorf("webhook %s: %w (last: %v)", c.URL, ctx.Err(), last)
			case <-t.C:
			}
			backoff *= 2
		}
		if last = c.post(ctx, client, body); last == nil {
			return true, nil
		}
	}
	return true, fmt.Errorf("webhook %s: %d attempts: %w", c.URL, attempts, last)
}

func (c *WebhookChannel) post(ctx context.Context, client *http.Client, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}

func rfc3339(t time.Time, set bool) string {
	if !set {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

const (
	alarmPending    = int32(logsv1.AlarmStatus_ALARM_STATUS_PENDING)
	alarmNotNeeded  = int32(logsv1.AlarmStatus_ALARM_STATUS_NOT_NEEDED)
	alarmSent       = int32(logsv1.AlarmStatus_ALARM_STATUS_SENT)
	alarmFailed     = int32(logsv1.AlarmStatus_ALARM_STATUS_FAILED)
	alarmCursorName = "alarms"
)

// alarmPass follows the completions outbox from the stored alarm cursor. A successful run's
// alarm is NOT_NEEDED, set by whatever completed it in the same row write (ingestion, the
// missing-record sweep), so the pass has nothing to do for it; a failed one (failure, timeout, kill, trigger failure, lost) goes to
// every channel and its run records SENT, FAILED, or NOT_NEEDED when no channel had anything to
// do. A replica claims a batch by moving the cursor past it (compare-and-set), so replicas never
// alarm twice; a replica that dies between claim and send loses that batch's alarms (they stay
// PENDING), as XXL-JOB's locked alarm_status does. It returns how many failed completions it
// handled.
func (s *Service) alarmPass(ctx context.Context) (int, error) {
	var from int64
	if err := s.store.QueryRowContext(ctx, s.store.Q(`SELECT position FROM cursors WHERE name = $1`), alarmCursorName).Scan(&from); err != nil {
		return 0, fmt.Errorf("read alarm cursor: %w", err)
	}
	failed, to, err := s.failedAfter(ctx, from)
	if err != nil || len(failed) == 0 {
		return 0, err
	}
	res, err := s.store.ExecContext(ctx, s.store.Q(`UPDATE cursors SET position = $1 WHERE name = $2 AND position = $3`), to, alarmCursorName, from)
	if err != nil {
		return 0, fmt.Errorf("claim alarms: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return 0, nil // another replica took them
	}
	for _, id := range failed {
		st, ok := s.alarm(ctx, id)
		if !ok {
			continue
		}
		if err := s.setAlarm(ctx, []string{id}, st); err != nil {
			return 0, err
		}
	}
	return len(failed), nil
}

// failedAfterQuery reads the failed completions after a cursor ($1), at most $2, through
// completions_unsuccessful: its literal predicate matches the index's, so even a generic plan
// can use it.
var failedAfterQuery = fmt.Sprintf(`SELECT cursor, trigger_id FROM completions
	WHERE cursor > $1 AND status <> %d ORDER BY cursor LIMIT $2`, statusSuccess)

// failedAfter finds, for the alarm pass, the next completions after cursor that did not succeed,
// through completions_unsuccessful (which successful completions, nearly all, never enter):
// their trigger ids in cursor order, at most WatchBatch, and the last one's cursor (cursor when
// there are none). Writers publish cursors in increasing order (on Postgres under
// completionsLock, on SQLite as its only writer), so a failed completion not read now comes
// after every one read. The cursor does not move past successes: it needs no write while
// nothing fails.
func (s *Service) failedAfter(ctx context.Context, cursor int64) (failed []string, to int64, err error) {
	rows, err := s.store.QueryContext(ctx, s.store.Q(failedAfterQuery), cursor, s.cfg.WatchBatch)
	if err != nil {
		return nil, 0, fmt.Errorf("read completions: %w", err)
	}
	defer rows.Close()
	to = cursor
	for rows.Next() {
		var id string
		if err := rows.Scan(&to, &id); err != nil {
			return nil, 0, fmt.Errorf("read completions: %w", err)
		}
		failed = append(failed, id)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("read completions: %w", err)
	}
	return failed, to, nil
}

// alarm sends run id's alarm on every channel and returns the alarm status to keep. ok is false
// when there is nothing to do: the run's alarm was dealt with already (a corrected completion
// of a run alarmed for its first), or the run has not failed after all (the executor's report
// reopened it since: it runs again, its alarm still PENDING, or it succeeded).
func (s *Service) alarm(ctx context.Context, id string) (st int32, ok bool) {
	r, err := s.getRun(ctx, id)
	if err != nil {
		s.log.WarnContext(ctx, "alarm: run gone", "trigger_id", id, "error", err)
		return alarmNotNeeded, true
	}
	if int32(r.GetAlarmStatus()) != alarmPending || !final(int32(r.GetStatus())) || r.GetStatus() == logsv1.RunStatus_RUN_STATUS_SUCCESS {
		return 0, false
	}
	a := Alarm{Run: r}
	if s.cfg.Jobs != nil {
		if a.Job, err = s.cfg.Jobs.Job(ctx, r.GetJobId()); err != nil {
			s.log.WarnContext(ctx, "alarm: cannot read the job; sending without its name and emails", "job_id", r.GetJobId(), "error", err)
		}
	}
	sentAny := false
	var errs []error
	for _, ch := range s.cfg.AlarmChannels {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		sent, err := ch.Send(sctx, a)
		cancel()
		sentAny = sentAny || sent
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ch.Name(), err))
		}
	}
	switch {
	case len(errs) > 0:
		s.log.ErrorContext(ctx, "alarm not delivered", "trigger_id", id, "job_id", r.GetJobId(), "error", errors.Join(errs...))
		return alarmFailed, true
	case sentAny:
		s.log.InfoContext(ctx, "alarm sent", "trigger_id", id, "job_id", r.GetJobId())
		return alarmSent, true
	}
	return alarmNotNeeded, true
}

// setAlarm records the alarm status of runs still PENDING.
func (s *Service) setAlarm(ctx context.Context, ids []string, st int32) error {
	for _, chunk := range chunks(ids, rowsPerStatement) {
		q := `UPDATE runs SET alarm_status = ` + s.ph(1) + ` WHERE alarm_status = ` + s.ph(2) + ` AND trigger_id IN ` + s.in(len(chunk), 3)
		if _, err := s.store.ExecContext(ctx, q, append([]any{st, alarmPending}, anys(chunk)...)...); err != nil {
			return fmt.Errorf("set alarm status: %w", err)
		}
	}
	return nil
}

// alarms runs alarm passes until ctx ends: at once after a new completion of this process, or
// every FallbackPoll for other replicas' completions.
func (s *Service) alarms(ctx context.Context) {
	for {
		signal := s.hub.completionsSignal()
		n, err := s.alarmPass(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Error("alarm pass failed", "error", err)
		}
		if n > 0 {
			continue
		}
		if err := s.wait(ctx, signal); err != nil {
			return
		}
	}
}
