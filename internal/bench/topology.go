package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/cluster"
	"github.com/jobmesh/jobmesh/internal/hostport"
	"github.com/jobmesh/jobmesh/services/executor-agent/meshtls"
	"github.com/jobmesh/jobmesh/services/gateway/auth"
)

// member is one process (one incarnation: a restarted replica is a new member of the same name).
type member struct {
	name string
	proc *cluster.Proc
	base cluster.Usage // at the start of the current window; zero if started after it
	log  *os.File
}

// replica is one scheduler replica, across its incarnations.
type replica struct {
	id, addr    string
	metricsAddr string // "" when the binary has no --metrics-addr
	pprofAddr   string // "" unless profiling
	args        []string
	cur         *member
	jobs        schedulerv1.JobServiceClient
	status      schedulerv1.SchedulerServiceClient
}

// topology is the cluster the bench drives: its processes, clients and database.
type topology struct {
	cfg Config
	log *slog.Logger
	dir string

	dbURL, dbName string
	pg            *pgx.Conn // the driver's own connection; nil when the database is unknown (--target)
	dropDB        func() error

	token, groupToken string
	// tls is the driver's identity toward the cluster (nil: plaintext); tlsArgs give the
	// processes the topology starts theirs (--tls-* or --insecure; none for a binary that
	// predates TLS).
	tls           *meshtls.Identity
	tlsArgs       []string
	app           string
	etcdEndpoints []string
	regAddr       string
	logsAddr      string
	logsPprofAddr string

	// sink is the bench's HTTP sink, which the jobs of every handler but noop call (nil with
	// noop); sinkAddr its address.
	sink     *agentClient
	sinkAddr string

	mu      sync.Mutex
	members []*member
	scheds  []*replica
	agents  []*agentClient
	groupID int64
	probeID int64
	reg     registryv1.RegistryServiceClient
	conns   []*grpc.ClientConn
	pgBase  map[int]time.Duration // Postgres backend pid → CPU at the window's start
	// completionsFrom is the last completion cursor before the window: the window's fires
	// complete after it (logsvc numbers completions as it writes them).
	completionsFrom int64
	crashes         []string
	// partitions is the schedulers' partition count as they report it (0: not known yet, or a
	// scheduler without partitions); only the failover driver's goroutine uses it.
	partitions int
}

// up starts (or, with Target, reaches) the cluster and the bench agents, creates the bench's
// executor group and waits until the scheduler leader routes to every agent.
func up(ctx context.Context, cfg Config) (_ *topology, err error) {
	t := &topology{cfg: cfg, log: cfg.Log, app: "bench"}
	defer func() {
		if err != nil {
			t.down()
		}
	}()
	if t.dir = cfg.WorkDir; t.dir == "" {
		if t.dir, err = os.MkdirTemp("", "jobmesh-bench-"); err != nil {
			return t, err
		}
	}
	if err := os.MkdirAll(filepath.Join(t.dir, "logs"), 0o700); err != nil {
		return t, err
	}
	t.log.Info("work directory", "dir", t.dir)

	switch {
	case cfg.DatabaseURL != "":
		t.dbURL = cfg.DatabaseURL
		if u, err := url.Parse(cfg.DatabaseURL); err == nil {
			t.dbName = strings.TrimPrefix(u.Path, "/")
		}
	case cfg.Target == nil:
		if t.dbURL, t.dbName, t.dropDB, err = createDatabase(ctx, cfg.AdminURL); err != nil {
			return t, err
		}
		t.log.Info("database created", "name", t.dbName)
	}
	if t.dbURL != "" {
		if t.pg, err = pgx.Connect(ctx, t.dbURL); err != nil {
			return t, fmt.Errorf("--database-url: %w", err)
		}
	}

	var regAddr string
	if tg := cfg.Target; tg != nil {
		if err := t.targetTLS(tg.TLS); err != nil {
			return t, err
		}
		t.token = tg.Token
		t.logsAddr, regAddr = tg.LogsAddr, tg.RegistryAddr
		t.app = "bench-" + randHex(4)
		for i, a := range tg.SchedulerAddrs {
			r := &replica{id: fmt.Sprintf("target-%d", i+1), addr: a}
			if err := t.dialReplica(r); err != nil {
				return t, err
			}
			t.scheds = append(t.scheds, r)
		}
	} else if regAddr, err = t.startServices(ctx); err != nil {
		return t, err
	}

	regConn, err := t.dial(regAddr)
	if err != nil {
		return t, err
	}
	t.reg, t.regAddr, t.groupToken = registryv1.NewRegistryServiceClient(regConn), regAddr, randHex(24)
	g, err := t.reg.CreateExecutorGroup(ctx, &registryv1.CreateExecutorGroupRequest{
		Group: &registryv1.ExecutorGroup{AppName: t.app, Title: "jobmesh bench", AddressType: registryv1.AddressType_ADDRESS_TYPE_AUTO,
			AccessToken: t.groupToken}})
	if err != nil {
		return t, fmt.Errorf("create the bench's executor group: %w", err)
	}
	t.groupID = g.GetGroup().GetId()

	if cfg.Handler != HandlerNoop {
		if err := t.startSink(ctx); err != nil {
			return t, err
		}
	}
	for i := range cfg.Agents {
		if err := t.startAgent(ctx, fmt.Sprintf("a%d", i+1)); err != nil {
			return t, err
		}
	}
	t.log.Info("cluster up", "schedulers", len(t.scheds), "agents", len(t.agents), "group_id", t.groupID)
	if err := t.probe(ctx); err != nil {
		return t, err
	}
	return t, nil
}

// startServices starts etcd, the registry, logsvc, the gateway and the scheduler replicas, and
// returns the registry's address.
func (t *topology) startServices(ctx context.Context) (string, error) {
	cfg := t.cfg
	t.token = randHex(24)
	if err := t.ownTLS(); err != nil {
		return "", err
	}
	etcdArgs := []string{"bench", "etcd", "--dir", filepath.Join(t.dir, "etcd"), "--client-addr", "127.0.0.1:0"}
	if cfg.UnsafeEtcd {
		etcdArgs = append(etcdArgs, "--unsafe")
	}
	etcd, err := t.start(ctx, "etcd", etcdArgs, nil, "etcd client ")
	if err != nil {
		return "", err
	}
	t.etcdEndpoints = []string{etcd.proc.Value("etcd client ")}
	ports, err := freeAddrs(4 + cfg.Schedulers)
	if err != nil {
		return "", err
	}
	reg, logs, authAddr, httpAddr := ports[0], ports[1], ports[2], ports[3]
	t.logsAddr = logs
	for i := range cfg.Schedulers {
		t.scheds = append(t.scheds, &replica{id: fmt.Sprintf("r%d", i+1), addr: ports[4+i]})
	}
	sched1 := t.scheds[0].addr
	common := append([]string{"--internal-token", t.token, "--log-level", cfg.ServiceLogLevel}, t.tlsArgs...)
	pprof := func(name string) (string, []string, error) {
		if cfg.PprofDir == "" {
			return "", nil, nil
		}
		a, err := freeAddrs(1)
		if err != nil {
			return "", nil, err
		}
		return a[0], []string{"JOBMESH_PPROF_ADDR=" + a[0]}, nil // --pprof-addr's environment twin; fetched with the internal token
	}
	// Every service serves its metrics, as a deployment would (and scale reads the pre-read
	// histogram from the leader's).
	hasMetrics := t.schedulerHasFlag("metrics-addr")
	metrics := func() ([]string, string, error) {
		if !hasMetrics {
			return nil, "", nil
		}
		a, err := freeAddrs(1)
		if err != nil {
			return nil, "", err
		}
		return []string{"--metrics-addr", a[0]}, a[0], nil
	}
	_, regEnv, err := pprof("registry")
	if err != nil {
		return "", err
	}
	m, _, err := metrics()
	if err != nil {
		return "", err
	}
	if _, err := t.start(ctx, "registry", append([]string{"registry", "--grpc-addr", reg, "--etcd-endpoints", t.etcdEndpoints[0],
		"--database-url", withAppName(t.dbURL, "registry"), "--scheduler-addr", sched1, "--logs-addr", logs, "--auth-addr", authAddr}, append(common, m...)...), regEnv, "registry grpc "); err != nil {
		return "", err
	}
	logsPprof, logsEnv, err := pprof("logsvc")
	if err != nil {
		return "", err
	}
	t.logsPprofAddr = logsPprof
	if m, _, err = metrics(); err != nil {
		return "", err
	}
	if _, err := t.start(ctx, "logsvc", append([]string{"logsvc", "--grpc-addr", logs, "--database-url", withAppName(t.dbURL, "logsvc"),
		"--scheduler-addr", sched1, "--registry-addr", reg, "--auth-addr", authAddr}, append(common, m...)...), logsEnv, "logsvc grpc "); err != nil {
		return "", err
	}
	if m, _, err = metrics(); err != nil {
		return "", err
	}
	if _, err := t.start(ctx, "gateway", append([]string{"gateway", "--http-addr", httpAddr, "--grpc-addr", authAddr,
		"--database-url", withAppName(t.dbURL, "gateway"), "--admin-password", randHex(12), "--scheduler-addr", sched1, "--registry-addr", reg,
		"--logs-addr", logs}, append(common, m...)...), nil, "gateway http "); err != nil {
		return "", err
	}
	for _, r := range t.scheds {
		r.args = append([]string{"scheduler", "--grpc-addr", r.addr, "--etcd-endpoints", t.etcdEndpoints[0],
			"--database-url", withAppName(t.dbURL, "scheduler-"+r.id), "--registry-addr", reg, "--logs-addr", logs, "--auth-addr", authAddr,
			"--replica-id", r.id}, common...)
		if cfg.SessionTTL > 0 {
			r.args = append(r.args, "--session-ttl", cfg.SessionTTL.String())
		}
		if cfg.Partitions > 0 {
			r.args = append(r.args, "--partitions", strconv.Itoa(cfg.Partitions))
		}
		if cfg.DispatchLead != "" {
			r.args = append(r.args, "--dispatch-lead", cfg.DispatchLead)
		}
		if m, r.metricsAddr, err = metrics(); err != nil {
			return "", err
		}
		r.args = append(r.args, m...)
		if r.pprofAddr, _, err = pprof(r.id); err != nil {
			return "", err
		}
		// One at a time: the first replica migrates the schema alone.
		if err := t.startReplica(ctx, r); err != nil {
			return "", err
		}
		if err := t.dialReplica(r); err != nil {
			return "", err
		}
	}
	return reg, nil
}

// ownTLS gives the cluster the topology starts certificates of a private CA in its directory,
// unless the binary predates TLS.
func (t *topology) ownTLS() error {
	if !t.schedulerHasFlag("tls-cert") {
		return nil
	}
	if t.cfg.Insecure {
		t.tlsArgs = []string{"--insecure"}
		return nil
	}
	ca, err := meshtls.EnsureCA(filepath.Join(t.dir, "tls"))
	if err != nil {
		return err
	}
	if t.tls, err = ca.Identity("node"); err != nil {
		return err
	}
	files := t.tls.Files()
	t.tlsArgs = []string{"--tls-cert", files.Cert, "--tls-key", files.Key, "--tls-ca", files.CA}
	return nil
}

// targetTLS takes the certificate given for a running cluster; none means plaintext.
func (t *topology) targetTLS(files meshtls.Files) error {
	if files.IsZero() {
		if t.schedulerHasFlag("tls-cert") {
			t.tlsArgs = []string{"--insecure"}
		}
		return nil
	}
	var err error
	if t.tls, err = meshtls.Load(files); err != nil {
		return fmt.Errorf("--tls-cert, --tls-key, --tls-ca: %w", err)
	}
	t.tlsArgs = []string{"--tls-cert", files.Cert, "--tls-key", files.Key, "--tls-ca", files.CA}
	return nil
}

// startReplica starts (or restarts, on the same address) a scheduler replica.
func (t *topology) startReplica(ctx context.Context, r *replica) error {
	var env []string
	if r.pprofAddr != "" {
		env = []string{"JOBMESH_PPROF_ADDR=" + r.pprofAddr}
	}
	m, err := t.start(ctx, "scheduler-"+r.id, r.args, env, "scheduler grpc ")
	if err != nil {
		return err
	}
	t.mu.Lock()
	r.cur = m
	t.mu.Unlock()
	return nil
}

func (t *topology) dialReplica(r *replica) error {
	conn, err := t.dial(r.addr)
	if err != nil {
		return err
	}
	r.jobs, r.status = schedulerv1.NewJobServiceClient(conn), schedulerv1.NewSchedulerServiceClient(conn)
	return nil
}

// schedulerHasFlag says whether `jobmesh scheduler -h` lists --name.
func (t *topology) schedulerHasFlag(name string) bool {
	out, _ := exec.Command(t.cfg.Bin, "scheduler", "-h").CombinedOutput()
	return strings.Contains(string(out), "-"+name+" ")
}

// start starts one process of the topology, logging to logs/<name>.log.
func (t *topology) start(ctx context.Context, name string, args, env []string, ready ...string) (*member, error) {
	logf, err := os.OpenFile(filepath.Join(t.dir, "logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	p, err := cluster.Start(ctx, cluster.Spec{Name: name, Path: t.cfg.Bin, Args: args, Env: env, Log: logf, Ready: ready})
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("%w (log: %s)", err, logf.Name())
	}
	m := &member{name: name, proc: p, log: logf}
	t.mu.Lock()
	t.members = append(t.members, m)
	t.mu.Unlock()
	return m, nil
}

// startAgent starts a bench agent.
func (t *topology) startAgent(ctx context.Context, id string) error {
	args := []string{"bench", "agent", "--app", t.app, "--instance", id, "--registry-addr", t.regAddr,
		"--logs-addr", t.logsAddr, "--group-token", t.groupToken, "--log-dir", filepath.Join(t.dir, "agents", id),
		"--log-level", t.cfg.ServiceLogLevel, "--hold", t.cfg.Hold.String()}
	if t.sinkAddr != "" {
		args = append(args, "--http-allow-hosts", t.sinkAddr)
	}
	args = append(args, t.tlsArgs...)
	m, err := t.start(ctx, "agent-"+id, args, nil, "agent grpc ", "agent http ")
	if err != nil {
		return err
	}
	t.agents = append(t.agents, newAgentClient(id, m.proc.Value("agent http ")))
	return nil
}

// startSink starts the bench's HTTP sink, which the agents are allowed to call.
func (t *topology) startSink(ctx context.Context) error {
	m, err := t.start(ctx, sinkName, []string{"bench", "sink", "--http-addr", "127.0.0.1:0"}, nil, "sink http ")
	if err != nil {
		return err
	}
	t.sinkAddr = m.proc.Value("sink http ")
	t.sink = newAgentClient(sinkName, t.sinkAddr)
	return nil
}

// recorders are where the fires are recorded: the sink, or with the noop handler the agents.
func (t *topology) recorders() []*agentClient {
	if t.sink != nil {
		return []*agentClient{t.sink}
	}
	return t.agents
}

func newAgentClient(name, addr string) *agentClient {
	return &agentClient{name: name, addr: addr, base: "http://" + addr, hc: &http.Client{Timeout: 5 * time.Minute}}
}

// dial connects to a service with the bench's token.
func (t *topology) dial(addr string) (*grpc.ClientConn, error) {
	c, err := grpc.NewClient(addr, t.tls.DialOption(), auth.BearerToken(t.token),
		grpc.WithUnaryInterceptor(boundCalls))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	t.mu.Lock()
	t.conns = append(t.conns, c)
	t.mu.Unlock()
	return c, nil
}

// boundCalls gives every call without a deadline one of 30 s.
func boundCalls(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	return invoke(ctx, method, req, reply, cc, opts...)
}

// leader waits up to timeout for a replica that says it leads.
func (t *topology) leader(ctx context.Context, timeout time.Duration) (*replica, error) {
	deadline := time.Now().Add(timeout)
	for {
		if err := t.checkCrashes(); err != nil {
			return nil, err
		}
		clients := make([]schedulerv1.SchedulerServiceClient, len(t.scheds))
		for i, r := range t.scheds {
			clients[i] = r.status
		}
		if i, _ := cluster.Leader(ctx, clients, time.Second); i >= 0 {
			return t.scheds[i], nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no scheduler leader among %d replicas within %v", len(t.scheds), timeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// killAndRestart SIGKILLs the replica and, after down, starts it again on the same address; it
// returns the time the signal was sent.
func (t *topology) killAndRestart(ctx context.Context, r *replica, down time.Duration) (time.Time, error) {
	at := r.cur.proc.Kill()
	if err := sleep(ctx, down); err != nil {
		return at, err
	}
	return at, t.startReplica(ctx, r)
}

// checkCrashes returns an error naming every process that ended without being told to.
func (t *topology) checkCrashes() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var errs []error
	for _, m := range t.members {
		if crashed, err := m.proc.Crashed(); crashed {
			errs = append(errs, fmt.Errorf("%s (pid %d) exited on its own: %v (log: %s)", m.name, m.proc.Pid(), err, m.log.Name()))
		}
	}
	return errors.Join(errs...)
}

// down stops every process (schedulers first, etcd last), closes the clients and drops the database
// unless Keep. It returns the processes that did not stop cleanly.
func (t *topology) down() []string {
	var problems []string
	if err := t.checkCrashes(); err != nil {
		problems = append(problems, err.Error())
	}
	t.mu.Lock()
	members := t.members
	conns := t.conns
	t.members, t.conns = nil, nil
	t.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	// Schedulers first (nothing fires any more), then agents (they flush results to logsvc),
	// then the other services, etcd last.
	order := func(m *member) int {
		switch {
		case strings.HasPrefix(m.name, "scheduler-"):
			return 0
		case strings.HasPrefix(m.name, "agent-"):
			return 1
		case m.name == "etcd":
			return 3
		}
		return 2
	}
	for stage := range 4 {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, m := range members {
			if order(m) != stage {
				continue
			}
			wg.Go(func() {
				if err := m.proc.Stop(syscall.SIGTERM, 20*time.Second); err != nil {
					// A failover kill or a crash (reported above) is not a failed stop.
					if crashed, _ := m.proc.Crashed(); !crashed && !isKilled(err) {
						mu.Lock()
						problems = append(problems, fmt.Sprintf("%s did not stop cleanly: %v", m.name, err))
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
	}
	for _, m := range members {
		m.log.Close()
	}
	if t.pg != nil {
		t.pg.Close(context.Background())
	}
	if t.cfg.Keep {
		t.log.Info("kept", "work_dir", t.dir, "database", t.dbName)
		return problems
	}
	if t.dropDB != nil {
		if err := t.dropDB(); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if t.cfg.WorkDir == "" && t.dir != "" {
		if err := os.RemoveAll(t.dir); err != nil {
			problems = append(problems, fmt.Sprintf("remove %s: %v", t.dir, err))
		}
	}
	return problems
}

// isKilled says whether err is the exit of a process this bench SIGKILLed (a failover kill).
func isKilled(err error) bool {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return true
		}
	}
	return false
}

// freeAddrs returns n distinct loopback addresses with free ports (hostport.ListenLoopback), for
// processes started on them later.
func freeAddrs(n int) ([]string, error) {
	out := make([]string, 0, n)
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := hostport.ListenLoopback()
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	return out, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
