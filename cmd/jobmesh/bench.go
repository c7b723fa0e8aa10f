package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/jobmesh/jobmesh/internal/bench"
	"github.com/jobmesh/jobmesh/services/executor-agent/meshtls"
	"github.com/jobmesh/jobmesh/services/executor-agent/telemetry"
)

const benchUsage = `jobmesh bench: the load tool. It starts a cluster of jobmesh processes (etcd, registry, logsvc,
gateway, schedulers, bench agents) on a fresh Postgres database, or drives a running one
(--target), runs a scenario and prints a Markdown report (--json writes the JSON one).

Usage:
  jobmesh bench rate [flags]       N jobs firing --rate times per second for --duration
  jobmesh bench scale [flags]      --jobs stored jobs: fires, pre-read scan time, scheduler memory
  jobmesh bench failover [flags]   rate while the leader is SIGKILLed --kills times
  jobmesh bench ramp [flags]       raise the rate step by step until lateness or loss breaks a limit

  --handler noop|http|shell|python: what each fire runs; all but noop call the bench's HTTP sink,
    where lateness and loss are measured (the side effect), not in the agent.
  --preset smoke: a short run (CI's smoke test).
Run "jobmesh bench rate -h" for the flags.
`

// runBench runs `jobmesh bench <scenario>`, and the hidden processes the bench starts:
// `jobmesh bench etcd`, `jobmesh bench agent` and `jobmesh bench sink`.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, benchUsage)
		if len(args) == 0 {
			return errors.New("bench: name a scenario")
		}
		return nil
	}
	switch args[0] {
	case "etcd":
		return runBenchEtcd(ctx, args[1:], stdout, stderr)
	case "agent":
		return runBenchAgent(ctx, args[1:], stdout, stderr)
	case "sink":
		return runBenchSink(ctx, args[1:], stdout, stderr)
	}
	return runBenchScenario(ctx, args[0], args[1:], stdout, stderr)
}

func (f *flags) integer(p *int, name string, def int, help string) {
	f.IntVar(p, name, def, help+" ("+envName(name)+")")
}

func (f *flags) float(p *float64, name string, def float64, help string) {
	f.Float64Var(p, name, def, help+" ("+envName(name)+")")
}

func (f *flags) boolean(p *bool, name string, def bool, help string) {
	f.BoolVar(p, name, def, help+" ("+envName(name)+")")
}

func runBenchScenario(ctx context.Context, scenario string, args []string, stdout, stderr io.Writer) error {
	var (
		cfg                        bench.Config
		jsonPath, mdPath, logLevel string
		target                     bool
		tg                         bench.Target
		schedAddrs                 string
		seed                       int
		shell                      bool
	)
	cfg.Scenario = scenario
	f := newFlags("jobmesh bench "+scenario, stderr)
	f.str(&cfg.Preset, "preset", "", "`name` of a preset: smoke, a short run (a few hundred fires/s for 10 s, 2 schedulers, 2 agents); flags given override it")
	f.str(&jsonPath, "json", "", "write the JSON report to this `file` (- for stdout)")
	f.str(&mdPath, "markdown", "", "write the Markdown report to this `file` too (it always goes to stdout)")
	f.str(&cfg.WorkDir, "work-dir", "", "`directory` for the processes' logs and data; empty means a temporary one, removed afterwards")
	f.boolean(&cfg.Keep, "keep", false, "keep the work directory and the database")
	f.boolean(&cfg.Insecure, "insecure", false, "run the bench's own cluster in plaintext, to measure what mutual TLS costs")
	f.str(&cfg.AdminURL, "admin-url", "", "Postgres server `url` where the run's database is created and dropped (default postgres://postgres@127.0.0.1:5432/postgres)")
	f.str(&cfg.DatabaseURL, "database-url", "", "`url` of an existing database to use as it is instead (never dropped); with --target, logsvc's database, to count stored results")
	f.integer(&cfg.Schedulers, "schedulers", 0, "`count` of scheduler replicas (default 1; failover 3)")
	f.integer(&cfg.Agents, "agents", 0, "`count` of bench agents (default 2)")
	f.dur(&cfg.SessionTTL, "session-ttl", 0, "schedulers' --session-ttl; 0 leaves the scheduler's default")
	f.integer(&cfg.Partitions, "partitions", 0, "schedulers' --partitions (`count`); 0 leaves the scheduler's default")
	f.str(&cfg.DispatchLead, "dispatch-lead", "", "schedulers' --dispatch-lead (a `duration`; 0: every fire at its time); empty leaves the scheduler's default")
	f.str(&cfg.ServiceLogLevel, "service-log-level", "", "services' --log-level `level` (default warn)")
	f.boolean(&cfg.UnsafeEtcd, "unsafe-etcd", false, "run etcd without fsync")
	f.str(&cfg.PprofDir, "pprof-dir", "", "save CPU profiles of the schedulers and logsvc over the window in this `directory`")
	f.float(&cfg.Rate, "rate", 0, "fires per second, a `rate` (rate, failover; default 1000)")
	f.dur(&cfg.Duration, "duration", 0, "measurement window (default 60s; failover: steady time after the last kill, 5s)")
	f.dur(&cfg.Warmup, "warmup", 0, "load time before the window opens (default 5s)")
	f.dur(&cfg.Interval, "interval", 0, "each job's period (default 1s; scale 10m)")
	f.float(&cfg.CronFraction, "cron-fraction", 0, "`fraction` of cron jobs, which fire on whole seconds (default 0.1; -1 for none)")
	f.str(&cfg.Route, "route", "", "jobs' route `strategy`: FIRST, ROUND, RANDOM, CONSISTENT_HASH… (default ROUND)")
	f.dur(&cfg.Hold, "hold", 0, "how long each fire holds its agent, a `duration`: the noop handler or the script waits that long, or the sink before it answers an http fire (0: at once)")
	f.str(&cfg.Handler, "handler", "", "what each fire runs, a `kind`: noop (the bench agent's handler records it), http (the agent's built-in http handler GETs the bench's sink), "+
		"shell (a bash GLUE_SHELL script GETs the sink over /dev/tcp and echoes a line), python (a python3 GLUE_PYTHON script, likewise); "+
		"with all but noop, lateness and loss are measured at the sink (default noop)")
	f.boolean(&shell, "shell", false, "same as --handler shell")
	f.integer(&cfg.CreateWorkers, "create-workers", 0, "`count` of CreateJob calls at once (default 16)")
	f.integer(&cfg.Jobs, "jobs", 0, "scale: `count` of jobs stored (default 1000000)")
	f.integer(&cfg.APIJobs, "api-jobs", 0, "scale: `count` of jobs created through the API, the rest by SQL (default 1000)")
	f.str(&cfg.PreReadMetric, "preread-metric", "", "scale: `name` of the schedulers' Prometheus histogram of pre-read scan seconds")
	f.integer(&cfg.Kills, "kills", 0, "failover: `count` of SIGKILLs of random scheduler replicas (default 20)")
	f.dur(&cfg.KillEvery, "kill-every", 0, "failover: mean time between kills, uniformly half to one and a half of it (default 2s)")
	f.dur(&cfg.RestartAfter, "restart-after", 0, "failover: how long a killed replica stays down before it starts again (default 0: at once)")
	f.integer(&seed, "seed", 0, "failover: kill schedule `seed`; 0 picks one (reported)")
	f.float(&cfg.StartRate, "start-rate", 0, "ramp: first `rate` (default 1000)")
	f.float(&cfg.StepRate, "step-rate", 0, "ramp: `rate` added per step (default 1000)")
	f.float(&cfg.MaxRate, "max-rate", 0, "ramp: last `rate` tried (default 20000)")
	f.dur(&cfg.StepDuration, "step-duration", 0, "ramp: each step's window (default 20s)")
	f.dur(&cfg.MaxP99, "max-p99", 0, "ramp: the p99 lateness a step may reach and hold (default 100ms)")
	f.integer(&cfg.MaxLost, "max-lost", 0, "ramp: `count` of lost + doubled fires a step may have and hold")
	f.dur(&cfg.StoreWait, "store-wait", 0, "how long after a window to wait for logsvc to store its results (default 60s)")
	f.boolean(&target, "target", false, "drive a running cluster: give --scheduler-addr, --registry-addr, --logs-addr, --token")
	f.str(&schedAddrs, "scheduler-addr", "", "--target: comma-separated scheduler replica gRPC `addresses`")
	f.str(&tg.RegistryAddr, "registry-addr", "", "--target: registry gRPC `address`")
	f.str(&tg.LogsAddr, "logs-addr", "", "--target: logsvc gRPC `address`")
	f.str(&tg.Token, "token", "", "--target: the internal `token`, or an admin's API token")
	f.str(&tg.TLS.Cert, "tls-cert", "", "--target: certificate `file` for mutual TLS with the cluster (with --tls-key and --tls-ca), for the driver and its agents; empty uses plaintext")
	f.str(&tg.TLS.Key, "tls-key", "", "--target: private key `file` of --tls-cert")
	f.str(&tg.TLS.CA, "tls-ca", "", "--target: CA bundle `file` of the cluster's certificates")
	f.str(&logLevel, "log-level", "info", "the bench's own progress log `level`")
	if err := f.parse(args); err != nil {
		return err
	}
	if f.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", f.Args())
	}
	if seed < 0 {
		return fmt.Errorf("--seed %d: must not be negative", seed)
	}
	cfg.Seed = uint64(seed)
	if shell {
		if cfg.Handler != "" && cfg.Handler != bench.HandlerShell {
			return fmt.Errorf("--shell: means --handler shell, but --handler is %q", cfg.Handler)
		}
		cfg.Handler = bench.HandlerShell
	}
	if target {
		tg.SchedulerAddrs = splitList(schedAddrs)
		cfg.Target = &tg
	}
	log, err := telemetry.NewLogger(telemetry.Config{Service: "bench", Level: logLevel, Output: stderr})
	if err != nil {
		return err
	}
	cfg.Log = log
	if cfg.Bin, err = os.Executable(); err != nil {
		return fmt.Errorf("find the jobmesh binary: %w", err)
	}
	rep, runErr := bench.Run(ctx, cfg)
	if rep == nil {
		return runErr
	}
	if err := rep.WriteMarkdown(stdout); err != nil {
		return err
	}
	if mdPath != "" {
		if err := writeFile(mdPath, rep.WriteMarkdown); err != nil {
			return fmt.Errorf("--markdown: %w", err)
		}
	}
	if jsonPath == "-" {
		if err := rep.WriteJSON(stdout); err != nil {
			return err
		}
	} else if jsonPath != "" {
		if err := writeFile(jsonPath, rep.WriteJSON); err != nil {
			return fmt.Errorf("--json: %w", err)
		}
	}
	if runErr == nil && len(rep.Problems) > 0 {
		runErr = fmt.Errorf("bench: %s", strings.Join(rep.Problems, "; "))
	}
	return runErr
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// runBenchEtcd is the bench's etcd process (there is no etcd binary to start).
func runBenchEtcd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg bench.EtcdConfig
	f := newFlags("jobmesh bench etcd", stderr)
	f.str(&cfg.Dir, "dir", "", "data `directory` (required)")
	f.str(&cfg.ClientAddr, "client-addr", "127.0.0.1:0", "client listen `address`; port 0 picks one")
	f.boolean(&cfg.Unsafe, "unsafe", false, "skip fsync")
	if err := f.parse(args); err != nil {
		return err
	}
	if cfg.Dir == "" {
		return errors.New("--dir: required")
	}
	if err := checkAddr("--client-addr", cfg.ClientAddr); err != nil {
		return err
	}
	return bench.RunEtcd(ctx, cfg, stdout)
}

// runBenchAgent is a bench agent process: an executor that records when each fire arrives.
func runBenchAgent(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		cfg                  bench.AgentConfig
		logLevel, allowHosts string
	)
	f := newFlags("jobmesh bench agent", stderr)
	f.str(&cfg.App, "app", "bench", "executor group app `name`")
	f.str(&cfg.Instance, "instance", "", "instance `id` (required)")
	f.str(&cfg.RegistryAddr, "registry-addr", "", "registry gRPC `address`, to register with (required)")
	f.str(&cfg.LogsAddr, "logs-addr", "", "logsvc gRPC `address` (required)")
	f.str(&cfg.GroupToken, "group-token", "", "the executor group's access `token` (required)")
	f.str(&cfg.LogDir, "log-dir", "", "`directory` of run logs and spool (required)")
	f.str(&cfg.GRPCAddr, "grpc-addr", "127.0.0.1:0", "ExecutorService `address`; port 0 picks one")
	f.str(&cfg.HTTPAddr, "http-addr", "127.0.0.1:0", "the driver's endpoint `address` (/stats, /executions); port 0 picks one")
	f.dur(&cfg.Hold, "hold", 0, "how long the bench handler holds each fire after recording it, a `duration`")
	f.str(&allowHosts, "http-allow-hosts", "", "comma-separated `hosts` the built-in http handler may call (the bench's sink); empty allows none")
	f.str(&logLevel, "log-level", "warn", "`level` of the logs: debug, info, warn or error")
	var (
		tlsFiles meshtls.Files
		insecure bool
	)
	addTLSFlags(f, &tlsFiles, &insecure)
	if err := f.parse(args); err != nil {
		return err
	}
	var err error
	if cfg.TLS, err = meshtls.Resolve(tlsFiles, insecure); err != nil {
		return err
	}
	if cfg.Hold < 0 {
		return fmt.Errorf("--hold %v: must not be negative", cfg.Hold)
	}
	cfg.HTTPAllowHosts = splitList(allowHosts)
	var errs []error
	for _, a := range []struct{ flag, addr string }{{"--grpc-addr", cfg.GRPCAddr}, {"--http-addr", cfg.HTTPAddr}, {"--logs-addr", cfg.LogsAddr}, {"--registry-addr", cfg.RegistryAddr}} {
		errs = append(errs, checkAddr(a.flag, a.addr))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	log, err := telemetry.NewLogger(telemetry.Config{Service: "bench-agent", Level: logLevel, Output: stderr})
	if err != nil {
		return err
	}
	cfg.Log = log
	return bench.RunAgent(ctx, cfg, stdout)
}

// runBenchSink is the bench's HTTP sink process: the neutral endpoint its http and script jobs
// call, which records when each request arrives.
func runBenchSink(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg bench.SinkConfig
	f := newFlags("jobmesh bench sink", stderr)
	f.str(&cfg.HTTPAddr, "http-addr", "127.0.0.1:0", "listen `address`; port 0 picks one")
	if err := f.parse(args); err != nil {
		return err
	}
	if f.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", f.Args())
	}
	if err := checkAddr("--http-addr", cfg.HTTPAddr); err != nil {
		return err
	}
	return bench.RunSink(ctx, cfg, stdout)
}
