package scheduler_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/services/scheduler"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/partition"
)

// nodeExecutor is an executor that accepts every fire once (a fire sent again is a DUPLICATE,
// as the SDK answers) and hands it to the test, which reports its result through logsvc's
// ingest as an executor does, with outputs.
type nodeExecutor struct {
	executorv1.UnimplementedExecutorServiceServer
	mu       sync.Mutex
	accepted map[string]int
	sent     map[string]int // Run deliveries per trigger id, duplicates included
	got      chan *executorv1.Trigger
}

func (e *nodeExecutor) Run(_ context.Context, req *executorv1.RunRequest) (*executorv1.RunResponse, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	resp := &executorv1.RunResponse{}
	for _, tr := range req.GetTriggers() {
		e.sent[tr.GetTriggerId()]++
		out := executorv1.RunOutcome_RUN_OUTCOME_DUPLICATE
		if e.accepted[tr.GetTriggerId()] == 0 {
			e.accepted[tr.GetTriggerId()]++
			out = executorv1.RunOutcome_RUN_OUTCOME_ACCEPTED
			e.got <- tr
		}
		resp.Acks = append(resp.Acks, &executorv1.RunAck{TriggerId: tr.GetTriggerId(), Outcome: out})
	}
	return resp, nil
}

func (e *nodeExecutor) Seen(_ context.Context, req *executorv1.SeenRequest) (*executorv1.SeenResponse, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	resp := &executorv1.SeenResponse{}
	for _, id := range req.GetTriggerIds() {
		if e.accepted[id] > 0 {
			resp.SeenTriggerIds = append(resp.SeenTriggerIds, id)
		}
	}
	return resp, nil
}

// nodeExecutor serves a nodeExecutor and creates a MANUAL executor group of its address.
func (c *cluster) nodeExecutor(t *testing.T) (*nodeExecutor, int64) {
	t.Helper()
	ex := &nodeExecutor{accepted: map[string]int{}, sent: map[string]int{}, got: make(chan *executorv1.Trigger, 16)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	executorv1.RegisterExecutorServiceServer(srv, ex)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	reg := registryv1.NewRegistryServiceClient(c.regConn)
	g, err := reg.CreateExecutorGroup(t.Context(), &registryv1.CreateExecutorGroupRequest{Group: &registryv1.ExecutorGroup{
		AppName: "wf-app", Title: "wf", AddressType: registryv1.AddressType_ADDRESS_TYPE_MANUAL, ManualAddresses: []string{ln.Addr().String()}}})
	if err != nil {
		t.Fatal(err)
	}
	return ex, g.GetGroup().GetId()
}

// recv waits up to 30 s for the next fire the executor accepts.
func (e *nodeExecutor) recv(t *testing.T, what string) *executorv1.Trigger {
	t.Helper()
	select {
	case tr := <-e.got:
		return tr
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no fire within 30s", what)
		return nil
	}
}

// report sends a fire's final result to logsvc as an executor does, and waits for its ack.
func report(t *testing.T, ingest logsv1.IngestServiceClient, tr *executorv1.Trigger, st logsv1.RunStatus, outputs map[string]string) {
	t.Helper()
	stream, err := ingest.IngestResults(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	if err := stream.Send(&logsv1.IngestResultsRequest{BatchId: 1, Results: []*logsv1.RunResult{{TriggerId: tr.GetTriggerId(),
		JobId: tr.GetJobId(), Status: st, StartUnixMs: now, EndUnixMs: now, Outputs: outputs}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	stream.CloseSend()
}

// TestWorkflowAcrossLeaderChange runs a diamond (A → B, A → C, B+C → D) on a real cluster:
// results (with outputs) go through logsvc's ingest, completions back to the leader. The leader
// stops while B and C run; the next leader decides D from their completions. Every node runs
// once (no fire lost, none accepted twice), D's trigger carries its upstreams' outputs, and
// the instance succeeds.
func TestWorkflowAcrossLeaderChange(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ex, group := c.nodeExecutor(t)
	a, b := c.replica(t, "a"), c.replica(t, "b")
	lead, _ := waitLeader(t, a, b)
	next := b
	if lead == b {
		next = a
	}
	wf := &schedulerv1.Workflow{GroupId: group, Name: "diamond", Params: map[string]string{"day": "2026-11-28"},
		Schedule: &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_NONE}}
	for _, n := range []string{"A", "B", "C", "D"} {
		j, err := next.CreateJob(t.Context(), &schedulerv1.CreateJobRequest{Job: &schedulerv1.Job{GroupId: group, Name: n, Handler: "h",
			GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN, Schedule: &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_NONE}}})
		if err != nil {
			t.Fatal(err)
		}
		wf.Nodes = append(wf.Nodes, &schedulerv1.WorkflowNode{Id: n, JobId: j.GetJob().GetId()})
	}
	for _, e := range [][2]string{{"A", "B"}, {"A", "C"}, {"B", "D"}, {"C", "D"}} {
		wf.Edges = append(wf.Edges, &schedulerv1.WorkflowEdge{From: e[0], To: e[1]})
	}
	created, err := next.CreateWorkflow(t.Context(), &schedulerv1.CreateWorkflowRequest{Workflow: wf})
	if err != nil {
		t.Fatal(err)
	}
	inst, err := lead.TriggerWorkflow(t.Context(), &schedulerv1.TriggerWorkflowRequest{Id: created.GetWorkflow().GetId()})
	if err != nil {
		t.Fatal(err)
	}
	ingest := logsv1.NewIngestServiceClient(c.logsConn)
	recv := func(what string) *executorv1.Trigger { t.Helper(); return ex.recv(t, what) }
	trA := recv("A")
	if trA.GetWorkflowNodeId() != "A" || trA.GetWorkflowInstanceId() != inst.GetInstance().GetId() || trA.GetContext()["day"] != "2026-11-28" {
		t.Fatalf("A's fire: node %q instance %q context %v", trA.GetWorkflowNodeId(), trA.GetWorkflowInstanceId(), trA.GetContext())
	}
	report(t, ingest, trA, logsv1.RunStatus_RUN_STATUS_SUCCESS, map[string]string{"rows": "42"})
	mid := map[string]*executorv1.Trigger{}
	for range 2 {
		tr := recv("B and C")
		mid[tr.GetWorkflowNodeId()] = tr
	}
	if mid["B"].GetContext()["A.rows"] != "42" || mid["C"].GetContext()["rows"] != "42" {
		t.Fatalf("B's and C's contexts %v, %v; want A's outputs", mid["B"].GetContext(), mid["C"].GetContext())
	}
	// The leader goes while B and C run; their completions reach the next one.
	lead.Stop()
	if l, _ := waitLeader(t, next); l != next {
		t.Fatal("no new leader")
	}
	report(t, ingest, mid["B"], logsv1.RunStatus_RUN_STATUS_SUCCESS, map[string]string{"k": "b"})
	report(t, ingest, mid["C"], logsv1.RunStatus_RUN_STATUS_SUCCESS, map[string]string{"k": "c"})
	trD := recv("D")
	if got := trD.GetContext(); got["B.k"] != "b" || got["C.k"] != "c" || got["k"] != "c" || got["day"] != "2026-11-28" {
		t.Errorf("D's context %v; want B.k=b C.k=c k=c day=2026-11-28", got)
	}
	report(t, ingest, trD, logsv1.RunStatus_RUN_STATUS_SUCCESS, nil)
	id := inst.GetInstance().GetId()
	var last *schedulerv1.WorkflowInstance
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := next.GetWorkflowInstance(t.Context(), &schedulerv1.GetWorkflowInstanceRequest{Id: id})
		if err != nil {
			t.Fatal(err)
		}
		last = got.GetInstance()
		if last.GetStatus() == schedulerv1.WorkflowInstanceStatus_WORKFLOW_INSTANCE_STATUS_SUCCESS {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance %s is %s, want SUCCESS within 30s", id, last.GetStatus())
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
	}
	if out := last.GetNodes()[0].GetOutputs(); out["rows"] != "42" {
		t.Errorf("A's outputs in the instance %v; want rows=42", out)
	}
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if len(ex.accepted) != 4 {
		t.Errorf("%d fires accepted, want 4 (one per node): %v", len(ex.accepted), ex.accepted)
	}
	select {
	case tr := <-ex.got:
		t.Errorf("a fire more: %s", tr.GetTriggerId())
	default:
	}
}

// slowPreReadPair starts two replicas that lead a partition each of 2 and pre-read every 10
// minutes (so that only a hand-off arms a pending fire stored after their first scans), and
// creates a job of group in each partition. It returns replica a, the leader of each
// partition and the job of each.
func (c *cluster) slowPreReadPair(t *testing.T, group int64) (*scheduler.Service, map[int]*scheduler.Service, map[int]int64) {
	t.Helper()
	cfg := func(id string) scheduler.Config {
		return scheduler.Config{ReplicaID: id, Partitions: 2, PreReadInterval: 10 * time.Minute, PreReadWindow: 10 * time.Minute}
	}
	a, b := c.replicaWith(t, cfg("a")), c.replicaWith(t, cfg("b"))
	byID := map[string]*scheduler.Service{"a": a, "b": b}
	lead := map[int]*scheduler.Service{}
	eventually(t, 15*time.Second, "a and b lead a partition each", func() bool {
		var views []string
		for _, r := range []*scheduler.Service{a, b} {
			st, err := r.GetStatus(t.Context(), &schedulerv1.GetStatusRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if !st.GetLeader() || len(st.GetPartitions()) != 2 {
				return false
			}
			views = append(views, fmt.Sprint(st.GetPartitions()[0].GetLeaderId(), st.GetPartitions()[1].GetLeaderId()))
			for _, p := range st.GetPartitions() {
				lead[int(p.GetPartition())] = byID[p.GetLeaderId()]
			}
		}
		return views[0] == views[1] && lead[0] != nil && lead[1] != nil && lead[0] != lead[1]
	})
	jobOf := map[int]int64{}
	for i := 0; len(jobOf) < 2; i++ {
		if i == 32 {
			t.Fatal("no job of each partition in 32 jobs")
		}
		j, err := a.CreateJob(t.Context(), &schedulerv1.CreateJobRequest{Job: &schedulerv1.Job{GroupId: group, Name: fmt.Sprint("j", i),
			Handler: "h", GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN, Schedule: &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_NONE}}})
		if err != nil {
			t.Fatal(err)
		}
		if p := partition.PartitionOf(j.GetJob().GetId(), 2); jobOf[p] == 0 {
			jobOf[p] = j.GetJob().GetId()
		}
	}
	return a, lead, jobOf
}

// TestWorkflowNodeHandedToItsJobsLeader: two replicas lead a partition each, and their
// pre-reads run every 10 minutes. A workflow A → B whose B job hashes to the partition the
// workflow's leader does not lead: B's fire, decided on the workflow's leader when A's
// completion comes, is stored as a pending fire of the other replica's partition and handed to
// it at once (the deciding transaction's notification), not left for its next pre-read. So B
// runs, once.
func TestWorkflowNodeHandedToItsJobsLeader(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ex, group := c.nodeExecutor(t)
	a, lead, jobOf := c.slowPreReadPair(t, group)
	// A workflow whose B job is of the other partition than the workflow: its nodes are set once
	// its id (and so its partition) is known.
	w := &schedulerv1.Workflow{GroupId: group, Name: "handoff", Schedule: &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_NONE},
		Nodes: []*schedulerv1.WorkflowNode{{Id: "A", JobId: jobOf[0]}, {Id: "B", JobId: jobOf[1]}},
		Edges: []*schedulerv1.WorkflowEdge{{From: "A", To: "B"}}}
	created, err := a.CreateWorkflow(t.Context(), &schedulerv1.CreateWorkflowRequest{Workflow: w})
	if err != nil {
		t.Fatal(err)
	}
	wf := created.GetWorkflow()
	if p := partition.PartitionOf(wf.GetId(), 2); p == 1 {
		wf.Nodes[0].JobId, wf.Nodes[1].JobId = jobOf[1], jobOf[0]
		updated, err := a.UpdateWorkflow(t.Context(), &schedulerv1.UpdateWorkflowRequest{Workflow: wf})
		if err != nil {
			t.Fatal(err)
		}
		wf = updated.GetWorkflow()
	}
	home := lead[partition.PartitionOf(wf.GetId(), 2)]
	inst, err := home.TriggerWorkflow(t.Context(), &schedulerv1.TriggerWorkflowRequest{Id: wf.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	ingest := logsv1.NewIngestServiceClient(c.logsConn)
	trA := ex.recv(t, "A")
	if trA.GetWorkflowNodeId() != "A" || trA.GetWorkflowInstanceId() != inst.GetInstance().GetId() {
		t.Fatalf("first fire: node %q of instance %q, want A of %s", trA.GetWorkflowNodeId(), trA.GetWorkflowInstanceId(), inst.GetInstance().GetId())
	}
	report(t, ingest, trA, logsv1.RunStatus_RUN_STATUS_SUCCESS, nil)
	trB := ex.recv(t, "B, handed to the other replica")
	if trB.GetWorkflowNodeId() != "B" || trB.GetJobId() == jobOf[partition.PartitionOf(wf.GetId(), 2)] {
		t.Fatalf("second fire: node %q job %d; want B, of the other partition's job", trB.GetWorkflowNodeId(), trB.GetJobId())
	}
	ex.mu.Lock()
	defer ex.mu.Unlock()
	for id, n := range ex.sent {
		if n != 1 {
			t.Errorf("fire %s sent %d times, want once", id, n)
		}
	}
}

// TestChildJobHandedToItsLeader: as TestWorkflowNodeHandedToItsJobsLeader, for a child job of
// the other partition than its parent's: the parent's leader stores the child's PARENT fire on
// the parent's success and hands it to the child's leader at once.
func TestChildJobHandedToItsLeader(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ex, group := c.nodeExecutor(t)
	a, lead, jobOf := c.slowPreReadPair(t, group)
	parent, child := jobOf[0], jobOf[1]
	got, err := a.GetJob(t.Context(), &schedulerv1.GetJobRequest{Id: parent})
	if err != nil {
		t.Fatal(err)
	}
	p := got.GetJob()
	p.ChildJobIds = []int64{child}
	if _, err := a.UpdateJob(t.Context(), &schedulerv1.UpdateJobRequest{Job: p}); err != nil {
		t.Fatal(err)
	}
	if _, err := lead[0].TriggerJob(t.Context(), &schedulerv1.TriggerJobRequest{Id: parent}); err != nil {
		t.Fatal(err)
	}
	trP := ex.recv(t, "the parent")
	if trP.GetJobId() != parent {
		t.Fatalf("first fire of job %d, want the parent %d", trP.GetJobId(), parent)
	}
	report(t, logsv1.NewIngestServiceClient(c.logsConn), trP, logsv1.RunStatus_RUN_STATUS_SUCCESS, nil)
	trC := ex.recv(t, "the child, handed to the other replica")
	if trC.GetJobId() != child || trC.GetTriggerType() != schedulerv1.TriggerType_TRIGGER_TYPE_PARENT {
		t.Fatalf("second fire: job %d %s, want the child %d's PARENT fire", trC.GetJobId(), trC.GetTriggerType(), child)
	}
}
