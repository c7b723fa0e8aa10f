package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"google.golang.org/grpc"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/grpcserver"
	"github.com/jobmesh/jobmesh/services/executor-agent/buildinfo"
	"github.com/jobmesh/jobmesh/services/gateway"
	"github.com/jobmesh/jobmesh/services/gateway/auth"
	"github.com/jobmesh/jobmesh/services/gateway/xxladmin"
	"github.com/jobmesh/jobmesh/services/logsvc"
	"github.com/jobmesh/jobmesh/services/registry"
)

// The `jobmesh registry`, `jobmesh logsvc` and `jobmesh gateway` commands run one service each,
// for a cluster of processes (docker-compose.yml, the load tool). Each serves its gRPC API
// behind the same guard as `jobmesh dev`, reaches its peers with the internal token, prints
// "<service> grpc <host:port>" (and the gateway "gateway http <host:port>") once it serves, and
// stops cleanly on SIGINT or SIGTERM.

// alarmFlags are logsvc's failure alarm channels, shared by `jobmesh dev` and `jobmesh logsvc`.
type alarmFlags struct {
	smtpAddr, smtpFrom, webhookURL string
}

func (a *alarmFlags) add(f *flags) {
	f.str(&a.smtpAddr, "alarm-smtp-addr", "", "SMTP server `address` (host:port) for failure alarms to the jobs' and workflows' alarm emails; empty sends none")
	f.str(&a.smtpFrom, "alarm-smtp-from", "jobmesh@localhost", "sender `email` of alarm emails")
	f.str(&a.webhookURL, "alarm-webhook-url", "", "`url` that receives a JSON POST for every failed run and failed workflow instance; empty sends none")
}

// channels checks the flags and returns the channels they configure.
func (a *alarmFlags) channels() ([]logsvc.AlarmChannel, error) {
	var out []logsvc.AlarmChannel
	if a.smtpAddr != "" {
		if err := checkAddr("--alarm-smtp-addr", a.smtpAddr); err != nil {
			return nil, err
		}
		out = append(out, &logsvc.EmailChannel{Addr: a.smtpAddr, From: a.smtpFrom})
	}
	if a.webhookURL != "" {
		if err := checkWebhookURL(a.webhookURL); err != nil {
			return nil, err
		}
		out = append(out, &logsvc.WebhookChannel{URL: a.webhookURL})
	}
	return out, nil
}

// edgeFlags are the gateway's defences against strangers, shared by `jobmesh dev` and
// `jobmesh gateway`.
type edgeFlags struct {
	maxBodyBytes   int64
	trustedProxies string
}

func (e *edgeFlags) add(f *flags) {
	f.int64(&e.maxBodyBytes, "max-body-bytes", gateway.DefaultMaxBodyBytes, "largest HTTP request body the gateway reads, in `bytes`; a larger one is answered 413")
	f.str(&e.trustedProxies, "trusted-proxies", "", "comma-separated `cidrs` of reverse proxies whose X-Forwarded-For names the client (for the login throttle); empty trusts none")
}

// check checks the flags and returns the trusted proxies.
func (e *edgeFlags) check() ([]netip.Prefix, error) {
	if e.maxBodyBytes <= 0 {
		return nil, fmt.Errorf("--max-body-bytes %d: want a positive size", e.maxBodyBytes)
	}
	trusted, err := auth.ParseCIDRs(e.trustedProxies)
	if err != nil {
		return nil, fmt.Errorf("--trusted-proxies: %w", err)
	}
	return trusted, nil
}

// xxlFlags configure the XXL-JOB admin API the gateway serves to XXL-JOB executors, shared by
// `jobmesh dev` and `jobmesh gateway`.
type xxlFlags struct {
	contextPath, accessToken string
	deadTime                 time.Duration
}

func (x *xxlFlags) add(f *flags) {
	f.str(&x.contextPath, "xxl-context-path", xxladmin.DefaultContextPath, "`path` of the XXL-JOB admin API on the HTTP address: XXL-JOB executors take http://HOST:PORT followed by it as their admin address")
	f.str(&x.accessToken, "xxl-access-token", "", "XXL-JOB access `token` that executors of groups without a token of their own must present; empty lets them in without one (a group's own token always applies)")
	f.dur(&x.deadTime, "xxl-dead-time", xxladmin.DefaultDeadTime, "how long an XXL-JOB executor stays registered after its last registry call (a `duration`, 10s to 1h, whole seconds)")
}

// check checks the flags, naming the one at fault.
func (x *xxlFlags) check() error {
	if err := xxladmin.CheckContextPath(x.contextPath); err != nil {
		return fmt.Errorf("--xxl-context-path: %w", err)
	}
	if err := xxladmin.CheckDeadTime(x.deadTime); err != nil {
		return fmt.Errorf("--xxl-dead-time: %w", err)
	}
	if len(x.accessToken) > 255 {
		return errors.New("--xxl-access-token: at most 255 characters")
	}
	return nil
}

// checkArgs checks a parsed service command line: no stray arguments, the peers it needs, and
// the command's own findings (extra; nils are ignored).
func checkArgs(f *flags, mesh *meshConfig, peers []peer, extra ...error) error {
	if f.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", f.Args())
	}
	return errors.Join(append(mesh.validate(peers), extra...)...)
}

func requireDatabase(url string) error {
	if url == "" {
		return errors.New("--database-url: required (a Postgres URL)")
	}
	return nil
}

var registryPeers = []peer{peerScheduler, peerLogs}

// runRegistry runs the registry: executor groups in Postgres, the live executor view from etcd.
func runRegistry(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		mesh                             meshConfig
		grpcAddr, endpoints, databaseURL string
		etcdTLS                          etcdTLSFlags
	)
	f := newFlags("jobmesh registry", stderr)
	f.str(&grpcAddr, "grpc-addr", "127.0.0.1:9011", "gRPC `address` of RegistryService; port 0 picks one")
	f.str(&endpoints, "etcd-endpoints", "", "comma-separated etcd `urls`, where agents register (required)")
	etcdTLS.add(f)
	f.str(&databaseURL, "database-url", "", "Postgres `url` (schema registry) (required)")
	mesh.addFlags(f, registryPeers, peerAuth)
	if err := f.parse(args); err != nil {
		return err
	}
	var errs []error
	if len(splitList(endpoints)) == 0 {
		errs = append(errs, errors.New("--etcd-endpoints: required"))
	}
	if err := checkArgs(f, &mesh, registryPeers, append(errs, checkAddr("--grpc-addr", grpcAddr), requireDatabase(databaseURL))...); err != nil {
		return err
	}

	p, err := newProcess(ctx, "registry", mesh, stderr)
	if err != nil {
		return err
	}
	defer p.close()
	store, err := p.openStore(ctx, databaseURL, "registry", registry.MigrationsFS())
	if err != nil {
		return err
	}
	etcd, err := p.etcdClient(splitList(endpoints), etcdTLS)
	if err != nil {
		return err
	}
	// Only services (the scheduler) read executor groups' access tokens in clear.
	reg, err := registry.New(registry.Config{Logger: p.log, RevealTokens: auth.IsInternalCaller,
		SealSecret: mesh.InternalToken, Executor: auth.ExecutorOf}, store, etcd)
	if err != nil {
		return err
	}
	ln, err := p.listen(ctx, "--grpc-addr", grpcAddr)
	if err != nil {
		return err
	}
	guard, err := p.peersGuard(guardDeps{}, selfAddr(ln), peerRegistry)
	if err != nil {
		return err
	}
	if err := reg.Start(ctx); err != nil {
		return err
	}
	defer reg.Stop()
	failed := make(chan error, 1)
	g := p.serve(ln, guard, failed, reg.Register)
	fmt.Fprintf(stdout, "registry grpc %s\n", ln.Addr())
	p.log.Info("registry up", "grpc_addr", ln.Addr().String())
	err = wait(ctx, failed)
	grpcserver.Stop(g, grpcserver.StopGrace, p.log)
	return err
}

var logsPeers = []peer{peerScheduler, peerRegistry}

// runLogsvc runs logsvc: run records, results and log lines in Postgres.
func runLogsvc(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		mesh                  meshConfig
		grpcAddr, databaseURL string
		alarms                alarmFlags
		lostAfter             time.Duration
	)
	f := newFlags("jobmesh logsvc", stderr)
	f.str(&grpcAddr, "grpc-addr", "127.0.0.1:9012", "gRPC `address` of IngestService and LogService; port 0 picks one")
	f.str(&databaseURL, "database-url", "", "Postgres `url` (schema logs) (required)")
	addLostAfter(f, &lostAfter)
	mesh.addFlags(f, logsPeers, peerAuth)
	alarms.add(f)
	if err := f.parse(args); err != nil {
		return err
	}
	channels, err := alarms.channels()
	errs := []error{err, checkAddr("--grpc-addr", grpcAddr), requireDatabase(databaseURL), checkLostAfter(lostAfter)}
	if err := checkArgs(f, &mesh, logsPeers, errs...); err != nil {
		return err
	}

	p, err := newProcess(ctx, "logsvc", mesh, stderr)
	if err != nil {
		return err
	}
	defer p.close()
	store, err := p.openStore(ctx, databaseURL, "logs", logsvc.MigrationsFS())
	if err != nil {
		return err
	}
	regConn, err := p.dial("--registry-addr", mesh.RegistryAddr)
	if err != nil {
		return err
	}
	schedConn, err := p.dial("--scheduler-addr", mesh.SchedulerAddr)
	if err != nil {
		return err
	}
	ln, err := p.listen(ctx, "--grpc-addr", grpcAddr)
	if err != nil {
		return err
	}
	guard, err := p.peersGuard(guardDeps{}, selfAddr(ln), peerLogs)
	if err != nil {
		return err
	}
	// logsvc follows the registry's live view (lost runs, executors online) and reads jobs from
	// the scheduler (alarm recipients, job count).
	view := logsvc.NewRegistryView(registryv1.NewRegistryServiceClient(regConn), p.log)
	if err := view.Start(ctx); err != nil {
		return err
	}
	defer view.Stop()
	logs, err := logsvc.New(logsvc.Config{
		Logger: p.log, Executors: view, AlarmChannels: channels, LostAfter: lostAfter,
		Jobs:           logsvc.SchedulerJobs{Client: schedulerv1.NewJobServiceClient(schedConn)},
		Workflows:      logsvc.SchedulerWorkflows{Client: schedulerv1.NewWorkflowServiceClient(schedConn)},
		DeliverySecret: mesh.InternalToken, Executor: auth.ExecutorOf,
	}, store, logsvc.SchedulerKiller{Client: schedulerv1.NewSchedulerServiceClient(schedConn)})
	if err != nil {
		return err
	}
	if err := logs.Start(ctx); err != nil {
		return err
	}
	defer logs.Stop()
	failed := make(chan error, 1)
	g := p.serve(ln, guard, failed, logs.Register)
	fmt.Fprintf(stdout, "logsvc grpc %s\n", ln.Addr())
	p.log.Info("logsvc up", "grpc_addr", ln.Addr().String())
	err = wait(ctx, failed)
	grpcserver.Stop(g, grpcserver.StopGrace, p.log)
	return err
}

// addLostAfter adds --lost-after, logsvc's lost-run threshold (logsvc.Config.LostAfter).
func addLostAfter(f *flags, p *time.Duration) {
	f.dur(p, "lost-after", logsvc.DefaultLostAfter, "how long after its trigger, beyond its job's timeout, a run still running is decided without "+
		"its executor: failed as lost when the executor has left the registry, or as not delivered when its dispatch was never answered "+
		"and the executor never reported it (a `duration`; the executor's report, should it come later, still decides the run)")
}

// checkLostAfter checks --lost-after.
func checkLostAfter(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("--lost-after %v: want a positive duration", d)
	}
	return nil
}

var gatewayPeers = []peer{peerScheduler, peerRegistry, peerLogs}

// runGateway runs the gateway (REST, OpenAPI, web UI) and the auth service it fronts: users,
// sessions, API tokens and the audit trail in Postgres.
func runGateway(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		mesh                                           meshConfig
		httpAddr, grpcAddr, databaseURL, adminPassword string
		httpCert, httpKey                              string
		sessionTTL                                     time.Duration
		edge                                           edgeFlags
		xxl                                            xxlFlags
	)
	f := newFlags("jobmesh gateway", stderr)
	f.str(&httpAddr, "http-addr", "127.0.0.1:8080", "HTTP `address`: web UI, REST under /api/v1, OpenAPI, /healthz")
	f.str(&httpCert, "http-tls-cert", "", "PEM certificate `file` of the HTTP listener, which then serves HTTPS (with --http-tls-key); empty serves plain HTTP")
	f.str(&httpKey, "http-tls-key", "", "PEM private key `file` of --http-tls-cert")
	f.str(&grpcAddr, "grpc-addr", "127.0.0.1:9013", "gRPC `address` of AuthService (the other services' --auth-addr); port 0 picks one")
	f.str(&databaseURL, "database-url", "", "Postgres `url` (schema auth) (required)")
	f.str(&adminPassword, "admin-password", "", "first admin's `password` on a fresh store; empty means random, printed once")
	f.dur(&sessionTTL, "login-ttl", 12*time.Hour, "how long a login session lasts (a `duration`)")
	var traceURL string
	f.str(&traceURL, "trace-url-template", "", "link of a run's trace id in the web UI: a `url` in which {trace_id} is replaced by it (e.g. Grafana's Tempo explorer); empty shows the id only")
	edge.add(f)
	xxl.add(f)
	mesh.addFlags(f, gatewayPeers)
	if err := f.parse(args); err != nil {
		return err
	}
	trusted, edgeErr := edge.check()
	errs := []error{edgeErr, xxl.check()}
	if sessionTTL <= 0 {
		errs = append(errs, fmt.Errorf("--login-ttl %v: want a positive duration", sessionTTL))
	}
	httpTLS, err := httpsConfig(httpCert, httpKey)
	errs = append(errs, err, checkAddr("--http-addr", httpAddr), checkAddr("--grpc-addr", grpcAddr), requireDatabase(databaseURL))
	if err := checkArgs(f, &mesh, gatewayPeers, errs...); err != nil {
		return err
	}

	p, err := newProcess(ctx, "gateway", mesh, stderr)
	if err != nil {
		return err
	}
	defer p.close()
	store, err := p.openStore(ctx, databaseURL, "auth", auth.MigrationsFS())
	if err != nil {
		return err
	}
	regConn, err := p.dial("--registry-addr", mesh.RegistryAddr)
	if err != nil {
		return err
	}
	authSvc, err := auth.New(auth.Config{SessionTTL: sessionTTL, Logger: p.log,
		Groups:        auth.ClientResolver{Registry: registryv1.NewRegistryServiceClient(regConn)},
		InternalToken: mesh.InternalToken, TrustedProxies: trusted}, store)
	if err != nil {
		return err
	}
	created, err := authSvc.Bootstrap(ctx, "admin", adminPassword)
	if err != nil {
		return err
	}
	if created != "" && adminPassword == "" {
		fmt.Fprintf(stdout, "first start: created user \"admin\" with password %s (shown once; change it)\n", created)
	}
	if created == "" && adminPassword != "" {
		p.log.Warn(ignoredAdminPassword)
		fmt.Fprintln(stderr, "warning:", ignoredAdminPassword)
	}
	ln, err := p.listen(ctx, "--grpc-addr", grpcAddr)
	if err != nil {
		return err
	}
	guard, err := p.peersGuard(guardDeps{Users: authSvc, Audit: authSvc, Registry: regConn}, selfAddr(ln), peerAuth)
	if err != nil {
		return err
	}
	failed := make(chan error, 1)
	g := p.serveWith(ln, guard, auth.ServerOptions(), failed, authSvc.Register)
	defer grpcserver.Stop(g, grpcserver.StopGrace, p.log)

	gw, err := gateway.New(gateway.Config{
		ListenAddr: httpAddr, SchedulerAddr: mesh.SchedulerAddr, RegistryAddr: mesh.RegistryAddr, LogsAddr: mesh.LogsAddr,
		AuthAddr: selfAddr(ln), Logger: p.log, TraceURLTemplate: traceURL, TLS: p.tls, HTTPTLS: httpTLS,
		MaxBodyBytes: edge.maxBodyBytes, TrustedProxies: trusted, InternalToken: mesh.InternalToken,
		Version:        buildinfo.Read(version, commit, date).Version,
		XxlContextPath: xxl.contextPath, XxlAccessToken: xxl.accessToken, XxlDeadTime: xxl.deadTime,
	})
	if err != nil {
		return err
	}
	if err := gw.Start(ctx); err != nil {
		return fmt.Errorf("--http-addr: %w", err)
	}
	defer gw.Stop()
	fmt.Fprintf(stdout, "auth grpc %s\ngateway http %s\n", ln.Addr(), gw.Addr())
	p.log.Info("gateway up", "http_addr", gw.Addr(), "auth_grpc_addr", ln.Addr().String())
	return wait(ctx, failed)
}

// httpsConfig loads the HTTPS certificate of the gateway; nil (plain HTTP) without one.
func httpsConfig(cert, key string) (*tls.Config, error) {
	if cert == "" && key == "" {
		return nil, nil
	}
	if cert == "" || key == "" {
		return nil, errors.New("--http-tls-cert and --http-tls-key: give both, or neither for plain HTTP")
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("--http-tls-cert, --http-tls-key: %w", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}, nil
}

// peersGuard builds the guard of a process that reaches the scheduler, registry and logsvc
// over the network; self is the process's own gRPC address, used for the service it serves
// itself (named by own).
func (p *process) peersGuard(d guardDeps, self string, own peer) (*auth.Guard, error) {
	addr := map[peer]string{peerScheduler: p.mesh.SchedulerAddr, peerRegistry: p.mesh.RegistryAddr, peerLogs: p.mesh.LogsAddr}
	addr[own] = self
	flag := map[peer]string{peerScheduler: "--scheduler-addr", peerRegistry: "--registry-addr", peerLogs: "--logs-addr"}
	var err error
	for _, q := range []struct {
		p    peer
		conn **grpc.ClientConn
	}{{peerScheduler, &d.Jobs}, {peerRegistry, &d.Registry}, {peerLogs, &d.Logs}} {
		if *q.conn != nil { // dialled already by the caller
			continue
		}
		if *q.conn, err = p.dial(flag[q.p], addr[q.p]); err != nil {
			return nil, err
		}
	}
	return p.guard(d)
}
