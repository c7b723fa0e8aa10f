package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	authv1 "github.com/jobmesh/jobmesh/gen/jobmesh/auth/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/grpcserver"
	"github.com/jobmesh/jobmesh/services/executor-agent/meshtls"
	"github.com/jobmesh/jobmesh/services/executor-agent/telemetry"
	"github.com/jobmesh/jobmesh/services/gateway/auth"
)

// meshConfig is what every service process of a cluster shares: where its peers listen, the
// secret the services present to each other, how it logs and where it serves its metrics.
type meshConfig struct {
	// SchedulerAddr, RegistryAddr, LogsAddr and AuthAddr are the peers' gRPC addresses. Each
	// command says which it needs; AuthAddr empty means the process accepts internal callers only.
	SchedulerAddr, RegistryAddr, LogsAddr, AuthAddr string
	// InternalToken is the secret the services present to each other (docs/auth.md); at least
	// auth.MinSecretLen characters.
	InternalToken string
	// LogLevel and LogFormat shape the process's logs on stderr.
	LogLevel, LogFormat string
	// MetricsAddr is where the process serves Prometheus /metrics; empty serves none
	// (docs/observability.md).
	MetricsAddr string
	// PprofAddr is a loopback address where the process serves net/http/pprof to callers with
	// the internal token; empty serves none.
	PprofAddr string
	// TLS names the process's certificate, key and the mesh's CA: every gRPC server it runs
	// requires mutual TLS, every peer it dials is verified against the CA (docs/security.md).
	TLS meshtls.Files
	// Insecure serves and dials plaintext instead; it is logged as a warning at every start.
	// Without TLS files or Insecure the process refuses to start.
	Insecure bool
}

// peer names one of the peer address flags.
type peer int

const (
	peerScheduler peer = iota
	peerRegistry
	peerLogs
	peerAuth
)

// addFlags declares the flags of the peers a command talks to (required ones say so), the
// internal token and the log flags.
func (m *meshConfig) addFlags(f *flags, required []peer, optional ...peer) {
	for _, p := range append(append([]peer(nil), required...), optional...) {
		need := " (required)"
		if !containsPeer(required, p) {
			need = ""
		}
		switch p {
		case peerScheduler:
			f.str(&m.SchedulerAddr, "scheduler-addr", "", "scheduler gRPC `address`: any replica, or a load balancer in front of them"+need)
		case peerRegistry:
			f.str(&m.RegistryAddr, "registry-addr", "", "registry gRPC `address`"+need)
		case peerLogs:
			f.str(&m.LogsAddr, "logs-addr", "", "logsvc gRPC `address`"+need)
		case peerAuth:
			f.str(&m.AuthAddr, "auth-addr", "", "auth gRPC `address` (served by jobmesh gateway) for checking people's tokens; empty accepts internal callers only"+need)
		}
	}
	f.str(&m.InternalToken, "internal-token", "", "`secret` the services present to each other, the same in every process (required)")
	addTLSFlags(f, &m.TLS, &m.Insecure)
	f.str(&m.LogLevel, "log-level", "info", "`level` of the logs: debug, info, warn or error")
	f.str(&m.LogFormat, "log-format", "text", "`format` of the logs: text or json")
	f.str(&m.MetricsAddr, "metrics-addr", "", "`address` of the Prometheus /metrics endpoint (e.g. 0.0.0.0:9464); empty serves none")
	f.str(&m.PprofAddr, "pprof-addr", "", "loopback `address` (127.0.0.1:port) serving /debug/pprof/ to callers with the internal token as bearer token; empty serves none")
}

// addTLSFlags declares --tls-cert, --tls-key, --tls-ca and --insecure.
func addTLSFlags(f *flags, files *meshtls.Files, insecure *bool) {
	f.str(&files.Cert, "tls-cert", "", "PEM certificate `file` of this process, for mutual TLS on every gRPC hop (with --tls-key and --tls-ca)")
	f.str(&files.Key, "tls-key", "", "PEM private key `file` of --tls-cert")
	f.str(&files.CA, "tls-ca", "", "PEM CA bundle `file` every peer's certificate must chain to")
	f.boolean(insecure, "insecure", false, "plaintext gRPC without certificates (warned at every start); only on a network you trust")
}

// etcdTLSFlags are the certificate, key and CA of the etcd connection, separate from the mesh's.
type etcdTLSFlags struct{ files meshtls.Files }

func (e *etcdTLSFlags) add(f *flags) {
	f.str(&e.files.Cert, "etcd-cert", "", "PEM client certificate `file` for etcd (with --etcd-key and --etcd-ca); empty connects without TLS")
	f.str(&e.files.Key, "etcd-key", "", "PEM private key `file` of --etcd-cert")
	f.str(&e.files.CA, "etcd-ca", "", "PEM CA bundle `file` etcd's server certificate must chain to")
}

// tlsConfig loads the files; nil without any.
func (e *etcdTLSFlags) tlsConfig() (*tls.Config, error) {
	if e.files.IsZero() {
		return nil, nil
	}
	id, err := meshtls.Load(e.files)
	if err != nil {
		return nil, fmt.Errorf("--etcd-cert, --etcd-key, --etcd-ca: %w", err)
	}
	return id.ClientConfig(), nil
}

func containsPeer(ps []peer, p peer) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// validate names every flag that is wrong.
func (m *meshConfig) validate(required []peer) []error {
	var errs []error
	addrs := []struct {
		p          peer
		flag, addr string
	}{
		{peerScheduler, "--scheduler-addr", m.SchedulerAddr}, {peerRegistry, "--registry-addr", m.RegistryAddr},
		{peerLogs, "--logs-addr", m.LogsAddr}, {peerAuth, "--auth-addr", m.AuthAddr},
	}
	for _, a := range addrs {
		if a.addr == "" {
			if containsPeer(required, a.p) {
				errs = append(errs, fmt.Errorf("%s: required", a.flag))
			}
			continue
		}
		errs = append(errs, checkAddr(a.flag, a.addr))
	}
	if len(m.InternalToken) < auth.MinSecretLen {
		errs = append(errs, fmt.Errorf("--internal-token: required, at least %d characters", auth.MinSecretLen))
	}
	if m.MetricsAddr != "" {
		errs = append(errs, checkAddr("--metrics-addr", m.MetricsAddr))
	}
	if m.PprofAddr != "" {
		errs = append(errs, checkPprofAddr(m.PprofAddr))
	}
	switch {
	case m.Insecure && !m.TLS.IsZero():
		errs = append(errs, errors.New("--insecure: not with --tls-cert, --tls-key or --tls-ca"))
	case !m.Insecure && m.TLS.IsZero():
		errs = append(errs, meshtls.ErrNoTLS)
	}
	return errs
}

// checkAddr says why addr is not a host:port, naming flag; nil if it is one.
func checkAddr(flag, addr string) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("%s %q: %w", flag, addr, err)
	}
	return nil
}

// splitList splits a comma-separated flag value, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// process holds what a service command sets up around its service: the logger, tracing,
// connections to peers, the stores, the gRPC servers; close undoes them in reverse order.
type process struct {
	log     *slog.Logger
	mesh    meshConfig
	tls     *meshtls.Identity // nil with --insecure
	closers []func()
	// pprofAddr is where pprof is served, when it is.
	pprofAddr string
}

// newProcess starts logging, tracing and metrics for service. The caller must call close.
func newProcess(ctx context.Context, service string, mesh meshConfig, stderr io.Writer) (*process, error) {
	log, err := telemetry.NewLogger(telemetry.Config{Service: service, Level: mesh.LogLevel, Format: mesh.LogFormat, Output: stderr})
	if err != nil {
		return nil, err
	}
	id, err := meshtls.Resolve(mesh.TLS, mesh.Insecure)
	if err != nil {
		return nil, err
	}
	if id == nil {
		log.Warn(meshtls.InsecureWarning)
	}
	shutdownTracing, err := telemetry.StartTracing(ctx, "jobmesh-"+service)
	if err != nil {
		return nil, err
	}
	p := &process{log: log, mesh: mesh, tls: id}
	p.onClose(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdownTracing(sctx); err != nil {
			log.Warn("flushing traces", "error", err)
		}
	})
	metrics, err := telemetry.StartMetrics(ctx, "jobmesh-"+service, mesh.MetricsAddr)
	if err != nil {
		p.close()
		return nil, err
	}
	p.onClose(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := metrics.Shutdown(sctx); err != nil {
			log.Warn("stopping metrics", "error", err)
		}
	})
	if a := metrics.Addr(); a != "" {
		log.Info("serving metrics", "metrics_url", "http://"+a+"/metrics")
	}
	if err := p.servePprof(); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// onClose registers f to run at close, before everything registered earlier.
func (p *process) onClose(f func()) { p.closers = append(p.closers, f) }

// close undoes everything in reverse order.
func (p *process) close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
	p.closers = nil
}

// openStore opens the Postgres database at url in schema and applies migrations.
func (p *process) openStore(ctx context.Context, url, schema string, migrations fs.FS) (*db.DB, error) {
	store, err := db.Open(ctx, db.Config{URL: url, Schema: schema})
	if err != nil {
		return nil, fmt.Errorf("--database-url: %w", err)
	}
	p.onClose(func() { store.Close() })
	if err := store.Migrate(ctx, migrations); err != nil {
		return nil, err
	}
	return store, nil
}

// etcdClient connects to the etcd cluster, with TLS when its flags are given.
func (p *process) etcdClient(endpoints []string, etcdTLS etcdTLSFlags) (*clientv3.Client, error) {
	tc, err := etcdTLS.tlsConfig()
	if err != nil {
		return nil, err
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), TLS: tc})
	if err != nil {
		return nil, fmt.Errorf("--etcd-endpoints: %w", err)
	}
	p.onClose(func() { c.Close() })
	return c, nil
}

// dial connects (lazily) to a peer, presenting the internal token; flag names the address in
// errors. Extra options follow the defaults.
func (p *process) dial(flag, addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	return p.dialAs(flag, addr, append([]grpc.DialOption{auth.BearerToken(p.mesh.InternalToken)}, opts...)...)
}

// dialAs connects (lazily) to a peer with only the given credentials: the auth connection
// carries the tokens of the people it checks.
func (p *process) dialAs(flag, addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	c, err := grpc.NewClient(addr, append([]grpc.DialOption{p.tls.DialOption(),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler())}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, addr, err)
	}
	p.onClose(func() { c.Close() })
	return c, nil
}

// selfAddr is the address a process dials to reach its own listener ln: an unspecified host
// (0.0.0.0, ::) becomes 127.0.0.1, a name the dev CA's certificates carry (a production
// certificate of a service must name it too, docs/security.md).
func selfAddr(ln net.Listener) string {
	a, ok := ln.Addr().(*net.TCPAddr)
	if !ok || !a.IP.IsUnspecified() {
		return ln.Addr().String()
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(a.Port))
}

// listen opens the gRPC or HTTP listener named by flag.
func (p *process) listen(ctx context.Context, flag, addr string) (net.Listener, error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	p.onClose(func() { ln.Close() })
	return ln, nil
}

// guardDeps are the parts of a guard that differ between processes.
type guardDeps struct {
	// Jobs reaches a JobService (the scheduler, or the replica itself) to map jobs to groups.
	Jobs *grpc.ClientConn
	// Logs and Registry reach logsvc and the registry to map runs and executors to groups.
	Logs, Registry *grpc.ClientConn
	// Users and Audit, when set, check people's tokens and store the audit trail in-process
	// (the auth service itself); otherwise the process uses the auth service at AuthAddr.
	Users auth.Authenticator
	Audit auth.AuditSink
}

// guard builds the token check every gRPC server of the process installs.
func (p *process) guard(d guardDeps) (*auth.Guard, error) {
	resolver := auth.ClientResolver{
		Jobs: schedulerv1.NewJobServiceClient(d.Jobs), Logs: logsv1.NewLogServiceClient(d.Logs),
		Registry:  registryv1.NewRegistryServiceClient(d.Registry),
		Workflows: schedulerv1.NewWorkflowServiceClient(d.Jobs),
	}
	cfg := auth.GuardConfig{
		InternalToken: p.mesh.InternalToken, Logger: p.log,
		Users: d.Users, Audit: d.Audit, Groups: resolver, Executors: resolver,
	}
	if d.Users == nil && p.mesh.AuthAddr != "" {
		authConn, err := p.dialAs("--auth-addr", p.mesh.AuthAddr)
		if err != nil {
			return nil, err
		}
		client := authv1.NewAuthServiceClient(authConn)
		cfg.Users = auth.RemoteUsers{Client: client}
		cfg.Audit = auth.RemoteAudit{Client: client, InternalToken: p.mesh.InternalToken}
	}
	return auth.NewGuard(cfg)
}

// serve starts a guarded gRPC server on ln with the services register adds. The server's end
// (other than by grpcserver.Stop) is reported on failed.
func (p *process) serve(ln net.Listener, guard *auth.Guard, failed chan<- error, register ...func(*grpc.Server)) *grpc.Server {
	return p.serveWith(ln, guard, nil, failed, register...)
}

// serveWith is serve with extra server options.
func (p *process) serveWith(ln net.Listener, guard *auth.Guard, opts []grpc.ServerOption, failed chan<- error, register ...func(*grpc.Server)) *grpc.Server {
	g := grpcserver.New(p.log, append(append(p.tls.ServerOptions(), guard.ServerOptions()...), opts...)...)
	for _, r := range register {
		r(g)
	}
	go func() {
		if err := g.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			failed <- fmt.Errorf("grpc server: %w", err)
		}
	}()
	return g
}

// wait blocks until ctx ends (a clean stop) or a server fails.
func wait(ctx context.Context, failed <-chan error) error {
	select {
	case <-ctx.Done():
		return nil
	case err := <-failed:
		return err
	}
}

// checkWebhookURL says why u is not an http(s) URL for alarm webhooks.
func checkWebhookURL(u string) error {
	pu, err := url.Parse(u)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return fmt.Errorf("--alarm-webhook-url %q: want an http or https URL", u)
	}
	return nil
}
