package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/internal/cluster"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/firecheck"
)

// TestSmoke is CI's run of the load tool: `jobmesh bench rate --preset smoke` against its own
// cluster of processes (a few hundred fires per second for 10 s). It checks the guarantees only —
// every expected fire ran exactly once and every result was stored — never the speed.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("about 40 s of processes; CI runs it (without -short)")
	}
	t.Parallel()
	bin, err := cluster.BuildJobmesh(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{Scenario: "rate", Preset: "smoke", Bin: bin, AdminURL: dbtest.AdminURL(), WorkDir: dir,
		Log: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	t.Cleanup(func() {
		if t.Failed() {
			dumpLogs(t, filepath.Join(dir, "logs"))
		}
	})
	if err != nil {
		t.Fatalf("bench: %v", err)
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", md.String())
	if len(rep.Problems) > 0 {
		t.Errorf("problems: %v", rep.Problems)
	}
	if len(rep.Steps) != 1 {
		t.Fatalf("%d steps, want 1", len(rep.Steps))
	}
	f := rep.Steps[0].Fires
	if f.Expected < 1000 {
		t.Errorf("only %d fires expected in the window; the smoke run is too small to say anything", f.Expected)
	}
	if f.Lost != 0 || f.Doubled != 0 || f.OffSchedule != 0 {
		t.Errorf("lost %d, doubled %d, off schedule %d (of %d expected); samples: %v %v %v", f.Lost, f.Doubled, f.OffSchedule,
			f.Expected, rep.Steps[0].LostSamples, rep.Steps[0].DoubledSamples, rep.Steps[0].OffGridSamples)
	}
	if c := rep.Steps[0].Store; c == nil || c.Executed != f.Executed || c.OK != c.Executed || c.Lost != 0 {
		t.Errorf("stored against executed: %+v, want every executed fire stored OK", c)
	}
	if f.Executed != f.Expected || f.Stored != f.Executed || f.Completed != f.Executed || f.Dispatched != f.Executed {
		t.Errorf("expected %d, dispatched %d, executed %d, stored %d, complete %d: want all equal", f.Expected, f.Dispatched, f.Executed, f.Stored, f.Completed)
	}
	var names []string
	for _, p := range rep.Steps[0].Processes {
		names = append(names, p.Name)
	}
	for _, want := range []string{"etcd", "registry", "logsvc", "gateway", "scheduler-r1", "scheduler-r2", "agent-a1", "agent-a2"} {
		if !strings.Contains(" "+strings.Join(names, " ")+" ", " "+want+" ") {
			t.Errorf("processes %v lack %s", names, want)
		}
	}
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil || back.Steps[0].Fires != f {
		t.Errorf("the JSON report does not read back: %v", err)
	}
}

// testWriter sends the bench's progress log to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// dumpLogs logs the end of every process's log.
func dumpLogs(t *testing.T, dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		t.Logf("--- last lines of %s:\n%s", e.Name(), strings.Join(lines[max(0, len(lines)-30):], "\n"))
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	c := Config{Scenario: "failover", Bin: "jobmesh"}.withDefaults()
	if c.Schedulers != 3 || c.Agents != 2 || c.Rate != 1000 || c.Kills != 20 || c.Duration != 5*time.Second || c.Route != "ROUND" {
		t.Errorf("failover defaults = %d schedulers, %d agents, rate %v, %d kills, %v, %s", c.Schedulers, c.Agents, c.Rate, c.Kills, c.Duration, c.Route)
	}
	if err := c.validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
	s := Config{Scenario: "scale", Bin: "jobmesh"}.withDefaults()
	if s.Interval != 10*time.Minute || s.CronFraction != 0 || s.Jobs != 1_000_000 {
		t.Errorf("scale defaults = interval %v, cron %v, %d jobs", s.Interval, s.CronFraction, s.Jobs)
	}
	if err := s.validate(); err != nil {
		t.Errorf("scale defaults do not validate: %v", err)
	}
	p := Config{Scenario: "rate", Preset: "smoke", Bin: "jobmesh", Rate: 50}.withDefaults()
	if p.Rate != 50 || p.Duration != 10*time.Second || p.Schedulers != 2 {
		t.Errorf("smoke preset with --rate 50 = rate %v, %v, %d schedulers; flags must win over the preset", p.Rate, p.Duration, p.Schedulers)
	}

	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"unknown scenario", Config{Scenario: "fast"}, `scenario "fast"`},
		{"unknown preset", Config{Scenario: "rate", Preset: "huge"}, "--preset"},
		{"cron on an interval that does not divide a minute", Config{Scenario: "rate", Interval: 7 * time.Second}, "--interval"},
		{"FIX_RATE under its minimum", Config{Scenario: "rate", Interval: 50 * time.Millisecond, CronFraction: -1}, "--interval"},
		{"a route that does not exist", Config{Scenario: "rate", Route: "NEAREST"}, "--route"},
		{"fractional session TTL", Config{Scenario: "rate", SessionTTL: 1500 * time.Millisecond}, "--session-ttl"},
		{"dispatch lead not a duration", Config{Scenario: "rate", DispatchLead: "soon"}, "--dispatch-lead"},
		{"more API jobs than jobs", Config{Scenario: "scale", Jobs: 10, APIJobs: 20}, "--api-jobs"},
		{"ramp that ends before it starts", Config{Scenario: "ramp", StartRate: 5000, MaxRate: 1000}, "--max-rate"},
		{"failover against a target", Config{Scenario: "failover", Target: &Target{SchedulerAddrs: []string{"x:1"}, LogsAddr: "y:1",
			RegistryAddr: "z:1", Token: "t"}}, "needs a cluster of its own"},
		{"a target without its addresses", Config{Scenario: "rate", Target: &Target{}}, "--scheduler-addr"},
		{"a negative hold", Config{Scenario: "failover", Hold: -time.Second}, "--hold"},
		{"a handler that does not exist", Config{Scenario: "rate", Handler: "ruby"}, `--handler "ruby": want one of noop, http, shell, python`},
	} {
		tc.cfg.Bin = "jobmesh"
		err := tc.cfg.withDefaults().validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: validate = %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
}

func TestLoadShape(t *testing.T) {
	t.Parallel()
	c := Config{Scenario: "rate", Bin: "jobmesh"}.withDefaults()
	if n := c.jobsFor(5000); n != 5000 {
		t.Errorf("jobs for 5000/s at 1 s = %d", n)
	}
	cron := 0
	for i := range 1000 {
		if c.isCron(i) {
			cron++
			if s := c.schedule(i); s.GetExpression() != "0/1 * * * * ?" {
				t.Errorf("cron job %d has schedule %q", i, s.GetExpression())
			}
		} else if s := c.schedule(i); s.GetExpression() != "1s" {
			t.Errorf("FIX_RATE job %d has schedule %q", i, s.GetExpression())
		}
	}
	if cron != 100 {
		t.Errorf("%d cron jobs of 1000 at fraction 0.1, want 100", cron)
	}
	c.Interval, c.CronFraction = 500*time.Millisecond, -1
	c = c.withDefaults()
	if n := c.jobsFor(5000); n != 2500 || c.isCron(9) {
		t.Errorf("jobs for 5000/s at 500 ms = %d (cron: %v), want 2500 FIX_RATE", n, c.isCron(9))
	}
}

func TestHolds(t *testing.T) {
	t.Parallel()
	c := Config{Scenario: "ramp", Bin: "jobmesh"}.withDefaults()
	good := Step{Fires: Fires{Expected: 100, Executed: 100, Stored: 100}, LatenessMs: Percentiles{P99: 20}}
	if ok, why := c.holds(good); !ok {
		t.Errorf("a clean step does not hold: %s", why)
	}
	for name, st := range map[string]Step{
		"lost":       {Fires: Fires{Expected: 100, Executed: 99, Stored: 99, Lost: 1}, LatenessMs: Percentiles{P99: 20}},
		"late":       {Fires: Fires{Expected: 100, Executed: 100, Stored: 100}, LatenessMs: Percentiles{P99: 150}},
		"not stored": {Fires: Fires{Expected: 100, Executed: 100, Stored: 90}, LatenessMs: Percentiles{P99: 20}},
		"empty":      {},
	} {
		if ok, _ := c.holds(st); ok {
			t.Errorf("%s: the step holds", name)
		}
	}
	unknown := good
	unknown.Fires.Stored = -1
	if ok, why := c.holds(unknown); !ok {
		t.Errorf("a step without stored counts (no database) does not hold: %s", why)
	}
}

func TestMarkdown(t *testing.T) {
	t.Parallel()
	held := false
	rep := &Report{Scenario: "ramp", Started: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC),
		Machine: Machine{NProc: 2, CPU: "Test CPU", MemoryMB: 2048}, Setup: Setup{Schedulers: 1, Agents: 2, Interval: "1s", CronFraction: 0.1, Route: "ROUND"},
		Steps: []Step{{TargetRate: 5000, Jobs: 5000, Seconds: 20, Fires: Fires{Expected: 100000, Dispatched: -1, Executed: 99990, Stored: -1, Completed: -1, Lost: 10},
			LatenessMs: Percentiles{P50: 1.5, P90: 3, P99: 12.25, P999: 40, Max: 250}, CPUMicrosPerFire: 123.4, LoadAvg: [3]float64{1.5},
			Processes: []ProcUsage{{Name: "scheduler-r1", CPUSeconds: 2, CPUMicrosPerFire: 20, PeakRSSMB: 150}, {Name: "postgres/logsvc", CPUSeconds: 3}},
			Held:      &held, Why: "10 lost", LostSamples: []string{"job 1 scheduled 12:00:01.000"},
			Store: &StoreCheck{Executed: 99990, OK: 99980, Failed: 4, Undecided: 6, Lost: 10, LostWithReason: 8, LostOverloaded: 7, LostNoReason: 2,
				Reasons: map[string]int{"overloaded": 7, "trigger failed": 1}, FailedSamples: []string{"job 3 scheduled 12:00:02.000: FAIL"}}}},
		Failover: &Failover{Kills: 2, GapsMs: []float64{1500, 0}, GapMedianMs: 1500, GapMaxMs: 1500, LostPerKill: []int{0, 0}, PartitionsPerKill: []int{5, 6}},
		Notes:    []string{"a note"}}
	var b bytes.Buffer
	if err := rep.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{"### jobmesh bench ramp, 2026-11-23 12:00 UTC", "2 CPUs (Test CPU), 2.0 GiB",
		"| 5000 | 5000 | 20.0 | 100000 | n/a | 99990 | n/a | n/a | 10 | 0 |", "1.50 / 3.00 / 12.2 / 40.0 / 250", "| 123 |",
		"no: 10 lost", "| scheduler-r1 | 2.00 | 20.0 | 150 |", "| postgres/logsvc | 3.00 | 0.0 | – |", "- lost: job 1 scheduled",
		"of 99990 fires executed, 99980 stored OK (0 without a trigger record), **4 stored failed**, 6 undecided, 0 not stored; of 10 not executed, 8 stored with a reason (7 overloaded), **2 without one** (0 undecided).",
		`- lost with reason "overloaded": 7`, "- executed but stored failed: job 3 scheduled 12:00:02.000: FAIL", "Failover: 2 kills of random replicas", "gaps ms: 1500, 0", "partitions led per kill: [5 6]", "- note: a note", "Highest rate held: **0 fires/s**"} {
		if !strings.Contains(got, want) {
			t.Errorf("markdown lacks %q:\n%s", want, got)
		}
	}
}

// TestLatenessBySchedule: the window's first runs of scheduled fires, split between FIX_RATE and
// cron jobs; retries, fires outside the window and a fire run twice are left out.
func TestLatenessBySchedule(t *testing.T) {
	l := newLoad()
	l.cron[2] = true
	at := func(job int64, id string, sched, lateMs int64, typ string) firecheck.Execution {
		return firecheck.Execution{JobID: job, TriggerID: id, ScheduledMs: sched, ArrivedNs: (sched + lateMs) * int64(time.Millisecond), TriggerType: typ}
	}
	execs := []firecheck.Execution{
		at(1, "1-1000", 1000, 2, "CRON"), at(1, "1-2000", 2000, 4, "CRON"), at(1, "1-2000", 2000, 900, "CRON"),
		at(2, "2-1000", 1000, 30, "CRON"), at(2, "2-1000r", 1000, 500, "RETRY"), at(2, "2-9000", 9000, 700, "CRON"),
	}
	got := latenessBySchedule(execs, l, 1000, 2000)
	if len(got) != 2 || got[0].Schedule != "FIX_RATE" || got[0].Fires != 2 || got[0].LatenessMs.Max != 4 ||
		got[1].Schedule != "cron" || got[1].Fires != 1 || got[1].LatenessMs.Max != 30 {
		t.Fatalf("latenessBySchedule = %+v", got)
	}
	if got := latenessBySchedule(execs[:2], l, 1000, 2000); got != nil {
		t.Errorf("FIX_RATE only: %+v, want nil", got)
	}
}
