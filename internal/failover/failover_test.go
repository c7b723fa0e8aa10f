package failover_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/cluster"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/devstack"
	"github.com/jobmesh/jobmesh/internal/firecheck"
	"github.com/jobmesh/jobmesh/services/executor-agent/meshtls"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/gateway/auth"
	"github.com/jobmesh/jobmesh/services/scheduler"
)

var (
	killsFlag = flag.Int("kills", 20, "leader kills in TestLeaderKill (0 checks the harness on a steady run)")
	jobsFlag  = flag.Int("jobs", 200, "1 s FIX_RATE jobs in TestLeaderKill")
	seedFlag  = flag.Uint64("seed", 0, "random seed of the kill schedule; 0 picks one (logged)")
)

const (
	nReplicas = 3
	// sessionTTL is the replicas' etcd session TTL: how long a killed leader keeps leadership.
	sessionTTL = "1s"
	// stopMargin excludes the fires scheduled just before the jobs were stopped, which race the stop.
	stopMargin = 2 * time.Second
	// steadyRun is how long the jobs keep firing after the last takeover (and, without kills,
	// the whole run).
	steadyRun = 5 * time.Second
	// quiet is how long no execution may arrive before the run counts as settled.
	quiet = 2 * time.Second
)

// TestLeaderKill is the failover guarantee: while ≥ 200 jobs fire every second, the scheduler
// leader is killed with SIGKILL at random moments (a replacement replica starts each time), and
// afterwards every scheduled fire of the run window has executed exactly once: no fire lost, none
// doubled. It reports the gap between each kill and the first execution of a fire scheduled after
// it: the new leader's first fire. (The first execution of any fire after the kill would not do:
// Runs the killed leader had in flight still land a millisecond later.)
//
// Run it alone with: go test ./internal/failover -run TestLeaderKill -v [-args -kills=N -jobs=N -seed=S]
func TestLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("about 80 s of processes and kills; CI runs it (without -short)")
	}
	t.Parallel()
	kills, nJobs := *killsFlag, *jobsFlag
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	t.Logf("failover: %d jobs, %d kills, seed %d (rerun with -args -seed=%d)", nJobs, kills, seed, seed)

	bin := buildJobmesh(t)
	logDir := t.TempDir()
	dbURL := dbtest.NewPostgres(t)
	tl := firecheck.NewTally()
	probed := make(chan struct{}, 1)
	stackLog, err := os.Create(filepath.Join(logDir, "stack.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stackLog.Close() })

	startCtx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	any0 := "127.0.0.1:0"
	st, err := devstack.Start(startCtx, devstack.Config{
		DataDir: t.TempDir(), DatabaseURL: dbURL, UnsafeEtcd: true, NoScheduler: true,
		HTTPAddr: any0, RegistryAddr: any0, LogsAddr: any0, AuthAddr: any0, AgentAddr: any0, EtcdAddr: any0,
		Logger: slog.New(slog.NewTextHandler(stackLog, &slog.HandlerOptions{Level: slog.LevelWarn})),
		AgentHandlers: map[string]sdk.HandlerFunc{
			"count": tl.Handle,
			"probe": func(context.Context, *sdk.Job) error {
				select {
				case probed <- struct{}{}:
				default:
				}
				return nil
			},
		},
	})
	if err != nil {
		t.Fatalf("devstack.Start: %v", err)
	}
	t.Cleanup(st.Stop)
	cancel()
	ctx := t.Context() // and every call has a deadline: boundCalls

	c := &replicaSet{t: t, bin: bin, logDir: logDir, token: st.InternalToken, tls: st.TLS, args: append([]string{
		"scheduler", "--grpc-addr", any0, "--etcd-endpoints", st.EtcdEndpoint, "--database-url", dbURL,
		"--registry-addr", st.RegistryAddr, "--logs-addr", st.LogsAddr, "--session-ttl", sessionTTL, "--log-level", "info",
		"--internal-token", st.InternalToken, "--auth-addr", st.AuthAddr,
	}, tlsArgs(st)...)}
	t.Cleanup(func() {
		if t.Failed() {
			c.dumpLogs()
		}
	})
	// One at a time, so the first replica migrates the schema alone, and the election queue is r1, r2, r3.
	for i := range nReplicas {
		c.start(fmt.Sprintf("r%d", i+1))
	}
	leader := c.waitLeader()
	t.Logf("first leader %s", leader.id)

	// The leader must see the agent before the first scheduled fire, or that fire fails for want
	// of an executor, which is not what this test is about.
	jobs := leader.jobs
	probe, err := jobs.CreateJob(ctx, &schedulerv1.CreateJobRequest{Job: &schedulerv1.Job{
		GroupId: st.GroupID, Name: "probe", Handler: "probe", GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN,
		Schedule: &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_NONE},
	}})
	if err != nil {
		t.Fatalf("create probe job: %v", err)
	}
	probeUntil := time.Now().Add(30 * time.Second)
	for probeOK := false; !probeOK; {
		if time.Now().After(probeUntil) {
			t.Fatal("the leader never ran a manual fire on the agent within 30s")
		}
		if _, err := leader.jobs.TriggerJob(ctx, &schedulerv1.TriggerJobRequest{Id: probe.GetJob().GetId()}); err != nil {
			t.Fatalf("trigger probe: %v", err)
		}
		select {
		case <-probed:
			probeOK = true
		case <-time.After(500 * time.Millisecond): // then trigger again
		}
	}

	// The load: nJobs jobs firing every second, created in parallel so their fires spread over the second.
	first := make(map[int64]int64, nJobs) // job id → first scheduled fire, Unix ms
	var mu sync.Mutex
	parallel(t, nJobs, 8, func(i int) error {
		resp, err := jobs.CreateJob(ctx, &schedulerv1.CreateJobRequest{Job: &schedulerv1.Job{
			GroupId: st.GroupID, Name: fmt.Sprintf("count-%03d", i), Handler: "count",
			GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN, Status: schedulerv1.JobStatus_JOB_STATUS_RUNNING,
			Schedule:        &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_FIX_RATE, Expression: "1s"},
			MisfireStrategy: schedulerv1.MisfireStrategy_MISFIRE_STRATEGY_DO_NOTHING,
		}})
		if err != nil {
			return fmt.Errorf("create job %d: %w", i, err)
		}
		j := resp.GetJob()
		if j.GetNextFireTime() == nil {
			return fmt.Errorf("job %d created without a next fire", j.GetId())
		}
		mu.Lock()
		first[j.GetId()] = firecheck.FirstFire(j.GetNextFireTime().AsTime().UnixMilli(), j.GetCreateTime().AsTime().UnixMilli(), 1000)
		mu.Unlock()
		return nil
	})
	created := time.Now()
	t.Logf("%d jobs created", nJobs)

	// The kills: find the leader, let it lead for a random 1–3 s, kill it, start its replacement.
	var killLog []firecheck.Kill
	for k := range kills {
		l := c.waitLeader()
		wait := time.NewTimer(time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))) // the workload's schedule, not a synchronization
		<-wait.C
		if now := c.waitLeader(); now != l {
			t.Logf("kill %d: leadership moved from %s to %s without a kill", k+1, l.id, now.id)
			l = now
		}
		at := l.kill()
		killLog = append(killLog, firecheck.Kill{N: k + 1, Replica: l.id, At: at, Lead: scheduler.DefaultDispatchLead})
		c.start(l.id)
	}
	steadyFrom := created
	if kills > 0 {
		last := killLog[len(killLog)-1].At
		if !tl.WaitScheduledAfter(last, 30*time.Second) {
			t.Errorf("no fire scheduled after the last kill ran within 30s")
		}
		steadyFrom = time.Now()
	}
	wait := time.NewTimer(time.Until(steadyFrom.Add(steadyRun)))
	<-wait.C

	// Stop every job (through the leader, whose ring holds their armed fires), then let the
	// executions settle before counting.
	stopper := c.waitLeader()
	stopped := make(map[int64]int64, nJobs) // job id → when its StopJob was sent, Unix ms
	ids := make([]int64, 0, nJobs)
	for id := range first {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	parallel(t, len(ids), 8, func(i int) error {
		at := time.Now().UnixMilli()
		if _, err := stopper.jobs.StopJob(ctx, &schedulerv1.StopJobRequest{Id: ids[i]}); err != nil {
			return fmt.Errorf("stop job %d: %w", ids[i], err)
		}
		mu.Lock()
		stopped[ids[i]] = at
		mu.Unlock()
		return nil
	})
	if !tl.WaitQuiet(quiet, 30*time.Second) {
		t.Errorf("executions still arriving 30s after the jobs were stopped")
	}
	c.stopAll()
	c.checkNoCrash()

	rep := firecheck.Check(tl.Snapshot(math.MinInt64, math.MaxInt64), grids(first, stopped), killLog)
	logReport(t, rep)
	if rep.Lost > 0 || rep.Doubled > 0 || rep.OffGrid > 0 {
		t.Errorf("failover guarantee broken: %d fires lost, %d doubled, %d off schedule (of %d checked, %d kills)",
			rep.Lost, rep.Doubled, rep.OffGrid, rep.Checked, len(killLog))
	}
	if rep.Checked == 0 {
		t.Errorf("no fire checked: the run window is empty")
	}
}

// grids turns the jobs' first fires and stop times into what firecheck expects: every fire
// first + k·1s up to the job's stop time minus stopMargin.
func grids(first, stopped map[int64]int64) map[int64]firecheck.Grid {
	out := make(map[int64]firecheck.Grid, len(first))
	for id, f := range first {
		out[id] = firecheck.Grid{First: f, Period: 1000, From: f, Until: stopped[id] - stopMargin.Milliseconds()}
	}
	return out
}

// logReport logs what the check found, kill by kill.
func logReport(t *testing.T, r *firecheck.Report) {
	t.Helper()
	for _, k := range r.Kills {
		t.Logf("kill %2d: %s at %s, next fire of the new leader after %v, lost fires scheduled until the next kill: %d",
			k.N, k.Replica, k.At.Format("15:04:05.000"), k.Gap.Round(time.Millisecond), k.Lost)
	}
	gaps := r.Gaps()
	median, worst := "n/a", "n/a"
	if len(gaps) > 0 {
		median, worst = gaps[len(gaps)/2].Round(time.Millisecond).String(), gaps[len(gaps)-1].Round(time.Millisecond).String()
	}
	if len(gaps) < len(r.Kills) {
		worst += fmt.Sprintf(" (%d kills with no later fire)", len(r.Kills)-len(gaps))
	}
	t.Logf("failover: kills=%d executions=%d fires_checked=%d lost=%d doubled=%d (same trigger id %d) off_schedule=%d gap_median=%s gap_worst=%s lateness p50=%v p99=%v max=%v",
		len(r.Kills), r.Executions, r.Checked, r.Lost, r.Doubled, r.DoubledSameID, r.OffGrid, median, worst,
		r.Lateness.P50.Round(time.Millisecond), r.Lateness.P99.Round(time.Millisecond), r.Lateness.Max.Round(time.Millisecond))
	if r.LostBeforeKills > 0 {
		t.Logf("lost before the first kill: %d", r.LostBeforeKills)
	}
	for _, s := range r.LostSamples {
		t.Logf("lost: %s", s)
	}
	for _, s := range r.DoubledSamples {
		t.Logf("doubled: %s", s)
	}
	for _, s := range r.OffGridSamples {
		t.Logf("off schedule: %s", s)
	}
}

// replicaSet is the set of `jobmesh scheduler` processes.
type replicaSet struct {
	t      *testing.T
	bin    string
	logDir string
	args   []string
	token  string            // the stack's internal token, which the test's clients present too
	tls    *meshtls.Identity // the stack's certificate, which the test's clients present too

	mu   sync.Mutex
	live map[string]*replica // by replica id
	all  []*replica
}

// replica is one `jobmesh scheduler` process.
type replica struct {
	id    string
	proc  *cluster.Proc
	jobs  schedulerv1.JobServiceClient
	sched schedulerv1.SchedulerServiceClient
}

// tlsArgs are the flags that give a process joining st the stack's certificates, for the mesh
// and for etcd.
func tlsArgs(st *devstack.Stack) []string {
	return []string{"--tls-cert", st.TLSFiles.Cert, "--tls-key", st.TLSFiles.Key, "--tls-ca", st.TLSFiles.CA,
		"--etcd-cert", st.EtcdTLSFiles.Cert, "--etcd-key", st.EtcdTLSFiles.Key, "--etcd-ca", st.EtcdTLSFiles.CA}
}

// start runs a replica and waits until it serves.
func (c *replicaSet) start(id string) *replica {
	t := c.t
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(c.logDir, id+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	p, err := cluster.Start(context.Background(), cluster.Spec{Name: "replica " + id, Path: c.bin,
		Args: append(slices.Clone(c.args), "--replica-id", id), Log: logf, Ready: []string{"scheduler grpc "}, ReadyTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Kill() })
	conn, err := grpc.NewClient(p.Value("scheduler grpc "), c.tls.DialOption(), grpc.WithUnaryInterceptor(boundCalls),
		auth.BearerToken(c.token))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	r := &replica{id: id, proc: p, jobs: schedulerv1.NewJobServiceClient(conn), sched: schedulerv1.NewSchedulerServiceClient(conn)}
	c.mu.Lock()
	if c.live == nil {
		c.live = map[string]*replica{}
	}
	c.live[id] = r
	c.all = append(c.all, r)
	c.mu.Unlock()
	return r
}

// waitLeader returns the live replica that says it leads, waiting up to 30s for one.
func (c *replicaSet) waitLeader() *replica {
	t := c.t
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		c.mu.Lock()
		live := make([]*replica, 0, len(c.live))
		for _, r := range c.live {
			live = append(live, r)
		}
		c.mu.Unlock()
		clients := make([]schedulerv1.SchedulerServiceClient, len(live))
		for i, r := range live {
			if crashed, err := r.proc.Crashed(); crashed {
				t.Fatalf("replica %s exited on its own: %v", r.id, err)
			}
			clients[i] = r.sched
		}
		if i, _ := cluster.Leader(context.Background(), clients, time.Second); i >= 0 {
			return live[i]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no scheduler leader among %d live replicas within 30s", len(live))
		}
		<-tick.C
	}
}

// kill SIGKILLs the replica, waits until it is gone and returns when the signal was sent.
func (r *replica) kill() time.Time { return r.proc.Kill() }

// stopAll ends the live replicas with SIGTERM, as an operator would, and checks they exit cleanly.
func (c *replicaSet) stopAll() {
	c.mu.Lock()
	live := c.live
	c.live = nil
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, r := range live {
		wg.Go(func() {
			if err := r.proc.Stop(syscall.SIGTERM, 15*time.Second); err != nil {
				c.t.Errorf("replica %s (pid %d) did not exit cleanly on SIGTERM: %v", r.id, r.proc.Pid(), err)
			}
		})
	}
	wg.Wait()
}

// checkNoCrash fails the test for every replica that exited without being told to.
func (c *replicaSet) checkNoCrash() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.all {
		if crashed, err := r.proc.Crashed(); crashed {
			c.t.Errorf("replica %s (pid %d) exited on its own: %v", r.id, r.proc.Pid(), err)
		}
	}
}

// dumpLogs prints the end of every replica's log.
func (c *replicaSet) dumpLogs() {
	ents, _ := os.ReadDir(c.logDir)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(c.logDir, e.Name()))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		lines = lines[max(0, len(lines)-40):]
		c.t.Logf("--- last lines of %s:\n%s", e.Name(), strings.Join(lines, "\n"))
	}
}

// parallel runs f(0..n-1) on the given number of goroutines and fails the test on any error.
func parallel(t *testing.T, n, workers int, f func(i int) error) {
	t.Helper()
	next := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if err := errors.Join(all...); err != nil {
		t.Fatal(err)
	}
}

// boundCalls gives every call to a replica a 10 s deadline.
func boundCalls(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return invoke(ctx, method, req, reply, cc, opts...)
}

// buildJobmesh builds the jobmesh binary once for the test.
func buildJobmesh(t *testing.T) string {
	t.Helper()
	bin, err := cluster.BuildJobmesh(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}
