// Command jobmesh-agent is the jobmesh executor sidecar: it serves ExecutorService for one
// executor group, runs GLUE scripts and the built-in "command" and "http" handlers (and, with
// --handler-addr, an application's handlers over HandlerService), registers itself in etcd and
// delivers results and output lines to logsvc through a durable spool.
//
// Every flag has an environment twin: --app-name is JOBMESH_APP_NAME, and so on. A flag given on
// the command line wins over its environment variable.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/executor-agent/telemetry"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	cfg, err := parseConfig(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "jobmesh-agent:", err)
		os.Exit(2)
	}
	log, err := telemetry.NewLogger(telemetry.Config{Service: "jobmesh-agent", Level: cfg.logLevel, Format: cfg.logFormat})
	if err != nil {
		fmt.Fprintln(os.Stderr, "jobmesh-agent:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, cfg, log)
	stop()
	if err != nil {
		log.Error("jobmesh-agent failed", "error", err)
		os.Exit(1)
	}
}

// startTimeout bounds start-up: listening, connecting and the first registration.
const startTimeout = 30 * time.Second

// run starts the agent and serves until ctx ends, then stops it in order.
func run(ctx context.Context, cfg config, log *slog.Logger) error {
	shutdownTracing, err := telemetry.StartTracing(ctx, "jobmesh-agent")
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
	metrics, err := telemetry.StartMetrics(ctx, "jobmesh-agent", cfg.metricsAddr)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := metrics.Shutdown(sctx); err != nil {
			log.Warn("stopping metrics", "error", err)
		}
	}()
	if a := metrics.Addr(); a != "" {
		log.Info("serving metrics", "metrics_url", "http://"+a+"/metrics")
	}

	var etcd *clientv3.Client
	if len(cfg.etcdEndpoints) > 0 {
		etcd, err = clientv3.New(clientv3.Config{Endpoints: cfg.etcdEndpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return fmt.Errorf("--etcd-endpoints: %w", err)
		}
		defer etcd.Close()
	}

	agent, err := sdk.New(sdk.Config{
		AppName: cfg.appName, InstanceID: cfg.instanceID, ListenAddr: cfg.listenAddr, AdvertiseAddr: cfg.advertiseAddr,
		Etcd: etcd, RegistrationTTL: cfg.registrationTTL, LogsvcAddr: cfg.logsvcAddr, LogDir: cfg.logDir,
		AccessToken: cfg.accessToken, Version: version, Capacity: cfg.capacity, Labels: cfg.labels,
		KillGrace: cfg.killGrace, StopGrace: cfg.stopGrace, Logger: log,
		SpoolDir: cfg.spoolDir, SpoolMaxBytes: cfg.spoolMaxBytes, MaxRunOutputBytes: cfg.maxRunOutputBytes, LogRetentionDays: cfg.logRetentionDays,
		HTTPAllowHosts: cfg.httpAllowHosts, LogsvcToken: cfg.logsvcToken,
	})
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if cfg.handlerAddr != "" {
		// The stats handler puts the run's trace context in the Handle call's metadata.
		conn, err := grpc.NewClient(cfg.handlerAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithStatsHandler(otelgrpc.NewClientHandler()))
		if err != nil {
			return fmt.Errorf("--handler-addr: %w", err)
		}
		defer conn.Close()
		names, err := agent.ForwardHandlers(sctx, executorv1.NewHandlerServiceClient(conn))
		if err != nil {
			return fmt.Errorf("--handler-addr %s: %w", cfg.handlerAddr, err)
		}
		log.Info("forwarding the application's handlers", "handler_addr", cfg.handlerAddr, "handlers", names)
	}
	err = agent.Start(sctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil { // a stop signal during start-up: Start undid itself; that is a clean stop
			log.Info("signal received during start-up; stopped")
			return nil
		}
		return err
	}
	<-ctx.Done()
	log.Info("signal received; stopping")
	agent.Stop()
	return nil
}

// config is the agent's command line.
type config struct {
	appName, instanceID, listenAddr, advertiseAddr string
	etcdEndpoints                                  []string
	logsvcAddr, logDir, accessToken                string
	spoolDir, handlerAddr, logsvcToken             string
	spoolMaxBytes, maxRunOutputBytes               int64
	logRetentionDays                               int
	httpAllowHosts                                 []string
	registrationTTL, killGrace, stopGrace          time.Duration
	capacity                                       int
	labels                                         map[string]string
	logLevel, logFormat                            string
	metricsAddr                                    string
}

// envName is a flag's environment twin: --log-dir → JOBMESH_LOG_DIR.
func envName(flagName string) string {
	return "JOBMESH_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseConfig reads flags, then fills every flag not given from its environment twin, then
// checks the result; errors name the flag and its variable.
func parseConfig(args []string, getenv func(string) string) (config, error) {
	var c config
	var endpoints, labels, allowHosts string
	fs := flag.NewFlagSet("jobmesh-agent", flag.ContinueOnError)
	fs.StringVar(&c.appName, "app-name", "", "executor group app name to register under (required)")
	fs.StringVar(&c.instanceID, "instance-id", "", "instance id within the app (default hostname-pid)")
	fs.StringVar(&c.listenAddr, "listen-addr", "127.0.0.1:9999", "gRPC listen address of ExecutorService")
	fs.StringVar(&c.advertiseAddr, "advertise-addr", "", "address registered for the scheduler to dial (default: the listen address)")
	fs.StringVar(&endpoints, "etcd-endpoints", "", "comma-separated etcd endpoints; empty disables registration")
	fs.StringVar(&c.logsvcAddr, "logsvc-addr", "", "gRPC address of logsvc; empty keeps results local")
	fs.StringVar(&c.logDir, "log-dir", "", "directory for run logs and GLUE scripts (required)")
	fs.StringVar(&c.spoolDir, "spool-dir", "", "durable spool of results and lines logsvc has not acknowledged (default <log-dir>/spool)")
	fs.Int64Var(&c.spoolMaxBytes, "spool-max-bytes", 128<<20, "size cap of the spool; beyond it lines, then results, are dropped and logged")
	fs.Int64Var(&c.maxRunOutputBytes, "max-run-output-bytes", sdk.DefaultMaxRunOutputBytes, "output one fire keeps; the rest is dropped after a line saying so (negative keeps everything)")
	fs.IntVar(&c.logRetentionDays, "log-retention-days", 30, "days of local run log files kept; negative keeps them forever")
	fs.StringVar(&allowHosts, "http-allow-hosts", "", "comma-separated hosts the http handler may call (host, host:port, *.domain); empty allows none")
	fs.StringVar(&c.handlerAddr, "handler-addr", "", "gRPC address of an application's HandlerService whose handlers the agent serves (sidecar)")
	fs.StringVar(&c.logsvcToken, "logsvc-token", "", "token presented to logsvc (prefer the environment variable)")
	fs.StringVar(&c.accessToken, "access-token", "", "token the scheduler must present (prefer the environment variable)")
	fs.DurationVar(&c.registrationTTL, "registration-ttl", 10*time.Second, "etcd lease TTL of the registration")
	fs.DurationVar(&c.killGrace, "kill-grace", 5*time.Second, "SIGTERM to SIGKILL grace for killed scripts")
	fs.DurationVar(&c.stopGrace, "stop-grace", 10*time.Second, "how long stopping waits for running handlers")
	fs.IntVar(&c.capacity, "capacity", 100, "fires the executor advertises it runs at once")
	fs.StringVar(&labels, "labels", "", "comma-separated key=value labels to register")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "text", "text or json")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", "address of the Prometheus /metrics endpoint (e.g. 0.0.0.0:9464); empty serves none")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: jobmesh-agent [flags]; each flag --x-y also reads JOBMESH_X_Y.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		if v := getenv(envName(f.Name)); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("--%s (%s): invalid value %q: %w", f.Name, envName(f.Name), v, err))
			}
		}
	})

	for e := range strings.SplitSeq(endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			c.etcdEndpoints = append(c.etcdEndpoints, e)
		}
	}
	for h := range strings.SplitSeq(allowHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			c.httpAllowHosts = append(c.httpAllowHosts, h)
		}
	}
	if c.spoolMaxBytes <= 0 {
		errs = append(errs, fmt.Errorf("--spool-max-bytes (%s): %d: must be positive", envName("spool-max-bytes"), c.spoolMaxBytes))
	}
	if c.maxRunOutputBytes == 0 {
		errs = append(errs, fmt.Errorf("--max-run-output-bytes (%s): 0: want a positive number of bytes, or negative to keep everything", envName("max-run-output-bytes")))
	}
	if c.logRetentionDays == 0 {
		errs = append(errs, fmt.Errorf("--log-retention-days (%s): 0: want a positive number of days, or negative to keep forever", envName("log-retention-days")))
	}
	for kv := range strings.SplitSeq(labels, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			errs = append(errs, fmt.Errorf("--labels (%s): %q is not key=value", envName("labels"), kv))
			continue
		}
		if c.labels == nil {
			c.labels = map[string]string{}
		}
		c.labels[k] = v
	}
	if c.appName == "" {
		errs = append(errs, fmt.Errorf("--app-name (%s): required", envName("app-name")))
	}
	if c.logDir == "" {
		errs = append(errs, fmt.Errorf("--log-dir (%s): required", envName("log-dir")))
	}
	if c.registrationTTL < time.Second {
		errs = append(errs, fmt.Errorf("--registration-ttl (%s): %v is below 1s", envName("registration-ttl"), c.registrationTTL))
	}
	if _, err := telemetry.ParseLevel(c.logLevel); err != nil {
		errs = append(errs, fmt.Errorf("--log-level (%s): %w", envName("log-level"), err))
	}
	if c.metricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.metricsAddr); err != nil {
			errs = append(errs, fmt.Errorf("--metrics-addr (%s): %q: %w", envName("metrics-addr"), c.metricsAddr, err))
		}
	}
	if c.logFormat != "text" && c.logFormat != "json" {
		errs = append(errs, fmt.Errorf("--log-format (%s): %q: want text or json", envName("log-format"), c.logFormat))
	}
	return c, errors.Join(errs...)
}
