package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/firecheck"
)

// scaleChunk is how many jobs one INSERT … SELECT stores.
const scaleChunk = 50_000

// runScale stores Jobs jobs (APIJobs of them through the API, the rest with SQL straight into
// the scheduler's tables: the API would take many minutes for a million), each firing every
// Interval with their first fires spread evenly over one interval, then measures a window: the
// fires as in rate, the leader's pre-read scan durations (from its metric) and its memory.
func runScale(ctx context.Context, t *topology, l *load, rep *Report) error {
	cfg := t.cfg
	sc := &Scale{Jobs: cfg.Jobs, APIJobs: cfg.APIJobs}
	rep.Scale = sc
	if cfg.APIJobs > 0 {
		t.log.Info("creating jobs through the API", "jobs", cfg.APIJobs)
		d, err := l.create(ctx, t, cfg.APIJobs)
		if err != nil {
			return err
		}
		rep.Setup.CreatedPerSecond = float64(cfg.APIJobs) / d.Seconds()
	}
	start := time.Now()
	firesFrom, err := t.insertJobs(ctx, l, cfg.Jobs-cfg.APIJobs, scaleChunk)
	if err != nil {
		return err
	}
	sc.InsertSeconds = time.Since(start).Seconds()
	t.log.Info("jobs inserted", "jobs", cfg.Jobs-cfg.APIJobs, "seconds", sc.InsertSeconds)
	for _, table := range []string{"scheduler.jobs", "scheduler.job_state"} {
		if _, err := t.pg.Exec(ctx, `VACUUM ANALYZE `+table); err != nil {
			return fmt.Errorf("vacuum analyze %s: %w", table, err)
		}
	}
	rate := float64(cfg.Jobs) / cfg.Interval.Seconds()
	// The window opens a warm-up after the inserted jobs' first fires begin.
	if err := sleep(ctx, time.Until(firesFrom)+cfg.Warmup); err != nil {
		return err
	}
	lead, err := t.leader(ctx, 60*time.Second)
	if err != nil {
		return err
	}
	var before histogram
	haveMetric := false
	if lead.metricsAddr == "" {
		rep.Notes = append(rep.Notes, "pre-read scan time not measured: this scheduler has no --metrics-addr")
	} else if before, err = scrapeHistogram(ctx, "http://"+lead.metricsAddr+"/metrics", cfg.PreReadMetric); err != nil {
		rep.Notes = append(rep.Notes, fmt.Sprintf("pre-read scan time not measured: %v", err))
	} else {
		haveMetric = true
	}

	from := time.Now()
	t.windowStart(ctx)
	stopProfiles := t.profile(ctx, cfg.Duration)
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			if u, err := lead.cur.proc.Usage(); err == nil {
				sc.SchedulerRSSMaxMB = max(sc.SchedulerRSSMaxMB, float64(u.RSS)/(1<<20))
				sc.SchedulerPeakRSSMB = float64(u.PeakRSS) / (1 << 20)
			}
			select {
			case <-sampleCtx.Done():
				return
			case <-tick.C:
			}
		}
	})
	err = sleep(ctx, cfg.Duration)
	to := time.Now()
	stopSampling()
	wg.Wait()
	stopProfiles()
	if err != nil {
		return err
	}
	if haveMetric {
		if after, err := scrapeHistogram(ctx, "http://"+lead.metricsAddr+"/metrics", cfg.PreReadMetric); err != nil {
			rep.Notes = append(rep.Notes, fmt.Sprintf("pre-read scan time not measured: %v", err))
		} else {
			sc.PreRead = after.since(before, cfg.PreReadMetric)
		}
	}
	st, _, err := t.measure(ctx, l, rate, from, to, nil)
	rep.Steps = append(rep.Steps, st)
	return err
}

// insertJobs stores n FIX_RATE jobs with SQL, chunk at a time, their first fires spread evenly over
// one interval starting a little after the first chunk commits (a fire due before it is stored
// would be a misfire); each chunk takes the next slice of the interval, moved by how much later
// it was stored. It returns when the first fires are due.
func (t *topology) insertJobs(ctx context.Context, l *load, n, chunk int) (time.Time, error) {
	cfg := t.cfg
	every := cfg.Interval.Milliseconds()
	l.mu.Lock()
	first := l.next
	l.next += n
	l.mu.Unlock()
	lead := 10 * time.Second
	var firesFrom time.Time
	for lo := first; lo < first+n; lo += chunk {
		hi := min(lo+chunk, first+n) - 1
		began := time.Now()
		base := began.Add(lead).UnixMilli()
		if firesFrom.IsZero() {
			firesFrom = time.UnixMilli(base)
		}
		// Two tables: the job, and its scheduling state (job_state, where next_fire_ms lives).
		rows, err := t.pg.Query(ctx, `WITH src AS (
				SELECT g, 'bench-' || lpad(g::text, 7, '0') AS name,
					$11::bigint + (g - $14::bigint) * $12::bigint / $13::bigint AS next
				FROM generate_series($16::bigint, $15::bigint) g),
			ins AS (
				INSERT INTO scheduler.jobs (group_id, name, schedule_type, schedule_expr, misfire_strategy,
					route_strategy, block_strategy, retry_backoff, glue_type, handler, status, create_ms, update_ms)
				SELECT $1, name, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11 FROM src
				RETURNING id, name),
			st AS (
				INSERT INTO scheduler.job_state (job_id, next_fire_ms)
				SELECT ins.id, src.next FROM ins JOIN src USING (name)
				RETURNING job_id, next_fire_ms)
			SELECT job_id, next_fire_ms FROM st`,
			t.groupID, int32(schedulerv1.ScheduleType_SCHEDULE_TYPE_FIX_RATE), cfg.Interval.String(),
			int32(schedulerv1.MisfireStrategy_MISFIRE_STRATEGY_DO_NOTHING), int32(cfg.route()),
			int32(schedulerv1.BlockStrategy_BLOCK_STRATEGY_SERIAL_EXECUTION), int32(schedulerv1.RetryBackoff_RETRY_BACKOFF_NONE),
			int32(schedulerv1.GlueType_GLUE_TYPE_BEAN), benchHandler, int32(schedulerv1.JobStatus_JOB_STATUS_RUNNING),
			base, every, int64(n), int64(first), int64(hi), int64(lo))
		if err != nil {
			return firesFrom, fmt.Errorf("insert jobs: %w", err)
		}
		got := 0
		l.mu.Lock()
		for rows.Next() {
			got++
			var id, next int64
			if err := rows.Scan(&id, &next); err != nil {
				rows.Close()
				l.mu.Unlock()
				return firesFrom, fmt.Errorf("insert jobs: %w", err)
			}
			l.grids[id] = firecheck.Grid{First: next, Period: every}
		}
		l.mu.Unlock()
		rows.Close()
		if err := rows.Err(); err != nil {
			return firesFrom, fmt.Errorf("insert jobs: %w", err)
		}
		if want := hi + 1 - lo; got != want {
			return firesFrom, fmt.Errorf("insert jobs %d to %d: %d stored, want %d", lo, hi, got, want)
		}
		// Keep the next chunk's first fires after its commit.
		if took := time.Since(began); took*2+3*time.Second > lead {
			lead = took*2 + 3*time.Second
		}
		t.log.Info("jobs inserted", "through", hi+1-first, "of", n)
	}
	return firesFrom, nil
}
