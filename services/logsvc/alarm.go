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
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/internal/triggerid"
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

// Alarm is one failed run, or one failed workflow instance, to tell people about.
type Alarm struct {
	// Run is the run as stored when it ended; nil for a workflow instance's alarm.
	Run *logsv1.Run
	// Job is its job; Name is empty when the scheduler could not be asked.
	Job JobInfo
	// Workflow is the failed workflow instance, for its alarm (Run is nil then).
	Workflow *logsv1.SendWorkflowAlarmRequest
}

// recipients are the alarm's email addresses: the job's, or the workflow's.
func (a Alarm) recipients() []string {
	if a.Workflow != nil {
		return a.Workflow.GetAlarmEmails()
	}
	return a.Job.AlarmEmails
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
	to := make([]string, 0, len(a.recipients()))
	for _, e := range a.recipients() {
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
	if w := a.Workflow; w != nil {
		subject := fmt.Sprintf("jobmesh alarm: workflow %d %s instance %s failed", w.GetWorkflowId(), oneLine(w.GetWorkflowName()), w.GetInstanceId())
		var b strings.Builder
		fmt.Fprintf(&b, "From: %s\r\nTo: %s\r\nSubject: %s\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n",
			c.From, strings.Join(to, ", "), subject)
		fmt.Fprintf(&b, "Workflow:       %d %s\r\nInstance:       %s\r\nStatus:         FAILED\r\nScheduled:      %s\r\nEnded:          %s\r\n\r\nFailed nodes:\r\n%s\r\n",
			w.GetWorkflowId(), oneLine(w.GetWorkflowName()), w.GetInstanceId(), time.UnixMilli(w.GetScheduledUnixMs()).UTC().Format(time.RFC3339),
			time.UnixMilli(w.GetEndUnixMs()).UTC().Format(time.RFC3339), crlf(strings.Join(w.GetFailedNodes(), "\n")))
		return c.send(ctx, auth, to, b.String())
	}
	r := a.Run
	subject := fmt.Sprintf("jobmesh alarm: job %d %s failed (%s)", r.GetJobId(), oneLine(a.Job.Name), r.GetStatus())
	var b strings.Builder
	fmt.Fprintf(&b, "From: %s\r\nTo: %s\r\nSubject: %s\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n",
		c.From, strings.Join(to, ", "), subject)
	fmt.Fprintf(&b, "Job:            %d %s\r\nRun:            %s\r\nStatus:         %s\r\nTrigger:        %s\r\nExecutor:       %s\r\nScheduled:      %s\r\nAttempt:        %d\r\n\r\nTrigger message:\r\n%s\r\n\r\nHandle message:\r\n%s\r\n",
		r.GetJobId(), oneLine(a.Job.Name), r.GetId(), r.GetStatus(), r.GetTriggerOutcome(), r.GetExecutorAddress(),
		r.GetScheduledTime().AsTime().UTC().Format(time.RFC3339), r.GetAttempt(), crlf(r.GetTriggerMessage()), crlf(r.GetHandleMessage()))
	if wi := workflowInstanceOf(r.GetId()); wi != "" {
		fmt.Fprintf(&b, "\r\nWorkflow instance: %s\r\n", wi)
	}
	return c.send(ctx, auth, to, b.String())
}

// send mails msg to to; net/smtp takes no context, so it runs aside, bounded by ctx.
func (c *EmailChannel) send(ctx context.Context, auth smtp.Auth, to []string, msg string) (bool, error) {
	done := make(chan error, 1)
	go func() { done <- smtp.SendMail(c.Addr, auth, c.From, to, []byte(msg)) }()
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
	// WorkflowInstanceID is the workflow instance of a workflow node's run
	// (w<workflow>-<scheduled ms>); empty for a job's own run. For a failed instance's own alarm
	// it is the instance, trigger_id and the job fields are empty, and Status is
	// WORKFLOW_INSTANCE_STATUS_FAILED.
	WorkflowInstanceID string `json:"workflow_instance_id,omitempty"`
	// WorkflowID and WorkflowName name the failed instance's workflow (its alarm only).
	WorkflowID   int64  `json:"workflow_id,omitempty"`
	WorkflowName string `json:"workflow_name,omitempty"`
	// FailedNodes are the failed instance's failed nodes, "<node id>: <why>" (its alarm only).
	FailedNodes []string `json:"failed_nodes,omitempty"`
}

// Name implements AlarmChannel.
func (c *WebhookChannel) Name() string { return "webhook" }

// Send implements AlarmChannel: a 2xx answer is success; anything else is retried.
func (c *WebhookChannel) Send(ctx context.Context, a Alarm) (bool, error) {
	body, err := json.Marshal(webhookPayload(a))
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

// webhookPayload is a's webhook body.
func webhookPayload(a Alarm) WebhookPayload {
	if w := a.Workflow; w != nil {
		return WebhookPayload{GroupID: w.GetGroupId(), Status: "WORKFLOW_INSTANCE_STATUS_FAILED",
			ScheduledTime: rfc3339(time.UnixMilli(w.GetScheduledUnixMs()), true), EndTime: rfc3339(time.UnixMilli(w.GetEndUnixMs()), true),
			WorkflowInstanceID: w.GetInstanceId(), WorkflowID: w.GetWorkflowId(), WorkflowName: w.GetWorkflowName(), FailedNodes: w.GetFailedNodes()}
	}
	r := a.Run
	return WebhookPayload{
		TriggerID: r.GetId(), JobID: r.GetJobId(), JobName: a.Job.Name, GroupID: r.GetGroupId(), Status: r.GetStatus().String(),
		TriggerOutcome: r.GetTriggerOutcome().String(), ExecutorAddress: r.GetExecutorAddress(),
		ScheduledTime: rfc3339(r.GetScheduledTime().AsTime(), r.GetScheduledTime() != nil),
		EndTime:       rfc3339(r.GetEndTime().AsTime(), r.GetEndTime() != nil), Attempt: r.GetAttempt(),
		TriggerMessage: r.GetTriggerMessage(), HandleMessage: r.GetHandleMessage(),
		WorkflowInstanceID: workflowInstanceOf(r.GetId()),
	}
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
			s.noJobLog.Log(ctx, "job_id", r.GetJobId(), "error", err)
		}
	}
	sentAny, err := s.deliver(ctx, a)
	switch {
	case err != nil:
		s.log.ErrorContext(ctx, "alarm not delivered", "trigger_id", id, "job_id", r.GetJobId(), "error", err)
		return alarmFailed, true
	case sentAny:
		s.log.InfoContext(ctx, "alarm sent", "trigger_id", id, "job_id", r.GetJobId())
		return alarmSent, true
	}
	return alarmNotNeeded, true
}

// deliver sends a on every channel, a minute at most each: sent says whether any had
// something to do; the error joins the channels that failed.
func (s *Service) deliver(ctx context.Context, a Alarm) (sent bool, err error) {
	var errs []error
	for _, ch := range s.cfg.AlarmChannels {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		did, err := ch.Send(sctx, a)
		cancel()
		sent = sent || did
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ch.Name(), err))
		}
	}
	return sent, errors.Join(errs...)
}

// SendWorkflowAlarm implements LogService: it sends the failed instance's alarm on every
// channel, now. An error means a channel failed (the scheduler sends it again later).
func (s *Service) SendWorkflowAlarm(ctx context.Context, req *logsv1.SendWorkflowAlarmRequest) (*logsv1.SendWorkflowAlarmResponse, error) {
	if _, _, ok := strings.Cut(req.GetInstanceId(), "-"); !ok || !strings.HasPrefix(req.GetInstanceId(), "w") {
		return nil, apierr.Field("instance_id", "not a workflow instance id (w<workflow>-<scheduled ms>): %q", req.GetInstanceId())
	}
	sentAny, err := s.deliver(ctx, Alarm{Workflow: req})
	if err != nil {
		s.log.ErrorContext(ctx, "workflow alarm not delivered", "instance_id", req.GetInstanceId(), "error", err)
		return nil, status.Errorf(codes.Unavailable, "workflow alarm of %s not delivered: %v", req.GetInstanceId(), err)
	}
	if sentAny {
		s.log.InfoContext(ctx, "workflow alarm sent", "instance_id", req.GetInstanceId(), "workflow_id", req.GetWorkflowId())
	}
	return &logsv1.SendWorkflowAlarmResponse{Sent: sentAny}, nil
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

// workflowInstanceOf is the workflow instance of a node's run, from its trigger id
// (<job>-<instance ms>-<shard>-<attempt>-w<workflow>.<node>); "" for a job's own run.
func workflowInstanceOf(triggerID string) string {
	id, ok := triggerid.Parse(triggerID)
	if !ok || id.Workflow == 0 {
		return ""
	}
	return "w" + strconv.FormatInt(id.Workflow, 10) + "-" + strconv.FormatInt(id.ScheduledMs, 10)
}
