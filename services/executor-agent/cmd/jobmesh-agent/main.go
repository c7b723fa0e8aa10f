// Command jobmesh-agent is the jobmesh executor sidecar: it serves ExecutorService for one
// executor group, runs GLUE scripts and the built-in "command" and "http" handlers (and, with
// --handler-addr, an application's handlers over HandlerService), registers itself with the
// registry and delivers results and output lines to logsvc through a durable spool, presenting its
// group's access token to both.
//
// Every gRPC hop is mutual TLS with --tls-cert, --tls-key and --tls-ca: the scheduler's calls,
// the logsvc connection and the --handler-addr connection. Plaintext needs --insecure, which is
// logged as a warning at every start.
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

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/buildinfo"
	"github.com/jobmesh/jobmesh/services/executor-agent/meshtls"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/executor-agent/telemetry"
)

// Stamped by the release build (scripts/release.sh): -ldflags "-X main.version=… -X main.commit=…
// -X main.date=…". Empty ones are read from the build information Go records.
var version, commit, date string

func main() {
	cfg, err := parseConfig(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "jobmesh-agent:", err)
		os.Exit(2)
	}
	if cfg.showVersion {
		fmt.Print(buildinfo.Read(version, commit, date).Format("jobmesh-agent"))
		return
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
	tlsID, err := meshtls.Resolve(cfg.tls, cfg.insecure)
	if err != nil {
		return err
	}
	if tlsID == nil {
		log.Warn(meshtls.InsecureWarning)
	}
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

	agent, err := sdk.New(sdk.Config{
		AppName: cfg.appName, InstanceID: cfg.instanceID, ListenAddr: cfg.listenAddr, AdvertiseAddr: cfg.advertiseAddr,
		RegistryAddr: cfg.registryAddr, LogsvcAddr: cfg.logsvcAddr, LogDir: cfg.logDir,
		AccessToken: cfg.accessToken, Version: buildinfo.Read(version, commit, date).Version, Capacity: cfg.capacity, Labels: cfg.labels,
		KillGrace: cfg.killGrace, Logger: log,
		SpoolDir: cfg.spoolDir, SpoolMaxBytes: cfg.spoolMaxBytes, MaxRunOutputBytes: cfg.maxRunOutputBytes, LogRetentionDays: cfg.logRetentionDays,
		HTTPAllowHosts: cfg.httpAllowHosts, HTTPMaxIdleConnsPerHost: cfg.httpMaxIdlePerHost, TLS: tlsID, Insecure: cfg.insecure,
	})
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if cfg.handlerAddr != "" {
		// The stats handler puts the run's trace context in the Handle call's metadata.
		conn, err := grpc.NewClient(cfg.handlerAddr, tlsID.DialOption(),
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
	// Running handlers get --stop-grace to finish; Stop logs what it had to cut short.
	sctx, cancel = context.WithTimeout(context.Background(), cfg.stopGrace)
	defer cancel()
	_ = agent.Stop(sctx)
	return nil
}

// config is the agent's command line.
type config struct {
	appName, instanceID, listenAddr, advertiseAddr string
	registryAddr                                   string
	logsvcAddr, logDir, accessToken                string
	spoolDir, handlerAddr                          string
	spoolMaxBytes, maxRunOutputBytes               int64
	logRetentionDays                               int
	httpAllowHosts                                 []string
	killGrace, stopGrace                           time.Duration
	capacity                                       int
	httpMaxIdlePerHost                             int
	labels                                         map[string]string
	logLevel, logFormat                            string
	metricsAddr                                    string
	tls                                            meshtls.Files
	insecure                                       bool
	showVersion                                    bool
}

// newFlagSet declares the agent's flags on c (--labels and --http-allow-hosts as text, parsed
// after).
func newFlagSet(c *config, labels, allowHosts *string) *flag.FlagSet {
	fs := flag.NewFlagSet("jobmesh-agent", flag.ContinueOnError)
	fs.StringVar(&c.appName, "app-name", "", "executor group app `name` to register under (required)")
	fs.StringVar(&c.instanceID, "instance-id", "", "instance `id` within the app (default hostname-pid)")
	fs.StringVar(&c.listenAddr, "listen-addr", "127.0.0.1:9999", "gRPC listen `address` of ExecutorService")
	fs.StringVar(&c.advertiseAddr, "advertise-addr", "", "`address` registered for the scheduler to dial (default: the listen address)")
	fs.StringVar(&c.registryAddr, "registry-addr", "", "gRPC `address` of the registry to register with; empty does not register")
	fs.StringVar(&c.logsvcAddr, "logsvc-addr", "", "gRPC `address` of logsvc; empty keeps results local")
	fs.StringVar(&c.logDir, "log-dir", "", "`directory` for run logs and GLUE scripts (required)")
	fs.StringVar(&c.spoolDir, "spool-dir", "", "`directory` of the durable spool of results and lines logsvc has not acknowledged (default <log-dir>/spool)")
	fs.Int64Var(&c.spoolMaxBytes, "spool-max-bytes", 128<<20, "size cap of the spool in `bytes`; beyond it lines, then results, are dropped and logged")
	fs.Int64Var(&c.maxRunOutputBytes, "max-run-output-bytes", sdk.DefaultMaxRunOutputBytes, "`bytes` of output one fire keeps; the rest is dropped after a line saying so (negative keeps everything)")
	fs.IntVar(&c.logRetentionDays, "log-retention-days", 30, "`days` of the local run log kept; negative keeps it forever")
	fs.StringVar(allowHosts, "http-allow-hosts", "", "comma-separated `hosts` the http handler may call (host, host:port, *.domain); empty allows none")
	fs.IntVar(&c.httpMaxIdlePerHost, "http-max-idle-per-host", sdk.DefaultHTTPMaxIdleConnsPerHost, "`count` of idle connections to one host the http handler keeps for its next fires")
	fs.StringVar(&c.handlerAddr, "handler-addr", "", "gRPC `address` of an application's HandlerService whose handlers the agent serves (sidecar)")
	fs.StringVar(&c.accessToken, "access-token", "", "the executor group's access `token`: the scheduler must present it, and the agent presents it to the registry and logsvc (prefer the environment variable)")
	fs.DurationVar(&c.killGrace, "kill-grace", 5*time.Second, "SIGTERM to SIGKILL grace for killed scripts (a `duration`)")
	fs.DurationVar(&c.stopGrace, "stop-grace", 10*time.Second, "how long stopping waits for running handlers (a `duration`)")
	fs.IntVar(&c.capacity, "capacity", 100, "`count` of fires the executor runs at once; a fire sent while all run is refused as busy and sent again by the scheduler")
	fs.StringVar(labels, "labels", "", "comma-separated key=value `labels` to register")
	fs.StringVar(&c.logLevel, "log-level", "info", "`level` of the logs: debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "text", "`format` of the logs: text or json")
	fs.StringVar(&c.tls.Cert, "tls-cert", "", "PEM certificate `file` of the agent, for mutual TLS on every gRPC hop (with --tls-key and --tls-ca)")
	fs.StringVar(&c.tls.Key, "tls-key", "", "PEM private key `file` of --tls-cert")
	fs.StringVar(&c.tls.CA, "tls-ca", "", "PEM CA bundle `file` the scheduler's, logsvc's and the handler's certificates must chain to")
	fs.BoolVar(&c.insecure, "insecure", false, "plaintext gRPC without certificates (warned at every start); without an --access-token anyone who reaches the agent runs code on it")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", "`address` of the Prometheus /metrics endpoint (e.g. 0.0.0.0:9464); empty serves none")
	fs.BoolVar(&c.showVersion, "version", false, "print the version, commit, build date and Go version, and exit")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: jobmesh-agent [flags]; each flag --x-y also reads JOBMESH_X_Y (except --version).")
		fs.PrintDefaults()
	}
	return fs
}

// envName is a flag's environment twin: --log-dir → JOBMESH_LOG_DIR.
func envName(flagName string) string {
	return "JOBMESH_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseConfig reads flags, then fills every flag not given from its environment twin, then
// checks the result; errors name the flag and its variable. With --version (or `version`) it
// only sets showVersion.
func parseConfig(args []string, getenv func(string) string) (config, error) {
	var c config
	if len(args) == 1 && args[0] == "version" {
		c.showVersion = true
		return c, nil
	}
	var labels, allowHosts string
	fs := newFlagSet(&c, &labels, &allowHosts)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.showVersion {
		return c, nil
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || f.Name == "version" {
			return
		}
		if v := getenv(envName(f.Name)); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("--%s (%s): invalid value %q: %w", f.Name, envName(f.Name), v, err))
			}
		}
	})

	for h := range strings.SplitSeq(allowHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			c.httpAllowHosts = append(c.httpAllowHosts, h)
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"kill-grace", c.killGrace}, {"stop-grace", c.stopGrace}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("--%s (%s): %v: must not be negative", d.name, envName(d.name), d.v))
		}
	}
	if c.spoolMaxBytes <= 0 {
		errs = append(errs, fmt.Errorf("--spool-max-bytes (%s): %d: must be positive", envName("spool-max-bytes"), c.spoolMaxBytes))
	}
	if c.maxRunOutputBytes == 0 {
		errs = append(errs, fmt.Errorf("--max-run-output-bytes (%s): 0: want a positive number of bytes, or negative to keep everything", envName("max-run-output-bytes")))
	}
	if c.httpMaxIdlePerHost <= 0 {
		errs = append(errs, fmt.Errorf("--http-max-idle-per-host (%s): %d: must be positive", envName("http-max-idle-per-host"), c.httpMaxIdlePerHost))
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
	switch {
	case (c.registryAddr != "" || c.logsvcAddr != "") && c.accessToken == "":
		errs = append(errs, fmt.Errorf("--access-token (%s): required to register or deliver results (the executor group's access token)", envName("access-token")))
	case c.accessToken == "" && !c.insecure:
		// TLS alone is no answer: every executor host holds a certificate of the mesh's CA.
		errs = append(errs, fmt.Errorf("--access-token (%s): required (the executor group's), or anyone who reaches the agent runs code on it; --insecure allows that", envName("access-token")))
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
