package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jobmesh/jobmesh/internal/firecheck"
)

// measure closes the window [from, to] that started with windowStart: it reads the processes'
// use, waits until the fires of the window have arrived, checks them against the schedules and
// counts what logsvc stored.
func (t *topology) measure(ctx context.Context, l *load, targetRate float64, from, to time.Time, kills []firecheck.Kill) (Step, *firecheck.Report, error) {
	procs := t.windowUsage(ctx, 0)
	st := Step{TargetRate: targetRate, Jobs: l.jobs(), From: from, To: to, Seconds: to.Sub(from).Seconds(), LoadAvg: loadAvg()}
	fromMs, toMs := from.UnixMilli(), to.UnixMilli()
	grids := l.window(fromMs, toMs)
	// After kills, re-fired fires come in bursts well behind the rest: wait longer for quiet.
	quiet := 5 * time.Second
	if len(kills) > 0 {
		quiet = 20 * time.Second
	}
	if err := t.settle(ctx, fromMs, toMs, firecheck.Expected(grids), quiet); err != nil {
		return st, nil, err
	}
	var execs []firecheck.Execution
	for _, a := range t.recorders() {
		e, err := a.executions(ctx, fromMs, toMs)
		if err != nil {
			return st, nil, err
		}
		execs = append(execs, e...)
	}
	rep := firecheck.Check(execs, grids, kills)
	st.Fires = Fires{Expected: rep.Checked, Executed: rep.Executed, Lost: rep.Lost, Doubled: rep.Doubled,
		DoubledSameID: rep.DoubledSameID, OffSchedule: rep.OffGrid, Dispatched: -1, DispatchFailed: -1, Stored: -1, Completed: -1,
		PerSecond: float64(rep.Executed) / st.Seconds}
	st.LatenessMs = percentilesOf(rep.Lateness)
	st.LatenessBySchedule = latenessBySchedule(execs, l, fromMs, toMs)
	st.LostSamples, st.DoubledSamples, st.OffGridSamples = rep.LostSamples, rep.DoubledSamples, rep.OffGridSamples
	if t.pg != nil {
		if err := setBenchJobs(ctx, t.pg, l.ids()); err != nil {
			return st, rep, err
		}
		s, err := t.settleStored(ctx, fromMs, toMs, rep.Executed)
		if err != nil {
			return st, rep, err
		}
		st.Fires.Dispatched, st.Fires.DispatchFailed, st.Fires.Stored, st.Fires.Completed = s.Dispatched, s.DispatchFailed, s.Stored, s.Completed
		st.StoredAfterSeconds = time.Since(to).Seconds()
		st.EndToEndMs = Percentiles{P50: s.E2E50, P99: s.E2E99}
		runs, err := readRuns(ctx, t.pg, fromMs, toMs)
		if err != nil {
			return st, rep, err
		}
		st.Store = checkStore(grids, execs, runs, linesPerRun(t.cfg.Handler))
	}
	var total float64
	for i := range procs {
		if rep.Executed > 0 {
			procs[i].CPUMicrosPerFire = procs[i].CPUSeconds * 1e6 / float64(rep.Executed)
		}
		switch {
		case procs[i].Name == sinkName:
			st.SinkCPUMicrosPerFire = procs[i].CPUMicrosPerFire
		case procs[i].Apart:
			st.ScriptCPUMicrosPerFire += procs[i].CPUMicrosPerFire
		}
		if procs[i].Apart {
			continue // the fires' work, not jobmesh's
		}
		total += procs[i].CPUSeconds
	}
	st.Processes = procs
	if rep.Executed > 0 {
		st.CPUMicrosPerFire = total * 1e6 / float64(rep.Executed)
	}
	t.log.Info("window measured", "target_rate", targetRate, "expected", rep.Checked, "executed", rep.Executed,
		"lost", rep.Lost, "doubled", rep.Doubled, "stored", st.Fires.Stored, "lateness_p99_ms", st.LatenessMs.P99,
		"cpu_us_per_fire", int(st.CPUMicrosPerFire))
	return st, rep, t.checkCrashes()
}

// latenessBySchedule splits the lateness of the window's scheduled fires (first runs) between
// FIX_RATE and cron jobs; nil when the load has only one kind. The sink's records carry no
// trigger type (the bench fires its jobs only on their schedules).
func latenessBySchedule(execs []firecheck.Execution, l *load, fromMs, toMs int64) []ScheduleLateness {
	var fixRate, cron []time.Duration
	seen := map[string]bool{}
	for _, e := range execs {
		if e.TriggerType != "CRON" && e.TriggerType != "" || e.ScheduledMs < fromMs || e.ScheduledMs > toMs || seen[e.TriggerID] {
			continue
		}
		seen[e.TriggerID] = true
		if l.isCron(e.JobID) {
			cron = append(cron, e.Lateness())
		} else {
			fixRate = append(fixRate, e.Lateness())
		}
	}
	if len(fixRate) == 0 || len(cron) == 0 {
		return nil
	}
	return []ScheduleLateness{
		{Schedule: "FIX_RATE", Fires: len(fixRate), LatenessMs: percentilesOf(firecheck.NewDist(fixRate))},
		{Schedule: "cron", Fires: len(cron), LatenessMs: percentilesOf(firecheck.NewDist(cron))},
	}
}

// settle waits until the fires of the window that are coming have come: until the recorders have
// run as many fires of the window as the schedules expect, or (fires were lost or doubled) until
// every recorder has fires scheduled more than a second after the window and the count has not
// moved for quiet — a re-fired fire after a failover can arrive well after later fires. At most
// two minutes.
func (t *topology) settle(ctx context.Context, fromMs, toMs int64, expected int, quiet time.Duration) error {
	deadline := time.Now().Add(2 * time.Minute)
	last, since := -1, time.Now()
	for time.Now().Before(deadline) {
		past, n := true, 0
		for _, a := range t.recorders() {
			s, err := a.stats(ctx)
			if err != nil {
				return err
			}
			past = past && s.MaxScheduledMs > toMs+1000
			c, err := a.count(ctx, fromMs, toMs)
			if err != nil {
				return err
			}
			n += c
		}
		if n >= expected && past {
			return nil
		}
		if n != last {
			last, since = n, time.Now()
		} else if past && time.Since(since) >= quiet {
			return nil
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
	t.log.Warn("fires of the window still arriving two minutes after it; counting what came", "expected", expected, "arrived", last)
	return nil
}

// settleStored waits until every executed fire's run is complete in logsvc's tables (trigger
// record and result in), at most StoreWait (logsvc may be working through a backlog of earlier
// fires' results: a count that does not grow for a while does not mean it is done), then counts
// what is stored. The polls read only the completions written since the window started: the
// full count joins logsvc's runs, and polling it took a core of Postgres from logsvc's catch-up.
func (t *topology) settleStored(ctx context.Context, fromMs, toMs int64, executed int) (stored, error) {
	deadline := time.Now().Add(t.cfg.StoreWait)
	t.mu.Lock()
	after := t.completionsFrom
	t.mu.Unlock()
	for {
		n, err := countCompleted(ctx, t.pg, t.groupID, after, fromMs, toMs)
		if err != nil {
			return stored{}, err
		}
		if n >= executed || time.Now().After(deadline) {
			break
		}
		if err := sleep(ctx, 2*time.Second); err != nil {
			return stored{}, err
		}
	}
	return readStored(ctx, t.pg, t.groupID, fromMs, toMs)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("interrupted: %w", ctx.Err())
	case <-tm.C:
		return nil
	}
}
