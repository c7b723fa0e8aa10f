package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	authv1 "github.com/jobmesh/jobmesh/gen/jobmesh/auth/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/grpcserver"
	"github.com/jobmesh/jobmesh/services/executor-agent/telemetry"
	"github.com/jobmesh/jobmesh/services/gateway/auth"
	"github.com/jobmesh/jobmesh/services/scheduler"
)

// schedulerConfig is what one `jobmesh scheduler` replica runs with.
type schedulerConfig struct {
	// GRPCAddr is where JobService and SchedulerService listen; port 0 picks a free port, and
	// the actual address is printed on stdout as "scheduler grpc <host:port>".
	GRPCAddr string
	// EtcdEndpoints is the etcd cluster the replicas campaign in. Required.
	EtcdEndpoints []string
	// DatabaseURL is the Postgres database shared by the replicas (schema "scheduler"). Required:
	// SQLite cannot be shared between processes.
	DatabaseURL string
	// RegistryAddr and LogsAddr are the gRPC addresses of the registry and logsvc. Required.
	RegistryAddr, LogsAddr string
	// InternalToken is the secret the jobmesh services present to each other (docs/auth.md):
	// this replica presents it to the registry and logsvc and accepts it from them. Required, at
	// least 32 characters.
	InternalToken string
	// AuthAddr is the auth service's gRPC address, where people's tokens are checked and the
	// audit trail is written. Empty: the replica accepts only callers with the internal token.
	AuthAddr string
	// ReplicaID names the replica in the election; empty means hostname-pid.
	ReplicaID string
	// SessionTTL is the etcd session TTL: how long a crashed leader keeps leadership.
	SessionTTL time.Duration
	// LogLevel and LogFormat shape the process's logs on stderr.
	LogLevel, LogFormat string
}

// validate names the flag of the first thing wrong.
func (c *schedulerConfig) validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.GRPCAddr); err != nil {
		errs = append(errs, fmt.Errorf("--grpc-addr %q: %w", c.GRPCAddr, err))
	}
	if len(c.EtcdEndpoints) == 0 {
		errs = append(errs, errors.New("--etcd-endpoints: required"))
	}
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("--database-url: required (a Postgres URL shared by every replica)"))
	}
	for _, a := range []struct{ flag, addr string }{{"--registry-addr", c.RegistryAddr}, {"--logs-addr", c.LogsAddr}} {
		if a.addr == "" {
			errs = append(errs, fmt.Errorf("%s: required", a.flag))
		} else if _, _, err := net.SplitHostPort(a.addr); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", a.flag, a.addr, err))
		}
	}
	if len(c.InternalToken) < auth.MinSecretLen {
		errs = append(errs, fmt.Errorf("--internal-token: required, at least %d characters", auth.MinSecretLen))
	}
	if c.AuthAddr != "" {
		if _, _, err := net.SplitHostPort(c.AuthAddr); err != nil {
			errs = append(errs, fmt.Errorf("--auth-addr %q: %w", c.AuthAddr, err))
		}
	}
	if c.SessionTTL < time.Second || c.SessionTTL%time.Second != 0 {
		errs = append(errs, fmt.Errorf("--session-ttl %v: want whole seconds, at least 1s", c.SessionTTL))
	}
	return errors.Join(errs...)
}

// parseSchedulerFlags reads the flags (and their JOBMESH_ twins) of `jobmesh scheduler`.
func parseSchedulerFlags(args []string, stderr io.Writer) (schedulerConfig, error) {
	var (
		c         schedulerConfig
		endpoints string
	)
	f := newFlags("jobmesh scheduler", stderr)
	f.str(&c.GRPCAddr, "grpc-addr", "127.0.0.1:9010", "gRPC address of JobService and SchedulerService; port 0 picks one")
	f.str(&endpoints, "etcd-endpoints", "", "comma-separated etcd endpoints (required)")
	f.str(&c.DatabaseURL, "database-url", "", "Postgres URL shared by every replica (required)")
	f.str(&c.RegistryAddr, "registry-addr", "", "registry gRPC address (required)")
	f.str(&c.LogsAddr, "logs-addr", "", "logsvc gRPC address (required)")
	f.str(&c.InternalToken, "internal-token", "", "secret the services present to each other, as given to `jobmesh dev` (required)")
	f.str(&c.AuthAddr, "auth-addr", "", "auth gRPC address for checking people's tokens; empty accepts internal callers only")
	f.str(&c.ReplicaID, "replica-id", "", "this replica's name in the election; empty means hostname-pid")
	f.dur(&c.SessionTTL, "session-ttl", 5*time.Second, "etcd session TTL: how long a crashed leader keeps leadership")
	f.str(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	f.str(&c.LogFormat, "log-format", "text", "text or json")
	if err := f.parse(args); err != nil {
		return c, err
	}
	if f.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", f.Args())
	}
	for _, e := range strings.Split(endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			c.EtcdEndpoints = append(c.EtcdEndpoints, e)
		}
	}
	return c, c.validate()
}

// runScheduler runs one scheduler replica until ctx ends: it serves the job API and campaigns
// for leadership; the elected replica schedules.
func runScheduler(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseSchedulerFlags(args, stderr)
	if err != nil {
		return err
	}
	log, err := telemetry.NewLogger(telemetry.Config{Service: "scheduler", Level: cfg.LogLevel, Format: cfg.LogFormat, Output: stderr})
	if err != nil {
		return err
	}
	shutdownTracing, err := telemetry.StartTracing(ctx, "jobmesh-scheduler")
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdownTracing(sctx); err != nil {
			log.Warn("flushing traces", "error", err)
		}
	}()

	store, err := db.Open(ctx, db.Config{URL: cfg.DatabaseURL, Schema: "scheduler"})
	if err != nil {
		return fmt.Errorf("--database-url: %w", err)
	}
	defer store.Close()
	if err := store.Migrate(ctx, scheduler.MigrationsFS()); err != nil {
		return err
	}

	etcd, err := clientv3.New(clientv3.Config{Endpoints: cfg.EtcdEndpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("--etcd-endpoints: %w", err)
	}
	defer etcd.Close()

	// Calls to the other services present the internal token; the auth connection carries the
	// tokens of the people it checks instead.
	dial := func(flag, addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
		c, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStatsHandler(otelgrpc.NewClientHandler())}, opts...)...)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", flag, addr, err)
		}
		return c, nil
	}
	internal := auth.BearerToken(cfg.InternalToken)
	regConn, err := dial("--registry-addr", cfg.RegistryAddr, internal)
	if err != nil {
		return err
	}
	defer regConn.Close()
	logsConn, err := dial("--logs-addr", cfg.LogsAddr, internal)
	if err != nil {
		return err
	}
	defer logsConn.Close()

	sched, err := scheduler.New(scheduler.Config{ReplicaID: cfg.ReplicaID, SessionTTL: cfg.SessionTTL, Logger: log}, scheduler.Deps{
		Store: store, Etcd: etcd, Registry: registryv1.NewRegistryServiceClient(regConn),
		Ingest: logsv1.NewIngestServiceClient(logsConn), Logs: logsv1.NewLogServiceClient(logsConn),
	})
	if err != nil {
		return err
	}

	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("--grpc-addr: %w", err)
	}
	// The guard looks jobs up on this replica itself, over loopback with the internal token.
	selfConn, err := dial("--grpc-addr", ln.Addr().String(), internal)
	if err != nil {
		ln.Close()
		return err
	}
	defer selfConn.Close()
	gcfg := auth.GuardConfig{
		InternalToken: cfg.InternalToken, Logger: log,
		Groups: auth.ClientResolver{
			Jobs: schedulerv1.NewJobServiceClient(selfConn), Logs: logsv1.NewLogServiceClient(logsConn),
			Registry: registryv1.NewRegistryServiceClient(regConn),
		},
	}
	if cfg.AuthAddr != "" {
		authConn, err := dial("--auth-addr", cfg.AuthAddr)
		if err != nil {
			ln.Close()
			return err
		}
		defer authConn.Close()
		authClient := authv1.NewAuthServiceClient(authConn)
		gcfg.Users = auth.RemoteUsers{Client: authClient}
		gcfg.Audit = auth.RemoteAudit{Client: authClient, InternalToken: cfg.InternalToken}
	}
	guard, err := auth.NewGuard(gcfg)
	if err != nil {
		ln.Close()
		return err
	}
	g := grpcserver.New(log, guard.ServerOptions()...)
	sched.Register(g)
	served := make(chan error, 1)
	go func() { served <- g.Serve(ln) }() // Serve closes ln when it returns

	if err := sched.Start(ctx); err != nil {
		g.Stop()
		<-served
		return err
	}
	fmt.Fprintf(stdout, "scheduler grpc %s\n", ln.Addr())
	log.Info("scheduler replica up", "grpc_addr", ln.Addr().String(), "replica_id", cfg.ReplicaID)

	select {
	case <-ctx.Done():
		err = nil
	case err = <-served:
		err = fmt.Errorf("grpc server: %w", err)
	}
	// Stop accepting calls, then resign and drain; the deferred closes follow.
	stopGRPC(g, 5*time.Second, log)
	sched.Stop()
	log.Info("scheduler replica stopped")
	return err
}

// stopGRPC stops g gracefully, cutting calls still running after grace.
func stopGRPC(g *grpc.Server, grace time.Duration, log *slog.Logger) {
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		log.Warn("grpc calls still running after the grace period; cutting them")
		g.Stop()
		<-done
	}
}
