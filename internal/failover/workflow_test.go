package failover_test

import (
	"flag"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/triggerid"
	"github.com/jobmesh/jobmesh/services/gateway/auth"
)

var (
	wfKillsFlag     = flag.Int("wf-kills", 6, "SIGKILLs of random replicas in TestReplicaKillWorkflows")
	wfRestartsFlag  = flag.Int("wf-restarts", 2, "graceful restarts in TestReplicaKillWorkflows, interleaved with the kills")
	wfWorkflowsFlag = flag.Int("wf-workflows", 50, "diamond workflows firing every 5 s in TestReplicaKillWorkflows")
)

const (
	// wfPeriod is the workflows' FIX_RATE period.
	wfPeriod = 5 * time.Second
	// wfSettle bounds how long the instances may take to end once the workflows are stopped.
	wfSettle = 60 * time.Second
)

// diamond is the graph every workflow of the test has: A → B, A → C, B + C → D.
var diamond = struct {
	nodes []string
	edges [][2]string
}{nodes: []string{"A", "B", "C", "D"}, edges: [][2]string{{"A", "B"}, {"A", "C"}, {"B", "D"}, {"C", "D"}}}

// TestReplicaKillWorkflows is issue 25's failover check for workflows: 50 diamond workflows
// (A → B, A → C, B + C → D, each node its own job on the counting agent) fire every 5 s on 3
// replicas sharing 16 partitions, while random replicas are killed with SIGKILL and others
// restarted gracefully. The workflows and their nodes' jobs hash to partitions independently,
// so instances are created, nodes fired and joins decided by replicas that die under them.
// Afterwards every scheduled fire of the run window has its instance, every instance the
// scheduler created has ended SUCCESS, and every node of every instance ran exactly once at the
// agent (counted by the trigger ids it received): 0 lost, 0 doubled, no run of an instance
// that does not exist.
//
// Run it alone, longer, with:
//
//	go test ./internal/failover -run TestReplicaKillWorkflows -v [-args -wf-kills=N -wf-restarts=N -wf-workflows=N -seed=S]
func TestReplicaKillWorkflows(t *testing.T) {
	if testing.Short() {
		t.Skip("about a minute of processes and kills; CI runs it (without -short)")
	}
	t.Parallel()
	kills, restarts, nWf := *wfKillsFlag, *wfRestartsFlag, *wfWorkflowsFlag
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	t.Logf("workflow failover: %d diamond workflows every %v, %d kills, %d graceful restarts, %d partitions, seed %d (rerun with -args -seed=%d)",
		nWf, wfPeriod, kills, restarts, partitions, seed, seed)

	h := newHarness(t, sideBySideConns)
	c := h.c
	ctx := t.Context()
	for i := range nReplicas {
		c.start(fmt.Sprintf("r%d", i+1))
	}
	c.waitOwners(30*time.Second, everyPartitionLed)
	h.probeEveryReplica()

	// The workflows: each diamond's four nodes are jobs of their own, so the nodes' fires are
	// sent by the leaders of four more partitions than the one deciding the instance.
	wfc := newWorkflowClients(t, c)
	created := make(map[int64]*schedulerv1.Workflow, nWf)
	var mu sync.Mutex
	parallel(t, nWf, 8, func(i int) error {
		r := c.any()
		wf := &schedulerv1.Workflow{GroupId: h.st.GroupID, Name: fmt.Sprintf("diamond-%02d", i),
			Schedule:        &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_FIX_RATE, Expression: wfPeriod.String()},
			MisfireStrategy: schedulerv1.MisfireStrategy_MISFIRE_STRATEGY_DO_NOTHING, Status: schedulerv1.JobStatus_JOB_STATUS_RUNNING,
			// An instance still running when the next fire comes (its node delayed by a
			// takeover) must not make that fire a SKIPPED instance.
			MaxConcurrentInstances: 100}
		for _, n := range diamond.nodes {
			j, err := r.jobs.CreateJob(ctx, &schedulerv1.CreateJobRequest{Job: &schedulerv1.Job{
				GroupId: h.st.GroupID, Name: fmt.Sprintf("wf%02d-%s", i, n), Handler: "count",
				GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN, Schedule: &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_NONE},
			}})
			if err != nil {
				return fmt.Errorf("create job %s of workflow %d: %w", n, i, err)
			}
			wf.Nodes = append(wf.Nodes, &schedulerv1.WorkflowNode{Id: n, JobId: j.GetJob().GetId()})
		}
		for _, e := range diamond.edges {
			wf.Edges = append(wf.Edges, &schedulerv1.WorkflowEdge{From: e[0], To: e[1]})
		}
		cl, err := wfc.of(r)
		if err != nil {
			return err
		}
		resp, err := cl.CreateWorkflow(ctx, &schedulerv1.CreateWorkflowRequest{Workflow: wf})
		if err != nil {
			return fmt.Errorf("create workflow %d: %w", i, err)
		}
		if resp.GetWorkflow().GetNextFireTime() == nil {
			return fmt.Errorf("workflow %d created without a next fire", resp.GetWorkflow().GetId())
		}
		mu.Lock()
		created[resp.GetWorkflow().GetId()] = resp.GetWorkflow()
		mu.Unlock()
		return nil
	})
	t.Logf("%d workflows created", nWf)

	// The kills and restarts, as in TestReplicaKill: once every partition has a leader again,
	// 1–3 s of the workload, then stop a random live replica and start its replacement, at once
	// or once the others lead every partition.
	events := make([]bool, kills+restarts) // true: a graceful restart
	for i := range restarts {
		events[i] = true
	}
	rng.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
	for n, graceful := range events {
		c.waitOwners(30*time.Second, everyPartitionLed)
		wait := time.NewTimer(time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))) // the workload's schedule, not a synchronization
		<-wait.C
		live := c.liveReplicas()
		victim := live[rng.IntN(len(live))]
		var at time.Time
		what := "SIGKILL"
		if graceful {
			at, what = c.stop(victim), "SIGTERM"
		} else {
			at = c.kill(victim)
		}
		how := "at once"
		if rng.IntN(2) == 0 {
			c.waitOwners(30*time.Second, everyPartitionLed)
			how = "once the others led every partition"
		}
		c.start(victim.id)
		t.Logf("event %d: %s %s at %s, replacement started %s, serving %v after", n+1, what, victim.id,
			at.Format("15:04:05.000"), how, time.Since(at).Round(time.Millisecond))
	}
	// Two more periods after the last event, so instances created by the replicas as they are
	// now run too.
	last := time.Now()
	if !h.tl.WaitScheduledAfter(last.Add(wfPeriod), 30*time.Second) {
		t.Errorf("no node fire scheduled %v after the last event ran within 30s", wfPeriod)
	}

	// Stop the workflows (instances already created run on), then wait until every instance
	// the scheduler created has ended.
	c.waitOwners(30*time.Second, everyPartitionLed)
	stopped := make(map[int64]int64, nWf) // workflow id → when its stop was sent, Unix ms
	ids := slices.Sorted(maps.Keys(created))
	parallel(t, len(ids), 8, func(i int) error {
		w := created[ids[i]]
		up := proto.CloneOf(w)
		up.Status = schedulerv1.JobStatus_JOB_STATUS_STOPPED
		cl, err := wfc.of(c.any())
		if err != nil {
			return err
		}
		at := time.Now().UnixMilli()
		if _, err := cl.UpdateWorkflow(ctx, &schedulerv1.UpdateWorkflowRequest{Workflow: up}); err != nil {
			return fmt.Errorf("stop workflow %d: %w", w.GetId(), err)
		}
		mu.Lock()
		stopped[w.GetId()] = at
		mu.Unlock()
		return nil
	})
	insts := waitInstancesEnded(t, wfc, c, ids)
	if !h.tl.WaitQuiet(quiet, 30*time.Second) {
		t.Errorf("node runs still arriving 30s after every instance ended")
	}
	c.stopAll()
	c.checkNoCrash()

	// The check. ran: by instance id and node index, the agent's runs of the node.
	ran := map[string]map[int32][]string{}
	stray := 0
	for _, e := range h.tl.Snapshot(math.MinInt64, math.MaxInt64) {
		id, ok := triggerid.Parse(e.TriggerID)
		if !ok || id.Workflow == 0 {
			continue // a probe
		}
		in := fmt.Sprintf("w%d-%d", id.Workflow, id.ScheduledMs)
		if ran[in] == nil {
			ran[in] = map[int32][]string{}
		}
		ran[in][id.Node] = append(ran[in][id.Node], e.TriggerID)
	}
	var (
		lost, doubled, notEnded, expected, checkedNodes int
		samples                                         []string
	)
	note := func(format string, args ...any) {
		if len(samples) < 20 {
			samples = append(samples, fmt.Sprintf(format, args...))
		}
	}
	for _, wid := range ids {
		w := created[wid]
		byMs := map[int64]*schedulerv1.WorkflowInstance{}
		for _, in := range insts[wid] {
			byMs[in.GetScheduledUnixMs()] = in
		}
		// Every fire of the grid up to the stop (less the fires racing it) has its instance.
		until := stopped[wid] - stopMargin.Milliseconds()
		for ms := w.GetNextFireTime().AsTime().UnixMilli(); ms <= until; ms += wfPeriod.Milliseconds() {
			expected++
			if byMs[ms] == nil {
				lost += len(diamond.nodes)
				note("workflow %d: no instance of its fire at %d", wid, ms)
			}
		}
		for _, in := range insts[wid] {
			if in.GetStatus() != schedulerv1.WorkflowInstanceStatus_WORKFLOW_INSTANCE_STATUS_SUCCESS {
				notEnded++
				note("instance %s ended %s: %s", in.GetId(), in.GetStatus(), nodeSummary(in))
			}
			for n, ns := range in.GetNodes() {
				checkedNodes++
				runs := ran[in.GetId()][int32(n)]
				switch {
				case len(runs) == 0:
					lost++
					note("instance %s node %s (%s): never ran", in.GetId(), ns.GetNodeId(), ns.GetStatus())
				case len(runs) > 1:
					doubled += len(runs) - 1
					note("instance %s node %s ran %d times: %v", in.GetId(), ns.GetNodeId(), len(runs), runs)
				case runs[0] != ns.GetTriggerId():
					note("instance %s node %s ran as %s, its state says %s", in.GetId(), ns.GetNodeId(), runs[0], ns.GetTriggerId())
					doubled++
				}
			}
			delete(ran, in.GetId())
		}
	}
	for in, nodes := range ran {
		for _, runs := range nodes {
			stray += len(runs)
			note("runs %v of instance %s, which the scheduler does not list", runs, in)
		}
	}
	t.Logf("workflow failover: events=%d fires_expected=%d instances=%d nodes_checked=%d lost=%d doubled=%d not_success=%d stray_runs=%d",
		len(events), expected, countInstances(insts), checkedNodes, lost, doubled, notEnded, stray)
	for _, s := range samples {
		t.Log(s)
	}
	if lost > 0 || doubled > 0 || notEnded > 0 || stray > 0 {
		t.Errorf("workflow failover guarantee broken: %d node runs lost, %d doubled, %d instances not SUCCESS, %d stray runs",
			lost, doubled, notEnded, stray)
	}
	if expected == 0 || checkedNodes == 0 {
		t.Errorf("nothing checked: %d fires expected, %d nodes checked", expected, checkedNodes)
	}
}

// waitInstancesEnded lists the instances of the workflows ids until none is RUNNING, and returns
// them by workflow id; it fails the test when some still run after wfSettle.
func waitInstancesEnded(t *testing.T, wfc *workflowClients, c *replicaSet, ids []int64) map[int64][]*schedulerv1.WorkflowInstance {
	t.Helper()
	deadline := time.Now().Add(wfSettle)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		out := make(map[int64][]*schedulerv1.WorkflowInstance, len(ids))
		running := 0
		var sample string
		for _, id := range ids {
			var token string
			for {
				cl, err := wfc.of(c.any())
				if err != nil {
					t.Fatal(err)
				}
				resp, err := cl.ListWorkflowInstances(t.Context(), &schedulerv1.ListWorkflowInstancesRequest{
					WorkflowId: id, PageSize: 500, PageToken: token})
				if err != nil {
					t.Fatalf("list instances of workflow %d: %v", id, err)
				}
				for _, in := range resp.GetInstances() {
					if in.GetStatus() == schedulerv1.WorkflowInstanceStatus_WORKFLOW_INSTANCE_STATUS_RUNNING {
						running++
						sample = in.GetId()
					}
				}
				out[id] = append(out[id], resp.GetInstances()...)
				if token = resp.GetNextPageToken(); token == "" {
					break
				}
			}
		}
		if running == 0 || time.Now().After(deadline) {
			if running > 0 {
				t.Errorf("%d instances still running %v after the workflows were stopped, e.g. %s", running, wfSettle, sample)
			}
			return withNodes(t, wfc, c, out)
		}
		<-tick.C
	}
}

// withNodes reads each instance listed in insts whole: a list gives no nodes.
func withNodes(t *testing.T, wfc *workflowClients, c *replicaSet, insts map[int64][]*schedulerv1.WorkflowInstance) map[int64][]*schedulerv1.WorkflowInstance {
	t.Helper()
	for _, list := range insts {
		for i, in := range list {
			cl, err := wfc.of(c.any())
			if err != nil {
				t.Fatal(err)
			}
			resp, err := cl.GetWorkflowInstance(t.Context(), &schedulerv1.GetWorkflowInstanceRequest{Id: in.GetId()})
			if err != nil {
				t.Fatalf("get instance %s: %v", in.GetId(), err)
			}
			list[i] = resp.GetInstance()
		}
	}
	return insts
}

// nodeSummary is an instance's nodes and their statuses, for a failure message.
func nodeSummary(in *schedulerv1.WorkflowInstance) string {
	parts := make([]string, len(in.GetNodes()))
	for i, n := range in.GetNodes() {
		parts[i] = fmt.Sprintf("%s %s %q", n.GetNodeId(), strings.TrimPrefix(n.GetStatus().String(), "WORKFLOW_NODE_STATUS_"), n.GetTriggerId()+" "+n.GetMessage())
	}
	return strings.Join(parts, ", ")
}

// countInstances counts the instances of every workflow.
func countInstances(insts map[int64][]*schedulerv1.WorkflowInstance) int {
	n := 0
	for _, in := range insts {
		n += len(in)
	}
	return n
}

// workflowClients keeps a WorkflowService client per replica process.
type workflowClients struct {
	t  testing.TB
	c  *replicaSet
	mu sync.Mutex
	by map[*replica]schedulerv1.WorkflowServiceClient
}

// newWorkflowClients returns an empty set of clients of c's replicas.
func newWorkflowClients(t testing.TB, c *replicaSet) *workflowClients {
	return &workflowClients{t: t, c: c, by: map[*replica]schedulerv1.WorkflowServiceClient{}}
}

// of returns the WorkflowService client of replica r, dialing it the first time.
func (w *workflowClients) of(r *replica) (schedulerv1.WorkflowServiceClient, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if cl, ok := w.by[r]; ok {
		return cl, nil
	}
	conn, err := grpc.NewClient(r.proc.Value("scheduler grpc "), w.c.tls.DialOption(), grpc.WithUnaryInterceptor(boundCalls),
		auth.BearerToken(w.c.token))
	if err != nil {
		return nil, fmt.Errorf("dial replica %s: %w", r.id, err)
	}
	w.t.Cleanup(func() { conn.Close() })
	cl := schedulerv1.NewWorkflowServiceClient(conn)
	w.by[r] = cl
	return cl, nil
}
