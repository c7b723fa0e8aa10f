package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/triggerid"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/partition"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/schedule"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/workflow"
)

// Workflows run on the machinery of retries and child jobs. A workflow's instance is created,
// with its root nodes' fires, in one transaction: the pre-read's of the workflow's partition
// (fenced, with the advance of the workflow's next fire) for a scheduled fire, the API's for a
// trigger. A node's fire is a pending fire of the node's job whose trigger id names the
// workflow and the node (<job>-<instance ms>-0-<attempt>-w<workflow>.<node>); its leader
// dispatches it as it does a retry, and a new leader re-sends only the ones logsvc and the
// executors do not know. A node's completion is acted on by the leader of the workflow's
// partition, in the fenced transaction that saves the partition's completion cursor: it
// updates the instance (locked) and stores the fires of the nodes it lets start. So each
// decision is taken once, and each fire has one id whoever sends it.

// maxWorkflowsPerScan bounds the workflows one pre-read fires.
const maxWorkflowsPerScan = 1000

// fireWorkflows creates, inside tx, the instances of partition l's workflows due up to horizon
// (Unix ms), advances their next fires and returns what arms the root nodes' fires after the
// commit. It raises the partition's fence once it has found due workflows: their read takes no
// locks, and the advance moves a workflow's next fire only if it is still the one read, so an
// API change committed in between wins. A fire later than the misfire threshold follows the
// workflow's misfire strategy: FIRE_ONCE_NOW starts it now (trigger type MISFIRE), DO_NOTHING
// records it as a SKIPPED instance. The whole scan costs a few statements, whatever number of
// instances it creates.
func (l *engine) fireWorkflows(ctx context.Context, tx *db.Tx, now time.Time, horizon int64) ([]func(), error) {
	s := l.s
	st := s.wfStore()
	due, err := st.dueWorkflows(ctx, tx.Tx, l.part, horizon, maxWorkflowsPerScan)
	if err != nil || len(due) == 0 {
		return nil, err
	}
	if err := s.jobs.fence(ctx, tx.Tx, l.part, l.epoch, s.cfg.ReplicaID); err != nil {
		return nil, err
	}
	nowMs := now.UnixMilli()
	type wfFireAt struct {
		w       *workflowRow
		ms, due int64
		tt      triggerType
		skip    bool
	}
	var (
		fires    []wfFireAt
		advances []advance
	)
	for _, w := range due {
		if w.Graph, err = s.graphOf(ctx, tx, w.ID, w.Version); err != nil {
			return nil, err
		}
		sch, err := schedule.Parse(w.ScheduleType, w.ScheduleExpr, w.TimeZone)
		if err != nil {
			s.log.Error("workflow not fired: its schedule does not parse", "workflow_id", w.ID, "error", err)
			advances = append(advances, advance{id: w.ID, readMs: w.NextFireMs, version: w.Version})
			continue
		}
		t := w.NextFireMs
		for t != 0 && t <= horizon {
			if isLate(t, nowMs, s.cfg.MisfireThreshold) {
				if w.Misfire == misfireFireOnceNow {
					fires = append(fires, wfFireAt{w: w, ms: t, due: nowMs, tt: triggerMisfire})
				} else {
					fires = append(fires, wfFireAt{w: w, ms: t, tt: triggerCron, skip: true})
				}
				t = nextAfter(sch, now)
				continue
			}
			fires = append(fires, wfFireAt{w: w, ms: t, due: t, tt: triggerCron})
			t = nextAfter(sch, time.UnixMilli(t))
		}
		advances = append(advances, advance{id: w.ID, readMs: w.NextFireMs, nextMs: t, version: w.Version})
	}
	advanced, err := st.advanceWorkflows(ctx, tx.Tx, advances)
	if err != nil {
		return nil, err
	}
	ids := make([]int64, 0, len(due))
	for _, w := range due {
		if advanced[w.ID] {
			ids = append(ids, w.ID)
		}
	}
	running, err := st.countRunningOf(ctx, tx.Tx, ids)
	if err != nil {
		return nil, err
	}
	t := newTxn(tx)
	var roots []int64
	for _, f := range fires {
		if advanced[f.w.ID] && !f.skip {
			for _, n := range f.w.Graph.Roots() {
				roots = append(roots, f.w.Graph.Nodes[n].JobID)
			}
		}
	}
	if err := t.needJobs(ctx, s, roots); err != nil {
		return nil, err
	}
	// The ids a manual trigger has taken already (they avoid whole seconds, where cron fires
	// fall, but not a FIX_RATE time): that instance stands for this fire, which neither starts
	// nor counts against max_concurrent_instances.
	planned := make([]string, 0, len(fires))
	for _, f := range fires {
		planned = append(planned, instanceID(f.w.ID, f.ms))
	}
	taken, err := st.existingInstances(ctx, tx.Tx, planned)
	if err != nil {
		return nil, err
	}
	var ins []*instanceRow
	for _, f := range fires {
		if !advanced[f.w.ID] {
			continue // the API moved it after the scan read it: its fires are not this scan's
		}
		if taken[instanceID(f.w.ID, f.ms)] {
			s.log.Warn("workflow fire not started: an instance has its time", "workflow_id", f.w.ID, "scheduled_ms", f.ms)
			continue
		}
		if f.skip {
			ins = append(ins, skippedInstance(f.w, f.ms, f.tt, "a late fire its misfire strategy DO_NOTHING skipped", nowMs))
			continue
		}
		in, err := s.newInstance(ctx, t, f.w, f.ms, f.due, f.tt, nil, running)
		if err != nil {
			return nil, err
		}
		ins = append(ins, in)
	}
	fresh, err := st.insertInstances(ctx, tx.Tx, ins)
	if err != nil {
		return nil, err
	}
	for _, in := range ins {
		if !fresh[in.ID] {
			// Taken since the check above, by a manual trigger committed meanwhile.
			s.log.Warn("workflow fire not started: an instance has its time", "workflow_id", in.WorkflowID,
				"scheduled_ms", in.ScheduledMs)
		}
	}
	t.keepFires(func(k pendingKey) bool { return fresh[instanceID(k.wf, k.fireMs)] })
	t.keepFailed(func(id string) bool { return fresh[id] })
	return t.flush(ctx, s, nil)
}

// skippedInstance is a fire of w that does not run, as a SKIPPED instance.
func skippedInstance(w *workflowRow, ms int64, tt triggerType, why string, nowMs int64) *instanceRow {
	in := &instanceRow{ID: instanceID(w.ID, ms), WorkflowID: w.ID, Version: w.Version, Status: instSkipped, TrigType: tt,
		ScheduledMs: ms, Params: w.Graph.Params, Nodes: make([]nodeState, len(w.Graph.Nodes)), CreateMs: nowMs, EndMs: nowMs}
	for i := range in.Nodes {
		in.Nodes[i].Msg = why
	}
	return in
}

// newInstance builds the instance of w (its current version) scheduled at ms, with its roots'
// fires due at dueMs gathered in t, unless the workflow runs max_concurrent_instances already
// (running counts them, and the instance when it runs): then a SKIPPED instance. extra params
// are merged over the workflow's. The caller stores it (insertInstances) and keeps t's fires
// only if it was new.
func (s *Service) newInstance(ctx context.Context, t *txn, w *workflowRow, ms, dueMs int64, tt triggerType,
	extra map[string]string, running map[int64]int) (*instanceRow, error) {
	nowMs := s.clk.Now().UnixMilli()
	if n := running[w.ID]; max(w.MaxConcurrent, 1) <= int32(n) {
		s.log.Info("workflow fire skipped: max concurrent instances running", "workflow_id", w.ID, "scheduled_ms", ms,
			"running", n)
		return skippedInstance(w, ms, tt, fmt.Sprintf("%d instances running: max_concurrent_instances", n), nowMs), nil
	}
	params := make(map[string]string, len(w.Graph.Params)+len(extra))
	for k, v := range w.Graph.Params {
		params[k] = v
	}
	for k, v := range extra {
		params[k] = v
	}
	in := &instanceRow{ID: instanceID(w.ID, ms), WorkflowID: w.ID, Version: w.Version, Status: instRunning, TrigType: tt,
		ScheduledMs: ms, Params: params, Nodes: make([]nodeState, len(w.Graph.Nodes)), CreateMs: nowMs}
	if err := s.advanceInstance(ctx, t, w.GroupID, w.Graph, in, dueMs); err != nil {
		return nil, err
	}
	if in.Status == instRunning {
		running[w.ID]++
	}
	return in, nil
}

// errInstanceExists: an instance with the id is stored already.
var errInstanceExists = errors.New("workflow instance exists")

// startInstance creates, inside t, the instance of w scheduled at ms (newInstance), and stores
// it; errInstanceExists when the id is taken. The caller flushes t.
func (s *Service) startInstance(ctx context.Context, t *txn, w *workflowRow, ms, dueMs int64, tt triggerType,
	extra map[string]string) (*instanceRow, error) {
	st := s.wfStore()
	// Instances start one at a time per workflow, so that each counts the ones before it: two
	// triggers at once (or a trigger and the pre-read, which holds the row from its advance on,
	// or a retry, instanceOp) would each count the same running instances and start over
	// max_concurrent_instances.
	if _, err := st.lockWorkflow(ctx, t.Tx, w.ID); err != nil {
		return nil, err
	}
	running, err := st.countRunningOf(ctx, t.Tx, []int64{w.ID})
	if err != nil {
		return nil, err
	}
	in, err := s.newInstance(ctx, t, w, ms, dueMs, tt, extra, running)
	if err != nil {
		return nil, err
	}
	fresh, err := st.insertInstances(ctx, t.Tx, []*instanceRow{in})
	if err != nil {
		return nil, err
	}
	if !fresh[in.ID] {
		return nil, errInstanceExists
	}
	return in, nil
}

// advanceInstance applies the graph's rule to in's nodes (workflow.Graph.Advance): it gathers in
// t the fires of the nodes that start, due at dueMs, marks the skipped ones, and ends the
// instance when nothing waits or runs. A node whose job is gone or has left the workflow's
// group fails at once. The caller saves in (t.save, or insertInstances for a new one).
func (s *Service) advanceInstance(ctx context.Context, t *txn, groupID int64, g *workflow.Graph, in *instanceRow, dueMs int64) error {
	st := make([]workflow.Status, len(in.Nodes))
	nowMs := s.clk.Now().UnixMilli()
	for {
		for i, n := range in.Nodes {
			st[i] = n.Status
		}
		start, outcome := g.Advance(st)
		for i := range in.Nodes {
			if st[i] != in.Nodes[i].Status {
				in.Nodes[i].Status, in.Nodes[i].EndMs = st[i], nowMs
				if st[i] == workflow.Passed {
					in.Nodes[i].Msg = "disabled: skipped as a success"
				} else {
					in.Nodes[i].Msg = "no incoming edge's condition held"
				}
			}
		}
		if len(start) == 0 {
			switch outcome {
			case workflow.Succeeded:
				in.Status, in.EndMs = instSuccess, nowMs
			case workflow.FailedOutcome:
				in.Status, in.EndMs = instFailed, nowMs
				t.failedNow(in)
			}
			return nil
		}
		ids := make([]int64, 0, len(start))
		for _, n := range start {
			ids = append(ids, g.Nodes[n].JobID)
		}
		if err := t.needJobs(ctx, s, ids); err != nil {
			return err
		}
		for _, n := range start {
			ns := &in.Nodes[n]
			j := t.jobs[g.Nodes[n].JobID]
			switch {
			case j == nil:
				ns.Status, ns.EndMs, ns.Msg = workflow.Failed, nowMs, fmt.Sprintf("job %d no longer exists", g.Nodes[n].JobID)
				continue
			case j.GroupID != groupID:
				ns.Status, ns.EndMs, ns.Msg = workflow.Failed, nowMs, fmt.Sprintf("job %d has left the workflow's executor group", j.ID)
				continue
			}
			tt := in.TrigType
			if ns.Attempt > 0 {
				tt = triggerRetry
			}
			t.addFire(s.nodeFire(g, in, n, j, ns.Attempt, tt), dueMs)
			ns.Status, ns.Fired, ns.StartMs, ns.EndMs, ns.Msg, ns.Outputs = workflow.Running, true, dueMs, 0, "", nil
		}
	}
}

// nodeFire builds the fire of node n of instance in, attempt attempt: the node's params over
// the job's, its timeout over the job's, and its context (workflow.Graph.Context).
func (s *Service) nodeFire(g *workflow.Graph, in *instanceRow, n int, j *jobRow, attempt int32, tt triggerType) *fire {
	node := g.Nodes[n]
	outs := make([]map[string]string, len(in.Nodes))
	for i := range in.Nodes {
		outs[i] = in.Nodes[i].Outputs
	}
	f := &fire{job: j, fireMs: in.ScheduledMs, attempt: attempt, kind: kindNode, trigType: tt,
		wf: &wfFire{ID: in.WorkflowID, Node: int32(n), NodeID: node.ID, Context: g.Context(n, in.Params, outs),
			TimeoutSeconds: node.TimeoutSeconds}}
	if node.Params != nil {
		p := *node.Params
		f.params = &p
	}
	return f
}

// nodeKey is the pending key of node n's fire at attempt in instance in.
func nodeKey(g *workflow.Graph, in *instanceRow, n int, attempt int32) pendingKey {
	return pendingKey{job: g.Nodes[n].JobID, fireMs: in.ScheduledMs, shard: -1, attempt: attempt, wf: in.WorkflowID, node: int32(n)}
}

// completionPart is the partition whose leader acts on completion c: a workflow node's
// completion goes to the workflow's partition (its instance's decisions are taken there, one
// at a time), any other to its job's.
func (s *Service) completionPart(c *logsv1.Completion) int {
	if id, ok := triggerid.Parse(c.GetTriggerId()); ok && id.Workflow != 0 {
		return partition.PartitionOf(id.Workflow, s.partCount())
	}
	return partition.PartitionOf(c.GetJobId(), s.partCount())
}

// isNodeCompletion reports whether c is a workflow node's.
func isNodeCompletion(c *logsv1.Completion) (triggerid.ID, bool) {
	id, ok := triggerid.Parse(c.GetTriggerId())
	return id, ok && id.Workflow != 0
}

// actOnNodeCompletions applies workflow nodes' completions inside the completion batch's
// fenced tx, and returns what arms the fires they decide after the commit. The batch costs a
// few statements whatever its size: its instances are locked in one query, its workflows'
// groups and the jobs of the nodes it may start read in one each, and the fires and instances
// it decides written in one round trip with the statements last holds (flush).
func (s *Service) actOnNodeCompletions(ctx context.Context, tx *db.Tx, cs []*logsv1.Completion, last *db.Batch) ([]func(), error) {
	if len(cs) == 0 {
		return nil, nil
	}
	st := s.wfStore()
	ids := make([]triggerid.ID, len(cs))
	names := make([]string, 0, len(cs))
	for i, c := range cs {
		ids[i], _ = isNodeCompletion(c)
		names = append(names, instanceID(ids[i].Workflow, ids[i].ScheduledMs))
	}
	ins, err := st.lockInstances(ctx, tx.Tx, names)
	if err != nil {
		return nil, err
	}
	wfs := make([]int64, 0, len(ins))
	var jobs []int64
	for i, c := range cs {
		in := ins[names[i]]
		if in == nil || in.Status != instRunning || int(ids[i].Node) >= len(in.Nodes) {
			continue
		}
		if !slices.Contains(wfs, in.WorkflowID) {
			wfs = append(wfs, in.WorkflowID)
		}
		if c.GetStatus() == logsv1.RunStatus_RUN_STATUS_RUNNING {
			continue
		}
		// The jobs a completion may start: its node's (a retry) and the nodes after it.
		g, err := s.graphOf(ctx, tx.Tx, in.WorkflowID, in.Version)
		if err != nil {
			return nil, err
		}
		n := int(ids[i].Node)
		jobs = append(jobs, g.Nodes[n].JobID)
		for _, d := range g.Next(n) {
			jobs = append(jobs, g.Nodes[d].JobID)
		}
	}
	groups, err := st.workflowGroups(ctx, tx.Tx, wfs)
	if err != nil {
		return nil, err
	}
	t := newTxn(tx)
	if err := t.needJobs(ctx, s, jobs); err != nil {
		return nil, err
	}
	for i, c := range cs {
		if in := ins[names[i]]; in != nil {
			if err := s.onNodeCompletion(ctx, t, c, ids[i], in, groups); err != nil {
				return nil, err
			}
		}
	}
	return t.flush(ctx, s, last)
}

// onNodeCompletion applies one node's completion to its instance in (locked): a success or a
// failure past the node's retries decides the node and lets the graph advance; a failure
// within them gathers the node's retry (attempt+1, after its job's backoff). A completion that
// is not the node's current attempt (a node marked done, killed or retried meanwhile), of an
// instance that has ended, or a correction (Completion.replaces_status) changes nothing.
// groups are the executor groups of the batch's workflows (a deleted one is missing).
func (s *Service) onNodeCompletion(ctx context.Context, t *txn, c *logsv1.Completion, id triggerid.ID, in *instanceRow,
	groups map[int64]int64) error {
	if in.Status != instRunning || int(id.Node) >= len(in.Nodes) {
		return nil
	}
	ns := &in.Nodes[id.Node]
	if ns.Status != workflow.Running || ns.Attempt != id.Attempt {
		return nil
	}
	if c.GetReplacesStatus() != logsv1.RunStatus_RUN_STATUS_UNSPECIFIED {
		s.log.Info("workflow node's run corrected after it was decided; the instance keeps its decision",
			"trigger_id", c.GetTriggerId(), "status", c.GetStatus().String(), "replaces", c.GetReplacesStatus().String())
		return nil
	}
	g, err := s.graphOf(ctx, t.Tx, in.WorkflowID, in.Version)
	if err != nil {
		return err
	}
	groupID, ok := groups[in.WorkflowID]
	if !ok {
		// Deleted: its running instances end as their version says; no job fires for them (their
		// nodes fail).
		groupID = -1
	}
	node := g.Nodes[id.Node]
	nowMs := s.clk.Now().UnixMilli()
	ns.Outputs = c.GetOutputs()
	switch c.GetStatus() {
	case logsv1.RunStatus_RUN_STATUS_RUNNING:
		return nil
	case logsv1.RunStatus_RUN_STATUS_SUCCESS:
		ns.Status, ns.Msg = workflow.Success, ""
	case logsv1.RunStatus_RUN_STATUS_KILLED:
		ns.Status, ns.Msg = workflow.Killed, "its run was killed"
	default:
		if id.Attempt-ns.Base < node.RetryCount {
			if err := t.needJobs(ctx, s, []int64{node.JobID}); err != nil {
				return err
			}
			if j := t.jobs[node.JobID]; j != nil {
				ns.Attempt++
				f := s.nodeFire(g, in, int(id.Node), j, ns.Attempt, triggerRetry)
				t.addFire(f, s.clk.Now().Add(retryWait(j, id.Attempt)).UnixMilli())
				ns.Msg = fmt.Sprintf("attempt %d %s; retrying", id.Attempt, c.GetStatus().String())
				t.save(in)
				return nil
			}
		}
		ns.Status, ns.Msg = workflow.Failed, "its run ended "+c.GetStatus().String()
	}
	ns.EndMs = max(c.GetEndUnixMs(), nowMs)
	if err := s.advanceInstance(ctx, t, groupID, g, in, nowMs); err != nil {
		return err
	}
	t.save(in)
	return nil
}

// graphOf reads version v of workflow wf's graph; versions never change, so it is kept.
func (s *Service) graphOf(ctx context.Context, q queryer, wf, v int64) (*workflow.Graph, error) {
	k := [2]int64{wf, v}
	if g, ok := s.graphs.Load(k); ok {
		return g.(*workflow.Graph), nil
	}
	g, err := s.wfStore().graphIn(ctx, q, wf, v)
	if err != nil {
		return nil, err
	}
	s.graphs.Store(k, g)
	return g, nil
}
