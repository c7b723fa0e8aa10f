package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/route"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/schedule"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/workflow"
)

// Limits of workflow fields, as the API documents them.
const (
	maxWorkflowParams   = 64
	maxConcurrentLimit  = 1000
	maxWorkflowPageSize = 500
)

// workflowFromProto converts the API's workflow, with the documented defaults.
func workflowFromProto(p *schedulerv1.Workflow) *workflowRow {
	w := &workflowRow{ID: p.GetId(), GroupID: p.GetGroupId(), Name: p.GetName(), Owner: p.GetOwner(),
		AlarmEmails:  strings.Join(p.GetAlarmEmails(), ","),
		ScheduleType: scheduleTypeOf(p.GetSchedule().GetType()), ScheduleExpr: p.GetSchedule().GetExpression(),
		TimeZone: p.GetSchedule().GetTimeZone(), Misfire: misfireStrategyOf(p.GetMisfireStrategy()), Status: jobStatusOf(p.GetStatus()),
		MaxConcurrent: p.GetMaxConcurrentInstances(), Version: p.GetVersion(), Graph: &workflow.Graph{Params: p.GetParams()}}
	if w.Misfire == 0 {
		w.Misfire = misfireDoNothing
	}
	if w.Status == jobStatusUnset {
		w.Status = jobStopped
	}
	if w.MaxConcurrent == 0 {
		w.MaxConcurrent = 1
	}
	for _, n := range p.GetNodes() {
		w.Graph.Nodes = append(w.Graph.Nodes, workflow.Node{ID: n.GetId(), JobID: n.GetJobId(), Params: n.Params,
			RetryCount: n.GetRetryCount(), TimeoutSeconds: n.GetTimeoutSeconds(), Disabled: n.Enabled != nil && !n.GetEnabled(),
			X: n.GetX(), Y: n.GetY()})
	}
	for _, e := range p.GetEdges() {
		c := workflow.OnSuccess
		switch e.GetCondition() {
		case schedulerv1.EdgeCondition_EDGE_CONDITION_ON_SUCCESS, schedulerv1.EdgeCondition_EDGE_CONDITION_UNSPECIFIED:
		case schedulerv1.EdgeCondition_EDGE_CONDITION_ON_FAILURE:
			c = workflow.OnFailure
		case schedulerv1.EdgeCondition_EDGE_CONDITION_ALWAYS:
			c = workflow.Always
		default:
			c = workflow.Condition(-1) // refused by validation
		}
		w.Graph.Edges = append(w.Graph.Edges, workflow.Edge{From: e.GetFrom(), To: e.GetTo(), Cond: c})
	}
	return w
}

// graphProto converts a graph's nodes and edges for the API.
func graphProto(g *workflow.Graph, p *schedulerv1.Workflow) {
	p.Params = g.Params
	for _, n := range g.Nodes {
		pn := &schedulerv1.WorkflowNode{Id: n.ID, JobId: n.JobID, Params: n.Params, RetryCount: n.RetryCount,
			TimeoutSeconds: n.TimeoutSeconds, X: n.X, Y: n.Y}
		if n.Disabled {
			f := false
			pn.Enabled = &f
		}
		p.Nodes = append(p.Nodes, pn)
	}
	for _, e := range g.Edges {
		c := schedulerv1.EdgeCondition_EDGE_CONDITION_ON_SUCCESS
		switch e.Cond {
		case workflow.OnFailure:
			c = schedulerv1.EdgeCondition_EDGE_CONDITION_ON_FAILURE
		case workflow.Always:
			c = schedulerv1.EdgeCondition_EDGE_CONDITION_ALWAYS
		}
		p.Edges = append(p.Edges, &schedulerv1.WorkflowEdge{From: e.From, To: e.To, Condition: c})
	}
}

func workflowProto(w *workflowRow) *schedulerv1.Workflow {
	p := &schedulerv1.Workflow{Id: w.ID, GroupId: w.GroupID, Name: w.Name, Owner: w.Owner, AlarmEmails: splitEmails(w.AlarmEmails),
		Schedule:        &schedulerv1.Schedule{Type: scheduleTypeProto(w.ScheduleType), Expression: w.ScheduleExpr, TimeZone: w.TimeZone},
		MisfireStrategy: w.Misfire.proto(), Status: w.Status.proto(), MaxConcurrentInstances: w.MaxConcurrent, Version: w.Version,
		NextFireTime: tsMs(w.NextFireMs), CreateTime: tsMs(w.CreateMs), UpdateTime: tsMs(w.UpdateMs)}
	graphProto(w.Graph, p)
	return p
}

// nodeStatusProto converts a node status for the API: a disabled node passed is SKIPPED too.
func nodeStatusProto(s workflow.Status) schedulerv1.WorkflowNodeStatus {
	switch s {
	case workflow.Running:
		return schedulerv1.WorkflowNodeStatus_WORKFLOW_NODE_STATUS_RUNNING
	case workflow.Success:
		return schedulerv1.WorkflowNodeStatus_WORKFLOW_NODE_STATUS_SUCCESS
	case workflow.Failed:
		return schedulerv1.WorkflowNodeStatus_WORKFLOW_NODE_STATUS_FAILED
	case workflow.Killed:
		return schedulerv1.WorkflowNodeStatus_WORKFLOW_NODE_STATUS_KILLED
	case workflow.Skipped, workflow.Passed:
		return schedulerv1.WorkflowNodeStatus_WORKFLOW_NODE_STATUS_SKIPPED
	}
	return schedulerv1.WorkflowNodeStatus_WORKFLOW_NODE_STATUS_WAITING
}

// instanceProto converts an instance for the API; g, its pinned graph, adds node ids and the
// definition when not nil.
func instanceProto(in *instanceRow, g *workflow.Graph) *schedulerv1.WorkflowInstance {
	p := &schedulerv1.WorkflowInstance{Id: in.ID, WorkflowId: in.WorkflowID, Version: in.Version,
		Status: schedulerv1.WorkflowInstanceStatus(in.Status), TriggerType: in.TrigType.proto(), ScheduledUnixMs: in.ScheduledMs,
		Params: in.Params, CreateUnixMs: in.CreateMs, EndUnixMs: in.EndMs}
	if g == nil {
		return p
	}
	p.Workflow = &schedulerv1.Workflow{Id: in.WorkflowID, Version: in.Version}
	graphProto(g, p.Workflow)
	for i, ns := range in.Nodes {
		s := &schedulerv1.WorkflowNodeState{NodeId: g.Nodes[i].ID, Status: nodeStatusProto(ns.Status), Attempt: ns.Attempt,
			Outputs: ns.Outputs, StartUnixMs: ns.StartMs, EndUnixMs: ns.EndMs, Message: ns.Msg}
		if ns.Fired {
			s.TriggerId = nodeKey(g, in, i, ns.Attempt).triggerID()
		}
		p.Nodes = append(p.Nodes, s)
	}
	return p
}

// validateWorkflow checks w; it returns the violations (each an apierr.FieldError naming its
// field and node) and w's parsed schedule, or an error of the store.
func (s *Service) validateWorkflow(ctx context.Context, w *workflowRow) (apierr.Fields, *schedule.Schedule, error) {
	var fs apierr.Fields
	if w.GroupID <= 0 {
		fs.Add("group_id", "required: the id of an executor group")
	} else if s.groups != nil {
		if err := s.groups.CheckGroup(ctx, w.GroupID); err != nil {
			if !errors.Is(err, apierr.ErrNotFound) {
				return nil, nil, err
			}
			fs.Add("group_id", "no executor group %d", w.GroupID)
		}
	}
	if n := len([]rune(w.Name)); n < 1 || n > maxNameLen {
		fs.Add("name", "want 1-%d characters, got %d", maxNameLen, n)
	}
	if n := len([]rune(w.Owner)); n > maxAuthorLen {
		fs.Add("owner", "at most %d characters, got %d", maxAuthorLen, n)
	}
	checkAlarmEmails(&fs, w.AlarmEmails)
	if w.MaxConcurrent < 1 || w.MaxConcurrent > maxConcurrentLimit {
		fs.Add("max_concurrent_instances", "want 1-%d (0 means 1), got %d", maxConcurrentLimit, w.MaxConcurrent)
	}
	if len(w.Graph.Params) > maxWorkflowParams {
		fs.Add("params", "at most %d keys, got %d", maxWorkflowParams, len(w.Graph.Params))
	}
	checkEnum(&fs, "misfire_strategy", schedulerv1.MisfireStrategy_name, int32(w.Misfire))
	checkEnum(&fs, "status", schedulerv1.JobStatus_name, int32(w.Status))
	var sch *schedule.Schedule
	switch {
	case scheduleTypeProto(w.ScheduleType) == schedulerv1.ScheduleType_SCHEDULE_TYPE_UNSPECIFIED:
		fs.Add("schedule.type", "required: NONE, CRON, FIX_RATE or ONCE")
	case w.ScheduleType == schedule.FixDelay:
		fs.Add("schedule.type", "FIX_DELAY is not available for workflows: use FIX_RATE with max_concurrent_instances 1")
	default:
		if _, ok := schedulerv1.ScheduleType_name[int32(w.ScheduleType)]; ok {
			var err error
			if sch, err = schedule.Parse(w.ScheduleType, w.ScheduleExpr, w.TimeZone); err != nil {
				var fe *apierr.FieldError
				if errors.As(scheduleErr(err), &fe) {
					fs = append(fs, fe)
				} else {
					return nil, nil, err
				}
			} else if w.Status == jobRunning {
				if err := checkFiresAgain(sch, w.ScheduleType, s.clk.Now()); err != nil {
					fs = append(fs, err.(*apierr.FieldError))
				}
			}
		}
	}
	for _, v := range w.Graph.Validate() {
		fs.Add(v.Field, "%s", v.Description)
	}
	// The nodes' jobs: each must exist in the workflow's group, and not broadcast (a node is one run).
	var ids []int64
	for _, n := range w.Graph.Nodes {
		if n.JobID > 0 {
			ids = append(ids, n.JobID)
		}
	}
	if len(ids) > 0 && w.GroupID > 0 {
		tx, err := s.jobs.begin(ctx)
		if err != nil {
			return nil, nil, err
		}
		jobs, err := s.jobs.getMany(ctx, tx.Tx, ids)
		tx.Rollback() // a read only
		if err != nil {
			return nil, nil, err
		}
		for i, n := range w.Graph.Nodes {
			if n.JobID <= 0 {
				continue
			}
			j := jobs[n.JobID]
			switch {
			case j == nil || j.GroupID != w.GroupID:
				// The same words for a job of another group as for none, as for child jobs.
				fs.Add(fmt.Sprintf("nodes[%d].job_id", i), "node %q: no job %d in this workflow's executor group", n.ID, n.JobID)
			case j.Route == route.ShardingBroadcast:
				fs.Add(fmt.Sprintf("nodes[%d].job_id", i), "node %q: job %d routes SHARDING_BROADCAST; a workflow node runs once", n.ID, n.JobID)
			}
		}
	}
	return fs, sch, nil
}

// ValidateWorkflow implements WorkflowService.
func (s *Service) ValidateWorkflow(ctx context.Context, req *schedulerv1.ValidateWorkflowRequest) (*schedulerv1.ValidateWorkflowResponse, error) {
	if req.GetWorkflow() == nil {
		return nil, apierr.Field("workflow", "required")
	}
	fs, _, err := s.validateWorkflow(ctx, workflowFromProto(req.GetWorkflow()))
	if err != nil {
		return nil, err
	}
	resp := &schedulerv1.ValidateWorkflowResponse{}
	for _, f := range fs {
		resp.Violations = append(resp.Violations, &schedulerv1.WorkflowViolation{Field: f.Field, Description: f.Reason})
	}
	return resp, nil
}

// CreateWorkflow implements WorkflowService.
func (s *Service) CreateWorkflow(ctx context.Context, req *schedulerv1.CreateWorkflowRequest) (*schedulerv1.CreateWorkflowResponse, error) {
	if req.GetWorkflow() == nil {
		return nil, apierr.Field("workflow", "required")
	}
	w := workflowFromProto(req.GetWorkflow())
	now := s.clk.Now()
	w.CreateMs, w.UpdateMs = now.UnixMilli(), now.UnixMilli()
	fs, sch, err := s.validateWorkflow(ctx, w)
	if err != nil {
		return nil, err
	}
	if err := fs.Err(); err != nil {
		return nil, err
	}
	w.NextFireMs = firstFire(sch, w.Status, now)
	n, err := s.partitionCount(ctx)
	if err != nil {
		return nil, err
	}
	id, err := s.wfStore().insertWorkflow(ctx, w, n)
	if err != nil {
		return nil, err
	}
	out, err := s.wfStore().getWorkflow(ctx, id)
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "workflow created", "workflow_id", id, "name", w.Name, "nodes", len(w.Graph.Nodes))
	return &schedulerv1.CreateWorkflowResponse{Workflow: workflowProto(out)}, nil
}

// GetWorkflow implements WorkflowService.
func (s *Service) GetWorkflow(ctx context.Context, req *schedulerv1.GetWorkflowRequest) (*schedulerv1.GetWorkflowResponse, error) {
	w, err := s.wfStore().getWorkflow(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	return &schedulerv1.GetWorkflowResponse{Workflow: workflowProto(w)}, nil
}

// pageSize reads a request's page size: 0 means 100.
func pageSize(n int32) (int, error) {
	switch {
	case n == 0:
		return 100, nil
	case n < 0 || n > maxWorkflowPageSize:
		return 0, apierr.Field("page_size", "want 1-%d, got %d", maxWorkflowPageSize, n)
	}
	return int(n), nil
}

// ListWorkflows implements WorkflowService.
func (s *Service) ListWorkflows(ctx context.Context, req *schedulerv1.ListWorkflowsRequest) (*schedulerv1.ListWorkflowsResponse, error) {
	size, err := pageSize(req.GetPageSize())
	if err != nil {
		return nil, err
	}
	before, err := decodeCursor(req.GetPageToken())
	if err != nil {
		return nil, err
	}
	rows, err := s.wfStore().listWorkflows(ctx, req.GetGroupId(), before, size+1)
	if err != nil {
		return nil, err
	}
	resp := &schedulerv1.ListWorkflowsResponse{}
	if len(rows) > size {
		rows = rows[:size]
		resp.NextPageToken = encodeCursor(rows[size-1].ID)
	}
	for _, w := range rows {
		resp.Workflows = append(resp.Workflows, workflowProto(w))
	}
	return resp, nil
}

// UpdateWorkflow implements WorkflowService.
func (s *Service) UpdateWorkflow(ctx context.Context, req *schedulerv1.UpdateWorkflowRequest) (*schedulerv1.UpdateWorkflowResponse, error) {
	if req.GetWorkflow() == nil {
		return nil, apierr.Field("workflow", "required")
	}
	w := workflowFromProto(req.GetWorkflow())
	old, err := s.wfStore().getWorkflow(ctx, w.ID)
	if err != nil {
		return nil, err
	}
	if w.Version == 0 {
		w.Version = old.Version
	}
	now := s.clk.Now()
	w.CreateMs, w.UpdateMs = old.CreateMs, now.UnixMilli()
	fs, sch, err := s.validateWorkflow(ctx, w)
	if err != nil {
		return nil, err
	}
	if err := fs.Err(); err != nil {
		return nil, err
	}
	setNext := w.Status != old.Status || w.ScheduleType != old.ScheduleType || w.ScheduleExpr != old.ScheduleExpr ||
		w.TimeZone != old.TimeZone
	if setNext {
		w.NextFireMs = firstFire(sch, w.Status, now)
	}
	if err := s.wfStore().updateWorkflow(ctx, w, setNext); err != nil {
		return nil, err
	}
	out, err := s.wfStore().getWorkflow(ctx, w.ID)
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "workflow updated", "workflow_id", w.ID, "version", out.Version)
	return &schedulerv1.UpdateWorkflowResponse{Workflow: workflowProto(out)}, nil
}

// DeleteWorkflow implements WorkflowService.
func (s *Service) DeleteWorkflow(ctx context.Context, req *schedulerv1.DeleteWorkflowRequest) (*schedulerv1.DeleteWorkflowResponse, error) {
	if err := s.wfStore().deleteWorkflow(ctx, req.GetId()); err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "workflow deleted", "workflow_id", req.GetId())
	return &schedulerv1.DeleteWorkflowResponse{}, nil
}

// TriggerWorkflow implements WorkflowService. The instance's scheduled time is now, moved on by
// a millisecond while an instance of the workflow has it (and off whole seconds, where cron
// fires fall), so each call makes its own instance.
func (s *Service) TriggerWorkflow(ctx context.Context, req *schedulerv1.TriggerWorkflowRequest) (*schedulerv1.TriggerWorkflowResponse, error) {
	tt, err := callerTriggerType(req.GetTriggerType(), triggerAPI)
	if err != nil {
		return nil, err
	}
	if len(req.GetParams()) > maxWorkflowParams {
		return nil, apierr.Field("params", "at most %d keys, got %d", maxWorkflowParams, len(req.GetParams()))
	}
	w, err := s.wfStore().getWorkflow(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	s.graphs.LoadOrStore([2]int64{w.ID, w.Version}, w.Graph)
	ms := s.clk.Now().UnixMilli()
	for range 1000 {
		if ms%1000 == 0 {
			ms++
		}
		after, in, err := s.inInstanceTx(ctx, func(tx *txn) (*instanceRow, error) {
			return s.startInstance(ctx, tx, w, ms, ms, tt, req.GetParams())
		})
		if errors.Is(err, errInstanceExists) {
			ms++
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, f := range after {
			f()
		}
		s.log.InfoContext(ctx, "workflow triggered", "workflow_id", w.ID, "instance_id", in.ID, "status", in.Status)
		return &schedulerv1.TriggerWorkflowResponse{Instance: instanceProto(in, w.Graph)}, nil
	}
	return nil, apierr.Statusf(codes.ResourceExhausted, apierr.CodeReason(codes.ResourceExhausted),
		"workflow %d: no free instance time near now", w.ID)
}

// ListWorkflowInstances implements WorkflowService.
func (s *Service) ListWorkflowInstances(ctx context.Context, req *schedulerv1.ListWorkflowInstancesRequest) (*schedulerv1.ListWorkflowInstancesResponse, error) {
	if req.GetWorkflowId() <= 0 {
		return nil, apierr.Field("workflow_id", "required")
	}
	size, err := pageSize(req.GetPageSize())
	if err != nil {
		return nil, err
	}
	before, err := decodeCursor(req.GetPageToken())
	if err != nil {
		return nil, err
	}
	rows, err := s.wfStore().listInstances(ctx, req.GetWorkflowId(), before, size+1)
	if err != nil {
		return nil, err
	}
	resp := &schedulerv1.ListWorkflowInstancesResponse{}
	if len(rows) > size {
		rows = rows[:size]
		resp.NextPageToken = encodeCursor(rows[size-1].ScheduledMs)
	}
	for _, in := range rows {
		resp.Instances = append(resp.Instances, instanceProto(in, nil))
	}
	return resp, nil
}

// GetWorkflowInstance implements WorkflowService.
func (s *Service) GetWorkflowInstance(ctx context.Context, req *schedulerv1.GetWorkflowInstanceRequest) (*schedulerv1.GetWorkflowInstanceResponse, error) {
	if err := checkInstanceID(req.GetId()); err != nil {
		return nil, err
	}
	in, err := s.wfStore().getInstance(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	g, err := s.graphOf(ctx, s.wfStore().db, in.WorkflowID, in.Version)
	if err != nil {
		return nil, err
	}
	return &schedulerv1.GetWorkflowInstanceResponse{Instance: instanceProto(in, g)}, nil
}

// instanceOp runs op on instance id, locked, in a transaction of its own, saves the instance
// and commits; after the commit it arms the fires op decided. op returns an error to change
// nothing.
//
// The instance's workflow row is locked first, as startInstance locks it before it creates an
// instance: an op that makes the instance run again counts the workflow's running instances
// (roomToRun) one at a time with triggers, the pre-read and other ops, and no transaction takes
// the two rows in the other order. A deleted workflow has no row to lock.
func (s *Service) instanceOp(ctx context.Context, id string, op func(tx *txn, in *instanceRow, g *workflow.Graph) error) (*schedulerv1.WorkflowInstance, error) {
	if err := checkInstanceID(id); err != nil {
		return nil, err
	}
	wf, _, _ := parseInstanceID(id)
	var g *workflow.Graph
	after, in, err := s.inInstanceTx(ctx, func(tx *txn) (*instanceRow, error) {
		if _, err := s.wfStore().lockWorkflow(ctx, tx.Tx, wf); err != nil && !errors.Is(err, apierr.ErrNotFound) {
			return nil, err
		}
		in, err := s.wfStore().lockInstance(ctx, tx.Tx, id)
		if err != nil {
			return nil, err
		}
		if g, err = s.graphOf(ctx, tx.Tx, in.WorkflowID, in.Version); err != nil {
			return nil, err
		}
		if err := op(tx, in, g); err != nil {
			return nil, err
		}
		tx.save(in)
		return in, nil
	})
	if err != nil {
		return nil, err
	}
	for _, f := range after {
		f()
	}
	return instanceProto(in, g), nil
}

// inInstanceTx runs f in a transaction, writes what it decided (txn.flush) and commits; it
// returns what arms the fires decided.
func (s *Service) inInstanceTx(ctx context.Context, f func(tx *txn) (*instanceRow, error)) ([]func(), *instanceRow, error) {
	tx, err := s.jobs.begin(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer tx.Rollback()
	t := newTxn(tx)
	in, err := f(t)
	if err != nil {
		return nil, nil, err
	}
	after, err := t.flush(ctx, s, nil)
	if err != nil {
		return nil, nil, err
	}
	if err := s.jobs.commit(tx); err != nil {
		return nil, nil, err
	}
	return after, in, nil
}

// workflowGroup is the group of an instance's workflow; -1 when the workflow is gone (its nodes
// then start no job).
func (s *Service) workflowGroup(ctx context.Context, tx *txn, wf int64) (int64, error) {
	w, err := s.wfStore().getWorkflowIn(ctx, tx.Tx, wf)
	switch {
	case errors.Is(err, apierr.ErrNotFound):
		return -1, nil
	case err != nil:
		return 0, err
	}
	return w.GroupID, nil
}

// roomToRun refuses to make instance in run again while its workflow runs
// max_concurrent_instances already, as a fire would be SKIPPED then; the instance is left as it
// was (status was), and the message says to do again, once one has ended. The caller holds the
// workflow's row (instanceOp), so that a trigger or another retry counts after it commits. A
// deleted workflow keeps no limit.
func (s *Service) roomToRun(ctx context.Context, tx *txn, in *instanceRow, was instStatus, again string) error {
	limit, err := s.wfStore().lockWorkflow(ctx, tx.Tx, in.WorkflowID) // held already: a read
	switch {
	case errors.Is(err, apierr.ErrNotFound):
		return nil
	case err != nil:
		return err
	}
	running, err := s.wfStore().countRunningOf(ctx, tx.Tx, []int64{in.WorkflowID})
	if err != nil {
		return err
	}
	if n := running[in.WorkflowID]; int32(n) >= limit {
		return apierr.Statusf(codes.FailedPrecondition, apierr.CodeReason(codes.FailedPrecondition),
			"workflow instance %s stays %s: workflow %d is at its max_concurrent_instances (%d running, limit %d); "+
				"%s once one has ended", in.ID, schedulerv1.WorkflowInstanceStatus(was), in.WorkflowID, n, limit, again)
	}
	return nil
}

// notRunning refuses an operation on an instance in the wrong state.
func notRunning(in *instanceRow, op string) error {
	return apierr.Statusf(codes.FailedPrecondition, apierr.CodeReason(codes.FailedPrecondition),
		"workflow instance %s is %s: %s", in.ID, schedulerv1.WorkflowInstanceStatus(in.Status), op)
}

// KillWorkflowInstance implements WorkflowService: its running nodes' fires not dispatched yet
// are dropped, their runs killed (logsvc's KillRun), and the instance ends KILLED.
func (s *Service) KillWorkflowInstance(ctx context.Context, req *schedulerv1.KillWorkflowInstanceRequest) (*schedulerv1.KillWorkflowInstanceResponse, error) {
	var kill []pendingKey
	in, err := s.instanceOp(ctx, req.GetId(), func(tx *txn, in *instanceRow, g *workflow.Graph) error {
		if in.Status != instRunning {
			return notRunning(in, "only a running instance can be killed")
		}
		nowMs := s.clk.Now().UnixMilli()
		for i := range in.Nodes {
			ns := &in.Nodes[i]
			if ns.Status != workflow.Running {
				continue
			}
			k := nodeKey(g, in, i, ns.Attempt)
			if _, err := s.jobs.dropPending(ctx, tx.Tx, k); err != nil {
				return err
			}
			kill = append(kill, k)
			ns.Status, ns.EndMs, ns.Msg = workflow.Killed, nowMs, "killed with its instance"
		}
		in.Status, in.EndMs = instKilled, nowMs
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, k := range kill {
		if l := s.engineOf(k.job); l != nil {
			l.disarmPending(k, true)
		}
		resp, err := s.logs.KillRun(ctx, &logsv1.KillRunRequest{Id: k.triggerID()})
		if err != nil {
			s.log.WarnContext(ctx, "workflow node's run not killed", "trigger_id", k.triggerID(), "error", err)
			continue
		}
		s.log.InfoContext(ctx, "workflow node's run killed", "trigger_id", k.triggerID(), "killed", resp.GetKilled(),
			"message", resp.GetMessage())
	}
	s.log.InfoContext(ctx, "workflow instance killed", "instance_id", in.GetId(), "nodes_killed", len(kill))
	return &schedulerv1.KillWorkflowInstanceResponse{Instance: in}, nil
}

// RetryWorkflowInstance implements WorkflowService: the failed and killed nodes run again (a
// new attempt, with the node's retry count afresh), the nodes skipped after them wait again,
// and the successful ones keep their results. While the workflow runs max_concurrent_instances
// already, the retry is refused (FailedPrecondition) and the instance stays as it is.
func (s *Service) RetryWorkflowInstance(ctx context.Context, req *schedulerv1.RetryWorkflowInstanceRequest) (*schedulerv1.RetryWorkflowInstanceResponse, error) {
	in, err := s.instanceOp(ctx, req.GetId(), func(tx *txn, in *instanceRow, g *workflow.Graph) error {
		if in.Status != instFailed && in.Status != instKilled {
			return notRunning(in, "only a FAILED or KILLED instance can be retried")
		}
		if err := s.roomToRun(ctx, tx, in, in.Status, "retry it"); err != nil {
			return err
		}
		for i := range in.Nodes {
			ns := &in.Nodes[i]
			switch ns.Status {
			case workflow.Failed, workflow.Killed, workflow.Skipped:
				if ns.Fired {
					ns.Attempt++
				}
				ns.Base, ns.Status, ns.Fired, ns.EndMs, ns.Msg = ns.Attempt, workflow.Waiting, false, 0, ""
			}
		}
		in.Status, in.EndMs = instRunning, 0
		gid, err := s.workflowGroup(ctx, tx, in.WorkflowID)
		if err != nil {
			return err
		}
		return s.advanceInstance(ctx, tx, gid, g, in, s.clk.Now().UnixMilli())
	})
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "workflow instance retried", "instance_id", in.GetId())
	return &schedulerv1.RetryWorkflowInstanceResponse{Instance: in}, nil
}

// MarkWorkflowNodeDone implements WorkflowService: the node is SUCCESS (a fire of it not
// dispatched yet is dropped; a run of it still going is left alone, and its end ignored), the
// nodes skipped after it wait again, and the graph advances; an instance that had ended runs
// again if that lets nodes start.
func (s *Service) MarkWorkflowNodeDone(ctx context.Context, req *schedulerv1.MarkWorkflowNodeDoneRequest) (*schedulerv1.MarkWorkflowNodeDoneResponse, error) {
	var drop *pendingKey
	in, err := s.instanceOp(ctx, req.GetId(), func(tx *txn, in *instanceRow, g *workflow.Graph) error {
		n, ok := g.NodeIndex(req.GetNodeId())
		if !ok {
			return apierr.Field("node_id", "instance %s has no node %q", in.ID, req.GetNodeId())
		}
		if in.Status == instSkipped {
			return notRunning(in, "a skipped instance has nothing to mark")
		}
		ns := &in.Nodes[n]
		switch ns.Status {
		case workflow.Success, workflow.Passed:
			return apierr.Statusf(codes.FailedPrecondition, apierr.CodeReason(codes.FailedPrecondition),
				"node %q of instance %s has succeeded already", req.GetNodeId(), in.ID)
		case workflow.Running:
			k := nodeKey(g, in, n, ns.Attempt)
			if _, err := s.jobs.dropPending(ctx, tx.Tx, k); err != nil {
				return err
			}
			drop = &k
		}
		nowMs := s.clk.Now().UnixMilli()
		ns.Status, ns.EndMs, ns.Msg = workflow.Success, nowMs, "marked done by hand"
		// The nodes skipped after it (because it failed, or as the skip spread) wait again: the
		// graph decides them afresh now that it succeeded. Those that ran keep what they did.
		for _, d := range g.Downstream(n) {
			if dn := &in.Nodes[d]; dn.Status == workflow.Skipped && !dn.Fired {
				dn.Status, dn.EndMs, dn.Msg = workflow.Waiting, 0, ""
			}
		}
		was := in.Status
		ended := was != instRunning
		if ended {
			// Its other failed or killed nodes stay as they are; the instance ends again once
			// what this lets start has ended.
			in.Status, in.EndMs = instRunning, 0
		}
		gid, err := s.workflowGroup(ctx, tx, in.WorkflowID)
		if err != nil {
			return err
		}
		if err := s.advanceInstance(ctx, tx, gid, g, in, nowMs); err != nil {
			return err
		}
		if ended && in.Status == instRunning {
			// An ended instance that runs again counts against max_concurrent_instances, as a
			// retry does; one that the mark only ends again runs nothing.
			return s.roomToRun(ctx, tx, in, was, "mark the node done")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if drop != nil {
		if l := s.engineOf(drop.job); l != nil {
			l.disarmPending(*drop, true)
		}
	}
	s.log.InfoContext(ctx, "workflow node marked done", "instance_id", in.GetId(), "node_id", req.GetNodeId())
	return &schedulerv1.MarkWorkflowNodeDoneResponse{Instance: in}, nil
}

// checkInstanceID refuses a string that is not an instance id.
func checkInstanceID(id string) error {
	if _, _, ok := parseInstanceID(id); !ok {
		return apierr.Field("id", "not a workflow instance id (w<workflow>-<scheduled ms>): %q", id)
	}
	return nil
}
