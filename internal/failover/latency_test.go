package failover_test

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/firecheck"
	"github.com/jobmesh/jobmesh/internal/hostport"
	"github.com/jobmesh/jobmesh/internal/triggerid"
)

var (
	latNodesFlag    = flag.Int("wf-lat-nodes", 1000, "workflow nodes per second in BenchmarkWorkflowNodeLatency (two per A → B chain firing every second)")
	latRunFlag      = flag.Duration("wf-lat-run", 20*time.Second, "how long BenchmarkWorkflowNodeLatency measures")
	latReplicasFlag = flag.Int("wf-lat-replicas", nReplicas, "scheduler replicas in BenchmarkWorkflowNodeLatency (each its own process, sharing the partitions)")
	latPprofFlag    = flag.String("wf-lat-pprof", "", "`directory` where BenchmarkWorkflowNodeLatency writes 10 s CPU profiles of each replica and of the test process (agent, logsvc, registry, etcd), taken mid-measurement; empty takes none")
)

// latWarmup is how long after the workflows are created the measurement starts: their first
// instances, and the replicas' first fires of their jobs, are not the steady state.
const latWarmup = 5 * time.Second

// BenchmarkWorkflowNodeLatency measures issue 25's node-to-next-node latency: from a node's
// completion to its downstream node's handler start, at 1,000 workflow nodes per second, on 3
// scheduler replicas (-wf-lat-replicas) sharing 16 partitions (so a node's job is usually led by
// another replica than the one that decides its instance). The load is chains A → B firing every second; both
// nodes run the counting agent's no-op handler, which records when each fire reached it and
// returns at once, so A's completion is its arrival plus the handler's few microseconds, and
// the latency is B's arrival minus A's: the agent's result to logsvc, logsvc's completion
// stream, the decision on the workflow's partition leader, the node fire's way to the leader
// of its job's partition and its dispatch. It reports p50, p99 and max in ms, the node rate
// reached and how many instances had A run but not B.
//
// Run it with:
//
//	go test ./internal/failover -run '^$' -bench BenchmarkWorkflowNodeLatency -benchtime 1x -v [-args -wf-lat-nodes=N -wf-lat-run=D -wf-lat-replicas=R]
func BenchmarkWorkflowNodeLatency(b *testing.B) {
	nodes, run, replicas := *latNodesFlag, *latRunFlag, max(*latReplicasFlag, 1)
	chains := max(nodes/2, 1)
	h := newHarness(b, 0) // alone: the replicas' pools as in production
	c := h.c
	ctx := b.Context()
	pprofAddrs := map[string]string{}
	if *latPprofFlag != "" {
		c.extra = func(id string) []string {
			ln, err := hostport.ListenLoopback()
			if err != nil {
				b.Fatal(err)
			}
			addr := ln.Addr().String()
			ln.Close()
			pprofAddrs[id] = addr
			return []string{"--pprof-addr", addr}
		}
	}
	for i := range replicas {
		c.start(fmt.Sprintf("r%d", i+1))
	}
	c.waitOwners(30*time.Second, everyPartitionLed)
	h.probeEveryReplica()

	wfc := newWorkflowClients(b, c)
	var mu sync.Mutex
	created := make(map[int64]*schedulerv1.Workflow, chains)
	parallel(b, chains, 8, func(i int) error {
		r := c.any()
		cl, err := wfc.of(r)
		if err != nil {
			return err
		}
		wf := &schedulerv1.Workflow{GroupId: h.st.GroupID, Name: fmt.Sprintf("chain-%04d", i),
			Schedule:        &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_FIX_RATE, Expression: "1s"},
			MisfireStrategy: schedulerv1.MisfireStrategy_MISFIRE_STRATEGY_DO_NOTHING, Status: schedulerv1.JobStatus_JOB_STATUS_RUNNING,
			MaxConcurrentInstances: 100, Edges: []*schedulerv1.WorkflowEdge{{From: "A", To: "B"}}}
		for _, n := range []string{"A", "B"} {
			j, err := r.jobs.CreateJob(ctx, &schedulerv1.CreateJobRequest{Job: &schedulerv1.Job{
				GroupId: h.st.GroupID, Name: fmt.Sprintf("chain%04d-%s", i, n), Handler: "count",
				GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN, Schedule: &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_NONE},
			}})
			if err != nil {
				return fmt.Errorf("create job %s of chain %d: %w", n, i, err)
			}
			wf.Nodes = append(wf.Nodes, &schedulerv1.WorkflowNode{Id: n, JobId: j.GetJob().GetId()})
		}
		resp, err := cl.CreateWorkflow(ctx, &schedulerv1.CreateWorkflowRequest{Workflow: wf})
		if err != nil {
			return fmt.Errorf("create chain %d: %w", i, err)
		}
		mu.Lock()
		created[resp.GetWorkflow().GetId()] = resp.GetWorkflow()
		mu.Unlock()
		return nil
	})
	from := time.Now().Add(latWarmup)
	until := from.Add(run)
	b.Logf("%d chains A → B every 1s (%d nodes/s) on %d replicas, %d partitions; measuring instances scheduled %s–%s",
		chains, 2*chains, replicas, partitions, from.Format("15:04:05"), until.Format("15:04:05"))
	b.ResetTimer()
	if *latPprofFlag != "" {
		profileMidway(b, *latPprofFlag, from.Add(run/2-5*time.Second), c.token, pprofAddrs)
	}
	wait := time.NewTimer(time.Until(until.Add(2 * time.Second))) // the load's length, not a synchronization
	<-wait.C
	b.StopTimer()
	parallel(b, len(created), 8, func(i int) error {
		w := proto.CloneOf(created[slices.Sorted(maps.Keys(created))[i]])
		w.Status = schedulerv1.JobStatus_JOB_STATUS_STOPPED
		cl, err := wfc.of(c.any())
		if err != nil {
			return err
		}
		if _, err := cl.UpdateWorkflow(ctx, &schedulerv1.UpdateWorkflowRequest{Workflow: w}); err != nil {
			return fmt.Errorf("stop workflow %d: %w", w.GetId(), err)
		}
		return nil
	})
	if !h.tl.WaitQuiet(quiet, 60*time.Second) {
		b.Errorf("node runs still arriving 60s after the workflows were stopped")
	}
	c.stopAll()
	c.checkNoCrash()

	// arrived: by instance, the arrival of node A (index 0) and B (index 1), Unix ns.
	type pair struct{ a, b int64 }
	arrived := map[[2]int64]*pair{}
	executed := 0
	for _, e := range h.tl.Snapshot(from.UnixMilli(), until.UnixMilli()) {
		id, ok := triggerid.Parse(e.TriggerID)
		if !ok || id.Workflow == 0 {
			continue
		}
		executed++
		k := [2]int64{id.Workflow, id.ScheduledMs}
		p := arrived[k]
		if p == nil {
			p = &pair{}
			arrived[k] = p
		}
		if id.Node == 0 {
			p.a = e.ArrivedNs
		} else {
			p.b = e.ArrivedNs
		}
	}
	var lat []time.Duration
	noB := 0
	for _, p := range arrived {
		switch {
		case p.a != 0 && p.b != 0:
			lat = append(lat, time.Duration(p.b-p.a))
		case p.a != 0:
			noB++
		}
	}
	d := firecheck.NewDist(lat)
	rate := float64(executed) / run.Seconds()
	ms := func(v time.Duration) float64 { return float64(v) / float64(time.Millisecond) }
	b.Logf("node → next node: n=%d p50=%v p90=%v p99=%v max=%v; %.0f nodes/s executed; %d instances with A run and B not",
		d.N, d.P50.Round(10*time.Microsecond), d.P90.Round(10*time.Microsecond), d.P99.Round(10*time.Microsecond),
		d.Max.Round(10*time.Microsecond), rate, noB)
	b.ReportMetric(ms(d.P50), "p50-ms")
	b.ReportMetric(ms(d.P99), "p99-ms")
	b.ReportMetric(ms(d.Max), "max-ms")
	b.ReportMetric(math.Round(rate), "nodes/s")
	if d.N == 0 {
		b.Errorf("no A → B pair measured")
	}
}

// profileMidway takes, from at on, 10 s CPU profiles of the replicas (their pprof addresses
// by id, served to the internal token) and of the test process, into dir.
func profileMidway(b *testing.B, dir string, at time.Time, token string, addrs map[string]string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	time.Sleep(time.Until(at)) // the profiles' place in the load, not a synchronization
	var wg sync.WaitGroup
	for id, addr := range addrs {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(b.Context(), "GET", "http://"+addr+"/debug/pprof/profile?seconds=10", nil)
			if err != nil {
				b.Error(err)
				return
			}
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				b.Errorf("profile replica %s: %v", id, err)
				return
			}
			defer resp.Body.Close()
			f, err := os.Create(filepath.Join(dir, "replica-"+id+".pprof"))
			if err != nil {
				b.Error(err)
				return
			}
			defer f.Close()
			if _, err := io.Copy(f, resp.Body); err != nil {
				b.Error(err)
			}
		})
	}
	f, err := os.Create(filepath.Join(dir, "test-process.pprof"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err == nil {
		time.Sleep(10 * time.Second) // the profile's length
		pprof.StopCPUProfile()
	}
	wg.Wait()
	b.Logf("CPU profiles in %s", dir)
}
