package bench

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"

	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/meshtls"
	"github.com/jobmesh/jobmesh/services/scheduler"
)

// Scenarios are the scenario names Run knows.
var Scenarios = []string{"rate", "scale", "failover", "ramp"}

// Config is one bench run. Zero values mean the defaults, which depend on the scenario and the
// preset (see withDefaults).
type Config struct {
	// Scenario is rate, scale, failover or ramp.
	Scenario string
	// Preset fills the fields left zero with a named set: "smoke" is a short run for CI (a few
	// hundred fires per second for about 10 s on 2 schedulers and 2 agents).
	Preset string

	// Bin is the jobmesh binary that runs every process. Required.
	Bin string
	// WorkDir holds the processes' logs, etcd's data and the agents' run logs. Empty means a new
	// temporary directory, removed at the end unless Keep.
	WorkDir string
	// Keep keeps the work directory and the database.
	Keep bool
	// Insecure runs the bench's own cluster in plaintext (every process with --insecure), to
	// measure what mutual TLS costs; by default it runs on mutual TLS, as a cluster should.
	Insecure bool
	// AdminURL is the Postgres server where the run's database is created (and dropped after the
	// run unless Keep). Default postgres://postgres@127.0.0.1:5432/postgres.
	AdminURL string
	// DatabaseURL, when set, is an existing database to use as it is (never dropped).
	DatabaseURL string

	// Target, when set, drives a running cluster instead of starting one: the bench starts only
	// its agents. The failover and scale scenarios need a cluster of their own.
	Target *Target

	// Schedulers is how many scheduler replicas to start. Default 1 (failover: 3).
	Schedulers int
	// Agents is how many bench agents to start. Default 2.
	Agents int
	// SessionTTL is the schedulers' --session-ttl; 0 leaves the scheduler's default.
	SessionTTL time.Duration
	// Partitions is the schedulers' --partitions; 0 leaves the scheduler's default.
	Partitions int
	// DispatchLead is the schedulers' --dispatch-lead ("0" sends every fire at its time); empty
	// leaves the scheduler's default.
	DispatchLead string
	// ServiceLogLevel is the services' --log-level. Default warn.
	ServiceLogLevel string
	// UnsafeEtcd runs etcd without fsync (faster, for smoke runs).
	UnsafeEtcd bool
	// PprofDir, when set, makes every service serve net/http/pprof and saves a CPU profile of
	// each scheduler replica and of logsvc over the measurement window there.
	PprofDir string

	// Rate is the fires per second the jobs add up to (rate, failover). Default 1000.
	Rate float64
	// Duration is the measurement window (rate, scale; failover's steady time after the last
	// kill). Default 60s (failover 5s).
	Duration time.Duration
	// Warmup is how long the load runs before the window opens. Default 5s.
	Warmup time.Duration
	// Interval is each job's period: FIX_RATE jobs fire every Interval, cron jobs on
	// "0/<Interval> * * * * ?" (whole seconds dividing 60). Default 1s (scale: 10m).
	Interval time.Duration
	// CronFraction is the share of cron jobs; their fires land on whole seconds, all at once.
	// Default 0.1; negative means none.
	CronFraction float64
	// Route is the jobs' route strategy (FIRST, ROUND, RANDOM, CONSISTENT_HASH, …). Default ROUND.
	Route string
	// Hold is how long each fire holds its executor: the bench handler sleeps it after recording
	// the fire, a script after its request, and the sink holds an http job's answer that long
	// (0: at once, and the bench measures delivery alone).
	Hold time.Duration
	// Handler is what each fire runs (HandlerNoop, HandlerHTTP, HandlerShell, HandlerPython),
	// and so where it is measured: noop, the bench agent's own handler, records the fire as it
	// enters; the others make an HTTP request to the bench's sink, a process of its own that
	// records its arrival (lateness and loss measured at the side effect). Default noop.
	Handler string
	// CreateWorkers is how many CreateJob calls run at once. Default 16.
	CreateWorkers int

	// Jobs is how many jobs scale stores. Default 1,000,000.
	Jobs int
	// APIJobs is how many of scale's jobs are created through the API (to measure its rate);
	// the rest are inserted with SQL. Default 1000.
	APIJobs int
	// PreReadMetric is the scheduler's Prometheus histogram of pre-read scan durations.
	PreReadMetric string

	// Kills is how many times failover SIGKILLs a random replica (with a scheduler without
	// partitions, the leader). Default 20.
	Kills int
	// KillEvery is the mean time from every partition being led to the next kill: uniformly
	// KillEvery/2 to 3·KillEvery/2. Default 2s.
	KillEvery time.Duration
	// RestartAfter is how long a killed replica stays down before it starts again (on the same
	// address): 0 restarts it at once, as a supervisor does; longer, the replica's partitions
	// are taken over while it is down. Default 0.
	RestartAfter time.Duration
	// Seed seeds the kill schedule; 0 picks one (reported).
	Seed uint64

	// StartRate, StepRate and MaxRate shape ramp: rates StartRate, StartRate+StepRate, … up to
	// MaxRate. Defaults 1000, 1000, 20000.
	StartRate, StepRate, MaxRate float64
	// StepDuration is each ramp step's window. Default 20s.
	StepDuration time.Duration
	// MaxP99 is the p99 lateness a ramp step may reach and still hold. Default 100ms.
	MaxP99 time.Duration
	// MaxLost is how many lost (or doubled) fires a ramp step may have and still hold. Default 0.
	MaxLost int

	// StoreWait bounds the wait, after a window, for logsvc to store the results of its fires
	// (results still missing then are reported as not stored). Default 60s.
	StoreWait time.Duration

	// Log receives progress; nil discards it.
	Log *slog.Logger
	// Stdout receives the processes' "ready" lines when nothing else does; nil discards.
	Stdout io.Writer
}

// Target is a running cluster to drive.
type Target struct {
	// SchedulerAddrs are the scheduler replicas' gRPC addresses (at least one).
	SchedulerAddrs []string
	// LogsAddr is logsvc's gRPC address, where the bench agents deliver results.
	LogsAddr string
	// Token is presented on every call to the scheduler and registry: the internal token, or an
	// API token of an admin.
	Token string
	// RegistryAddr is the registry's gRPC address, to create the bench's executor group.
	RegistryAddr string
	// TLS is the certificate the driver and its agents present to the cluster and the CA they
	// verify it against; zero talks plaintext (a cluster run with --insecure).
	TLS meshtls.Files
}

// withDefaults fills zero fields from the preset, then from the scenario's defaults.
func (c Config) withDefaults() Config {
	if c.Preset == "smoke" {
		setF(&c.Rate, 300)
		setD(&c.Duration, 10*time.Second)
		setD(&c.Warmup, 2*time.Second)
		setI(&c.Schedulers, 2)
		setI(&c.Agents, 2)
		setI(&c.Kills, 3)
		setI(&c.Jobs, 20_000)
		setI(&c.APIJobs, 200)
		setF(&c.StartRate, 200)
		setF(&c.StepRate, 200)
		setF(&c.MaxRate, 400)
		setD(&c.StepDuration, 5*time.Second)
		c.UnsafeEtcd = true
	}
	switch c.Scenario {
	case "failover":
		setI(&c.Schedulers, 3)
		setD(&c.Duration, 5*time.Second)
	case "scale":
		setD(&c.Interval, 10*time.Minute)
		setF(&c.CronFraction, -1) // jobs every few minutes: FIX_RATE only
	}
	setI(&c.Schedulers, 1)
	setI(&c.Agents, 2)
	setF(&c.Rate, 1000)
	setD(&c.Duration, 60*time.Second)
	setD(&c.Warmup, 5*time.Second)
	setD(&c.Interval, time.Second)
	setF(&c.CronFraction, 0.1)
	if c.CronFraction < 0 {
		c.CronFraction = 0
	}
	if c.Route == "" {
		c.Route = "ROUND"
	}
	if c.Handler == "" {
		c.Handler = HandlerNoop
	}
	setI(&c.CreateWorkers, 16)
	setI(&c.Jobs, 1_000_000)
	setI(&c.APIJobs, 1000)
	if c.PreReadMetric == "" {
		c.PreReadMetric = "jobmesh_scheduler_preread_duration_seconds"
	}
	setI(&c.Kills, 20)
	setD(&c.KillEvery, 2*time.Second)
	setF(&c.StartRate, 1000)
	setF(&c.StepRate, 1000)
	setF(&c.MaxRate, 20_000)
	setD(&c.StepDuration, 20*time.Second)
	setD(&c.MaxP99, 100*time.Millisecond)
	setD(&c.StoreWait, 60*time.Second)
	if c.ServiceLogLevel == "" {
		c.ServiceLogLevel = "warn"
	}
	if c.AdminURL == "" {
		c.AdminURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Stdout == nil {
		c.Stdout = io.Discard
	}
	return c
}

func setF(p *float64, v float64) {
	if *p == 0 {
		*p = v
	}
}

func setI(p *int, v int) {
	if *p == 0 {
		*p = v
	}
}

func setD(p *time.Duration, v time.Duration) {
	if *p == 0 {
		*p = v
	}
}

// validate checks a defaulted config; errors name the flag.
func (c Config) validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--"+flag+" "+format, args...))
	}
	known := false
	for _, s := range Scenarios {
		known = known || s == c.Scenario
	}
	if !known {
		errs = append(errs, fmt.Errorf("scenario %q: want one of %s", c.Scenario, strings.Join(Scenarios, ", ")))
	}
	if c.Preset != "" && c.Preset != "smoke" {
		bad("preset", "%q: want smoke or nothing", c.Preset)
	}
	if c.Bin == "" {
		errs = append(errs, errors.New("bin: the jobmesh binary is required"))
	}
	if c.Schedulers < 1 || c.Schedulers > 9 {
		bad("schedulers", "%d: want 1 to 9", c.Schedulers)
	}
	if c.Agents < 1 || c.Agents > 64 {
		bad("agents", "%d: want 1 to 64", c.Agents)
	}
	if c.SessionTTL != 0 && (c.SessionTTL < time.Second || c.SessionTTL%time.Second != 0) {
		bad("session-ttl", "%v: want whole seconds, at least 1s", c.SessionTTL)
	}
	if c.Partitions < 0 || c.Partitions > 4096 {
		bad("partitions", "%d: want 1 to 4096 (0: the scheduler's default)", c.Partitions)
	}
	if c.DispatchLead != "" {
		if d, err := time.ParseDuration(c.DispatchLead); err != nil || d < 0 || d > 4*time.Second { // as `jobmesh scheduler` checks
			bad("dispatch-lead", "%q: want a duration from 0 (off) to 4s", c.DispatchLead)
		}
	}
	if c.Rate <= 0 || math.IsInf(c.Rate, 0) || math.IsNaN(c.Rate) {
		bad("rate", "%v: want a positive number of fires per second", c.Rate)
	}
	if c.Duration < time.Second {
		bad("duration", "%v: want at least 1s", c.Duration)
	}
	if c.Warmup < 0 {
		bad("warmup", "%v: must not be negative", c.Warmup)
	}
	if c.Interval < 100*time.Millisecond || c.Interval%time.Millisecond != 0 {
		bad("interval", "%v: want whole milliseconds, at least 100ms (FIX_RATE's minimum)", c.Interval)
	}
	if c.CronFraction > 1 {
		bad("cron-fraction", "%v: want 0 to 1", c.CronFraction)
	}
	if c.CronFraction > 0 && (c.Interval%time.Second != 0 || 60%int(c.Interval/time.Second) != 0) {
		bad("interval", "%v: cron jobs fire every interval, so it must be whole seconds dividing 60 (or --cron-fraction -1)", c.Interval)
	}
	if _, ok := schedulerv1.RouteStrategy_value["ROUTE_STRATEGY_"+strings.ToUpper(c.Route)]; !ok || strings.EqualFold(c.Route, "UNSPECIFIED") {
		bad("route", "%q: want a route strategy such as FIRST, ROUND, RANDOM or CONSISTENT_HASH", c.Route)
	}
	if c.Hold < 0 {
		bad("hold", "%v: must not be negative", c.Hold)
	}
	if !slices.Contains(Handlers, c.Handler) {
		bad("handler", "%q: want one of %s", c.Handler, strings.Join(Handlers, ", "))
	}
	if c.CreateWorkers < 1 {
		bad("create-workers", "%d: want at least 1", c.CreateWorkers)
	}
	if c.Jobs < 1 {
		bad("jobs", "%d: want at least 1", c.Jobs)
	}
	if c.APIJobs < 0 || c.APIJobs > c.Jobs {
		bad("api-jobs", "%d: want 0 to --jobs", c.APIJobs)
	}
	if c.Kills < 0 {
		bad("kills", "%d: must not be negative", c.Kills)
	}
	if c.KillEvery < 200*time.Millisecond {
		bad("kill-every", "%v: want at least 200ms", c.KillEvery)
	}
	if c.RestartAfter < 0 {
		bad("restart-after", "%v: must not be negative", c.RestartAfter)
	}
	if c.StartRate <= 0 || c.StepRate <= 0 || c.MaxRate < c.StartRate {
		bad("start-rate", "%v, --step-rate %v, --max-rate %v: want positive rates with max ≥ start", c.StartRate, c.StepRate, c.MaxRate)
	}
	if c.StepDuration < time.Second {
		bad("step-duration", "%v: want at least 1s", c.StepDuration)
	}
	if c.MaxP99 <= 0 {
		bad("max-p99", "%v: want a positive duration", c.MaxP99)
	}
	if c.StoreWait < time.Second {
		bad("store-wait", "%v: want at least 1s", c.StoreWait)
	}
	if c.MaxLost < 0 {
		bad("max-lost", "%d: must not be negative", c.MaxLost)
	}
	if t := c.Target; t != nil {
		if len(t.SchedulerAddrs) == 0 {
			bad("scheduler-addr", "required with --target")
		}
		if t.LogsAddr == "" {
			bad("logs-addr", "required with --target")
		}
		if t.RegistryAddr == "" {
			bad("registry-addr", "required with --target")
		}
		if t.Token == "" {
			bad("token", "required with --target")
		}
		if c.Scenario == "failover" || c.Scenario == "scale" {
			errs = append(errs, fmt.Errorf("scenario %s: needs a cluster of its own (it kills the leader or writes the scheduler's tables); drop --target", c.Scenario))
		}
	}
	return errors.Join(errs...)
}

// route is the configured route strategy.
func (c Config) route() schedulerv1.RouteStrategy {
	return schedulerv1.RouteStrategy(schedulerv1.RouteStrategy_value["ROUTE_STRATEGY_"+strings.ToUpper(c.Route)])
}

// dispatchLead is the schedulers' dispatch lead: --dispatch-lead, or the scheduler's default.
func (c Config) dispatchLead() time.Duration {
	if d, err := time.ParseDuration(c.DispatchLead); err == nil {
		return d
	}
	return scheduler.DefaultDispatchLead
}
