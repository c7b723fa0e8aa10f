// Package devstack composes every jobmesh service into one process: an embedded etcd, the stores
// (SQLite under the data directory, or Postgres), registry, logsvc, scheduler, auth, gateway and
// one local executor agent. `jobmesh dev` runs it; the end-to-end tests start the same stack.
//
// Every gRPC server checks tokens with the same auth.Guard: people log in (the first admin's
// password is printed at first start), services call each other with the internal token, and the
// agent registers and delivers results with its executor group's access token (docs/security.md).
//
// Every gRPC hop is mutual TLS: at first start the stack makes a private CA and certificates
// under <DataDir>/tls (meshtls.EnsureCA) and reuses them later; the embedded etcd serves TLS
// with client certificates of its own CA under <DataDir>/tls/etcd, held by the in-process
// services only. The local agent's executor group gets an access token at first start.
package devstack

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jobmesh/jobmesh/services/executor-agent/buildinfo"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/cli"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/etcdembed"
	"github.com/jobmesh/jobmesh/internal/grpcserver"
	"github.com/jobmesh/jobmesh/internal/hostport"
	"github.com/jobmesh/jobmesh/services/executor-agent/meshtls"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/executor-agent/telemetry"
	"github.com/jobmesh/jobmesh/services/gateway"
	"github.com/jobmesh/jobmesh/services/gateway/auth"
	"github.com/jobmesh/jobmesh/services/gateway/xxladmin"
	"github.com/jobmesh/jobmesh/services/logsvc"
	"github.com/jobmesh/jobmesh/services/registry"
	"github.com/jobmesh/jobmesh/services/scheduler"
)

// IgnoredAdminPassword is the warning when an admin password is given for a store that already
// has users: it only sets the first admin's.
const IgnoredAdminPassword = "--admin-password ignored: the store already has users (it only sets the first admin's); " +
	"to set a lost password: jobmesh admin reset-password --user admin"

// agentStopGrace is how long stopping the stack lets the local agent's running handlers finish.
const agentStopGrace = 10 * time.Second

// DevApp is the app name of the local agent and of the executor group created for it.
const DevApp = "jobmesh-dev"

// Config says where the stack keeps data and listens. Port 0 picks a free port.
type Config struct {
	// Version is the build's version: the dev agent registers with it and the gateway serves it as
	// the API document's version. Empty means the binary's build information.
	Version string
	// DataDir holds etcd's data, the SQLite stores and the agent's logs. Required.
	DataDir string
	// DatabaseURL selects Postgres instead of SQLite.
	DatabaseURL string
	// HTTPAddr is the gateway's address (REST, UI). Default 127.0.0.1:8080.
	HTTPAddr string
	// SchedulerAddr, RegistryAddr, LogsAddr, AuthAddr and AgentAddr are the gRPC addresses.
	// Defaults 127.0.0.1:9010, :9011, :9012, :9013 and :9999.
	SchedulerAddr, RegistryAddr, LogsAddr, AuthAddr, AgentAddr string
	// AdminPassword is the first admin's password on a fresh store; empty means a random one,
	// printed once.
	AdminPassword string
	// InternalToken is the secret the services present to each other (at least 32 characters);
	// external scheduler replicas (NoScheduler) must be given the same. It also seals fires'
	// delivery tokens and the executors' registrations, so it must outlive a restart for results
	// spooled across it to be accepted: empty means the one made at the data directory's first
	// start and kept in DataDir/internal-token (Stack.InternalToken).
	InternalToken string
	// Auth tunes the auth service (session TTL, login throttling, clock); its Logger is set here.
	Auth auth.Config
	// EtcdAddr is the embedded etcd's client address. Default 127.0.0.1:2379.
	EtcdAddr string
	// EtcdPeerAddr is the embedded etcd's peer address, which it listens on but, as a single
	// member, never dials. Default: a free loopback port.
	EtcdPeerAddr string
	// Scheduler tunes the scheduler (clock, windows); its Logger is set here.
	Scheduler scheduler.Config
	// Logger receives every service's logs.
	Logger *slog.Logger
	// UnsafeEtcd skips fsync in etcd (tests).
	UnsafeEtcd bool
	// NoScheduler leaves the scheduler out, for scheduler replicas run as their own processes
	// (`jobmesh scheduler`, on DatabaseURL and the stack's EtcdEndpoint). SchedulerAddr is then
	// not listened on: it is the address of one of those replicas, which the gateway and logsvc's
	// kill path dial lazily; their scheduler calls fail with Unavailable while nothing serves it.
	NoScheduler bool
	// LostAfter is logsvc's lost-run threshold (logsvc.Config.LostAfter); 0 means
	// logsvc.DefaultLostAfter.
	LostAfter time.Duration
	// AlarmChannels deliver failure alarms (logsvc.EmailChannel, logsvc.WebhookChannel); none
	// marks failed runs' alarms NOT_NEEDED.
	AlarmChannels []logsvc.AlarmChannel
	// AgentHandlers are registered on the local agent before it starts, by handler name.
	AgentHandlers map[string]sdk.HandlerFunc
	// MetricsAddr, when set, serves every service's metrics on one Prometheus endpoint,
	// http://MetricsAddr/metrics: Start installs the process's global MeterProvider
	// (telemetry.StartMetrics), so set it for one stack per process only.
	MetricsAddr string
	// TraceURLTemplate links trace ids in the web UI (gateway.Config.TraceURLTemplate).
	TraceURLTemplate string
	// MaxBodyBytes bounds HTTP request bodies (gateway.Config.MaxBodyBytes); 0 means 4 MiB.
	MaxBodyBytes int64
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names the client, for the
	// gateway and the auth service (gateway.Config.TrustedProxies).
	TrustedProxies []netip.Prefix
	// XxlContextPath, XxlAccessToken and XxlDeadTime configure the XXL-JOB admin API that
	// XXL-JOB executors call on the gateway (gateway.Config's fields of the same names): by
	// default at /xxl-job-admin, no fallback token, a 90 s dead time. XxlAccessToken is also the
	// scheduler's (scheduler.Config.XxlAccessToken), unless that is set.
	XxlContextPath, XxlAccessToken string
	XxlDeadTime                    time.Duration
}

func (c *Config) setDefaults() {
	def := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	def(&c.HTTPAddr, "127.0.0.1:8080")
	def(&c.SchedulerAddr, "127.0.0.1:9010")
	def(&c.RegistryAddr, "127.0.0.1:9011")
	def(&c.LogsAddr, "127.0.0.1:9012")
	def(&c.AuthAddr, "127.0.0.1:9013")
	def(&c.AgentAddr, "127.0.0.1:9999")
	def(&c.EtcdAddr, "127.0.0.1:2379")
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Stack is a running all-in-one jobmesh.
type Stack struct {
	// HTTPAddr, SchedulerAddr, RegistryAddr, LogsAddr, AuthAddr, AgentAddr and EtcdEndpoint are
	// the actual addresses after Start (SchedulerAddr as configured with NoScheduler).
	HTTPAddr, SchedulerAddr, RegistryAddr, LogsAddr, AuthAddr, AgentAddr, EtcdEndpoint string
	// AdminPassword is the password given to the first admin by this start; empty when the
	// store already had users.
	AdminPassword string
	// InternalToken is the secret the services present to each other (see Config).
	InternalToken string
	// GroupID is the executor group of the local agent, and GroupToken its access token (made
	// at the group's creation): the local agent presents it, and so must any other executor of
	// the group.
	GroupID    int64
	GroupToken string
	// MetricsAddr is the actual address of the /metrics endpoint; empty without one.
	MetricsAddr string
	// TLSFiles are the certificate, key and CA of the stack's services and local agent (under
	// <DataDir>/tls): give them as --tls-cert, --tls-key and --tls-ca to processes that join
	// the stack. ClientTLSFiles are the command-line client's (<DataDir>/tls/client*.pem).
	TLSFiles, ClientTLSFiles meshtls.Files
	// TLS is the loaded TLSFiles: TLS.DialOption() reaches any of the stack's gRPC servers.
	TLS *meshtls.Identity
	// EtcdTLSFiles are the etcd client certificate, key and CA (--etcd-cert, --etcd-key,
	// --etcd-ca of processes that join the stack).
	EtcdTLSFiles meshtls.Files
	// EtcdTLS is the TLS configuration of an etcd client of the stack.
	EtcdTLS *tls.Config

	log     *slog.Logger
	closers []func() // in shutdown order
}

// Start brings the whole stack up. On error, whatever started is stopped again.
func Start(ctx context.Context, cfg Config) (_ *Stack, err error) {
	cfg.setDefaults()
	if cfg.DataDir == "" {
		return nil, errors.New("devstack: data dir: required")
	}
	st := &Stack{log: cfg.Logger, InternalToken: cfg.InternalToken}
	if st.InternalToken == "" {
		if st.InternalToken, err = dataDirSecret(cfg.DataDir, "internal-token"); err != nil {
			return nil, err
		}
	}
	var undo []func() // reverse start order
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	log := cfg.Logger

	// Metrics first, so every service's instruments report to the process's provider.
	if cfg.MetricsAddr != "" {
		m, err := telemetry.StartMetrics(ctx, "jobmesh", cfg.MetricsAddr)
		if err != nil {
			return nil, fmt.Errorf("devstack: %w", err)
		}
		undo = append(undo, func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = m.Shutdown(sctx)
		})
		st.MetricsAddr = m.Addr()
	}

	if err := st.ensureTLS(cfg); err != nil {
		return nil, err
	}
	ecfg := etcdembed.Config{Dir: filepath.Join(cfg.DataDir, "etcd"), ClientAddr: cfg.EtcdAddr, PeerAddr: cfg.EtcdPeerAddr, Unsafe: cfg.UnsafeEtcd}
	server, client, err := etcdCerts(cfg)
	if err != nil {
		return nil, err
	}
	ecfg.TLS, ecfg.ClientTLS = &server, &client
	st.EtcdTLSFiles = client
	etcd, err := etcdembed.Start(ctx, ecfg)
	if err != nil {
		return nil, err
	}
	st.EtcdTLS = etcd.ClientTLS()
	undo = append(undo, etcd.Close)
	st.EtcdEndpoint = etcd.Endpoint()
	var clients []*clientv3.Client
	newEtcd := func() (*clientv3.Client, error) {
		c, err := etcd.Client()
		if err == nil {
			clients = append(clients, c)
		}
		return c, err
	}
	undo = append(undo, func() {
		for _, c := range clients {
			c.Close()
		}
	})

	open := func(schema string, m fs.FS) (*db.DB, error) {
		d, err := db.Open(ctx, db.Config{URL: cfg.DatabaseURL, DataDir: filepath.Join(cfg.DataDir, "db"), Schema: schema})
		if err != nil {
			return nil, err
		}
		undo = append(undo, func() { d.Close() })
		if err := d.Migrate(ctx, m); err != nil {
			return nil, err
		}
		return d, nil
	}
	regDB, err := open("registry", registry.MigrationsFS())
	if err != nil {
		return nil, err
	}
	logsDB, err := open("logs", logsvc.MigrationsFS())
	if err != nil {
		return nil, err
	}
	var schedDB *db.DB
	if !cfg.NoScheduler {
		if schedDB, err = open("scheduler", scheduler.MigrationsFS()); err != nil {
			return nil, err
		}
	}
	authDB, err := open("auth", auth.MigrationsFS())
	if err != nil {
		return nil, err
	}

	// Listen first, so every service knows every address before it dials.
	listen := func(addr string) (net.Listener, error) {
		ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("devstack: listen %s: %w", addr, err)
		}
		undo = append(undo, func() { ln.Close() })
		return ln, nil
	}
	regLn, err := listen(cfg.RegistryAddr)
	if err != nil {
		return nil, err
	}
	logsLn, err := listen(cfg.LogsAddr)
	if err != nil {
		return nil, err
	}
	var schedLn net.Listener
	st.SchedulerAddr = cfg.SchedulerAddr // served elsewhere with NoScheduler
	if !cfg.NoScheduler {
		if schedLn, err = listen(cfg.SchedulerAddr); err != nil {
			return nil, err
		}
		st.SchedulerAddr = schedLn.Addr().String()
	}
	authLn, err := listen(cfg.AuthAddr)
	if err != nil {
		return nil, err
	}
	st.RegistryAddr, st.LogsAddr = regLn.Addr().String(), logsLn.Addr().String()
	st.AuthAddr = authLn.Addr().String()

	// Service-to-service connections present the internal token.
	dial := func(addr string) (*grpc.ClientConn, error) {
		c, err := grpc.NewClient(addr, st.TLS.DialOption(), grpc.WithStatsHandler(otelgrpc.NewClientHandler()),
			auth.BearerToken(st.InternalToken))
		if err != nil {
			return nil, fmt.Errorf("devstack: dial %s: %w", addr, err)
		}
		undo = append(undo, func() { c.Close() })
		return c, nil
	}
	regConn, err := dial(st.RegistryAddr)
	if err != nil {
		return nil, err
	}
	logsConn, err := dial(st.LogsAddr)
	if err != nil {
		return nil, err
	}
	schedConn, err := dial(st.SchedulerAddr)
	if err != nil {
		return nil, err
	}

	// Auth comes first: every server's guard asks it who a token belongs to.
	acfg := cfg.Auth
	acfg.Logger = log.With("service", "auth")
	acfg.InternalToken = st.InternalToken // the gateway proves the client address with it
	if acfg.TrustedProxies == nil {
		acfg.TrustedProxies = cfg.TrustedProxies
	}
	if acfg.Groups == nil {
		acfg.Groups = auth.ClientResolver{Registry: registryv1.NewRegistryServiceClient(regConn)}
	}
	authSvc, err := auth.New(acfg, authDB)
	if err != nil {
		return nil, err
	}
	if st.AdminPassword, err = authSvc.Bootstrap(ctx, "admin", cfg.AdminPassword); err != nil {
		return nil, err
	}
	if st.AdminPassword == "" && cfg.AdminPassword != "" {
		log.Warn(IgnoredAdminPassword)
	}
	resolver := auth.ClientResolver{
		Jobs: schedulerv1.NewJobServiceClient(schedConn), Logs: logsv1.NewLogServiceClient(logsConn),
		Registry:  registryv1.NewRegistryServiceClient(regConn),
		Workflows: schedulerv1.NewWorkflowServiceClient(schedConn),
	}
	guard, err := auth.NewGuard(auth.GuardConfig{
		Users: authSvc, InternalToken: st.InternalToken, Audit: authSvc, Groups: resolver, Executors: resolver,
		Logger: log.With("service", "guard"),
	})
	if err != nil {
		return nil, err
	}

	serve := func(name string, ln net.Listener, register func(*grpc.Server), opts ...grpc.ServerOption) {
		g := grpcserver.New(log.With("service", name), append(append(st.TLS.ServerOptions(), guard.ServerOptions()...), opts...)...)
		register(g)
		go func() {
			if err := g.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				log.Error("grpc server ended", "service", name, "error", err)
			}
		}()
		undo = append(undo, func() { grpcserver.Stop(g, grpcserver.StopGrace, log.With("service", name)) })
	}

	// Registry.
	regEtcd, err := newEtcd()
	if err != nil {
		return nil, err
	}
	reg, err := registry.New(registry.Config{Logger: log.With("service", "registry"), RevealTokens: auth.IsInternalCaller,
		SealSecret: st.InternalToken, Executor: auth.ExecutorOf}, regDB, regEtcd)
	if err != nil {
		return nil, err
	}
	if err := reg.Start(ctx); err != nil {
		return nil, err
	}
	undo = append(undo, reg.Stop)
	serve("registry", regLn, reg.Register)

	// logsvc.
	// logsvc follows the registry's live view (lost runs, executors online) and reads jobs from
	// the scheduler (alarm recipients, job count).
	execView := logsvc.NewRegistryView(registryv1.NewRegistryServiceClient(regConn), log.With("service", "logsvc"))
	if err := execView.Start(ctx); err != nil {
		return nil, err
	}
	undo = append(undo, execView.Stop)
	logs, err := logsvc.New(logsvc.Config{
		Logger: log.With("service", "logsvc"), Executors: execView, LostAfter: cfg.LostAfter,
		Jobs: logsvc.SchedulerJobs{Client: schedulerv1.NewJobServiceClient(schedConn)}, AlarmChannels: cfg.AlarmChannels,
		Workflows:      logsvc.SchedulerWorkflows{Client: schedulerv1.NewWorkflowServiceClient(schedConn)},
		DeliverySecret: st.InternalToken, Executor: auth.ExecutorOf,
	}, logsDB, logsvc.SchedulerKiller{Client: schedulerv1.NewSchedulerServiceClient(schedConn)})
	if err != nil {
		return nil, err
	}
	if err := logs.Start(ctx); err != nil {
		return nil, err
	}
	undo = append(undo, logs.Stop)
	serve("logsvc", logsLn, logs.Register)

	// Scheduler.
	stopSched := func() {}
	if !cfg.NoScheduler {
		schedEtcd, err := newEtcd()
		if err != nil {
			return nil, err
		}
		scfg := cfg.Scheduler
		scfg.Logger = log.With("service", "scheduler")
		if scfg.XxlAccessToken == "" {
			// The fallback token XXL-JOB executors of a group without one present and expect.
			scfg.XxlAccessToken = cfg.XxlAccessToken
		}
		// One replica here, but `jobmesh scheduler` replicas may join its etcd: it is wired into
		// the mesh as theirs are.
		sched, err := scheduler.NewInMesh(scfg, scheduler.Mesh{
			Store: schedDB, Etcd: schedEtcd, Registry: regConn, Logs: logsConn, TLS: st.TLS.DialOption(),
			InternalToken: st.InternalToken, InternalCreds: auth.BearerToken(st.InternalToken), InternalCaller: auth.IsInternalCaller,
			AdvertiseAddr: hostport.Advertised(schedLn.Addr()),
		})
		if err != nil {
			return nil, err
		}
		if err := sched.Start(ctx); err != nil {
			return nil, err
		}
		undo = append(undo, sched.Stop)
		serve("scheduler", schedLn, sched.Register)
		// Undone before the server stops: the replica withdraws its address first.
		undo = append(undo, sched.StopAdvertising)
		stopSched = func() { sched.StopAdvertising(); sched.Stop() }
	}

	// Every service serves before the local agent joins.
	serve("auth", authLn, authSvc.Register, auth.ServerOptions()...)

	// The local agent's group, then the agent.
	if st.GroupID, st.GroupToken, err = ensureGroup(ctx, registryv1.NewRegistryServiceClient(regConn)); err != nil {
		return nil, err
	}
	agent, err := sdk.New(sdk.Config{
		AppName: DevApp, InstanceID: "local", ListenAddr: cfg.AgentAddr, RegistryAddr: st.RegistryAddr,
		LogsvcAddr: st.LogsAddr, LogDir: filepath.Join(cfg.DataDir, "agent"), Version: buildinfo.Read(cfg.Version, "", "").Version,
		TLS: st.TLS, AccessToken: st.GroupToken,
		DialOptions: []grpc.DialOption{
			st.TLS.DialOption(),
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
				MinConnectTimeout: 5 * time.Second,
			}),
		},
		Logger: log.With("service", "agent"),
	})
	if err != nil {
		return nil, err
	}
	for name, h := range cfg.AgentHandlers {
		agent.Handle(name, h)
	}
	if err := agent.Start(ctx); err != nil {
		return nil, err
	}
	stopAgent := func() {
		sctx, cancel := context.WithTimeout(context.Background(), agentStopGrace)
		defer cancel()
		_ = agent.Stop(sctx) // it logs what it cut short
	}
	undo = append(undo, stopAgent)
	st.AgentAddr = agent.Addr()

	// Gateway.
	gw, err := gateway.New(gateway.Config{
		ListenAddr: cfg.HTTPAddr, SchedulerAddr: st.SchedulerAddr, RegistryAddr: st.RegistryAddr, LogsAddr: st.LogsAddr,
		AuthAddr: st.AuthAddr, Logger: log.With("service", "gateway"), TraceURLTemplate: cfg.TraceURLTemplate,
		MaxBodyBytes: cfg.MaxBodyBytes, TrustedProxies: cfg.TrustedProxies, InternalToken: st.InternalToken,
		TLS: st.TLS, Version: cfg.Version,
		XxlContextPath: cfg.XxlContextPath, XxlAccessToken: cfg.XxlAccessToken, XxlDeadTime: cfg.XxlDeadTime,
	})
	if err != nil {
		return nil, err
	}
	if err := gw.Start(ctx); err != nil {
		return nil, err
	}
	undo = append(undo, gw.Stop)
	st.HTTPAddr = gw.Addr()

	// Shutdown order: stop accepting (gateway), resign and drain (scheduler), finish runs and
	// deliver results (agent), then logsvc and registry, the gRPC servers, connections, etcd, stores.
	// Every Stop is idempotent, so the reverse start order that follows only closes what is left.
	st.closers = []func(){gw.Stop, stopSched, stopAgent, logs.Stop, reg.Stop}
	for i := len(undo) - 1; i >= 0; i-- {
		st.closers = append(st.closers, undo[i])
	}
	return st, nil
}

// PrintWhere writes where everything is.
func (s *Stack) PrintWhere(w io.Writer, cfg Config) {
	store := "SQLite under " + filepath.Join(cfg.DataDir, "db")
	if cfg.DatabaseURL != "" {
		store = "Postgres (schemas scheduler, registry, logs, auth)"
	}
	sched := s.SchedulerAddr
	if cfg.NoScheduler {
		sched += "   (external replicas, not started here)"
	}
	metrics := "off   (--metrics-addr serves Prometheus /metrics)"
	if s.MetricsAddr != "" {
		metrics = "http://" + s.MetricsAddr + "/metrics"
	}
	etcdTLS := "(TLS, client certificates under " + filepath.Join(meshtls.DevDir(cfg.DataDir), "etcd") + ")"
	if s.EtcdTLS == nil {
		etcdTLS = "(plaintext)"
	}
	login := "as \"admin\" with the password printed at this data directory's first start"
	switch {
	case s.AdminPassword != "" && cfg.AdminPassword == "":
		fmt.Fprintf(w, "first start: created user \"admin\" with password %s (shown once; change it)\n", s.AdminPassword)
		login = "as \"admin\" with the password above"
	case s.AdminPassword != "":
		login = "as \"admin\" with the password from --admin-password (JOBMESH_ADMIN_PASSWORD)"
	case cfg.AdminPassword != "":
		fmt.Fprintln(w, "warning:", IgnoredAdminPassword)
	}
	clientLogin := "jobmesh login --user admin" // the client's default endpoint is dev's default address
	if ep := "http://" + s.HTTPAddr; ep != cli.DefaultEndpoint {
		clientLogin += " --endpoint " + ep
	}
	xxlPath := cfg.XxlContextPath
	if xxlPath == "" {
		xxlPath = xxladmin.DefaultContextPath
	}
	fmt.Fprintf(w, `jobmesh dev is up
  web UI and REST   http://%s/   (API under /api/v1, OpenAPI at /api/openapi.json)
  XXL-JOB admin     http://%s%s   (admin address of XXL-JOB executors)
  scheduler gRPC    %s
  registry gRPC     %s
  logsvc gRPC       %s
  auth gRPC         %s
  local agent gRPC  %s   (app %q, executor group id %d)
  etcd              %s   %s
  TLS               mutual TLS on every gRPC hop; CA and certificates under %s
                    (a gRPC client presents client.pem and client-key.pem from there)
  metrics           %s
  store             %s
  data directory    %s
Log in %s, in the web UI or with
  curl -s http://%s/api/v1/auth/login -d '{"username":"admin","password":"…"}'
  and send the token as "Authorization: Bearer <token>" (REST and gRPC alike),
  or with the command-line client: %s, then jobmesh jobs list.
Press Ctrl-C to stop.
`, s.HTTPAddr, s.HTTPAddr, xxlPath, sched, s.RegistryAddr, s.LogsAddr, s.AuthAddr, s.AgentAddr, DevApp, s.GroupID, s.EtcdEndpoint, etcdTLS,
		meshtls.DevDir(cfg.DataDir), metrics, store, cfg.DataDir, login, s.HTTPAddr, clientLogin)
}

// Stop shuts everything down in order. It is idempotent (every part's Stop is).
func (s *Stack) Stop() {
	for _, c := range s.closers {
		c()
	}
}

// dataDirSecret returns the secret kept in dir/name, making a random one on first use.
func dataDirSecret(dir, name string) (string, error) {
	path := filepath.Join(dir, name)
	if b, err := os.ReadFile(path); err == nil {
		if tok := strings.TrimSpace(string(b)); len(tok) >= auth.MinSecretLen {
			return tok, nil
		}
		return "", fmt.Errorf("devstack: %s: want a secret of at least %d characters", path, auth.MinSecretLen)
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("devstack: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("devstack: %w", err)
	}
	tok := auth.NewSecret()
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("devstack: %w", err)
	}
	return tok, nil
}

// ensureGroup returns the id and access token of the local agent's executor group, creating it
// with a random token on first start, and giving it one if it has none (a store from before
// groups had tokens). The stack calls as a service, so the registry answers the token in clear.
func ensureGroup(ctx context.Context, reg registryv1.RegistryServiceClient) (int64, string, error) {
	resp, err := reg.ListExecutorGroups(ctx, &registryv1.ListExecutorGroupsRequest{AppName: DevApp})
	if err != nil {
		return 0, "", fmt.Errorf("devstack: list groups: %w", err)
	}
	for _, g := range resp.GetGroups() {
		if g.GetAppName() != DevApp {
			continue
		}
		if g.GetAccessToken() != "" {
			return g.GetId(), g.GetAccessToken(), nil
		}
		token := auth.NewSecret()
		_, err := reg.UpdateExecutorGroup(ctx, &registryv1.UpdateExecutorGroupRequest{
			Group:      &registryv1.ExecutorGroup{Id: g.GetId(), AccessToken: token},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"access_token"}},
		})
		if err != nil {
			return 0, "", fmt.Errorf("devstack: give group %s an access token: %w", DevApp, err)
		}
		return g.GetId(), token, nil
	}
	token := auth.NewSecret()
	cr, err := reg.CreateExecutorGroup(ctx, &registryv1.CreateExecutorGroupRequest{Group: &registryv1.ExecutorGroup{
		AppName: DevApp, Title: "Local dev agent", AddressType: registryv1.AddressType_ADDRESS_TYPE_AUTO, AccessToken: token,
	}})
	if err != nil {
		return 0, "", fmt.Errorf("devstack: create group: %w", err)
	}
	return cr.GetGroup().GetId(), token, nil
}

// ensureTLS makes (first start) or loads the stack's CA and certificates under <DataDir>/tls.
func (s *Stack) ensureTLS(cfg Config) error {
	ca, err := meshtls.EnsureCA(meshtls.DevDir(cfg.DataDir))
	if err != nil {
		return fmt.Errorf("devstack: %w", err)
	}
	if s.TLS, err = ca.Identity("node", certHosts(cfg)...); err != nil {
		return fmt.Errorf("devstack: %w", err)
	}
	s.TLSFiles = s.TLS.Files()
	if s.ClientTLSFiles, err = ca.Leaf("client"); err != nil {
		return fmt.Errorf("devstack: %w", err)
	}
	return nil
}

// etcdCerts makes (first start) or loads the embedded etcd's own CA, its server certificate and
// the services' client certificate under <DataDir>/tls/etcd.
func etcdCerts(cfg Config) (server, client meshtls.Files, err error) {
	ca, err := meshtls.EnsureCA(filepath.Join(meshtls.DevDir(cfg.DataDir), "etcd"))
	if err == nil {
		server, err = ca.Leaf("server", certHosts(cfg)...)
	}
	if err == nil {
		client, err = ca.Leaf("client")
	}
	if err != nil {
		return server, client, fmt.Errorf("devstack: etcd certificates: %w", err)
	}
	return server, client, nil
}

// certHosts are the hosts of the configured addresses besides loopback (always in a
// certificate) and the unspecified address (0.0.0.0 is reached as 127.0.0.1).
func certHosts(cfg Config) []string {
	var hosts []string
	for _, a := range []string{cfg.SchedulerAddr, cfg.RegistryAddr, cfg.LogsAddr, cfg.AuthAddr, cfg.AgentAddr, cfg.EtcdAddr} {
		h, _, err := net.SplitHostPort(a)
		if ip := net.ParseIP(h); err != nil || h == "" || (ip != nil && ip.IsUnspecified()) {
			continue
		}
		hosts = append(hosts, h)
	}
	return hosts
}
