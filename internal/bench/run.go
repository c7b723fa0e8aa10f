package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/cluster"
	"github.com/jobmesh/jobmesh/internal/firecheck"
)

// Run runs the scenario cfg names and returns its report. The report is returned (partly filled)
// with the error too, when there is one.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	rep := &Report{Scenario: cfg.Scenario, Preset: cfg.Preset, Started: time.Now(), Machine: machine(),
		Setup: Setup{Target: cfg.Target != nil, Schedulers: cfg.Schedulers, Agents: cfg.Agents, Interval: cfg.Interval.String(),
			CronFraction: cfg.CronFraction, Route: cfg.Route}}
	if cfg.SessionTTL > 0 {
		rep.Setup.SessionTTL = cfg.SessionTTL.String()
	}
	rep.Setup.DispatchLead = cfg.DispatchLead
	rep.Setup.Handler = cfg.Handler
	if cfg.Hold > 0 {
		rep.Setup.Hold = cfg.Hold.String()
	}
	if cfg.Target != nil {
		rep.Setup.Schedulers = len(cfg.Target.SchedulerAddrs)
	}
	t, err := up(ctx, cfg)
	if err != nil {
		return rep, err
	}
	defer func() { rep.Problems = append(rep.Problems, t.down()...) }()
	if t.pg == nil {
		rep.Notes = append(rep.Notes, "dispatched, stored and end-to-end not measured: the bench does not know logsvc's database (give --database-url)")
	}
	if len(t.postgresUsage(ctx)) == 0 {
		rep.Notes = append(rep.Notes, "postgres CPU not measured: its server processes are not readable here")
	}
	if t.pg != nil {
		var av string
		if err := t.pg.QueryRow(ctx, `SHOW autovacuum`).Scan(&av); err == nil && av == "off" {
			rep.Notes = append(rep.Notes, "the Postgres server runs with autovacuum off: rows updated again and again (job_state, "+
				"logsvc's counters and cursors) keep their dead versions for the whole run, which makes later writes costlier "+
				"than on a server with it on (the default)")
		}
	}
	l := newLoad()
	switch cfg.Scenario {
	case "rate":
		err = runRate(ctx, t, l, rep)
	case "failover":
		err = runFailover(ctx, t, l, rep)
	case "ramp":
		err = runRamp(ctx, t, l, rep)
	case "scale":
		err = runScale(ctx, t, l, rep)
	}
	if cfg.Target != nil {
		if derr := t.deleteJobs(context.WithoutCancel(ctx), l); derr != nil {
			rep.Problems = append(rep.Problems, derr.Error())
		}
	}
	return rep, err
}

// createRate creates the jobs of rate fires per second (beyond those the load has) and notes the
// API's create rate.
func createRate(ctx context.Context, t *topology, l *load, rate float64, rep *Report) error {
	n := t.cfg.jobsFor(rate) - l.jobs()
	if n <= 0 {
		return nil
	}
	t.log.Info("creating jobs", "jobs", n, "rate", rate)
	d, err := l.create(ctx, t, n)
	if err != nil {
		return err
	}
	rep.Setup.CreatedPerSecond = float64(n) / d.Seconds()
	t.log.Info("jobs created", "jobs", n, "seconds", d.Seconds())
	return nil
}

// window runs one measurement window of d after the warm-up and appends its step.
func window(ctx context.Context, t *topology, l *load, rate float64, d time.Duration, rep *Report) (Step, error) {
	if err := sleep(ctx, t.cfg.Warmup); err != nil {
		return Step{}, err
	}
	from := time.Now()
	t.windowStart(ctx)
	stopProfiles := t.profile(ctx, d)
	if err := sleep(ctx, d); err != nil {
		return Step{}, err
	}
	to := time.Now()
	stopProfiles()
	st, _, err := t.measure(ctx, l, rate, from, to, nil)
	rep.Steps = append(rep.Steps, st)
	return st, err
}

func runRate(ctx context.Context, t *topology, l *load, rep *Report) error {
	if err := createRate(ctx, t, l, t.cfg.Rate, rep); err != nil {
		return err
	}
	_, err := window(ctx, t, l, t.cfg.Rate, t.cfg.Duration, rep)
	return err
}

func runRamp(ctx context.Context, t *topology, l *load, rep *Report) error {
	cfg := t.cfg
	for rate := cfg.StartRate; rate <= cfg.MaxRate; rate += cfg.StepRate {
		if err := createRate(ctx, t, l, rate, rep); err != nil {
			return err
		}
		st, err := window(ctx, t, l, rate, cfg.StepDuration, rep)
		if err != nil {
			return err
		}
		held, why := cfg.holds(st)
		last := &rep.Steps[len(rep.Steps)-1]
		last.Held, last.Why = &held, why
		if !held {
			t.log.Info("ramp step broke a limit", "rate", rate, "why", why)
			return nil
		}
		rep.HighestHeld = rate
	}
	return nil
}

// holds says whether a ramp step kept within the limits, and if not, why.
func (c Config) holds(st Step) (bool, string) {
	f := st.Fires
	var why []string
	if f.Lost+f.Doubled > c.MaxLost {
		why = append(why, fmt.Sprintf("%d lost, %d doubled", f.Lost, f.Doubled))
	}
	if p99 := time.Duration(st.LatenessMs.P99 * float64(time.Millisecond)); p99 > c.MaxP99 {
		why = append(why, fmt.Sprintf("p99 lateness %v > %v", p99.Round(time.Millisecond), c.MaxP99))
	}
	if f.Stored >= 0 && f.Executed-f.Stored > c.MaxLost {
		why = append(why, fmt.Sprintf("%d results not stored %.0f s after the window", f.Executed-f.Stored, st.StoredAfterSeconds))
	}
	if f.Expected == 0 {
		why = append(why, "no fire expected")
	}
	if len(why) > 0 {
		return false, fmt.Sprint(why)
	}
	return true, ""
}

func runFailover(ctx context.Context, t *topology, l *load, rep *Report) error {
	cfg := t.cfg
	if len(t.scheds) < 2 {
		return errors.New("--schedulers: failover needs at least 2 replicas")
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	if err := createRate(ctx, t, l, cfg.Rate, rep); err != nil {
		return err
	}
	if err := sleep(ctx, cfg.Warmup); err != nil {
		return err
	}
	from := time.Now()
	t.windowStart(ctx)
	var kills []firecheck.Kill
	for k := range cfg.Kills {
		if err := t.waitPartitionsLed(ctx, 60*time.Second); err != nil {
			return err
		}
		wait := cfg.KillEvery/2 + time.Duration(rng.Int64N(int64(cfg.KillEvery)))
		if err := sleep(ctx, wait); err != nil {
			return err
		}
		victim, kill, err := t.pickVictim(ctx, rng)
		if err != nil {
			return err
		}
		kill.N, kill.Lead = k+1, cfg.dispatchLead()
		if kill.At, err = t.killAndRestart(ctx, victim, cfg.RestartAfter); err != nil {
			return err
		}
		kills = append(kills, kill)
		t.log.Info("killed a replica", "kill", k+1, "replica", victim.id, "partitions", kill.Partitions)
	}
	if len(kills) > 0 {
		if err := t.waitScheduledAfter(ctx, kills[len(kills)-1].At, time.Minute); err != nil {
			return err
		}
	}
	if err := sleep(ctx, cfg.Duration); err != nil {
		return err
	}
	to := time.Now()
	st, fr, err := t.measure(ctx, l, cfg.Rate, from, to, kills)
	rep.Steps = append(rep.Steps, st)
	if fr != nil {
		f := &Failover{Kills: len(kills), Seed: seed}
		for _, k := range fr.Kills {
			f.GapsMs = append(f.GapsMs, msOf(k.Gap))
			f.LostPerKill = append(f.LostPerKill, k.Lost)
			f.PartitionsPerKill = append(f.PartitionsPerKill, len(k.Partitions))
		}
		if gaps := fr.Gaps(); len(gaps) > 0 {
			f.GapMedianMs, f.GapMaxMs = msOf(gaps[len(gaps)/2]), msOf(gaps[len(gaps)-1])
		}
		rep.Failover = f
	}
	return err
}

// pickVictim chooses the replica to kill: a random one, with the partitions it says it leads
// (the kill's gap is measured per partition). A scheduler without partitions (whose replicas
// report no partition count: see waitPartitionsLed) has one leader of every job: that one is the
// victim, as before partitions.
func (t *topology) pickVictim(ctx context.Context, rng *rand.Rand) (*replica, firecheck.Kill, error) {
	r := t.scheds[rng.IntN(len(t.scheds))]
	st, err := r.status.GetStatus(ctx, &schedulerv1.GetStatusRequest{})
	if err != nil {
		return nil, firecheck.Kill{}, fmt.Errorf("status of scheduler %s: %w", r.id, err)
	}
	if n := int64(t.partitions); n > 0 {
		return r, firecheck.Kill{Replica: r.id, Partitions: cluster.Led(st),
			PartitionOf: func(job int64) int { return int((job%n + n) % n) }}, nil
	}
	if r, err = t.leader(ctx, 60*time.Second); err != nil {
		return nil, firecheck.Kill{}, err
	}
	return r, firecheck.Kill{Replica: r.id}, nil
}

// waitPartitionsLed waits until every partition has a leader among the replicas (each asked
// which it leads itself), or, for a scheduler without partitions, until one replica leads.
func (t *topology) waitPartitionsLed(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if err := t.checkCrashes(); err != nil {
			return err
		}
		count, led, asked := 0, map[int]bool{}, 0
		for _, r := range t.scheds {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := r.status.GetStatus(cctx, &schedulerv1.GetStatusRequest{})
			cancel()
			if err != nil {
				continue
			}
			asked++
			count = max(count, int(st.GetPartitionCount()))
			for _, p := range cluster.Led(st) {
				led[p] = true
			}
			if st.GetPartitionCount() == 0 && st.GetLeader() {
				return nil // a scheduler without partitions: one leader is all it takes
			}
		}
		if count > 0 && len(led) == count {
			t.partitions = count
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d partitions led among %d answering scheduler replicas after %v", len(led), count, asked, timeout)
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// waitScheduledAfter waits until some recorder has a fire scheduled after at.
func (t *topology) waitScheduledAfter(ctx context.Context, at time.Time, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		for _, a := range t.recorders() {
			s, err := a.stats(ctx)
			if err != nil {
				return err
			}
			if s.MaxScheduledMs > at.UnixMilli() {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no fire scheduled after %s ran within %v", at.Format("15:04:05.000"), timeout)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// profile fetches a CPU profile of d from every scheduler replica, logsvc, agent and sink that serves
// pprof, then their allocation profiles, into PprofDir; the returned function waits for them.
func (t *topology) profile(ctx context.Context, d time.Duration) func() {
	if t.cfg.PprofDir == "" {
		return func() {}
	}
	targets := map[string]string{}
	for _, r := range t.scheds {
		if r.pprofAddr != "" {
			targets["scheduler-"+r.id] = r.pprofAddr
		}
	}
	if t.logsPprofAddr != "" {
		targets["logsvc"] = t.logsPprofAddr
	}
	for _, a := range t.agents {
		targets["agent-"+a.name] = a.addr
	}
	if t.sink != nil {
		targets[sinkName] = t.sink.addr
	}
	secs := max(1, int(d.Seconds()))
	stamp := time.Now().Format("150405")
	var wg sync.WaitGroup
	for name, addr := range targets {
		wg.Go(func() {
			for _, p := range []struct{ kind, path string }{
				{"cpu", fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs)}, {"allocs", "/debug/pprof/allocs"},
			} {
				file := filepath.Join(t.cfg.PprofDir, fmt.Sprintf("%s-%s-%s.%s.pprof", t.cfg.Scenario, stamp, name, p.kind))
				if err := fetchTo(ctx, "http://"+addr+p.path, t.token, file); err != nil {
					t.log.Warn("profile", "process", name, "kind", p.kind, "error", err)
					return
				}
				t.log.Info("profile saved", "process", name, "path", file)
			}
		})
	}
	return wg.Wait
}

// fetchTo saves what url answers in path; token is the bearer token the services' pprof
// endpoints want (the internal token).
func fetchTo(ctx context.Context, url, token, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// deleteJobs deletes the bench's jobs from a target cluster.
func (t *topology) deleteJobs(ctx context.Context, l *load) error {
	ids := l.ids()
	slices.Sort(ids)
	r, err := t.leader(ctx, 30*time.Second)
	if err != nil {
		return err
	}
	var errs []error
	if t.probeID > 0 {
		ids = append(ids, t.probeID)
	}
	for _, id := range ids {
		if _, err := r.jobs.DeleteJob(ctx, &schedulerv1.DeleteJobRequest{Id: id}); err != nil {
			errs = append(errs, fmt.Errorf("delete job %d: %w", id, err))
			if len(errs) > 10 {
				break
			}
		}
	}
	if t.reg != nil && len(errs) == 0 {
		if _, err := t.reg.DeleteExecutorGroup(ctx, &registryv1.DeleteExecutorGroupRequest{Id: t.groupID}); err != nil {
			errs = append(errs, fmt.Errorf("delete the bench's executor group: %w", err))
		}
	}
	return errors.Join(errs...)
}
