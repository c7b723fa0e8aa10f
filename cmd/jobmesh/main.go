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
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jobmesh/jobmesh/internal/cli"
	"github.com/jobmesh/jobmesh/internal/devstack"
	"github.com/jobmesh/jobmesh/services/executor-agent/buildinfo"
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
  jobmesh bench SCENARIO       the load tool: rate, scale, failover or ramp (jobmesh bench -h)
  jobmesh admin reset-password --user NAME
                               set a lost password in the auth store (jobmesh admin -h)
  jobmesh login|logout|jobs|runs|executors|import ...
                               the command-line client (jobmesh help lists its commands)
  jobmesh completion bash|zsh|fish
                               print a shell completion script (jobmesh completion -h)
  jobmesh version              print the version, commit, build date and Go version (also --version)

Run "jobmesh <command> -h" for its flags. Every flag of the service commands has an environment
twin: --data-dir is JOBMESH_DATA_DIR.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Stamped by the release build (scripts/release.sh): -ldflags "-X main.version=… -X main.commit=…
// -X main.date=…". Empty ones are read from the build information Go records.
var version, commit, date string

// commandNames are jobmesh's first words, in the order of usage.
var commandNames = []string{"dev", "scheduler", "registry", "logsvc", "gateway", "health", "tls", "bench", "admin",
	"login", "logout", "jobs", "runs", "executors", "import", "completion", "version", "help"}

// subcommandNames are the second words of jobmesh's own two-word commands (the client's come
// from cli.Commands).
var subcommandNames = map[string][]string{
	"tls":        {"init"},
	"bench":      {"rate", "scale", "failover", "ramp"},
	"admin":      {"reset-password"},
	"completion": {"bash", "zsh", "fish"},
}

// isClient says whether a first word is one of the command-line client's.
func isClient(name string) bool {
	return name == "login" || name == "logout" || slices.Contains(cli.Groups, name)
}

// run runs the command in args (after the program's name) and returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	if isClient(args[0]) {
		return cli.Run(ctx, args, stdin, stdout, stderr)
	}
	err := dispatch(ctx, args, stdin, stdout, stderr)
	var unknown unknownCommand
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &unknown):
		fmt.Fprintf(stderr, "jobmesh: %v\n\n%s", err, usage)
		return 2
	}
	var bad usageError
	if errors.As(err, &bad) {
		fmt.Fprintln(stderr, "jobmesh:", err)
		return 2
	}
	fmt.Fprintln(stderr, "jobmesh:", err)
	return 1
}

// usageError is a command line that cannot be run as given (a bad flag, a missing or extra
// argument): exit code 2, as for the client commands.
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

// unknownCommand is a first word jobmesh does not know.
type unknownCommand string

func (u unknownCommand) Error() string { return fmt.Sprintf("unknown command %q", string(u)) }

// dispatch runs one of jobmesh's own commands.
func dispatch(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	rest := args[1:]
	switch args[0] {
	case "dev":
		return runDev(ctx, rest, stdout, stderr)
	case "scheduler":
		return runScheduler(ctx, rest, stdout, stderr)
	case "registry":
		return runRegistry(ctx, rest, stdout, stderr)
	case "logsvc":
		return runLogsvc(ctx, rest, stdout, stderr)
	case "gateway":
		return runGateway(ctx, rest, stdout, stderr)
	case "health":
		return runHealth(ctx, rest, stdout, stderr)
	case "tls":
		return runTLS(ctx, rest, stdout, stderr)
	case "bench":
		return runBench(ctx, rest, stdout, stderr)
	case "admin":
		return runAdmin(ctx, rest, stdin, stdout, stderr)
	case "completion":
		return runCompletion(rest, stdout, stderr)
	case "version", "--version", "-version":
		if len(rest) > 0 {
			return usageError{errors.New("version takes no arguments")}
		}
		fmt.Fprint(stdout, buildinfo.Read(version, commit, date).Format("jobmesh"))
		return nil
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage+"\n"+cli.Usage)
		return nil
	}
	return unknownCommand(args[0])
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

// describeArg, alone as a command's arguments, makes flags.parse return the command's flag set
// (a flagSetError) instead of parsing: how completion and the tests see every command's flags
// as the command declares them. No real command line holds it (arguments hold no NUL).
const describeArg = "\x00describe-flags"

// flagSetError carries a command's flag set out of the command (see describeArg).
type flagSetError struct{ fs *flag.FlagSet }

func (e flagSetError) Error() string { return e.fs.Name() + ": flags described, not parsed" }

// flagsOf returns the flags of a command path ("dev", "tls init", "jobs list", …); nil for a
// command without flags.
func flagsOf(path ...string) *flag.FlagSet {
	if isClient(path[0]) {
		return cli.FlagSet(strings.Join(path, " "))
	}
	err := dispatch(context.Background(), append(slices.Clone(path), describeArg), nil, io.Discard, io.Discard)
	var fe flagSetError
	if errors.As(err, &fe) {
		return fe.fs
	}
	return nil
}

// parse applies the environment first, so flags on the command line win.
func (f *flags) parse(args []string) error {
	if len(args) == 1 && args[0] == describeArg {
		return flagSetError{f.FlagSet}
	}
	var err error
	f.VisitAll(func(fl *flag.Flag) {
		if v, ok := os.LookupEnv(envName(fl.Name)); ok && err == nil {
			if e := fl.Value.Set(v); e != nil {
				err = fmt.Errorf("%s=%q: %w", envName(fl.Name), v, e)
			}
		}
	})
	if err != nil {
		return usageError{err}
	}
	if err := f.Parse(args); err != nil && !errors.Is(err, flag.ErrHelp) {
		return usageError{err}
	} else if err != nil {
		return err
	}
	return nil
}

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		cfg                 devstack.Config
		logLevel, logFormat string
		sessionTTL          time.Duration
	)
	f := newFlags("jobmesh dev", stderr)
	f.str(&cfg.DataDir, "data-dir", ".data/dev", "`directory` for etcd, the SQLite stores and agent logs")
	f.str(&cfg.DatabaseURL, "database-url", "", "Postgres `url`; empty means SQLite under --data-dir")
	f.str(&cfg.HTTPAddr, "http-addr", "127.0.0.1:8080", "gateway `address`: web UI and REST")
	f.str(&cfg.TraceURLTemplate, "trace-url-template", "", "link of a run's trace id in the web UI: a `url` in which {trace_id} is replaced by it (e.g. Grafana's Tempo explorer); empty shows the id only")
	f.str(&cfg.SchedulerAddr, "scheduler-addr", "127.0.0.1:9010", "scheduler gRPC `address`")
	f.str(&cfg.RegistryAddr, "registry-addr", "127.0.0.1:9011", "registry gRPC `address`")
	f.str(&cfg.LogsAddr, "logs-addr", "127.0.0.1:9012", "logsvc gRPC `address`")
	f.str(&cfg.AuthAddr, "auth-addr", "127.0.0.1:9013", "auth gRPC `address`")
	f.str(&cfg.AdminPassword, "admin-password", "", "first admin's `password` on a fresh store; empty means random, printed once")
	f.str(&cfg.InternalToken, "internal-token", "", "`secret` the services present to each other (give it to jobmesh scheduler replicas); empty means the one made at the data directory's first start (<data-dir>/internal-token)")
	f.str(&cfg.AgentAddr, "agent-addr", "127.0.0.1:9999", "local executor agent gRPC `address`")
	f.str(&cfg.EtcdAddr, "etcd-addr", "127.0.0.1:2379", "embedded etcd client `address`")
	f.str(&cfg.EtcdPeerAddr, "etcd-peer-addr", "", "embedded etcd peer `address` (it listens there, a member of one); empty picks a free loopback port")
	f.dur(&sessionTTL, "session-ttl", 2*time.Second, "scheduler leader session TTL")
	addLostAfter(f, &cfg.LostAfter)
	var alarms alarmFlags
	alarms.add(f)
	var edge edgeFlags
	edge.add(f)
	var xxl xxlFlags
	xxl.add(f)
	f.str(&logLevel, "log-level", "info", "`level` of the logs: debug, info, warn or error")
	f.str(&logFormat, "log-format", "text", "`format` of the logs: text or json")
	f.str(&cfg.MetricsAddr, "metrics-addr", "", "`address` of the Prometheus /metrics endpoint of every service (e.g. 127.0.0.1:9464); empty serves none")
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
	if err := xxl.check(); err != nil {
		return err
	}
	cfg.XxlContextPath, cfg.XxlAccessToken, cfg.XxlDeadTime = xxl.contextPath, xxl.accessToken, xxl.deadTime
	if err := checkLostAfter(cfg.LostAfter); err != nil {
		return err
	}
	cfg.TrustedProxies = trusted
	cfg.MaxBodyBytes = edge.maxBodyBytes
	if cfg.MetricsAddr != "" {
		if err := checkAddr("--metrics-addr", cfg.MetricsAddr); err != nil {
			return err
		}
	}
	if cfg.EtcdPeerAddr != "" {
		if err := checkAddr("--etcd-peer-addr", cfg.EtcdPeerAddr); err != nil {
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
	cfg.Version = buildinfo.Read(version, commit, date).Version
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
