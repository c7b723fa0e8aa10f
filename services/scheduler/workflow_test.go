package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/internal/clock"
	"github.com/jobmesh/jobmesh/internal/triggerid"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/schedule"
)

// wfRig is the completion rig (one partition led here, a fake clock, a ring that is not
// running) with workflows: completions of node fires are handed to the leader as logsvc would
// stream them, and what the leader decides is read back from the store.
type wfRig struct {
	*completionRig
	kills *killRecorder
}

// killRecorder is a LogServiceClient that records KillRun and SendWorkflowAlarm calls; a
// SendWorkflowAlarm fails while alarmDown is set.
type killRecorder struct {
	logsv1.LogServiceClient
	ids       []string
	alarms    []*logsv1.SendWorkflowAlarmRequest
	alarmDown bool
}

func (k *killRecorder) SendWorkflowAlarm(_ context.Context, req *logsv1.SendWorkflowAlarmRequest, _ ...grpc.CallOption) (*logsv1.SendWorkflowAlarmResponse, error) {
	if k.alarmDown {
		return nil, status.Error(codes.Unavailable, "logsvc down")
	}
	k.alarms = append(k.alarms, req)
	return &logsv1.SendWorkflowAlarmResponse{Sent: true}, nil
}

func (k *killRecorder) KillRun(_ context.Context, req *logsv1.KillRunRequest, _ ...grpc.CallOption) (*logsv1.KillRunResponse, error) {
	k.ids = append(k.ids, req.GetId())
	return &logsv1.KillRunResponse{Killed: true}, nil
}

func newWfRig(t *testing.T) *wfRig {
	r := &wfRig{completionRig: newCompletionRig(t), kills: &killRecorder{}}
	r.s.logs = r.kills
	r.s.cfg.MisfireThreshold = 5 * time.Second
	return r
}

// jobs creates n jobs of group 1 without retries.
func (r *wfRig) jobs(t *testing.T, n int) []int64 {
	t.Helper()
	var ids []int64
	for range n {
		id, err := r.s.jobs.insert(t.Context(), &jobRow{GroupID: 1, Name: "j", ScheduleType: schedule.None, Misfire: 1, Route: 1,
			Block: 1, RetryBackoff: retryNoWait, GlueType: 1, Handler: "h", Status: jobStopped}, 1)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// graph builds a workflow of group 1 from node ids (each on its own job) and edges "A>B"
// (ON_SUCCESS), "A!B" (ON_FAILURE), "A*B" (ALWAYS).
func (r *wfRig) graph(t *testing.T, ids string, edges ...string) *schedulerv1.Workflow {
	t.Helper()
	names := strings.Fields(ids)
	jobs := r.jobs(t, len(names))
	w := &schedulerv1.Workflow{GroupId: 1, Name: "wf", Schedule: &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_NONE}}
	for i, n := range names {
		w.Nodes = append(w.Nodes, &schedulerv1.WorkflowNode{Id: n, JobId: jobs[i]})
	}
	for _, e := range edges {
		c, sep := schedulerv1.EdgeCondition_EDGE_CONDITION_ON_SUCCESS, ">"
		switch {
		case strings.Contains(e, "!"):
			c, sep = schedulerv1.EdgeCondition_EDGE_CONDITION_ON_FAILURE, "!"
		case strings.Contains(e, "*"):
			c, sep = schedulerv1.EdgeCondition_EDGE_CONDITION_ALWAYS, "*"
		}
		from, to, _ := strings.Cut(e, sep)
		w.Edges = append(w.Edges, &schedulerv1.WorkflowEdge{From: from, To: to, Condition: c})
	}
	return w
}

func (r *wfRig) create(t *testing.T, w *schedulerv1.Workflow) *schedulerv1.Workflow {
	t.Helper()
	resp, err := r.s.CreateWorkflow(t.Context(), &schedulerv1.CreateWorkflowRequest{Workflow: w})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetWorkflow()
}

func (r *wfRig) trigger(t *testing.T, wf int64, params map[string]string) string {
	t.Helper()
	resp, err := r.s.TriggerWorkflow(t.Context(), &schedulerv1.TriggerWorkflowRequest{Id: wf, Params: params})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetInstance().GetId()
}

// pendingNode is a node fire the leader stored.
type pendingNode struct {
	id      string // trigger id
	node    string
	context map[string]string
	params  *string
	timeout int32
}

// pending lists the node fires stored for instance id, by node id.
func (r *wfRig) pending(t *testing.T, id string) map[string]pendingNode {
	t.Helper()
	wf, ms, _ := parseInstanceID(id)
	d := storeDB(r.s)
	rows, err := d.QueryContext(t.Context(), d.Q(`SELECT job_id, attempt, wf_node, wf, fire_params FROM pending_fires
		WHERE wf_id = $1 AND fire_ms = $2`), wf, ms)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]pendingNode{}
	for rows.Next() {
		var (
			job       int64
			att, node int32
			text      string
			params    *string
		)
		if err := rows.Scan(&job, &att, &node, &text, &params); err != nil {
			t.Fatal(err)
		}
		var w wfFire
		if err := json.Unmarshal([]byte(text), &w); err != nil {
			t.Fatal(err)
		}
		tid := triggerid.ID{Job: job, ScheduledMs: ms, Attempt: att, Workflow: wf, Node: node}.String()
		out[w.NodeID] = pendingNode{id: tid, node: w.NodeID, context: w.Context, params: params, timeout: w.TimeoutSeconds}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// pendingIDs lists the node ids with a fire stored for instance id, sorted.
func (r *wfRig) pendingIDs(t *testing.T, id string) []string {
	t.Helper()
	return slices.Sorted(maps.Keys(r.pending(t, id)))
}

// run dispatches node's stored fire (its pending row goes, as after a dispatch) and hands the
// leader its completion with status and outputs.
func (r *wfRig) run(t *testing.T, id, node string, st logsv1.RunStatus, outputs map[string]string) {
	t.Helper()
	p, ok := r.pending(t, id)[node]
	if !ok {
		t.Fatalf("node %s of %s has no fire stored; stored: %v", node, id, r.pendingIDs(t, id))
	}
	tid, _ := triggerid.Parse(p.id)
	if err := r.s.jobs.deletePending(t.Context(), pendingKey{job: tid.Job, fireMs: tid.ScheduledMs, shard: -1, attempt: tid.Attempt,
		wf: tid.Workflow, node: tid.Node}); err != nil {
		t.Fatal(err)
	}
	c := &logsv1.Completion{Cursor: r.clk.Now().UnixMilli(), TriggerId: p.id, JobId: tid.Job, Status: st, Attempt: tid.Attempt,
		ScheduledUnixMs: tid.ScheduledMs, EndUnixMs: r.clk.Now().UnixMilli(), Outputs: outputs}
	if err := applyCompletions(t.Context(), r.s, []*logsv1.Completion{c}); err != nil {
		t.Fatal(err)
	}
	r.clk.Advance(time.Millisecond)
}

// state returns the instance's status and its nodes' as "A=SUCCESS B=SKIPPED …".
func (r *wfRig) state(t *testing.T, id string) (string, string) {
	t.Helper()
	resp, err := r.s.GetWorkflowInstance(t.Context(), &schedulerv1.GetWorkflowInstanceRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, n := range resp.GetInstance().GetNodes() {
		nodes = append(nodes, n.GetNodeId()+"="+strings.TrimPrefix(n.GetStatus().String(), "WORKFLOW_NODE_STATUS_"))
	}
	return strings.TrimPrefix(resp.GetInstance().GetStatus().String(), "WORKFLOW_INSTANCE_STATUS_"), strings.Join(nodes, " ")
}

func (r *wfRig) want(t *testing.T, id, wantStatus, wantNodes string) {
	t.Helper()
	if st, nodes := r.state(t, id); st != wantStatus || nodes != wantNodes {
		t.Fatalf("instance %s: %s [%s]; want %s [%s]", id, st, nodes, wantStatus, wantNodes)
	}
}

func (r *wfRig) wantPending(t *testing.T, id string, want ...string) {
	t.Helper()
	if got := r.pendingIDs(t, id); !slices.Equal(got, want) {
		t.Fatalf("instance %s: node fires stored %v; want %v", id, got, want)
	}
}

var (
	stKilled = logsv1.RunStatus_RUN_STATUS_KILLED
)

// TestWorkflowDiamond: A → B, A → C, B+C → D. The root starts at once; B and C after A; D only
// once both have ended; the instance succeeds. Each node's context holds the instance's params
// and its upstream nodes' outputs.
func TestWorkflowDiamond(t *testing.T) {
	t.Parallel()
	r := newWfRig(t)
	w := r.create(t, r.graph(t, "A B C D", "A>B", "A>C", "B>D", "C>D"))
	id := r.trigger(t, w.GetId(), map[string]string{"day": "2026-11-28"})
	r.want(t, id, "RUNNING", "A=RUNNING B=WAITING C=WAITING D=WAITING")
	r.wantPending(t, id, "A")
	if got := r.armed(w.GetNodes()[0].GetJobId()); len(got) != 1 {
		t.Fatalf("A's fire armed %v; want one (this replica leads its partition)", got)
	}

	r.run(t, id, "A", stSuccess, map[string]string{"rows": "42"})
	r.wantPending(t, id, "B", "C")
	if got, want := r.pending(t, id)["B"].context, map[string]string{"day": "2026-11-28", "rows": "42", "A.rows": "42"}; !maps.Equal(got, want) {
		t.Errorf("B's context %v; want %v", got, want)
	}
	r.run(t, id, "B", stSuccess, map[string]string{"k": "b"})
	r.wantPending(t, id, "C")
	r.want(t, id, "RUNNING", "A=SUCCESS B=SUCCESS C=RUNNING D=WAITING")
	r.run(t, id, "C", stSuccess, map[string]string{"k": "c"})
	d := r.pending(t, id)["D"]
	// D reads its upstreams' outputs: C is later than B in the graph's order, so its bare k wins.
	if want := map[string]string{"day": "2026-11-28", "B.k": "b", "C.k": "c", "k": "c"}; !maps.Equal(d.context, want) {
		t.Errorf("D's context %v; want %v", d.context, want)
	}
	if !strings.HasSuffix(d.id, "-w"+itoa(w.GetId())+".3") {
		t.Errorf("D's trigger id %s: want it to name the workflow and node 3", d.id)
	}
	r.run(t, id, "D", stSuccess, nil)
	r.want(t, id, "SUCCESS", "A=SUCCESS B=SUCCESS C=SUCCESS D=SUCCESS")
	r.wantPending(t, id)

	// A completion handled again (a failover replays the stream) changes nothing.
	c := &logsv1.Completion{Cursor: r.clk.Now().UnixMilli(), TriggerId: d.id, JobId: w.GetNodes()[3].GetJobId(), Status: stFail,
		ScheduledUnixMs: mustParse(t, d.id).ScheduledMs}
	if err := applyCompletions(t.Context(), r.s, []*logsv1.Completion{c}); err != nil {
		t.Fatal(err)
	}
	r.want(t, id, "SUCCESS", "A=SUCCESS B=SUCCESS C=SUCCESS D=SUCCESS")
}

// TestWorkflowFailureBranchAndCleanup: A fails → E runs on ON_FAILURE, D (ON_SUCCESS) is
// skipped, the ALWAYS cleanup F runs after D (skipped) and E; the failure was handled, so the
// instance succeeds. Without the ON_FAILURE path, A's failure fails the instance.
func TestWorkflowFailureBranchAndCleanup(t *testing.T) {
	t.Parallel()
	r := newWfRig(t)
	w := r.create(t, r.graph(t, "A D E F", "A>D", "A!E", "D*F", "E*F"))
	id := r.trigger(t, w.GetId(), nil)
	r.run(t, id, "A", stFail, nil)
	r.want(t, id, "RUNNING", "A=FAILED D=SKIPPED E=RUNNING F=WAITING")
	r.wantPending(t, id, "E")
	r.run(t, id, "E", stSuccess, nil)
	r.wantPending(t, id, "F")
	r.run(t, id, "F", stSuccess, nil)
	r.want(t, id, "SUCCESS", "A=FAILED D=SKIPPED E=SUCCESS F=SUCCESS")

	// The success path: E is skipped, F still runs (ALWAYS).
	id2 := r.trigger(t, w.GetId(), nil)
	r.run(t, id2, "A", stSuccess, nil)
	r.wantPending(t, id2, "D")
	r.run(t, id2, "D", stFail, nil)
	r.want(t, id2, "RUNNING", "A=SUCCESS D=FAILED E=SKIPPED F=RUNNING")
	r.run(t, id2, "F", stSuccess, nil)
	r.want(t, id2, "FAILED", "A=SUCCESS D=FAILED E=SKIPPED F=SUCCESS") // D failed with no ON_FAILURE edge
}

// TestWorkflowDisabledNodeAndRetries: a disabled node is skipped as a success (its ON_SUCCESS
// edges hold); a node retries with its own retry count, under attempt+1's trigger id.
func TestWorkflowDisabledNodeAndRetries(t *testing.T) {
	t.Parallel()
	r := newWfRig(t)
	g := r.graph(t, "A B C", "A>B", "B>C")
	off := false
	g.Nodes[1].Enabled = &off
	g.Nodes[2].RetryCount = 1
	p := "override"
	g.Nodes[2].Params, g.Nodes[2].TimeoutSeconds = &p, 7
	w := r.create(t, g)
	id := r.trigger(t, w.GetId(), nil)
	r.run(t, id, "A", stSuccess, nil)
	r.want(t, id, "RUNNING", "A=SUCCESS B=SKIPPED C=RUNNING")
	c := r.pending(t, id)["C"]
	if c.params == nil || *c.params != "override" || c.timeout != 7 || mustParse(t, c.id).Attempt != 0 {
		t.Fatalf("C's fire %+v; want the node's params and timeout, attempt 0", c)
	}
	r.run(t, id, "C", stFail, nil)
	if got := mustParse(t, r.pending(t, id)["C"].id).Attempt; got != 1 {
		t.Fatalf("C's retry is attempt %d; want 1", got)
	}
	r.want(t, id, "RUNNING", "A=SUCCESS B=SKIPPED C=RUNNING")
	r.run(t, id, "C", stSuccess, nil)
	r.want(t, id, "SUCCESS", "A=SUCCESS B=SKIPPED C=SUCCESS")
}

// TestWorkflowKillRetryAndMarkDone: killing a running instance kills its running nodes' runs
// and drops their fires; retrying it re-runs the killed and failed nodes (a new attempt) and
// keeps the successful ones; marking a failed node done lets its downstream run.
func TestWorkflowKillRetryAndMarkDone(t *testing.T) {
	t.Parallel()
	r := newWfRig(t)
	w := r.create(t, r.graph(t, "A B C D", "A>B", "A>C", "B>D", "C>D"))
	id := r.trigger(t, w.GetId(), nil)
	r.run(t, id, "A", stSuccess, nil)
	r.run(t, id, "B", stSuccess, nil)
	cFire := r.pending(t, id)["C"].id
	if _, err := r.s.KillWorkflowInstance(t.Context(), &schedulerv1.KillWorkflowInstanceRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	r.want(t, id, "KILLED", "A=SUCCESS B=SUCCESS C=KILLED D=WAITING")
	r.wantPending(t, id)
	if !slices.Equal(r.kills.ids, []string{cFire}) {
		t.Errorf("runs killed %v; want C's %s", r.kills.ids, cFire)
	}
	// C's run ends KILLED: the instance has ended already.
	c := &logsv1.Completion{Cursor: r.clk.Now().UnixMilli(), TriggerId: cFire, JobId: mustParse(t, cFire).Job, Status: stKilled,
		ScheduledUnixMs: mustParse(t, cFire).ScheduledMs}
	if err := applyCompletions(t.Context(), r.s, []*logsv1.Completion{c}); err != nil {
		t.Fatal(err)
	}
	r.clk.Advance(time.Millisecond)
	if _, err := r.s.KillWorkflowInstance(t.Context(), &schedulerv1.KillWorkflowInstanceRequest{Id: id}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("killing a killed instance: %v; want FailedPrecondition", err)
	}

	if _, err := r.s.RetryWorkflowInstance(t.Context(), &schedulerv1.RetryWorkflowInstanceRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	r.want(t, id, "RUNNING", "A=SUCCESS B=SUCCESS C=RUNNING D=WAITING")
	if got := mustParse(t, r.pending(t, id)["C"].id).Attempt; got != 1 {
		t.Errorf("C re-runs as attempt %d; want 1 (a new trigger id)", got)
	}
	r.run(t, id, "C", stFail, nil)
	r.want(t, id, "RUNNING", "A=SUCCESS B=SUCCESS C=FAILED D=RUNNING") // D runs on B (one edge holds)
	r.run(t, id, "D", stFail, nil)
	r.want(t, id, "FAILED", "A=SUCCESS B=SUCCESS C=FAILED D=FAILED")

	if _, err := r.s.MarkWorkflowNodeDone(t.Context(), &schedulerv1.MarkWorkflowNodeDoneRequest{Id: id, NodeId: "C"}); err != nil {
		t.Fatal(err)
	}
	r.want(t, id, "FAILED", "A=SUCCESS B=SUCCESS C=SUCCESS D=FAILED")
	if _, err := r.s.MarkWorkflowNodeDone(t.Context(), &schedulerv1.MarkWorkflowNodeDoneRequest{Id: id, NodeId: "D"}); err != nil {
		t.Fatal(err)
	}
	r.want(t, id, "SUCCESS", "A=SUCCESS B=SUCCESS C=SUCCESS D=SUCCESS")
}

// TestWorkflowMarkDoneReopensSkipped: marking a failed node done lets the nodes skipped after it
// (and the skip's spread) run; the graph decides them afresh.
func TestWorkflowMarkDoneReopensSkipped(t *testing.T) {
	t.Parallel()
	r := newWfRig(t)
	w := r.create(t, r.graph(t, "A B C", "A>B", "B>C"))
	id := r.trigger(t, w.GetId(), nil)
	r.run(t, id, "A", stFail, nil)
	r.want(t, id, "FAILED", "A=FAILED B=SKIPPED C=SKIPPED")
	if _, err := r.s.MarkWorkflowNodeDone(t.Context(), &schedulerv1.MarkWorkflowNodeDoneRequest{Id: id, NodeId: "A"}); err != nil {
		t.Fatal(err)
	}
	r.want(t, id, "RUNNING", "A=SUCCESS B=RUNNING C=WAITING")
	r.run(t, id, "B", stSuccess, nil)
	r.run(t, id, "C", stSuccess, nil)
	r.want(t, id, "SUCCESS", "A=SUCCESS B=SUCCESS C=SUCCESS")
}

// TestWorkflowVersions: an update stores a new version; an instance started before it runs the
// version it pinned to the end.
func TestWorkflowVersions(t *testing.T) {
	t.Parallel()
	r := newWfRig(t)
	w := r.create(t, r.graph(t, "A B", "A>B"))
	id := r.trigger(t, w.GetId(), nil)
	w.Nodes = w.Nodes[:1]
	w.Edges = nil
	up, err := r.s.UpdateWorkflow(t.Context(), &schedulerv1.UpdateWorkflowRequest{Workflow: w})
	if err != nil {
		t.Fatal(err)
	}
	if up.GetWorkflow().GetVersion() != 2 || len(up.GetWorkflow().GetNodes()) != 1 {
		t.Fatalf("updated: version %d, %d nodes; want version 2, 1 node", up.GetWorkflow().GetVersion(), len(up.GetWorkflow().GetNodes()))
	}
	if _, err := r.s.UpdateWorkflow(t.Context(), &schedulerv1.UpdateWorkflowRequest{Workflow: w}); !errorIs(err, apierr.ErrVersionConflict) {
		t.Errorf("update at a stale version: %v; want a version conflict", err)
	}
	r.run(t, id, "A", stSuccess, nil)
	r.want(t, id, "RUNNING", "A=SUCCESS B=RUNNING") // version 1 still has B
	r.run(t, id, "B", stSuccess, nil)
	r.want(t, id, "SUCCESS", "A=SUCCESS B=SUCCESS")
	id2 := r.trigger(t, w.GetId(), nil)
	r.want(t, id2, "RUNNING", "A=RUNNING")
}

// TestWorkflowValidation: errors name the field and the node.
func TestWorkflowValidation(t *testing.T) {
	t.Parallel()
	r := newWfRig(t)
	g := r.graph(t, "A B C", "A>B", "B>C", "C>B")
	other, err := r.s.jobs.insert(t.Context(), &jobRow{GroupID: 2, Name: "x", ScheduleType: schedule.None, Misfire: 1, Route: 1, Block: 1,
		RetryBackoff: 1, GlueType: 1, Handler: "h", Status: jobStopped}, 1)
	if err != nil {
		t.Fatal(err)
	}
	g.Nodes[0].JobId = other
	g.Nodes = append(g.Nodes, &schedulerv1.WorkflowNode{Id: "A", JobId: g.Nodes[1].GetJobId()})
	g.Edges = append(g.Edges, &schedulerv1.WorkflowEdge{From: "C", To: "Z"})
	resp, err := r.s.ValidateWorkflow(t.Context(), &schedulerv1.ValidateWorkflowRequest{Workflow: g})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range resp.GetViolations() {
		got = append(got, v.GetField()+": "+v.GetDescription())
	}
	want := []string{
		`nodes[3].id: node "A": the id of nodes[0] too; node ids are unique`,
		`edges[3].to: edge "C" → "Z": no node "Z"`,
		`nodes[0].job_id: node "A": no job ` + itoa(other) + ` in this workflow's executor group`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The cycle, once the rest is right; create refuses it as InvalidArgument naming the node.
	g = r.graph(t, "A B C", "A>B", "B>C", "C>B")
	_, err = r.s.CreateWorkflow(t.Context(), &schedulerv1.CreateWorkflowRequest{Workflow: g})
	var fs apierr.Fields
	if !errorAs(err, &fs) || len(fs) != 1 || fs[0].Field != "nodes[1]" || fs[0].Reason != `node "B" is on a cycle` {
		t.Errorf("create with a cycle: %v; want nodes[1]: node \"B\" is on a cycle", err)
	}
}

// newScheduledWfRig is a rig whose pre-read looks 5 s ahead, with a running workflow of one
// node firing every 2 s (max 1 instance at once), and its first fire's time.
func newScheduledWfRig(t *testing.T) (*wfRig, *schedulerv1.Workflow, int64) {
	t.Helper()
	r := newWfRig(t)
	r.s.cfg.PreReadWindow, r.s.cfg.PreReadBatch = 5*time.Second, 100
	g := r.graph(t, "A")
	g.Schedule = &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_FIX_RATE, Expression: "2s"}
	g.Status = schedulerv1.JobStatus_JOB_STATUS_RUNNING
	w := r.create(t, g)
	return r, w, w.GetNextFireTime().AsTime().UnixMilli()
}

// TestWorkflowSchedule: the partition's pre-read creates a scheduled workflow's instances in
// its fenced transaction, at their times, one per fire, and a fire over
// max_concurrent_instances is recorded as a SKIPPED instance.
func TestWorkflowSchedule(t *testing.T) {
	t.Parallel()
	r, w, first := newScheduledWfRig(t)
	if _, err := r.l.preRead(t.Context()); err != nil {
		t.Fatal(err)
	}
	list, err := r.s.ListWorkflowInstances(t.Context(), &schedulerv1.ListWorkflowInstancesRequest{WorkflowId: w.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range list.GetInstances() {
		got = append(got, in.GetId()+"="+strings.TrimPrefix(in.GetStatus().String(), "WORKFLOW_INSTANCE_STATUS_"))
	}
	// Fires at first (now+2s) and first+2s within the 5 s window: the first runs, the second
	// finds it running (max 1) and is skipped.
	wf := itoa(w.GetId())
	want := []string{"w" + wf + "-" + itoa(first+2000) + "=SKIPPED", "w" + wf + "-" + itoa(first) + "=RUNNING"}
	if !slices.Equal(got, want) {
		t.Fatalf("instances %v; want %v", got, want)
	}
	// Read again: nothing new (the next fire moved past the window).
	if _, err := r.l.preRead(t.Context()); err != nil {
		t.Fatal(err)
	}
	list, _ = r.s.ListWorkflowInstances(t.Context(), &schedulerv1.ListWorkflowInstancesRequest{WorkflowId: w.GetId()})
	if len(list.GetInstances()) != 2 {
		t.Errorf("%d instances after a second pre-read; want 2", len(list.GetInstances()))
	}
	if due, ok := r.pendingDueNode(t, "w"+wf+"-"+itoa(first)); !ok || due != first {
		t.Errorf("root fire due %d (%v); want at its scheduled time %d", due, ok, first)
	}
}

// TestWorkflowScanThatOnlySkipsIsStored: a pre-read whose only workflow fire is skipped (its
// instance over max_concurrent_instances) arms nothing, and still stores the SKIPPED instance
// and the workflow's next fire.
func TestWorkflowScanThatOnlySkipsIsStored(t *testing.T) {
	t.Parallel()
	r, w, first := newScheduledWfRig(t)
	if _, err := r.l.preRead(t.Context()); err != nil { // first runs, first+2s is skipped
		t.Fatal(err)
	}
	r.clk.Advance(2 * time.Second) // first+4s comes into the window; first still runs
	if _, err := r.l.preRead(t.Context()); err != nil {
		t.Fatal(err)
	}
	list, err := r.s.ListWorkflowInstances(t.Context(), &schedulerv1.ListWorkflowInstancesRequest{WorkflowId: w.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	id := "w" + itoa(w.GetId()) + "-" + itoa(first+4000)
	var found bool
	for _, in := range list.GetInstances() {
		if in.GetId() == id {
			found = true
			if in.GetStatus() != schedulerv1.WorkflowInstanceStatus_WORKFLOW_INSTANCE_STATUS_SKIPPED {
				t.Errorf("instance %s is %v; want SKIPPED", id, in.GetStatus())
			}
		}
	}
	if !found {
		t.Fatalf("no instance %s after a scan that only skipped it (%d instances)", id, len(list.GetInstances()))
	}
	got, err := r.s.GetWorkflow(t.Context(), &schedulerv1.GetWorkflowRequest{Id: w.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if next := got.GetWorkflow().GetNextFireTime().AsTime().UnixMilli(); next != first+6000 {
		t.Errorf("next fire %d; want %d, past the skipped one", next, first+6000)
	}
}

// TestWorkflowEditedDuringAScanIsNotAdvanced: a workflow edited (a new version) after a scan
// read it, its next fire unchanged, is left for the next scan, which fires the new version.
func TestWorkflowEditedDuringAScanIsNotAdvanced(t *testing.T) {
	t.Parallel()
	r, w, first := newScheduledWfRig(t)
	st := r.s.wfStore()
	tx, err := st.begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	stale := advance{id: w.GetId(), readMs: first, nextMs: first + 2000, version: w.GetVersion() - 1}
	current := stale
	current.version = w.GetVersion()
	done, err := st.advanceWorkflows(t.Context(), tx.Tx, []advance{stale})
	if err != nil || done[w.GetId()] {
		t.Fatalf("advance at an older version: %v, %v; want not advanced", done, err)
	}
	if done, err = st.advanceWorkflows(t.Context(), tx.Tx, []advance{current}); err != nil || !done[w.GetId()] {
		t.Fatalf("advance at the version read: %v, %v; want advanced", done, err)
	}
}

func (r *wfRig) pendingDueNode(t *testing.T, id string) (int64, bool) {
	wf, ms, _ := parseInstanceID(id)
	d := storeDB(r.s)
	var due int64
	if err := d.QueryRowContext(t.Context(), d.Q(`SELECT due_ms FROM pending_fires WHERE wf_id = $1 AND fire_ms = $2`), wf, ms).Scan(&due); err != nil {
		return 0, false
	}
	return due, true
}

func mustParse(t *testing.T, id string) triggerid.ID {
	t.Helper()
	tid, ok := triggerid.Parse(id)
	if !ok {
		t.Fatalf("not a trigger id: %q", id)
	}
	return tid
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func errorIs(err, target error) bool { return errors.Is(err, target) }

func errorAs(err error, target any) bool { return errors.As(err, target) }

// TestWorkflowFailureAlarm: an instance that ends FAILED stores its alarm with the decision, and
// the sender hands it to logsvc once, with the workflow's alarm emails and the failed nodes; an
// alarm logsvc could not take is sent again once its backoff has passed. An instance that succeeds, its
// failed node handled by an ON_FAILURE edge, raises none.
func TestWorkflowFailureAlarm(t *testing.T) {
	t.Parallel()
	r := newWfRig(t)
	w := r.graph(t, "A B", "A>B")
	w.AlarmEmails = []string{"data@example.com", "ops@example.com"}
	w = r.create(t, w)
	if got := w.GetAlarmEmails(); !slices.Equal(got, []string{"data@example.com", "ops@example.com"}) {
		t.Fatalf("alarm emails stored: %v", got)
	}
	handled := r.create(t, r.graph(t, "A E", "A!E"))
	ok := r.trigger(t, handled.GetId(), nil)
	r.run(t, ok, "A", stFail, nil)
	r.run(t, ok, "E", stSuccess, nil)
	r.want(t, ok, "SUCCESS", "A=FAILED E=SUCCESS")

	id := r.trigger(t, w.GetId(), nil)
	r.run(t, id, "A", stFail, nil)
	r.want(t, id, "FAILED", "A=FAILED B=SKIPPED")
	pass := func() {
		t.Helper()
		if err := r.s.sendWorkflowAlarms(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	r.kills.alarmDown = true
	pass() // fails: put off by wfAlarmBackoff
	r.kills.alarmDown = false
	pass()
	if len(r.kills.alarms) != 0 {
		t.Fatalf("alarm sent again before its backoff: %v", r.kills.alarms)
	}
	r.clk.Advance(wfAlarmBackoff)
	pass()
	pass()
	if len(r.kills.alarms) != 1 {
		t.Fatalf("%d alarms sent, want 1 (the failed instance's, once): %v", len(r.kills.alarms), r.kills.alarms)
	}
	a := r.kills.alarms[0]
	if a.GetInstanceId() != id || a.GetWorkflowId() != w.GetId() || a.GetWorkflowName() != "wf" || a.GetGroupId() != 1 ||
		!slices.Equal(a.GetAlarmEmails(), w.GetAlarmEmails()) || !slices.Equal(a.GetFailedNodes(), []string{"A: its run ended RUN_STATUS_FAIL"}) {
		t.Errorf("alarm %v", a)
	}
	bad := r.graph(t, "A")
	bad.AlarmEmails = []string{"not an address"}
	_, err := r.s.CreateWorkflow(t.Context(), &schedulerv1.CreateWorkflowRequest{Workflow: bad})
	if err == nil || !strings.Contains(err.Error(), "alarm_emails[0]") {
		t.Errorf("a bad alarm email: %v, want alarm_emails[0] named", err)
	}
}

// TestWorkflowScheduledFireOnATakenTime: a manual instance that took a FIX_RATE fire's time
// stands for that fire, which neither starts again nor counts against max_concurrent_instances:
// the next fire in the same pre-read starts.
func TestWorkflowScheduledFireOnATakenTime(t *testing.T) {
	t.Parallel()
	r, w, first := newScheduledWfRig(t)
	manual := &instanceRow{ID: instanceID(w.GetId(), first), WorkflowID: w.GetId(), Version: w.GetVersion(), Status: instSuccess,
		TrigType: triggerManual, ScheduledMs: first, Params: map[string]string{},
		Nodes: make([]nodeState, 1), CreateMs: first, EndMs: first}
	tx, err := r.s.jobs.begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if fresh, err := r.s.wfStore().insertInstances(t.Context(), tx.Tx, []*instanceRow{manual}); err != nil || !fresh[manual.ID] {
		t.Fatalf("store the manual instance: %v, %v", fresh, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.l.preRead(t.Context()); err != nil {
		t.Fatal(err)
	}
	list, err := r.s.ListWorkflowInstances(t.Context(), &schedulerv1.ListWorkflowInstancesRequest{WorkflowId: w.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range list.GetInstances() {
		got = append(got, in.GetId()+"="+strings.TrimPrefix(in.GetStatus().String(), "WORKFLOW_INSTANCE_STATUS_")+"/"+
			strings.TrimPrefix(in.GetTriggerType().String(), "TRIGGER_TYPE_"))
	}
	wf := itoa(w.GetId())
	want := []string{"w" + wf + "-" + itoa(first+2000) + "=RUNNING/CRON", "w" + wf + "-" + itoa(first) + "=SUCCESS/MANUAL"}
	if !slices.Equal(got, want) {
		t.Fatalf("instances %v; want %v", got, want)
	}
}

// TestWorkflowConcurrentTriggersKeepTheLimit: triggers of one workflow at the same moment start
// no more instances than its max_concurrent_instances (1); the others are SKIPPED.
func TestWorkflowConcurrentTriggersKeepTheLimit(t *testing.T) {
	t.Parallel()
	r := newWfRig(t)
	w := r.create(t, r.graph(t, "A B", "A>B"))
	// Each trigger at its own millisecond, as callers at nearly the same moment are: their
	// instances' ids differ, so nothing but the limit serialises them.
	r.s.clk = tickingClock{r.clk}
	const n = 8
	got := make([]schedulerv1.WorkflowInstanceStatus, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, err := r.s.TriggerWorkflow(t.Context(), &schedulerv1.TriggerWorkflowRequest{Id: w.GetId()})
			got[i], errs[i] = resp.GetInstance().GetStatus(), err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	running := 0
	for _, st := range got {
		switch st {
		case schedulerv1.WorkflowInstanceStatus_WORKFLOW_INSTANCE_STATUS_RUNNING:
			running++
		case schedulerv1.WorkflowInstanceStatus_WORKFLOW_INSTANCE_STATUS_SKIPPED:
		default:
			t.Errorf("an instance is %v; want RUNNING or SKIPPED", st)
		}
	}
	if running != 1 {
		t.Errorf("%d instances running after %d triggers at once (%v); want 1, the workflow's max_concurrent_instances", running, n, got)
	}
}

// TestWorkflowRetryKeepsTheLimit: retrying a failed instance while its workflow runs
// max_concurrent_instances (2) already is refused with FailedPrecondition naming the limit and
// the count, and the instance stays as it was, nodes and fires; once a running instance has
// ended the same retry runs it, and it counts against the limit as a new instance does.
func TestWorkflowRetryKeepsTheLimit(t *testing.T) {
	t.Parallel()
	r := newWfRig(t)
	w := r.graph(t, "A B", "A>B")
	w.MaxConcurrentInstances = 2
	w = r.create(t, w)
	failed := r.trigger(t, w.GetId(), nil)
	r.run(t, failed, "A", stSuccess, nil)
	r.run(t, failed, "B", stFail, nil)
	r.want(t, failed, "FAILED", "A=SUCCESS B=FAILED")
	first, second := r.trigger(t, w.GetId(), nil), r.trigger(t, w.GetId(), nil)
	r.want(t, second, "RUNNING", "A=RUNNING B=WAITING")

	get := func() *schedulerv1.WorkflowInstance {
		t.Helper()
		resp, err := r.s.GetWorkflowInstance(t.Context(), &schedulerv1.GetWorkflowInstanceRequest{Id: failed})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetInstance()
	}
	before := get()
	_, err := r.s.RetryWorkflowInstance(t.Context(), &schedulerv1.RetryWorkflowInstanceRequest{Id: failed})
	if status.Code(err) != codes.FailedPrecondition || apierr.Info(err).GetReason() != "FAILED_PRECONDITION" ||
		!strings.Contains(status.Convert(err).Message(), "stays WORKFLOW_INSTANCE_STATUS_FAILED: workflow "+strconv.FormatInt(w.GetId(), 10)+" is at its max_concurrent_instances (2 running, limit 2); retry it once one has ended") {
		t.Fatalf("retry with 2 instances running: %v; want FailedPrecondition naming the 2 running and the limit 2", err)
	}
	if after := get(); !proto.Equal(after, before) {
		t.Fatalf("the refused retry changed the instance:\n%v\nwant\n%v", after, before)
	}
	r.wantPending(t, failed)

	r.run(t, first, "A", stFail, nil)
	r.want(t, first, "FAILED", "A=FAILED B=SKIPPED")
	if _, err := r.s.RetryWorkflowInstance(t.Context(), &schedulerv1.RetryWorkflowInstanceRequest{Id: failed}); err != nil {
		t.Fatal(err)
	}
	r.want(t, failed, "RUNNING", "A=SUCCESS B=RUNNING")
	if got := mustParse(t, r.pending(t, failed)["B"].id).Attempt; got != 1 {
		t.Errorf("B re-runs as attempt %d; want 1", got)
	}
	skipped := r.trigger(t, w.GetId(), nil)
	r.want(t, skipped, "SKIPPED", "A=WAITING B=WAITING")
}

// TestWorkflowMarkDoneKeepsTheLimit: marking a node of an ended instance done is refused while
// the workflow runs max_concurrent_instances when the mark would make the instance run again,
// and taken when it only ends the instance again.
func TestWorkflowMarkDoneKeepsTheLimit(t *testing.T) {
	t.Parallel()
	r := newWfRig(t)
	w := r.create(t, r.graph(t, "A B C", "A>B", "B>C"))
	failed := r.trigger(t, w.GetId(), nil)
	r.run(t, failed, "A", stSuccess, nil)
	r.run(t, failed, "B", stFail, nil)
	r.want(t, failed, "FAILED", "A=SUCCESS B=FAILED C=SKIPPED")
	running := r.trigger(t, w.GetId(), nil)
	r.want(t, running, "RUNNING", "A=RUNNING B=WAITING C=WAITING")

	mark := func(id, node string) error {
		_, err := r.s.MarkWorkflowNodeDone(t.Context(), &schedulerv1.MarkWorkflowNodeDoneRequest{Id: id, NodeId: node})
		return err
	}
	err := mark(failed, "B")
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(),
		"stays WORKFLOW_INSTANCE_STATUS_FAILED: workflow "+strconv.FormatInt(w.GetId(), 10)+" is at its max_concurrent_instances (1 running, limit 1); mark the node done once one has ended") {
		t.Fatalf("mark B done, which starts C, with 1 instance running: %v; want FailedPrecondition naming the limit", err)
	}
	r.want(t, failed, "FAILED", "A=SUCCESS B=FAILED C=SKIPPED")
	r.wantPending(t, failed)

	// A mark that starts nothing ends the instance again: no limit to keep.
	r.run(t, running, "A", stSuccess, nil)
	r.run(t, running, "B", stSuccess, nil)
	r.run(t, running, "C", stFail, nil)
	r.want(t, running, "FAILED", "A=SUCCESS B=SUCCESS C=FAILED")
	again := r.trigger(t, w.GetId(), nil)
	r.want(t, again, "RUNNING", "A=RUNNING B=WAITING C=WAITING")
	if err := mark(running, "C"); err != nil {
		t.Fatalf("mark C done, which ends the instance: %v", err)
	}
	r.want(t, running, "SUCCESS", "A=SUCCESS B=SUCCESS C=SUCCESS")

	// Once nothing else runs, the refused mark is taken and C runs.
	r.run(t, again, "A", stFail, nil)
	r.want(t, again, "FAILED", "A=FAILED B=SKIPPED C=SKIPPED")
	if err := mark(failed, "B"); err != nil {
		t.Fatal(err)
	}
	r.want(t, failed, "RUNNING", "A=SUCCESS B=SUCCESS C=RUNNING")
}

// TestWorkflowRetryWaitsForAStartingInstance: a retry while a trigger of the same workflow is
// between its count and its commit waits for the trigger (the workflow's row), then counts the
// instance it started and is refused; without the wait it would count the running instances
// without it and run one over max_concurrent_instances (1).
func TestWorkflowRetryWaitsForAStartingInstance(t *testing.T) {
	t.Parallel()
	r := newWfRig(t)
	w := r.create(t, r.graph(t, "A"))
	failed := r.trigger(t, w.GetId(), nil)
	r.run(t, failed, "A", stFail, nil)

	// A trigger stopped before its commit: what TriggerWorkflow runs in inInstanceTx.
	ctx := t.Context()
	tx, err := r.s.jobs.begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	row, err := r.s.wfStore().getWorkflow(ctx, w.GetId())
	if err != nil {
		t.Fatal(err)
	}
	trig := newTxn(tx)
	ms := r.clk.Now().UnixMilli() + 1 // the failed instance's trigger took the millisecond now
	started, err := r.s.startInstance(ctx, trig, row, ms, ms, triggerAPI, nil)
	if err != nil || started.Status != instRunning {
		t.Fatalf("start an instance: %v, %v; want it running", started, err)
	}
	after, err := trig.flush(ctx, r.s, nil)
	if err != nil {
		t.Fatal(err)
	}

	retried := make(chan error, 1)
	go func() {
		_, err := r.s.RetryWorkflowInstance(ctx, &schedulerv1.RetryWorkflowInstanceRequest{Id: failed})
		retried <- err
	}()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for waiting := 0; waiting == 0; {
		select {
		case err := <-retried:
			t.Fatalf("the retry ended (%v) while a trigger of its workflow was starting an instance; want it to wait", err)
		case <-ctx.Done():
			t.Fatal("the retry neither waits for a lock nor ends")
		case <-tick.C:
		}
		if err := storeDB(r.s).QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.s.jobs.commit(tx); err != nil {
		t.Fatal(err)
	}
	for _, f := range after {
		f()
	}
	err = <-retried
	if status.Code(err) != codes.FailedPrecondition ||
		!strings.Contains(status.Convert(err).Message(), "max_concurrent_instances (1 running, limit 1)") {
		t.Fatalf("retry while an instance was starting: %v; want FailedPrecondition naming the 1 running and the limit 1", err)
	}
	r.want(t, failed, "FAILED", "A=FAILED")
	r.want(t, started.ID, "RUNNING", "A=RUNNING")
}

// TestWorkflowConcurrentRetriesKeepTheLimit: retries of failed instances and triggers of their
// workflow at the same moment leave no more instances running than its
// max_concurrent_instances (1): the retries that lose are refused, the triggers that lose are
// SKIPPED.
func TestWorkflowConcurrentRetriesKeepTheLimit(t *testing.T) {
	t.Parallel()
	r := newWfRig(t)
	w := r.create(t, r.graph(t, "A"))
	const n = 6
	var failed []string
	for range n {
		id := r.trigger(t, w.GetId(), nil)
		r.run(t, id, "A", stFail, nil)
		failed = append(failed, id)
	}
	r.s.clk = tickingClock{r.clk} // each trigger at its own millisecond, so only the limit serialises them
	retried := make([]error, n)
	triggered := make([]schedulerv1.WorkflowInstanceStatus, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, retried[i] = r.s.RetryWorkflowInstance(t.Context(), &schedulerv1.RetryWorkflowInstanceRequest{Id: failed[i]})
		})
		wg.Go(func() {
			resp, err := r.s.TriggerWorkflow(t.Context(), &schedulerv1.TriggerWorkflowRequest{Id: w.GetId()})
			triggered[i], errs[i] = resp.GetInstance().GetStatus(), err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	running := 0
	for i, err := range retried {
		switch status.Code(err) {
		case codes.OK:
			running++
		case codes.FailedPrecondition:
		default:
			t.Errorf("retry of %s: %v; want success or FailedPrecondition", failed[i], err)
		}
	}
	for _, st := range triggered {
		switch st {
		case schedulerv1.WorkflowInstanceStatus_WORKFLOW_INSTANCE_STATUS_RUNNING:
			running++
		case schedulerv1.WorkflowInstanceStatus_WORKFLOW_INSTANCE_STATUS_SKIPPED:
		default:
			t.Errorf("a triggered instance is %v; want RUNNING or SKIPPED", st)
		}
	}
	list, err := r.s.ListWorkflowInstances(t.Context(), &schedulerv1.ListWorkflowInstancesRequest{WorkflowId: w.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	stored := 0
	for _, in := range list.GetInstances() {
		if in.GetStatus() == schedulerv1.WorkflowInstanceStatus_WORKFLOW_INSTANCE_STATUS_RUNNING {
			stored++
		}
	}
	if running != 1 || stored != 1 {
		t.Errorf("%d retries and triggers passed, %d instances stored RUNNING, after %d retries and %d triggers at once; want 1, "+
			"the workflow's max_concurrent_instances", running, stored, n, n)
	}
}

// tickingClock is a fake clock that moves on a millisecond at every reading.
type tickingClock struct{ *clock.Fake }

func (c tickingClock) Now() time.Time {
	c.Advance(time.Millisecond)
	return c.Fake.Now()
}
