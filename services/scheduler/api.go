package scheduler

import (
	"context"
	"errors"
	"fmt"
	"net/mail"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/route"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/schedule"
)

// Limits of job fields, as the API documents them.
const (
	maxNameLen       = 255
	maxAuthorLen     = 64
	maxAlarmEmails   = 20
	maxHandlerLen    = 255
	maxParamsLen     = 2048
	maxTimeout       = 86400
	maxRetryCount    = 100
	maxRetryInterval = 3_600_000
	maxGlueSource    = 1 << 20
	maxGlueRemark    = 128
	maxChildJobs     = 50
)

// CreateJob implements JobService.
func (s *Service) CreateJob(ctx context.Context, req *schedulerv1.CreateJobRequest) (*schedulerv1.CreateJobResponse, error) {
	in := req.GetJob()
	if in == nil {
		return nil, apierr.Field("job", "required")
	}
	now := s.clk.Now()
	j := fromProto(in)
	j.CreateMs, j.UpdateMs = now.UnixMilli(), now.UnixMilli()
	if j.GlueType.isScript() {
		j.GlueUpdatedMs = now.UnixMilli()
	}
	sch, err := s.validate(ctx, j, 0)
	if err != nil {
		return nil, err
	}
	j.NextFireMs = firstFire(sch, j.Status, now)
	n, err := s.partitionCount(ctx)
	if err != nil {
		return nil, err
	}
	id, err := s.jobs.insert(ctx, j, n)
	if err != nil {
		return nil, err
	}
	out, err := s.jobs.get(ctx, id)
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "job created", "job_id", id, "name", j.Name)
	return &schedulerv1.CreateJobResponse{Job: toProto(out), Warnings: s.saveWarnings(ctx, out)}, nil
}

// GetJob implements JobService.
func (s *Service) GetJob(ctx context.Context, req *schedulerv1.GetJobRequest) (*schedulerv1.GetJobResponse, error) {
	j, err := s.jobs.get(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	return &schedulerv1.GetJobResponse{Job: toProto(j)}, nil
}

// ListJobs implements JobService.
func (s *Service) ListJobs(ctx context.Context, req *schedulerv1.ListJobsRequest) (*schedulerv1.ListJobsResponse, error) {
	size := int(req.GetPageSize())
	switch {
	case size == 0:
		size = 50
	case size < 0 || size > 1000:
		return nil, apierr.Field("page_size", "want 1-1000, got %d", size)
	}
	if _, ok := schedulerv1.JobStatus_name[int32(req.GetStatus())]; !ok {
		return nil, apierr.Field("status", "unknown value %d", req.GetStatus())
	}
	var fs apierr.Fields
	fs.Filter("name", req.GetName())
	fs.Filter("handler", req.GetHandler())
	fs.Filter("author", req.GetAuthor())
	fs.Skip("skip", req.GetSkip())
	if err := fs.Err(); err != nil {
		return nil, err
	}
	before, err := decodeCursor(req.GetPageToken())
	if err != nil {
		return nil, err
	}
	rows, total, err := s.jobs.list(ctx, jobFilter{
		GroupID: req.GetGroupId(), Status: jobStatusOf(req.GetStatus()), Name: req.GetName(), Handler: req.GetHandler(),
		Author: req.GetAuthor(), Limit: size + 1, Skip: int(req.GetSkip()), BeforeID: before,
	})
	if err != nil {
		return nil, err
	}
	resp := &schedulerv1.ListJobsResponse{TotalSize: total}
	if len(rows) > size {
		rows = rows[:size]
		resp.NextPageToken = encodeCursor(rows[size-1].ID)
	}
	for _, j := range rows {
		resp.Jobs = append(resp.Jobs, toProto(j))
	}
	return resp, nil
}

// writableJobFields are the fields UpdateJob may change.
var writableJobFields = []string{
	"group_id", "name", "author", "alarm_emails", "schedule", "schedule.type", "schedule.expression", "schedule.time_zone",
	"misfire_strategy", "route_strategy", "handler", "params", "block_strategy", "timeout_seconds", "retry_count",
	"retry_backoff", "retry_interval_ms", "glue_type", "glue_source", "glue_remark", "child_job_ids", "status",
}

// UpdateJob implements JobService.
func (s *Service) UpdateJob(ctx context.Context, req *schedulerv1.UpdateJobRequest) (*schedulerv1.UpdateJobResponse, error) {
	in := req.GetJob()
	if in == nil {
		return nil, apierr.Field("job", "required")
	}
	cur, err := s.jobs.get(ctx, in.GetId())
	if err != nil {
		return nil, err
	}
	if in.GetVersion() != 0 && in.GetVersion() != cur.Version {
		return nil, fmt.Errorf("job %d is at version %d, the update was based on %d: %w", cur.ID, cur.Version, in.GetVersion(), apierr.ErrVersionConflict)
	}
	paths := req.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		paths = writableJobFields
	}
	next := *cur
	upd := fromProto(in)
	for _, p := range paths {
		switch p {
		case "group_id":
			next.GroupID = upd.GroupID
		case "name":
			next.Name = upd.Name
		case "author":
			next.Author = upd.Author
		case "alarm_emails":
			next.AlarmEmails = upd.AlarmEmails
		case "schedule":
			next.ScheduleType, next.ScheduleExpr, next.TimeZone = upd.ScheduleType, upd.ScheduleExpr, upd.TimeZone
		case "schedule.type":
			next.ScheduleType = upd.ScheduleType
		case "schedule.expression":
			next.ScheduleExpr = upd.ScheduleExpr
		case "schedule.time_zone":
			next.TimeZone = upd.TimeZone
		case "misfire_strategy":
			next.Misfire = upd.Misfire
		case "route_strategy":
			next.Route = upd.Route
		case "handler":
			next.Handler = upd.Handler
		case "params":
			next.Params = upd.Params
		case "block_strategy":
			next.Block = upd.Block
		case "timeout_seconds":
			next.TimeoutSeconds = upd.TimeoutSeconds
		case "retry_count":
			next.RetryCount = upd.RetryCount
		case "retry_backoff":
			next.RetryBackoff = upd.RetryBackoff
		case "retry_interval_ms":
			next.RetryIntervalMs = upd.RetryIntervalMs
		case "glue_type":
			next.GlueType = upd.GlueType
		case "glue_source":
			next.GlueSource = upd.GlueSource
		case "glue_remark":
			next.GlueRemark = upd.GlueRemark
		case "child_job_ids":
			next.ChildJobIDs = upd.ChildJobIDs
		case "status":
			next.Status = upd.Status
		case "id", "version":
			// The job's identity and the version the change is based on, not changes.
		default:
			return nil, apierr.Field("update_mask", "unknown or read-only field %q", p)
		}
	}
	defaults(&next)
	sch, err := s.validate(ctx, &next, cur.ID)
	if err != nil {
		return nil, err
	}
	now := s.clk.Now()
	next.UpdateMs = now.UnixMilli()
	glueChanged := next.GlueType.isScript() && (next.GlueType != cur.GlueType || next.GlueSource != cur.GlueSource)
	if glueChanged {
		next.GlueUpdatedMs = now.UnixMilli()
	}
	resched := next.Status != cur.Status || next.ScheduleType != cur.ScheduleType || next.ScheduleExpr != cur.ScheduleExpr || next.TimeZone != cur.TimeZone
	if resched {
		next.NextFireMs = firstFire(sch, next.Status, now)
		s.disarm(cur.ID)
	}
	if err := s.jobs.update(ctx, &next, resched, glueChanged); err != nil {
		return nil, err
	}
	out, err := s.jobs.get(ctx, cur.ID)
	if err != nil {
		return nil, err
	}
	return &schedulerv1.UpdateJobResponse{Job: toProto(out), Warnings: s.saveWarnings(ctx, out)}, nil
}

// DeleteJob implements JobService.
func (s *Service) DeleteJob(ctx context.Context, req *schedulerv1.DeleteJobRequest) (*schedulerv1.DeleteJobResponse, error) {
	if err := s.jobs.delete(ctx, req.GetId(), s.clk.Now().UnixMilli()); err != nil {
		return nil, err
	}
	s.disarm(req.GetId())
	return &schedulerv1.DeleteJobResponse{}, nil
}

// StartJob implements JobService.
func (s *Service) StartJob(ctx context.Context, req *schedulerv1.StartJobRequest) (*schedulerv1.StartJobResponse, error) {
	j, err := s.setStatus(ctx, req.GetId(), jobRunning)
	if err != nil {
		return nil, err
	}
	return &schedulerv1.StartJobResponse{Job: j}, nil
}

// StopJob implements JobService.
func (s *Service) StopJob(ctx context.Context, req *schedulerv1.StopJobRequest) (*schedulerv1.StopJobResponse, error) {
	j, err := s.setStatus(ctx, req.GetId(), jobStopped)
	if err != nil {
		return nil, err
	}
	return &schedulerv1.StopJobResponse{Job: j}, nil
}

func (s *Service) setStatus(ctx context.Context, id int64, st jobStatus) (*schedulerv1.Job, error) {
	for {
		cur, err := s.jobs.get(ctx, id)
		if err != nil {
			return nil, err
		}
		if cur.Status == st {
			return toProto(cur), nil
		}
		sch, err := parseSchedule(cur)
		if err != nil {
			return nil, err
		}
		if st == jobRunning {
			if err := checkFiresAgain(sch, cur.ScheduleType, s.clk.Now()); err != nil {
				return nil, err
			}
		}
		now := s.clk.Now()
		cur.Status, cur.UpdateMs = st, now.UnixMilli()
		cur.NextFireMs = firstFire(sch, st, now)
		err = s.jobs.update(ctx, cur, true, false)
		if errors.Is(err, apierr.ErrConflict) {
			continue // changed under us; read again
		}
		if err != nil {
			return nil, err
		}
		s.disarm(id)
		out, err := s.jobs.get(ctx, id)
		if err != nil {
			return nil, err
		}
		return toProto(out), nil
	}
}

// CopyJob implements JobService.
func (s *Service) CopyJob(ctx context.Context, req *schedulerv1.CopyJobRequest) (*schedulerv1.CopyJobResponse, error) {
	cur, err := s.jobs.get(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	cp := *cur
	cp.Name = req.GetName()
	if cp.Name == "" {
		cp.Name = cur.Name + " (copy)"
	}
	if n := len([]rune(cp.Name)); n > maxNameLen {
		return nil, apierr.Field("name", "at most %d characters, got %d", maxNameLen, n)
	}
	now := s.clk.Now()
	cp.Status, cp.NextFireMs, cp.LastFireMs = jobStopped, 0, 0
	cp.CreateMs, cp.UpdateMs = now.UnixMilli(), now.UnixMilli()
	n, err := s.partitionCount(ctx)
	if err != nil {
		return nil, err
	}
	id, err := s.jobs.insert(ctx, &cp, n)
	if err != nil {
		return nil, err
	}
	out, err := s.jobs.get(ctx, id)
	if err != nil {
		return nil, err
	}
	return &schedulerv1.CopyJobResponse{Job: toProto(out)}, nil
}

// callerTriggerType is the trigger type a caller gave a trigger: MANUAL or API, dflt when unset.
func callerTriggerType(t schedulerv1.TriggerType, dflt triggerType) (triggerType, error) {
	switch t {
	case schedulerv1.TriggerType_TRIGGER_TYPE_UNSPECIFIED:
		return dflt, nil
	case schedulerv1.TriggerType_TRIGGER_TYPE_MANUAL, schedulerv1.TriggerType_TRIGGER_TYPE_API:
		return triggerTypeOf(t), nil
	}
	return 0, apierr.Field("trigger_type", "want MANUAL or API, got %s", t)
}

// TriggerJob implements JobService: fire once now. The replica that leads the job's partition
// dispatches the fire: another reserves its time and forwards the call to it (forwardTrigger),
// and dispatches the fire itself only when the leader is not known, or the call failed without
// an answer and this replica claimed the fire first.
func (s *Service) TriggerJob(ctx context.Context, req *schedulerv1.TriggerJobRequest) (*schedulerv1.TriggerJobResponse, error) {
	tt, err := callerTriggerType(req.GetTriggerType(), triggerManual)
	if err != nil {
		return nil, err
	}
	for i, a := range req.GetAddresses() {
		if !validAddress(a) {
			return nil, apierr.Field(fmt.Sprintf("addresses[%d]", i), "want host:port or an XXL-JOB executor's http(s) URL ending in /, got %q", a)
		}
	}
	if n := len([]rune(req.GetParams())); n > maxParamsLen {
		return nil, apierr.Field("params", "at most %d characters, got %d", maxParamsLen, n)
	}
	fwdMs, forwarded, err := s.forwardedFire(ctx)
	if err != nil {
		return nil, err
	}
	j, err := s.jobs.get(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	if err := s.checkTriggerAddresses(ctx, j.GroupID, req.GetAddresses()); err != nil {
		return nil, err
	}
	// Every accepted trigger is a run of its own: its scheduled time is reserved for it alone,
	// so its trigger id is too (and its retries', which keep that time).
	var fireMs int64
	if forwarded {
		// The forwarding replica reserved the time, and dispatches the fire itself if it claims
		// it first (forwardTrigger).
		if err := s.claimForwarded(ctx, j.ID, fwdMs); err != nil {
			return nil, err
		}
		fireMs = fwdMs
	} else {
		resp, ms, handled, err := s.forwardTrigger(ctx, req, j)
		if handled {
			return resp, err
		}
		if fireMs = ms; fireMs == 0 {
			if fireMs, err = s.jobs.reserveManualFire(ctx, j.ID, s.clk.Now().UnixMilli()); err != nil {
				return nil, err
			}
		}
	}
	f := &fire{job: j, fireMs: fireMs, kind: kindManual, trigType: tt, addresses: req.GetAddresses()}
	if req.GetParams() != "" {
		p := req.GetParams()
		f.params = &p
	}
	done := make(chan []string, 1)
	s.dispatch(f, trace.LinkFromContext(ctx), func(ids []string) { done <- ids })
	select {
	case ids := <-done:
		return &schedulerv1.TriggerJobResponse{TriggerIds: ids}, nil
	case <-ctx.Done(): // the fire goes on; its record tells how it went
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// ListGlueVersions implements JobService.
func (s *Service) ListGlueVersions(ctx context.Context, req *schedulerv1.ListGlueVersionsRequest) (*schedulerv1.ListGlueVersionsResponse, error) {
	if _, err := s.jobs.get(ctx, req.GetJobId()); err != nil {
		return nil, err
	}
	vs, err := s.jobs.glueVersions(ctx, req.GetJobId())
	if err != nil {
		return nil, err
	}
	resp := &schedulerv1.ListGlueVersionsResponse{Versions: make([]*schedulerv1.GlueVersion, len(vs))}
	for i, v := range vs {
		resp.Versions[i] = v.proto()
	}
	return resp, nil
}

// RestoreGlueVersion implements JobService.
func (s *Service) RestoreGlueVersion(ctx context.Context, req *schedulerv1.RestoreGlueVersionRequest) (*schedulerv1.RestoreGlueVersionResponse, error) {
	vs, err := s.ListGlueVersions(ctx, &schedulerv1.ListGlueVersionsRequest{JobId: req.GetJobId()})
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(vs.Versions, func(v *schedulerv1.GlueVersion) bool { return v.Version == req.GetVersion() })
	if i < 0 {
		return nil, fmt.Errorf("glue version %d of job %d: %w", req.GetVersion(), req.GetJobId(), apierr.ErrGlueVersionNotFound)
	}
	v := vs.Versions[i]
	resp, err := s.UpdateJob(ctx, &schedulerv1.UpdateJobRequest{
		Job: &schedulerv1.Job{Id: req.GetJobId(), GlueType: v.GlueType, GlueSource: v.GlueSource,
			GlueRemark: fmt.Sprintf("restored version %d: %s", v.Version, v.GlueRemark)},
		UpdateMask: fieldMask("glue_type", "glue_source", "glue_remark"),
	})
	if err != nil {
		return nil, err
	}
	return &schedulerv1.RestoreGlueVersionResponse{Job: resp.Job}, nil
}

// PreviewSchedule implements JobService.
func (s *Service) PreviewSchedule(_ context.Context, req *schedulerv1.PreviewScheduleRequest) (*schedulerv1.PreviewScheduleResponse, error) {
	n := int(req.GetCount())
	switch {
	case n == 0:
		n = 5
	case n < 0 || n > 100:
		return nil, apierr.Field("count", "want 1-100, got %d", n)
	}
	sc := req.GetSchedule()
	if sc == nil {
		return nil, apierr.Field("schedule", "required")
	}
	sch, err := schedule.Parse(schedule.Type(sc.GetType()), sc.GetExpression(), sc.GetTimeZone())
	if err != nil {
		return nil, scheduleErr(err)
	}
	from := s.clk.Now()
	if req.GetStartTime() != nil {
		from = req.GetStartTime().AsTime()
	}
	resp := &schedulerv1.PreviewScheduleResponse{}
	for _, t := range sch.Preview(from, n) {
		resp.FireTimes = append(resp.FireTimes, timestamppb.New(t))
	}
	return resp, nil
}

// validate checks a job completely and returns its parsed schedule. self is the job's id when
// it already exists (0 on create), for the child-job checks.
func (s *Service) validate(ctx context.Context, j *jobRow, self int64) (*schedule.Schedule, error) {
	var fs apierr.Fields
	if j.GroupID <= 0 {
		fs.Add("group_id", "required: the id of an executor group")
	} else if s.groups != nil {
		if err := s.groups.CheckGroup(ctx, j.GroupID); err != nil {
			if !errors.Is(err, apierr.ErrNotFound) {
				return nil, err
			}
			fs.Add("group_id", "no executor group %d", j.GroupID)
		}
	}
	if n := len([]rune(j.Name)); n < 1 || n > maxNameLen {
		fs.Add("name", "want 1-%d characters, got %d", maxNameLen, n)
	}
	if n := len([]rune(j.Author)); n > maxAuthorLen {
		fs.Add("author", "at most %d characters, got %d", maxAuthorLen, n)
	}
	checkAlarmEmails(&fs, j.AlarmEmails)
	checkEnum(&fs, "schedule.type", schedulerv1.ScheduleType_name, int32(j.ScheduleType))
	checkEnum(&fs, "misfire_strategy", schedulerv1.MisfireStrategy_name, int32(j.Misfire))
	checkEnum(&fs, "route_strategy", schedulerv1.RouteStrategy_name, int32(j.Route))
	checkEnum(&fs, "block_strategy", schedulerv1.BlockStrategy_name, int32(j.Block))
	checkEnum(&fs, "retry_backoff", schedulerv1.RetryBackoff_name, int32(j.RetryBackoff))
	checkEnum(&fs, "glue_type", schedulerv1.GlueType_name, int32(j.GlueType))
	checkEnum(&fs, "status", schedulerv1.JobStatus_name, int32(j.Status))
	var sch *schedule.Schedule
	if scheduleTypeProto(j.ScheduleType) == schedulerv1.ScheduleType_SCHEDULE_TYPE_UNSPECIFIED {
		fs.Add("schedule.type", "required: NONE, CRON, FIX_RATE, FIX_DELAY or ONCE")
	} else if _, ok := schedulerv1.ScheduleType_name[int32(j.ScheduleType)]; ok {
		var err error
		if sch, err = parseSchedule(j); err != nil {
			var fe *apierr.FieldError
			if errors.As(err, &fe) {
				fs = append(fs, fe)
			} else {
				return nil, err
			}
		} else if j.Status == jobRunning {
			if err := checkFiresAgain(sch, j.ScheduleType, s.clk.Now()); err != nil {
				fs = append(fs, err.(*apierr.FieldError))
			}
		}
	}
	if j.GlueType == glueBean {
		if j.Handler == "" {
			fs.Add("handler", "required for glue type BEAN: the name of a handler registered in the executor")
		}
	} else if j.GlueType.isScript() {
		if strings.TrimSpace(j.GlueSource) == "" {
			fs.Add("glue_source", "required for glue type %s", j.GlueType)
		}
	}
	if n := len(j.Handler); n > maxHandlerLen {
		fs.Add("handler", "at most %d characters, got %d", maxHandlerLen, n)
	}
	if n := len([]rune(j.Params)); n > maxParamsLen {
		fs.Add("params", "at most %d characters, got %d", maxParamsLen, n)
	}
	if j.TimeoutSeconds < 0 || j.TimeoutSeconds > maxTimeout {
		fs.Add("timeout_seconds", "want 0-%d (0 means no limit), got %d", maxTimeout, j.TimeoutSeconds)
	}
	if j.RetryCount < 0 || j.RetryCount > maxRetryCount {
		fs.Add("retry_count", "want 0-%d, got %d", maxRetryCount, j.RetryCount)
	}
	if j.RetryIntervalMs < 0 || j.RetryIntervalMs > maxRetryInterval {
		fs.Add("retry_interval_ms", "want 0-%d, got %d", maxRetryInterval, j.RetryIntervalMs)
	}
	if n := len(j.GlueSource); n > maxGlueSource {
		fs.Add("glue_source", "at most %d bytes, got %d", maxGlueSource, n)
	}
	if n := len([]rune(j.GlueRemark)); n > maxGlueRemark {
		fs.Add("glue_remark", "at most %d characters, got %d", maxGlueRemark, n)
	}
	if err := s.checkChildren(ctx, &fs, j, self); err != nil {
		return nil, err
	}
	return sch, fs.Err()
}

// checkAlarmEmails checks comma-separated alarm emails (a job's or a workflow's).
func checkAlarmEmails(fs *apierr.Fields, list string) {
	if list == "" {
		return
	}
	emails := strings.Split(list, ",")
	if len(emails) > maxAlarmEmails {
		fs.Add("alarm_emails", "at most %d addresses, got %d", maxAlarmEmails, len(emails))
	}
	for i, e := range emails {
		if a, err := mail.ParseAddress(e); err != nil || a.Address != e {
			fs.Add(fmt.Sprintf("alarm_emails[%d]", i), "not an email address: %q", e)
		}
	}
}

// splitEmails is comma-separated alarm emails as a list (none for "").
func splitEmails(list string) []string {
	if list == "" {
		return nil
	}
	return strings.Split(list, ",")
}

// checkChildren rejects missing children, children in another executor group than the job's
// (firing a job must not run another group's code), the job itself, and cycles through child
// links.
func (s *Service) checkChildren(ctx context.Context, fs *apierr.Fields, j *jobRow, self int64) error {
	kids := splitIDs(j.ChildJobIDs)
	if len(kids) > maxChildJobs {
		fs.Add("child_job_ids", "at most %d, got %d", maxChildJobs, len(kids))
		return nil
	}
	seen := map[int64]bool{}
	queue := []int64{}
	for i, id := range kids {
		switch {
		case id <= 0:
			fs.Add(fmt.Sprintf("child_job_ids[%d]", i), "not a job id: %d", id)
		case self != 0 && id == self:
			fs.Add(fmt.Sprintf("child_job_ids[%d]", i), "a job cannot be its own child")
		default:
			child, err := s.jobs.get(ctx, id)
			if err != nil && !errors.Is(err, apierr.ErrNotFound) {
				return err
			}
			if err != nil || child.GroupID != j.GroupID {
				// One answer for "no such job" and "another group's job", so that
				// the answer tells nothing about jobs outside the caller's group.
				fs.Add(fmt.Sprintf("child_job_ids[%d]", i), "no job %d in this job's executor group", id)
				continue
			}
			if !seen[id] {
				seen[id] = true
				queue = append(queue, splitIDs(child.ChildJobIDs)...)
			}
		}
	}
	// Walk the descendants: reaching self again is a cycle.
	for len(queue) > 0 && self != 0 {
		id := queue[0]
		queue = queue[1:]
		if id == self {
			fs.Add("child_job_ids", "would form a cycle back to job %d", self)
			return nil
		}
		if seen[id] {
			continue
		}
		seen[id] = true
		child, err := s.jobs.get(ctx, id)
		if errors.Is(err, apierr.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		queue = append(queue, splitIDs(child.ChildJobIDs)...)
	}
	return nil
}

func checkEnum(fs *apierr.Fields, field string, names map[int32]string, v int32) {
	if _, ok := names[v]; !ok {
		fs.Add(field, "unknown value %d", v)
	}
}

func parseSchedule(j *jobRow) (*schedule.Schedule, error) {
	sch, err := schedule.Parse(j.ScheduleType, j.ScheduleExpr, j.TimeZone)
	if err != nil {
		return nil, scheduleErr(err)
	}
	return sch, nil
}

func scheduleErr(err error) error {
	var se *schedule.Error
	if errors.As(err, &se) {
		return apierr.Field("schedule."+se.Field, "%s", se.Reason)
	}
	return err
}

// checkFiresAgain refuses to run a CRON or ONCE schedule that has no fire left.
func checkFiresAgain(sch *schedule.Schedule, typ schedule.Type, now time.Time) error {
	if typ != schedule.Cron && typ != schedule.Once {
		return nil
	}
	if _, ok := sch.First(now); !ok {
		return &apierr.FieldError{Field: "schedule.expression", Reason: fmt.Sprintf("never fires after %s", now.UTC().Format(time.RFC3339))}
	}
	return nil
}

// firstFire is the next_fire of a job that starts (or is saved) now.
func firstFire(sch *schedule.Schedule, st jobStatus, now time.Time) int64 {
	if sch == nil || st != jobRunning {
		return 0
	}
	t, ok := sch.First(now)
	if !ok {
		return 0
	}
	return t.UnixMilli()
}

// defaults fills in the API's documented defaults for unset enums.
func defaults(j *jobRow) {
	if j.Misfire == 0 {
		j.Misfire = misfireDoNothing
	}
	if j.Route == 0 {
		j.Route = route.First
	}
	if j.Block == 0 {
		j.Block = blockSerial
	}
	if j.RetryBackoff == 0 {
		j.RetryBackoff = retryNoWait
	}
	if j.GlueType == 0 {
		j.GlueType = glueBean
	}
	if j.Status == jobStatusUnset {
		j.Status = jobStopped
	}
}

func fromProto(p *schedulerv1.Job) *jobRow {
	j := &jobRow{
		ID: p.GetId(), GroupID: p.GetGroupId(), Name: p.GetName(), Author: p.GetAuthor(),
		AlarmEmails: strings.Join(p.GetAlarmEmails(), ","), ScheduleType: scheduleTypeOf(p.GetSchedule().GetType()),
		ScheduleExpr: strings.TrimSpace(p.GetSchedule().GetExpression()), TimeZone: p.GetSchedule().GetTimeZone(),
		Misfire: misfireStrategyOf(p.GetMisfireStrategy()), Route: routeOf(p.GetRouteStrategy()), Handler: p.GetHandler(), Params: p.GetParams(),
		Block: blockStrategyOf(p.GetBlockStrategy()), TimeoutSeconds: p.GetTimeoutSeconds(), RetryCount: p.GetRetryCount(),
		RetryBackoff: retryBackoffOf(p.GetRetryBackoff()), RetryIntervalMs: p.GetRetryIntervalMs(), GlueType: glueTypeOf(p.GetGlueType()),
		GlueSource: p.GetGlueSource(), GlueRemark: p.GetGlueRemark(), ChildJobIDs: joinIDs(p.GetChildJobIds()),
		Status: jobStatusOf(p.GetStatus()), Version: p.GetVersion(),
	}
	defaults(j)
	return j
}

func toProto(j *jobRow) *schedulerv1.Job {
	p := &schedulerv1.Job{
		Id: j.ID, GroupId: j.GroupID, Name: j.Name, Author: j.Author,
		Schedule:        &schedulerv1.Schedule{Type: scheduleTypeProto(j.ScheduleType), Expression: j.ScheduleExpr, TimeZone: j.TimeZone},
		MisfireStrategy: j.Misfire.proto(), RouteStrategy: routeProto(j.Route), Handler: j.Handler, Params: j.Params,
		BlockStrategy: j.Block.proto(), TimeoutSeconds: j.TimeoutSeconds, RetryCount: j.RetryCount,
		RetryBackoff: j.RetryBackoff.proto(), RetryIntervalMs: j.RetryIntervalMs, GlueType: j.GlueType.proto(),
		GlueSource: j.GlueSource, GlueRemark: j.GlueRemark, GlueUpdatedTime: tsMs(j.GlueUpdatedMs),
		ChildJobIds: splitIDs(j.ChildJobIDs), Status: j.Status.proto(), LastFireTime: tsMs(j.LastFireMs),
		NextFireTime: tsMs(j.NextFireMs), Version: j.Version, CreateTime: tsMs(j.CreateMs), UpdateTime: tsMs(j.UpdateMs),
	}
	p.AlarmEmails = splitEmails(j.AlarmEmails)
	return p
}

func tsMs(ms int64) *timestamppb.Timestamp {
	if ms == 0 {
		return nil
	}
	return timestamppb.New(time.UnixMilli(ms))
}

func fieldMask(paths ...string) *fieldmaskpb.FieldMask { return &fieldmaskpb.FieldMask{Paths: paths} }

// checkTriggerAddresses refuses trigger address overrides outside the job's executor group: each
// must be an address the group routes over now (an online executor of an AUTO group, the list of
// a MANUAL one) or one of its manual addresses. Otherwise whoever may fire a job could run its
// handler on another group's machines. The rule holds for every caller, admins included; an
// admin who wants another machine adds it to the group first (docs/auth.md).
func (s *Service) checkTriggerAddresses(ctx context.Context, groupID int64, addrs []string) error {
	if len(addrs) == 0 {
		return nil
	}
	g, err := s.groups.group(ctx, groupID)
	if err != nil {
		return err
	}
	routed, _, err := s.groups.addresses(ctx, groupID)
	if err != nil {
		return err
	}
	var bad apierr.Fields
	for i, a := range addrs {
		if !slices.Contains(routed, a) && !slices.Contains(g.GetManualAddresses(), a) {
			bad.Add(fmt.Sprintf("addresses[%d]", i), "%s is not an executor of the job's group %d (%s): want an online executor or a manual address of it", a, groupID, g.GetAppName())
		}
	}
	return bad.Err()
}
