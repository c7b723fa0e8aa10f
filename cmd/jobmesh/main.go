// Command jobmesh runs jobmesh. `jobmesh dev` starts every service in one process on an embedded
// etcd and an embedded store; `jobmesh scheduler`, `jobmesh registry`, `jobmesh logsvc` and
// `jobmesh gateway` run one service each, for a cluster on a shared etcd and Postgres (executor
// agents are the separate jobmesh-agent binary). The client commands talk to a running jobmesh.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jobmesh/jobmesh/internal/cli"
	"github.com/jobmesh/jobmesh/internal/devstack"
	"github.com/jobmesh/jobmesh/services/executor-agent/telemetry"
	"github.com/jobmesh/jobmesh/services/scheduler"
)

const usage = `jobmesh: a distributed job scheduler.

Usage:
  jobmesh dev [flags]          run every service in one process (embedded etcd and store)
  jobmesh scheduler [flags]    run one scheduler replica (shared etcd and Postgres)
  jobmesh registry [flags]     run the registry (executor groups, the live executor view)
  jobmesh logsvc [flags]       run logsvc (runs, results, log lines, reports, alarms)
  jobmesh gateway [flags]      run the gateway (web UI, REST) and the auth service
  jobmesh health TARGET...     exit 0 if every gRPC address or http(s) URL is healthy
  jobmesh tls init [flags]     make a private CA and certificates for a cluster (jobmesh tls init -h)
  jobmesh bench <scenario>     the load tool: rate, scale, failover or ramp (jobmesh bench -h)
  jobmesh admin reset-password --user NAME
                               set a lost password in the auth store (jobmesh admin -h)
  jobmesh login|logout|jobs|runs|executors ...
                               the command-line client (jobmesh help lists its commands)

Run "jobmesh <command> -h" for its flags. Every flag has an environment twin: --data-dir is JOBMESH_DATA_DIR.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "dev":
		err = runDev(ctx, os.Args[2:], os.Stdout, os.Stderr)
	case "scheduler":
		err = runScheduler(ctx, os.Args[2:], os.Stdout, os.Stderr)
	case "registry":
		err = runRegistry(ctx, os.Args[2:], os.Stdout, os.Stderr)
	case "logsvc":
		err = runLogsvc(ctx, os.Args[2:], os.Stdout, os.Stderr)
	case "gateway":
		err = runGateway(ctx, os.Args[2:], os.Stdout, os.Stderr)
	case "health":
		err = runHealth(ctx, os.Args[2:], os.Stdout, os.Stderr)
	case "tls":
		err = runTLS(ctx, os.Args[2:], os.Stdout, os.Stderr)
	case "bench":
		err = runBench(ctx, os.Args[2:], os.Stdout, os.Stderr)
	case "admin":
		err = runAdmin(ctx, os.Args[2:], os.Stdin, os.Stdout, os.Stderr)
	case "login", "logout", "jobs", "runs", "executors":
		os.Exit(cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	case "-h", "--help", "help":
		fmt.Print(usage + "\n" + cli.Usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "jobmesh: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "jobmesh:", err)
		os.Exit(1)
	}
}

// flags is a FlagSet whose every flag also reads JOBMESH_<NAME> from the environment.
type flags struct {
	*flag.FlagSet
	env map[string]string
}

func newFlags(name string, stderr io.Writer) *flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return &flags{FlagSet: fs, env: map[string]string{}}
}

func envName(flagName string) string {
	return "JOBMESH_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func (f *flags) str(p *string, name, def, help string) {
	f.StringVar(p, name, def, help+" ("+envName(name)+")")
}

func (f *flags) int64(p *int64, name string, def int64, help string) {
	f.Int64Var(p, name, def, help+" ("+envName(name)+")")
}

func (f *flags) dur(p *time.Duration, name string, def time.Duration, help string) {
	f.DurationVar(p, name, def, help+" ("+envName(name)+")")
}

// parse applies the environment first, so flags on the command line win.
func (f *flags) parse(args []string) error {
	var err error
	f.VisitAll(func(fl *flag.Flag) {
		if v, ok := os.LookupEnv(envName(fl.Name)); ok && err == nil {
			if e := fl.Value.Set(v); e != nil {
				err = fmt.Errorf("%s=%q: %w", envName(fl.Name), v, e)
			}
		}
	})
	if err != nil {
		return err
	}
	return f.Parse(args)
}

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		cfg                 devstack.Config
		logLevel, logFormat string
		sessionTTL          time.Duration
	)
	f := newFlags("jobmesh dev", stderr)
	f.str(&cfg.DataDir, "data-dir", ".data/dev", "directory for etcd, the SQLite stores and agent logs")
	f.str(&cfg.DatabaseURL, "database-url", "", "Postgres URL; empty means SQLite under --data-dir")
	f.str(&cfg.HTTPAddr, "http-addr", "127.0.0.1:8080", "gateway address: web UI and REST")
	f.str(&cfg.TraceURLTemplate, "trace-url-template", "", `link of a run's trace id in the web UI, "{trace_id}" replaced by it (e.g. Grafana's Tempo explorer); empty shows the id only`)
	f.str(&cfg.SchedulerAddr, "scheduler-addr", "127.0.0.1:9010", "scheduler gRPC address")
	f.str(&cfg.RegistryAddr, "registry-addr", "127.0.0.1:9011", "registry gRPC address")
	f.str(&cfg.LogsAddr, "logs-addr", "127.0.0.1:9012", "logsvc gRPC address")
	f.str(&cfg.AuthAddr, "auth-addr", "127.0.0.1:9013", "auth gRPC address")
	f.str(&cfg.AdminPassword, "admin-password", "", "first admin's password on a fresh store; empty means random, printed once")
	f.str(&cfg.InternalToken, "internal-token", "", "secret the services present to each other (give it to `jobmesh scheduler` replicas); empty means the one made at the data directory's first start (<data-dir>/internal-token)")
	f.str(&cfg.AgentAddr, "agent-addr", "127.0.0.1:9999", "local executor agent gRPC address")
	f.str(&cfg.EtcdAddr, "etcd-addr", "127.0.0.1:2379", "embedded etcd client address")
	f.dur(&sessionTTL, "session-ttl", 2*time.Second, "scheduler leader session TTL")
	var alarms alarmFlags
	alarms.add(f)
	var edge edgeFlags
	edge.add(f)
	f.str(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.str(&logFormat, "log-format", "text", "text or json")
	f.str(&cfg.MetricsAddr, "metrics-addr", "", "address of the Prometheus /metrics endpoint of every service (e.g. 127.0.0.1:9464); empty serves none")
	if err := f.parse(args); err != nil {
		return err
	}
	if f.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", f.Args())
	}
	trusted, err := edge.check()
	if err != nil {
		return err
	}
	cfg.TrustedProxies = trusted
	cfg.MaxBodyBytes = edge.maxBodyBytes
	if cfg.MetricsAddr != "" {
		if err := checkAddr("--metrics-addr", cfg.MetricsAddr); err != nil {
			return err
		}
	}
	log, err := telemetry.NewLogger(telemetry.Config{Level: logLevel, Format: logFormat, Output: stderr})
	if err != nil {
		return err
	}
	shutdownTracing, err := telemetry.StartTracing(ctx, "jobmesh")
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdownTracing(sctx)
	}()
	cfg.Logger = log
	if cfg.AlarmChannels, err = alarms.channels(); err != nil {
		return err
	}
	cfg.Scheduler = scheduler.Config{SessionTTL: sessionTTL}
	st, err := devstack.Start(ctx, cfg)
	if err != nil {
		return err
	}
	st.PrintWhere(stdout, cfg)
	<-ctx.Done()
	fmt.Fprintln(stdout, "stopping jobmesh dev...")
	st.Stop()
	fmt.Fprintln(stdout, "stopped")
	return nil
}
