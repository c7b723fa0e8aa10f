package failover_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/cluster"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/devstack"
	"github.com/jobmesh/jobmesh/internal/firecheck"
	"github.com/jobmesh/jobmesh/internal/xxltest"
	"github.com/jobmesh/jobmesh/services/executor-agent/meshtls"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/gateway/auth"
	"github.com/jobmesh/jobmesh/services/scheduler"
)

var (
	killsFlag    = flag.Int("kills", 20, "SIGKILLs of random replicas in TestReplicaKill (0 with -restarts=0 checks the harness on a steady run)")
	restartsFlag = flag.Int("restarts", 5, "graceful restarts (SIGTERM, clean exit, start again) in TestReplicaKill, interleaved with the kills")
	jobsFlag     = flag.Int("jobs", 200, "1 s FIX_RATE jobs in TestReplicaKill")
	xxlJobsFlag  = flag.Int("xxl-jobs", 50, "of -jobs, how many are BEAN jobs of an XXL-JOB executor group (two test executors) rather than the agent's")
	seedFlag     = flag.Uint64("seed", 0, "random seed of the kill schedule; 0 picks one (logged)")
)

const (
	nReplicas = 3
	// partitions is the replicas' --partitions: a job's partition is its id mod partitions.
	partitions = 16
	// sessionTTL is the replicas' etcd session TTL: how long a killed replica keeps its partitions.
	sessionTTL = "1s"
	// stopMargin excludes the fires scheduled just before the jobs were stopped, which race the stop.
	stopMargin = 2 * time.Second
	// steadyRun is how long the jobs keep firing after the last takeover (and, without kills,
	// the whole run).
	steadyRun = 5 * time.Second
	// quiet is how long no execution may arrive before the run counts as settled.
	quiet = 2 * time.Second
	// balanceWithin is how soon after a replica joins or leaves the partitions must be spread
	// over the live replicas again.
	balanceWithin = 10 * time.Second
)

// partitionOf is the partition of a job: its id mod partitions, as the scheduler hashes it.
func partitionOf(job int64) int { return int(job % partitions) }

// TestReplicaKill is the failover guarantee: while ≥ 200 jobs fire every second on 3 replicas that
// share 16 partitions, random replicas (leaders of some partitions, whichever they are) are killed
// with SIGKILL at random moments and others are restarted gracefully (SIGTERM, clean exit, start
// again), a replacement of the same id starting each time; afterwards every scheduled fire of the
// run window has executed exactly once: no fire lost, none doubled, none off schedule. It reports,
// per kill and per partition the victim led just before, the gap between the kill and the first
// execution of a fire of that partition scheduled after it: the next leader's first fire of it.
// (The first execution of any fire after the kill would not do: runs the killed replica had in
// flight still land a millisecond later, and the other replicas' partitions never stopped.)
//
// Run it alone with:
//
//	go test ./internal/failover -run TestReplicaKill -v [-args -kills=N -restarts=N -jobs=N -seed=S]
func TestReplicaKill(t *testing.T) {
	if testing.Short() {
		t.Skip("about 2 minutes of processes and kills; CI runs it (without -short)")
	}
	t.Parallel()
	kills, restarts, nJobs, nXxl := *killsFlag, *restartsFlag, *jobsFlag, min(*xxlJobsFlag, *jobsFlag)
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	t.Logf("failover: %d jobs (%d of them on XXL-JOB executors), %d kills, %d graceful restarts, %d partitions, seed %d (rerun with -args -seed=%d)",
		nJobs, nXxl, kills, restarts, partitions, seed, seed)

	h := newHarness(t, sideBySideConns)
	c := h.c
	ctx := t.Context() // and every call has a deadline: boundCalls
	// One at a time, so the first replica migrates the schema alone.
	for i := range nReplicas {
		c.start(fmt.Sprintf("r%d", i+1))
	}
	c.waitOwners(30*time.Second, everyPartitionLed)
	h.probeEveryReplica()

	// The load: nJobs jobs firing every second, created in parallel so their fires spread over the second.
	jobs := c.any().jobs
	first := make(map[int64]int64, nJobs) // job id → first scheduled fire, Unix ms
	var mu sync.Mutex
	xxlJobs := map[int64]bool{}
	parallel(t, nJobs, 8, func(i int) error {
		group, route := h.st.GroupID, schedulerv1.RouteStrategy_ROUTE_STRATEGY_UNSPECIFIED
		if i < nXxl { // the first nXxl jobs run on the XXL-JOB executors, in turn
			group, route = h.xxlGroup, schedulerv1.RouteStrategy_ROUTE_STRATEGY_ROUND
		}
		resp, err := jobs.CreateJob(ctx, &schedulerv1.CreateJobRequest{Job: &schedulerv1.Job{
			GroupId: group, Name: fmt.Sprintf("count-%03d", i), Handler: "count", RouteStrategy: route,
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
		if i < nXxl {
			xxlJobs[j.GetId()] = true
		}
		mu.Unlock()
		return nil
	})
	created := time.Now()
	t.Logf("%d jobs created", nJobs)

	// The kills and restarts, in random order: once every partition has a leader again, let the
	// replicas run a random 1–3 s, then stop a random live replica (after reading which
	// partitions it leads) and start its replacement, of the same id. Half the time the
	// replacement starts at once, and finds and deletes its predecessor's keys; the other half it
	// starts only once the others lead every partition (after a SIGKILL, once the victim's
	// session has expired), so the gaps cover both ways a partition changes hands.
	events := make([]bool, kills+restarts) // true: a graceful restart
	for i := range restarts {
		events[i] = true
	}
	rng.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
	var killLog []firecheck.Kill
	var replaced []string // per event, how its replacement started
	for n, graceful := range events {
		c.waitOwners(30*time.Second, everyPartitionLed)
		wait := time.NewTimer(time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))) // the workload's schedule, not a synchronization
		<-wait.C
		live := c.liveReplicas()
		victim := live[rng.IntN(len(live))]
		st, err := victim.sched.GetStatus(ctx, &schedulerv1.GetStatusRequest{})
		if err != nil {
			t.Fatalf("event %d: status of %s: %v", n+1, victim.id, err)
		}
		k := firecheck.Kill{N: n + 1, Replica: victim.id, Graceful: graceful, Lead: scheduler.DefaultDispatchLead,
			Partitions: cluster.Led(st), PartitionOf: partitionOf}
		if graceful {
			k.At = c.stop(victim)
		} else {
			k.At = c.kill(victim)
		}
		killLog = append(killLog, k)
		how := "replacement started at once"
		if rng.IntN(2) == 0 {
			c.waitOwners(30*time.Second, everyPartitionLed)
			how = fmt.Sprintf("replacement started once the others led every partition, %v after", time.Since(k.At).Round(time.Millisecond))
		}
		c.start(victim.id)
		replaced = append(replaced, fmt.Sprintf("%s, serving %v after", how, time.Since(k.At).Round(time.Millisecond)))
	}
	steadyFrom := created
	if len(killLog) > 0 {
		last := killLog[len(killLog)-1].At
		if !h.tl.WaitScheduledAfter(last, 30*time.Second) {
			t.Errorf("no fire scheduled after the last kill ran within 30s")
		}
		steadyFrom = time.Now()
	}
	wait := time.NewTimer(time.Until(steadyFrom.Add(steadyRun)))
	<-wait.C

	// Stop every job through the leader of its partition (whose ring holds its armed fires), then
	// let the executions settle before counting.
	leaders := c.waitOwners(30*time.Second, everyPartitionLed)
	stopped := make(map[int64]int64, nJobs) // job id → when its StopJob was sent, Unix ms
	ids := make([]int64, 0, nJobs)
	for id := range first {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	parallel(t, len(ids), 8, func(i int) error {
		r := c.byID(leaders.leader[partitionOf(ids[i])])
		if r == nil {
			r = c.any()
		}
		at := time.Now().UnixMilli()
		if _, err := r.jobs.StopJob(ctx, &schedulerv1.StopJobRequest{Id: ids[i]}); err != nil {
			return fmt.Errorf("stop job %d: %w", ids[i], err)
		}
		mu.Lock()
		stopped[ids[i]] = at
		mu.Unlock()
		return nil
	})
	if !h.tl.WaitQuiet(quiet, 30*time.Second) {
		t.Errorf("executions still arriving 30s after the jobs were stopped")
	}
	c.stopAll()
	c.checkNoCrash()

	execs := h.xxlTriggerIDs(h.tl.Snapshot(math.MinInt64, math.MaxInt64))
	rep := firecheck.Check(execs, grids(first, stopped), killLog)
	logReport(t, rep, replaced)
	if rep.Lost > 0 || rep.Doubled > 0 || rep.OffGrid > 0 {
		t.Errorf("failover guarantee broken: %d fires lost, %d doubled, %d off schedule (of %d checked, %d kills, %d graceful restarts)",
			rep.Lost, rep.Doubled, rep.OffGrid, rep.Checked, kills, restarts)
	}
	// The XXL-JOB jobs alone, so that their share is seen to hold too.
	xgrids, xexecs := map[int64]firecheck.Grid{}, []firecheck.Execution(nil)
	for id, g := range grids(first, stopped) {
		if xxlJobs[id] {
			xgrids[id] = g
		}
	}
	// An XXL-JOB executor runs a fire as soon as it gets it, so the scheduler must not send one
	// ahead of its time as it does to agents, which hold fires until then.
	var early []string
	for _, e := range execs {
		if !xxlJobs[e.JobID] {
			continue
		}
		xexecs = append(xexecs, e)
		if e.Lateness() < 0 && len(early) < 10 {
			early = append(early, fmt.Sprintf("job %d trigger %s ran %v before its time", e.JobID, e.TriggerID, -e.Lateness()))
		}
	}
	xrep := firecheck.Check(xexecs, xgrids, nil)
	t.Logf("failover, XXL-JOB jobs: jobs=%d executions=%d fires_checked=%d lost=%d doubled=%d (same trigger id %d) off_schedule=%d; lateness p50=%v p99=%v max=%v",
		len(xgrids), xrep.Executions, xrep.Checked, xrep.Lost, xrep.Doubled, xrep.DoubledSameID, xrep.OffGrid,
		xrep.Lateness.P50.Round(time.Millisecond), xrep.Lateness.P99.Round(time.Millisecond), xrep.Lateness.Max.Round(time.Millisecond))
	if nXxl > 0 && xrep.Checked == 0 {
		t.Errorf("no fire of an XXL-JOB job checked")
	}
	if len(early) > 0 {
		t.Errorf("XXL-JOB executors ran fires before their time (sent ahead, though they do not hold fires): %s", strings.Join(early, "; "))
	}
	if rep.Checked == 0 {
		t.Errorf("no fire checked: the run window is empty")
	}
}

// TestBalance: 3 replicas sharing 16 partitions each lead 5 or 6 of them within 10 s of the last
// one's start, every partition with exactly one leader; once one replica stops gracefully, the
// other two lead all 16 within 10 s. Each replica is asked which partitions it leads itself.
// (Not parallel: it runs before TestReplicaKill's load, so the timing it checks is the
// scheduler's, not the machine's.)
func TestBalance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a stack and three scheduler processes; CI runs it (without -short)")
	}
	h := newHarness(t, sideBySideConns)
	c := h.c
	for i := range nReplicas {
		c.start(fmt.Sprintf("r%d", i+1))
	}
	joined := time.Now()
	o := c.waitOwners(balanceWithin, func(o owners) error {
		if err := o.exactlyOneLeader(); err != nil {
			return err
		}
		for id, ps := range o.led {
			if n := len(ps); n < partitions/nReplicas || n > (partitions+nReplicas-1)/nReplicas {
				return fmt.Errorf("%s leads %d partitions %v, want %d or %d", id, n, ps, partitions/nReplicas, (partitions+nReplicas-1)/nReplicas)
			}
		}
		return nil
	})
	t.Logf("balanced %v after the last join: %s", time.Since(joined).Round(time.Millisecond), o)

	leaving := c.byID("r2")
	at := c.stop(leaving)
	o = c.waitOwners(balanceWithin, owners.exactlyOneLeader)
	t.Logf("%s's partitions led by the others %v after its SIGTERM: %s", leaving.id, time.Since(at).Round(time.Millisecond), o)
	c.stopAll()
	c.checkNoCrash()
}

// harness is a stack (etcd, Postgres, registry, logsvc, gateway, one agent) without a scheduler,
// and the scheduler replicas the test starts against it.
type harness struct {
	t  testing.TB
	st *devstack.Stack
	c  *replicaSet
	// tl records the runs of the "count" handler; probed gets the params of each "probe" job
	// run: the replica that was asked to fire it.
	tl     *firecheck.Tally
	probed chan string
	// xxlGroup is an XXL-JOB executor group served by two test executors (internal/xxltest) in
	// the test process, registered through the stack's XXL-JOB admin API. Their "count" handler
	// records into tl under the log id (xxlTriggerIDs maps it to the trigger id); xprobed gets the
	// params of each of their "probe" runs.
	xxlGroup int64
	xprobed  chan string
	dbURL    string
}

// newHarness starts the stack; the replicas it will start share partitions partitions, each
// with a pool of replicaConns Postgres connections (0: the scheduler's default).
func newHarness(t testing.TB, replicaConns int) *harness {
	t.Helper()
	bin := buildJobmesh(t)
	logDir := t.TempDir()
	dbURL := dbtest.NewPostgres(t)
	h := &harness{t: t, tl: firecheck.NewTally(), probed: make(chan string, 16), xprobed: make(chan string, 16), dbURL: dbURL}
	// The gateway and logsvc reach the scheduler replicas as behind a load balancer.
	front, err := startFront(t)
	if err != nil {
		t.Fatal(err)
	}
	stackLog, err := os.Create(filepath.Join(logDir, "stack.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stackLog.Close() })

	startCtx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	any0 := "127.0.0.1:0"
	h.st, err = devstack.Start(startCtx, devstack.Config{
		DataDir: t.TempDir(), DatabaseURL: dbURL, UnsafeEtcd: true, NoScheduler: true, SchedulerAddr: front.addr(),
		HTTPAddr: any0, RegistryAddr: any0, LogsAddr: any0, AuthAddr: any0, AgentAddr: any0, EtcdAddr: any0,
		Logger: slog.New(slog.NewTextHandler(stackLog, &slog.HandlerOptions{Level: slog.LevelWarn})),
		AgentHandlers: map[string]sdk.HandlerFunc{
			"count": h.tl.Handle,
			"probe": func(_ context.Context, j *sdk.Job) error {
				select {
				case h.probed <- j.Params:
				default:
				}
				return nil
			},
		},
	})
	if err != nil {
		t.Fatalf("devstack.Start: %v", err)
	}
	t.Cleanup(h.st.Stop)
	st := h.st
	h.c = &replicaSet{t: t, bin: bin, logDir: logDir, token: st.InternalToken, tls: st.TLS, args: append([]string{
		"scheduler", "--grpc-addr", any0, "--etcd-endpoints", st.EtcdEndpoint, "--database-url", withPool(t, dbURL, replicaConns),
		"--registry-addr", st.RegistryAddr, "--logs-addr", st.LogsAddr, "--session-ttl", sessionTTL, "--log-level", "info",
		"--internal-token", st.InternalToken, "--auth-addr", st.AuthAddr, "--partitions", strconv.Itoa(partitions),
	}, tlsArgs(st)...)}
	front.route(h.c)
	t.Cleanup(func() {
		if t.Failed() {
			h.c.dumpLogs()
		}
	})
	h.startXxlExecutors()
	return h
}

// sideBySideConns is the pool size of the replicas of the tests that run side by side: two
// replica-kill tests with three replicas each, every replica warming its whole pool, and a
// killed replica's backends lingering a moment after its replacement connects, came within a few
// connections of Postgres' default max_connections (100) at the default 10 a replica.
const sideBySideConns = 6

// withPool is dbURL with a pool of conns connections (pool_max_conns); dbURL itself when conns
// is 0.
func withPool(t testing.TB, dbURL string, conns int) string {
	if conns == 0 {
		return dbURL
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", strconv.Itoa(conns))
	u.RawQuery = q.Encode()
	return u.String()
}

// xxlLogPrefix marks an execution recorded by an XXL-JOB test executor under its log id, until
// xxlTriggerIDs names its trigger id.
const xxlLogPrefix = "xxl-log-"

// startXxlExecutors creates the XXL-JOB executor group and starts its two executors, configured
// as a real XXL-JOB executor is (the admin address and the group's token), and waits until both
// are registered.
func (h *harness) startXxlExecutors() {
	t := h.t
	t.Helper()
	const app, token = "failover-xxl", "failover-xxl-group-token"
	conn, err := grpc.NewClient(h.st.RegistryAddr, h.st.TLS.DialOption(), grpc.WithUnaryInterceptor(boundCalls), auth.BearerToken(h.st.InternalToken))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	g, err := registryv1.NewRegistryServiceClient(conn).CreateExecutorGroup(t.Context(), &registryv1.CreateExecutorGroupRequest{Group: &registryv1.ExecutorGroup{
		AppName: app, Title: "XXL-JOB executors", AddressType: registryv1.AddressType_ADDRESS_TYPE_AUTO, AccessToken: token,
	}})
	if err != nil {
		t.Fatalf("create the XXL-JOB executor group: %v", err)
	}
	h.xxlGroup = g.GetGroup().GetId()
	for range 2 {
		e, err := xxltest.New(xxltest.Config{
			AppName: app, AdminAddresses: []string{"http://" + h.st.HTTPAddr + "/xxl-job-admin"}, AccessToken: token,
			LogDir: t.TempDir(), CallbackRetryInterval: time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		e.Handle("count", func(_ context.Context, job *xxltest.Job) {
			h.tl.Record(firecheck.Execution{JobID: job.Param.JobID, TriggerID: xxlLogPrefix + strconv.FormatInt(job.Param.LogID, 10),
				ScheduledMs: job.Param.LogDateTime, ArrivedNs: time.Now().UnixNano(), TriggerType: "XXL-JOB"})
		})
		e.Handle("probe", func(_ context.Context, job *xxltest.Job) {
			select {
			case h.xprobed <- job.Param.ExecutorParams:
			default:
			}
		})
		if err := e.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Stop)
		wctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		err = e.Wait(wctx, func() bool {
			return slices.ContainsFunc(e.AdminCalls(), func(c xxltest.AdminCall) bool { return c.Endpoint == "api/registry" && c.OK })
		})
		cancel()
		if err != nil {
			t.Fatalf("XXL-JOB executor %s not registered: %v (calls %+v)", e.Address(), err, e.AdminCalls())
		}
	}
}

// xxlTriggerIDs returns execs with the XXL-JOB executors' executions named by their trigger
// ids, which the scheduler recorded against the log ids it sent (scheduler.xxl_runs).
func (h *harness) xxlTriggerIDs(execs []firecheck.Execution) []firecheck.Execution {
	t := h.t
	t.Helper()
	d, err := db.Open(t.Context(), db.Config{URL: h.dbURL, Schema: "scheduler"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	rows, err := d.QueryContext(t.Context(), `SELECT log_id, trigger_id FROM xxl_runs`)
	if err != nil {
		t.Fatalf("read xxl_runs: %v", err)
	}
	defer rows.Close()
	ids := map[string]string{}
	for rows.Next() {
		var logID int64
		var id string
		if err := rows.Scan(&logID, &id); err != nil {
			t.Fatal(err)
		}
		ids[xxlLogPrefix+strconv.FormatInt(logID, 10)] = id
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	out := slices.Clone(execs)
	for i, e := range out {
		if !strings.HasPrefix(e.TriggerID, xxlLogPrefix) {
			continue
		}
		id, ok := ids[e.TriggerID]
		if !ok {
			t.Errorf("job %d ran on an XXL-JOB executor under %s, which the scheduler has no record of", e.JobID, e.TriggerID)
			continue
		}
		out[i].TriggerID = id
	}
	return out
}

// front stands where a load balancer in front of the scheduler replicas would: the stack's
// gateway (XXL-JOB callbacks, REST) and logsvc (kills) dial its one address, and each connection
// goes on to a live replica.
type front struct {
	ln net.Listener

	mu    sync.Mutex
	c     *replicaSet
	conns map[net.Conn]bool
	done  bool
}

// startFront listens on a free loopback port; it routes nowhere until route.
func startFront(t testing.TB) (*front, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &front{ln: ln, conns: map[net.Conn]bool{}}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { f.pipe(conn) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		f.done = true
		for c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
		wg.Wait()
	})
	return f, nil
}

func (f *front) addr() string { return f.ln.Addr().String() }

// route sends the connections to c's live replicas.
func (f *front) route(c *replicaSet) {
	f.mu.Lock()
	f.c = c
	f.mu.Unlock()
}

// track adds (or, with add false, removes) a connection to close at the end; false when the
// front has closed.
func (f *front) track(conn net.Conn, add bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !add {
		delete(f.conns, conn)
		return true
	}
	if f.done {
		return false
	}
	f.conns[conn] = true
	return true
}

// pipe joins a connection to a live replica, the first that accepts in a random order.
func (f *front) pipe(in net.Conn) {
	defer in.Close()
	f.mu.Lock()
	c := f.c
	f.mu.Unlock()
	if c == nil || !f.track(in, true) {
		return
	}
	defer f.track(in, false)
	live := c.liveReplicas()
	rand.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
	var out net.Conn
	for _, r := range live {
		var err error
		if out, err = net.DialTimeout("tcp", r.addr, time.Second); err == nil {
			break
		}
	}
	if out == nil {
		return
	}
	if !f.track(out, true) {
		out.Close()
		return
	}
	defer f.track(out, false)
	defer out.Close()
	go func() {
		_, _ = io.Copy(out, in)
		out.Close()
	}()
	_, _ = io.Copy(in, out)
}

// probeEveryReplica runs a manual fire of a probe job through each live replica (a manual fire is
// dispatched by the replica that takes it), on the agent and on the XXL-JOB executors, so every
// replica has seen both groups' executors before the first scheduled fire, which would otherwise
// fail for want of an executor: not what these tests are about.
func (h *harness) probeEveryReplica() {
	t := h.t
	t.Helper()
	ctx := t.Context()
	live := h.c.liveReplicas()
	for _, g := range []struct {
		group  int64
		what   string
		probed chan string
	}{{h.st.GroupID, "the agent", h.probed}, {h.xxlGroup, "an XXL-JOB executor", h.xprobed}} {
		probe, err := live[0].jobs.CreateJob(ctx, &schedulerv1.CreateJobRequest{Job: &schedulerv1.Job{
			GroupId: g.group, Name: "probe", Handler: "probe", GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN,
			Schedule: &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_NONE},
		}})
		if err != nil {
			t.Fatalf("create probe job: %v", err)
		}
		id := probe.GetJob().GetId()
		for _, r := range live {
			until := time.Now().Add(30 * time.Second)
			for ok := false; !ok; {
				if time.Now().After(until) {
					t.Fatalf("replica %s never ran a manual fire on %s within 30s", r.id, g.what)
				}
				if _, err := r.jobs.TriggerJob(ctx, &schedulerv1.TriggerJobRequest{Id: id, Params: r.id}); err != nil {
					t.Fatalf("trigger probe through %s: %v", r.id, err)
				}
				retry := time.NewTimer(500 * time.Millisecond) // then trigger again
			wait:
				for {
					select {
					case by := <-g.probed:
						if ok = by == r.id; ok {
							break wait
						} // else a late run of an earlier replica's probe
					case <-retry.C:
						break wait
					}
				}
				retry.Stop()
			}
		}
	}
}

// owners is who leads which partition, as each live replica says of itself.
type owners struct {
	// led: by replica id, the partitions it says it leads.
	led map[string][]int
	// leader: by partition, the replica that says it leads it ("" if none does; the last one asked
	// if several do, which exactlyOneLeader reports).
	leader [partitions]string
	// claims: by partition, how many replicas say they lead it.
	claims [partitions]int
}

func (o owners) String() string {
	ids := slices.Sorted(maps.Keys(o.led))
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprintf("%s leads %d %v", id, len(o.led[id]), o.led[id])
	}
	return strings.Join(parts, "; ")
}

// everyPartitionLed says whether some live replica leads each partition.
func everyPartitionLed(o owners) error {
	var free []int
	for p, n := range o.claims {
		if n == 0 {
			free = append(free, p)
		}
	}
	if len(free) > 0 {
		return fmt.Errorf("partitions %v have no leader (%s)", free, o)
	}
	return nil
}

// exactlyOneLeader says whether every partition is led by exactly one live replica.
func (o owners) exactlyOneLeader() error {
	if err := everyPartitionLed(o); err != nil {
		return err
	}
	for p, n := range o.claims {
		if n > 1 {
			return fmt.Errorf("partition %d has %d leaders (%s)", p, n, o)
		}
	}
	return nil
}

// owners asks every live replica which partitions it leads.
func (c *replicaSet) owners() (owners, error) {
	o := owners{led: map[string][]int{}}
	for _, r := range c.liveReplicas() {
		if crashed, err := r.proc.Crashed(); crashed {
			c.t.Fatalf("replica %s exited on its own: %v", r.id, err)
		}
		st, err := r.sched.GetStatus(c.t.Context(), &schedulerv1.GetStatusRequest{})
		if err != nil {
			return o, fmt.Errorf("status of %s: %w", r.id, err)
		}
		if n := st.GetPartitionCount(); n != partitions && n != 0 { // 0: it has not joined yet
			c.t.Fatalf("replica %s reports %d partitions, want %d", r.id, n, partitions)
		}
		o.led[r.id] = cluster.Led(st)
		for _, p := range o.led[r.id] {
			o.leader[p] = r.id
			o.claims[p]++
		}
	}
	return o, nil
}

// waitOwners polls the live replicas until ok accepts who leads what, and returns that; it fails
// the test with ok's last complaint when timeout passes first.
func (c *replicaSet) waitOwners(timeout time.Duration, ok func(owners) error) owners {
	t := c.t
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		o, err := c.owners()
		if err == nil {
			if err = ok(o); err == nil {
				return o
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("partition leaders not as wanted within %v: %v", timeout, err)
		}
		<-tick.C
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

// logReport logs what the check found, kill by kill: per kill, the gap to the next fire of each
// partition the stopped replica led (and notes[i] on kill i), and the worst gap over the SIGKILLs.
func logReport(t *testing.T, r *firecheck.Report, notes []string) {
	t.Helper()
	var worst, worstGraceful struct {
		gap  time.Duration
		what string
	}
	unmeasured := 0
	for i, k := range r.Kills {
		what := "SIGKILL"
		if k.Graceful {
			what = "SIGTERM"
		}
		per := make([]string, len(k.Partitions))
		for i, p := range k.Partitions {
			g := k.PartitionGaps[i]
			per[i] = fmt.Sprintf("p%d %v", p, g.Round(time.Millisecond))
			if g == 0 {
				per[i] = fmt.Sprintf("p%d none", p)
			}
			w := &worst
			if k.Graceful {
				w = &worstGraceful
			}
			if g > w.gap {
				w.gap, w.what = g, fmt.Sprintf("kill %d, partition %d", k.N, p)
			}
		}
		unmeasured += k.Unmeasured()
		note := ""
		if i < len(notes) {
			note = "; " + notes[i]
		}
		t.Logf("kill %2d: %s %s at %s, led %d partitions, worst gap %v; gap to the next fire per partition: %s; lost fires scheduled until the next kill: %d%s",
			k.N, what, k.Replica, k.At.Format("15:04:05.000"), len(k.Partitions), k.Gap.Round(time.Millisecond), strings.Join(per, ", "), k.Lost, note)
	}
	gaps := r.Gaps()
	median := "n/a"
	if len(gaps) > 0 {
		median = gaps[len(gaps)/2].Round(time.Millisecond).String()
	}
	t.Logf("failover: events=%d executions=%d fires_checked=%d lost=%d doubled=%d (same trigger id %d) off_schedule=%d "+
		"SIGKILL gap (worst partition per kill) median=%s worst=%v (%s); SIGTERM worst=%v (%s); partitions with no later fire=%d; lateness p50=%v p99=%v max=%v",
		len(r.Kills), r.Executions, r.Checked, r.Lost, r.Doubled, r.DoubledSameID, r.OffGrid, median,
		worst.gap.Round(time.Millisecond), worst.what, worstGraceful.gap.Round(time.Millisecond), worstGraceful.what, unmeasured,
		r.Lateness.P50.Round(time.Millisecond), r.Lateness.P99.Round(time.Millisecond), r.Lateness.Max.Round(time.Millisecond))
	if r.LostBeforeKills > 0 {
		t.Logf("lost before the first kill: %d", r.LostBeforeKills)
	}
	if len(r.LostPerJob) > 0 {
		byPart := map[int][]string{}
		sum := map[int]int{}
		for _, job := range slices.Sorted(maps.Keys(r.LostPerJob)) {
			p := partitionOf(job)
			byPart[p] = append(byPart[p], fmt.Sprintf("job %d: %d", job, r.LostPerJob[job]))
			sum[p] += r.LostPerJob[job]
		}
		for _, p := range slices.Sorted(maps.Keys(byPart)) {
			t.Logf("lost in partition %d: %d (%s)", p, sum[p], strings.Join(byPart[p], ", "))
		}
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
	t      testing.TB
	bin    string
	logDir string
	args   []string
	token  string            // the stack's internal token, which the test's clients present too
	tls    *meshtls.Identity // the stack's certificate, which the test's clients present too
	// extra, when set, gives flags of replica id's process besides args (a benchmark's
	// --pprof-addr).
	extra func(id string) []string

	mu   sync.Mutex
	live map[string]*replica // by replica id
	all  []*replica
}

// replica is one `jobmesh scheduler` process.
type replica struct {
	id    string
	addr  string // its gRPC address
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
		Args: append(append(slices.Clone(c.args), "--replica-id", id), c.extraArgs(id)...), Log: logf, Ready: []string{"scheduler grpc "}, ReadyTimeout: 30 * time.Second})
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
	r := &replica{id: id, addr: p.Value("scheduler grpc "), proc: p, jobs: schedulerv1.NewJobServiceClient(conn), sched: schedulerv1.NewSchedulerServiceClient(conn)}
	c.mu.Lock()
	if c.live == nil {
		c.live = map[string]*replica{}
	}
	c.live[id] = r
	c.all = append(c.all, r)
	c.mu.Unlock()
	return r
}

// extraArgs are replica id's flags besides args (extra).
func (c *replicaSet) extraArgs(id string) []string {
	if c.extra == nil {
		return nil
	}
	return c.extra(id)
}

// liveReplicas returns the live replicas, by id.
func (c *replicaSet) liveReplicas() []*replica {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*replica, 0, len(c.live))
	for _, id := range slices.Sorted(maps.Keys(c.live)) {
		out = append(out, c.live[id])
	}
	return out
}

// byID returns the live replica id, or nil.
func (c *replicaSet) byID(id string) *replica {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live[id]
}

// any returns a live replica, failing the test when none is.
func (c *replicaSet) any() *replica {
	live := c.liveReplicas()
	if len(live) == 0 {
		c.t.Fatal("no live replica")
	}
	return live[0]
}

// waitLeader returns the live replica that says it leads (with partitions: one that leads at
// least one), waiting up to 30s for one.
func (c *replicaSet) waitLeader() *replica {
	t := c.t
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		live := c.liveReplicas()
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

// stop ends the replica with SIGTERM, as an operator would, fails the test unless it exits
// cleanly within 15 s, and returns when the signal was sent. The replica is no longer live.
func (c *replicaSet) stop(r *replica) time.Time {
	c.mu.Lock()
	if c.live[r.id] == r {
		delete(c.live, r.id)
	}
	c.mu.Unlock()
	at := time.Now()
	if err := r.proc.Stop(syscall.SIGTERM, 15*time.Second); err != nil {
		c.t.Errorf("replica %s (pid %d) did not exit cleanly on SIGTERM: %v", r.id, r.proc.Pid(), err)
	}
	return at
}

// kill SIGKILLs the replica, waits until it is gone and returns when the signal was sent. The
// replica is no longer live.
func (c *replicaSet) kill(r *replica) time.Time {
	c.mu.Lock()
	if c.live[r.id] == r {
		delete(c.live, r.id)
	}
	c.mu.Unlock()
	return r.proc.Kill()
}

// stopAll ends the live replicas with SIGTERM, as an operator would, and checks they exit cleanly.
func (c *replicaSet) stopAll() {
	c.mu.Lock()
	live := c.live
	c.live = nil
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, r := range live {
		wg.Go(func() { c.stop(r) })
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

// dumpLogs prints the end of every replica's log and keeps the whole logs in a directory that
// outlives the test.
func (c *replicaSet) dumpLogs() {
	if keep, err := os.MkdirTemp("", "jobmesh-failover-logs-"); err == nil {
		if err := os.CopyFS(keep, os.DirFS(c.logDir)); err == nil {
			c.t.Logf("the replicas' and the stack's logs are kept in %s", keep)
		}
	}
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
func parallel(t testing.TB, n, workers int, f func(i int) error) {
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
func buildJobmesh(t testing.TB) string {
	t.Helper()
	bin, err := cluster.BuildJobmesh(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}
