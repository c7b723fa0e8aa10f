package failover_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/devstack"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/gateway/auth"
)

var (
	killsFlag = flag.Int("kills", 20, "leader kills in TestLeaderKill (0 checks the harness on a steady run)")
	jobsFlag  = flag.Int("jobs", 200, "1 s FIX_RATE jobs in TestLeaderKill")
	seedFlag  = flag.Uint64("seed", 0, "random seed of the kill schedule; 0 picks one (logged)")
)

const (
	replicas = 3
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
	tl := newTally()
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
			"count": tl.handle,
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

	c := &cluster{t: t, bin: bin, logDir: logDir, token: st.InternalToken, args: []string{
		"scheduler", "--grpc-addr", any0, "--etcd-endpoints", st.EtcdEndpoint, "--database-url", dbURL,
		"--registry-addr", st.RegistryAddr, "--logs-addr", st.LogsAddr, "--session-ttl", sessionTTL, "--log-level", "info",
		"--internal-token", st.InternalToken, "--auth-addr", st.AuthAddr,
	}}
	t.Cleanup(func() {
		if t.Failed() {
			c.dumpLogs()
		}
	})
	// One at a time, so the first replica migrates the schema alone, and the election queue is r1, r2, r3.
	for i := range replicas {
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
		first[j.GetId()] = j.GetNextFireTime().AsTime().UnixMilli()
		mu.Unlock()
		return nil
	})
	created := time.Now()
	t.Logf("%d jobs created", nJobs)

	// The kills: find the leader, let it lead for a random 1–3 s, kill it, start its replacement.
	var killLog []kill
	for k := range kills {
		l := c.waitLeader()
		wait := time.NewTimer(time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))) // the workload's schedule, not a synchronization
		<-wait.C
		if now := c.waitLeader(); now != l {
			t.Logf("kill %d: leadership moved from %s to %s without a kill", k+1, l.id, now.id)
			l = now
		}
		at := l.kill()
		killLog = append(killLog, kill{n: k + 1, replica: l.id, at: at})
		c.start(l.id)
	}
	steadyFrom := created
	if kills > 0 {
		last := killLog[len(killLog)-1].at
		if !tl.waitScheduledAfter(last, 30*time.Second) {
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
	if !tl.waitQuiet(quiet, 30*time.Second) {
		t.Errorf("executions still arriving 30s after the jobs were stopped")
	}
	c.stopAll()
	c.checkNoCrash()

	rep := check(tl.snapshot(), first, stopped, killLog)
	rep.log(t)
	if rep.lost > 0 || rep.doubled > 0 || rep.offGrid > 0 {
		t.Errorf("failover guarantee broken: %d fires lost, %d doubled, %d off schedule (of %d checked, %d kills)",
			rep.lost, rep.doubled, rep.offGrid, rep.checked, len(killLog))
	}
	if rep.checked == 0 {
		t.Errorf("no fire checked: the run window is empty")
	}
}

// execution is one run of the "count" handler.
type execution struct {
	jobID     int64
	triggerID string
	scheduled int64 // Unix ms
	arrived   time.Time
	trigType  string
}

// tally records every execution of the "count" handler.
type tally struct {
	mu       sync.Mutex
	execs    []execution
	last     time.Time     // latest arrival
	maxSched int64         // latest scheduled time seen, Unix ms
	changed  chan struct{} // closed and replaced on every execution
}

func newTally() *tally { return &tally{changed: make(chan struct{})} }

func (tl *tally) handle(_ context.Context, job *sdk.Job) error {
	now := time.Now()
	sched := job.ScheduledTime.UnixMilli()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.execs = append(tl.execs, execution{jobID: job.ID, triggerID: job.TriggerID, scheduled: sched, arrived: now, trigType: job.TriggerType})
	tl.last = now
	tl.maxSched = max(tl.maxSched, sched)
	close(tl.changed)
	tl.changed = make(chan struct{})
	return nil
}

func (tl *tally) snapshot() []execution {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return slices.Clone(tl.execs)
}

// waitScheduledAfter waits until a fire scheduled after t has executed.
func (tl *tally) waitScheduledAfter(t time.Time, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		tl.mu.Lock()
		ok, ch := tl.maxSched > t.UnixMilli(), tl.changed
		tl.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return false
		}
	}
}

// waitQuiet waits until no execution has arrived for d.
func (tl *tally) waitQuiet(d, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		tl.mu.Lock()
		since, ch := time.Since(tl.last), tl.changed
		tl.mu.Unlock()
		if since >= d {
			return true
		}
		quietEnd := time.NewTimer(d - since)
		select {
		case <-ch: // another arrival: measure again
		case <-quietEnd.C:
		case <-deadline.C:
			quietEnd.Stop()
			return false
		}
		quietEnd.Stop()
	}
}

// kill is one SIGKILL of the leader.
type kill struct {
	n       int
	replica string
	at      time.Time
	gap     time.Duration // to the first execution of a fire scheduled after the kill; 0 if none
	lost    int           // lost fires scheduled between this kill and the next
}

// report is what the check found.
type report struct {
	checked, lost, doubled, doubledSameID, offGrid int
	executions                                     int
	lostSamples, doubledSamples, offGridSamples    []string
	lostBeforeKills                                int // lost fires scheduled before the first kill
	kills                                          []kill
	lateP50, lateP99, lateMax                      time.Duration
}

// check compares the executions with the schedule: for every job, each fire first + k·1s up to
// its stop time minus stopMargin must have run exactly once; any fire that ran more than once
// (window or not) is doubled; an execution off the job's 1 s grid is off schedule.
func check(execs []execution, first, stopped map[int64]int64, kills []kill) *report {
	type key struct {
		job   int64
		sched int64
	}
	r := &report{executions: len(execs), kills: slices.Clone(kills)}
	perFire := map[key]int{}
	perID := map[string]int{}
	var late []time.Duration
	for _, e := range execs {
		perFire[key{e.jobID, e.scheduled}]++
		perID[e.triggerID]++
		late = append(late, e.arrived.Sub(time.UnixMilli(e.scheduled)))
		f, ok := first[e.jobID]
		if !ok || e.scheduled < f || (e.scheduled-f)%1000 != 0 {
			r.offGrid++
			if len(r.offGridSamples) < 10 {
				r.offGridSamples = append(r.offGridSamples, fmt.Sprintf("job %d trigger %s (%s) scheduled %s", e.jobID, e.triggerID, e.trigType, msTime(e.scheduled)))
			}
		}
	}
	for k, n := range perFire {
		if n > 1 {
			r.doubled++
			if len(r.doubledSamples) < 10 {
				r.doubledSamples = append(r.doubledSamples, fmt.Sprintf("job %d scheduled %s ran %d times", k.job, msTime(k.sched), n))
			}
		}
	}
	for _, n := range perID {
		if n > 1 {
			r.doubledSameID++
		}
	}
	ids := make([]int64, 0, len(first))
	for id := range first {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		end := stopped[id] - stopMargin.Milliseconds()
		for s := first[id]; s <= end; s += 1000 {
			r.checked++
			if perFire[key{id, s}] > 0 {
				continue
			}
			r.lost++
			i := lastKillBefore(kills, s)
			if i < 0 {
				r.lostBeforeKills++
			} else {
				r.kills[i].lost++
			}
			if len(r.lostSamples) < 10 {
				where := "before the first kill"
				if i >= 0 {
					where = fmt.Sprintf("%v after kill %d", time.UnixMilli(s).Sub(kills[i].at).Round(time.Millisecond), kills[i].n)
				}
				r.lostSamples = append(r.lostSamples, fmt.Sprintf("job %d scheduled %s (%s)", id, msTime(s), where))
			}
		}
	}
	// The gap of each kill: to the first arrival of a fire scheduled after it.
	for i := range r.kills {
		k := &r.kills[i]
		for _, e := range execs {
			if e.scheduled > k.at.UnixMilli() && e.arrived.After(k.at) {
				if g := e.arrived.Sub(k.at); k.gap == 0 || g < k.gap {
					k.gap = g
				}
			}
		}
	}
	slices.Sort(late)
	if n := len(late); n > 0 {
		r.lateP50, r.lateP99, r.lateMax = late[n/2], late[n*99/100], late[n-1]
	}
	return r
}

// lastKillBefore returns the index of the last kill at or before the Unix ms s, or -1.
func lastKillBefore(kills []kill, s int64) int {
	i := -1
	for j, k := range kills {
		if k.at.UnixMilli() <= s {
			i = j
		}
	}
	return i
}

func (r *report) log(t *testing.T) {
	t.Helper()
	var gaps []time.Duration
	for _, k := range r.kills {
		t.Logf("kill %2d: %s at %s, next fire of the new leader after %v, lost fires scheduled until the next kill: %d",
			k.n, k.replica, k.at.Format("15:04:05.000"), k.gap.Round(time.Millisecond), k.lost)
		if k.gap > 0 {
			gaps = append(gaps, k.gap)
		}
	}
	median, worst := "n/a", "n/a"
	if len(gaps) > 0 {
		slices.Sort(gaps)
		median, worst = gaps[len(gaps)/2].Round(time.Millisecond).String(), gaps[len(gaps)-1].Round(time.Millisecond).String()
	}
	if len(gaps) < len(r.kills) {
		worst += fmt.Sprintf(" (%d kills with no later fire)", len(r.kills)-len(gaps))
	}
	t.Logf("failover: kills=%d executions=%d fires_checked=%d lost=%d doubled=%d (same trigger id %d) off_schedule=%d gap_median=%s gap_worst=%s lateness p50=%v p99=%v max=%v",
		len(r.kills), r.executions, r.checked, r.lost, r.doubled, r.doubledSameID, r.offGrid, median, worst,
		r.lateP50.Round(time.Millisecond), r.lateP99.Round(time.Millisecond), r.lateMax.Round(time.Millisecond))
	if r.lostBeforeKills > 0 {
		t.Logf("lost before the first kill: %d", r.lostBeforeKills)
	}
	for _, s := range r.lostSamples {
		t.Logf("lost: %s", s)
	}
	for _, s := range r.doubledSamples {
		t.Logf("doubled: %s", s)
	}
	for _, s := range r.offGridSamples {
		t.Logf("off schedule: %s", s)
	}
}

func msTime(ms int64) string { return time.UnixMilli(ms).UTC().Format("15:04:05.000") }

// cluster is the set of `jobmesh scheduler` processes.
type cluster struct {
	t      *testing.T
	bin    string
	logDir string
	args   []string
	token  string // the stack's internal token, which the test's clients present too

	mu   sync.Mutex
	live map[string]*replica // by replica id
	all  []*replica
}

// replica is one `jobmesh scheduler` process.
type replica struct {
	id     string
	cmd    *exec.Cmd
	addr   string
	jobs   schedulerv1.JobServiceClient
	sched  schedulerv1.SchedulerServiceClient
	exited chan struct{} // closed when the process has been reaped
	err    error         // its exit status, once exited is closed
	killed bool          // the test ended it
}

// start runs a replica and waits until it serves.
func (c *cluster) start(id string) *replica {
	t := c.t
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(c.logDir, id+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close() // the child has its own copy
	addrs := make(chan string, 1)
	cmd := exec.Command(c.bin, append(slices.Clone(c.args), "--replica-id", id)...)
	cmd.Stdout = &addrWriter{addrs: addrs}
	cmd.Stderr = logf
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start replica %s: %v", id, err)
	}
	fmt.Fprintf(logf, "=== test: started pid %d\n", cmd.Process.Pid)
	r := &replica{id: id, cmd: cmd, exited: make(chan struct{})}
	go func() {
		r.err = cmd.Wait()
		close(r.exited)
	}()
	t.Cleanup(func() { r.stop(syscall.SIGKILL) })
	c.mu.Lock()
	if c.live == nil {
		c.live = map[string]*replica{}
	}
	c.live[id] = r
	c.all = append(c.all, r)
	c.mu.Unlock()

	select {
	case r.addr = <-addrs:
	case <-r.exited:
		t.Fatalf("replica %s exited before serving: %v", id, r.err)
	case <-time.After(30 * time.Second):
		t.Fatalf("replica %s not serving after 30s", id)
	}
	conn, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUnaryInterceptor(boundCalls),
		auth.BearerToken(c.token))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	r.jobs, r.sched = schedulerv1.NewJobServiceClient(conn), schedulerv1.NewSchedulerServiceClient(conn)
	return r
}

// waitLeader returns the live replica that says it leads, waiting up to 30s for one.
func (c *cluster) waitLeader() *replica {
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
		var leader *replica
		var epoch int64
		for _, r := range live {
			select {
			case <-r.exited:
				t.Fatalf("replica %s exited on its own: %v", r.id, r.err)
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			s, err := r.sched.GetStatus(ctx, &schedulerv1.GetStatusRequest{})
			cancel()
			if err == nil && s.GetLeader() && s.GetEpoch() > epoch {
				leader, epoch = r, s.GetEpoch()
			}
		}
		if leader != nil {
			return leader
		}
		if time.Now().After(deadline) {
			t.Fatalf("no scheduler leader among %d live replicas within 30s", len(live))
		}
		<-tick.C
	}
}

// kill SIGKILLs the replica, waits until it is gone and returns when the signal was sent.
func (r *replica) kill() time.Time {
	r.killed = true
	at := time.Now()
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.exited
	return at
}

// stop signals the replica by its pid and waits for it, up to 15s before SIGKILL.
func (r *replica) stop(sig os.Signal) {
	select {
	case <-r.exited:
		return
	default:
	}
	r.killed = true
	_ = r.cmd.Process.Signal(sig)
	select {
	case <-r.exited:
	case <-time.After(15 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.exited
	}
}

// stopAll ends the live replicas with SIGTERM, as an operator would, and checks they exit cleanly.
func (c *cluster) stopAll() {
	c.mu.Lock()
	live := c.live
	c.live = nil
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, r := range live {
		wg.Go(func() { r.stop(syscall.SIGTERM) })
	}
	wg.Wait()
	for _, r := range live {
		if r.err != nil {
			c.t.Errorf("replica %s (pid %d) did not exit cleanly on SIGTERM: %v", r.id, r.cmd.Process.Pid, r.err)
		}
	}
}

// checkNoCrash fails the test for every replica that exited without being told to.
func (c *cluster) checkNoCrash() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.all {
		select {
		case <-r.exited:
			if !r.killed {
				c.t.Errorf("replica %s (pid %d) exited on its own: %v", r.id, r.cmd.Process.Pid, r.err)
			}
		default:
		}
	}
}

// dumpLogs prints the end of every replica's log.
func (c *cluster) dumpLogs() {
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

// addrWriter picks the "scheduler grpc <addr>" line out of a replica's stdout.
type addrWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	addrs chan<- string
	sent  bool
}

func (w *addrWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sent {
		return len(p), nil
	}
	w.buf.Write(p)
	sc := bufio.NewScanner(bytes.NewReader(w.buf.Bytes()))
	for sc.Scan() {
		if addr, ok := strings.CutPrefix(sc.Text(), "scheduler grpc "); ok {
			w.addrs <- strings.TrimSpace(addr)
			w.sent = true
			break
		}
	}
	return len(p), nil
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
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(root)
		if parent == root {
			t.Fatal("no go.mod above the test's directory")
		}
		root = parent
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build jobmesh: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "jobmesh")
	cmd := exec.Command(goBin, "build", "-o", bin, "./cmd/jobmesh")
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build ./cmd/jobmesh: %v\n%s", err, out.String())
	}
	return bin
}
