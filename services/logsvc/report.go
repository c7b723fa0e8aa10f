package logsvc

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"time"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/internal/db"
)

// Reports are kept as runs complete: complete() counts every completion it publishes into
// report_group_days and report_minutes in the same transaction, and countJobs folds the
// completions into report_group_jobs a few seconds later, so a report reads a few counter rows
// instead of scanning runs. A run's day (minute) is the UTC day
// (minute) of its scheduled time, and every counter carries the run's executor group, so a
// report can be limited to the groups a caller may see. Running runs are a live state, not an
// event: they are counted through runs_running, a partial index that holds only running rows.

const (
	minuteMs = int64(time.Minute / time.Millisecond)
	// minuteKeep is how long per-minute counters are kept: the dashboard shows the last hour.
	minuteKeep = dayMs
	// dashboardMinutes is how many minutes the dashboard's fires-per-minute chart shows.
	dashboardMinutes = 60
	// maxRunningJobIDs caps the job ids CountRunningRuns lists per executor.
	maxRunningJobIDs = 100
)

// counter says which table a reportKey counts in.
type counter int8

const (
	perDay    counter = iota // report_group_days
	perJob                   // report_group_jobs
	perMinute                // report_minutes
)

// reportKey is one counter row: a day (a minute for perMinute), a group, and a job (0 unless
// perJob).
type reportKey struct {
	kind           counter
	at, group, job int64
}

// reportCounts accumulates the completions of one transaction.
type reportCounts struct {
	// oldestMinute is the first minute still counted per minute: older runs only count per day.
	oldestMinute int64
	rows         map[reportKey]*[2]int64 // success, fail
}

func newReportCounts(nowMs int64) reportCounts {
	return reportCounts{oldestMinute: (nowMs - minuteKeep) / minuteMs, rows: map[reportKey]*[2]int64{}}
}

// add counts a completion per day and per minute (complete()): its status when the run ended,
// less the status of the completion it corrects (replaces) when that one had ended.
func (c reportCounts) add(schedMs, group int64, st, replaces int32) {
	m := schedMs / minuteMs
	for _, k := range []reportKey{{perDay, schedMs / dayMs, group, 0}, {perMinute, m, group, 0}} {
		if k.kind == perMinute && m < c.oldestMinute {
			continue
		}
		c.bump(k, st, 1)
		c.bump(k, replaces, -1)
	}
}

// addJob counts a completion per job (countJobs), as add does.
func (c reportCounts) addJob(schedMs, group, job int64, st, replaces int32) {
	k := reportKey{perJob, schedMs / dayMs, group, job}
	c.bump(k, st, 1)
	c.bump(k, replaces, -1)
}

// bump adds n to k's success or fail count by st; a status that has not ended counts nowhere,
// nor does a skipped misfire (it did not run, and did not fail).
func (c reportCounts) bump(k reportKey, st int32, n int64) {
	if !final(st) || st == statusSkipped {
		return
	}
	i := 1
	if st == statusSuccess {
		i = 0
	}
	if c.rows[k] == nil {
		c.rows[k] = new([2]int64)
	}
	c.rows[k][i] += n
}

const (
	// jobCountCursor names countJobs' position in completions (table cursors).
	jobCountCursor = "report_jobs"
	// jobCountEvery is how often the background pass folds new completions into the per-job
	// counters; GetReport folds in what is left before it reads them (at most this long's
	// completions: 140,000 at 14,000 fires/s).
	jobCountEvery = 10 * time.Second
	// jobCountBatch caps the completions one countJobs transaction reads: enough for
	// jobCountEvery at 20,000 fires/s, since only the completions of one transaction share
	// their counter rows' upserts (the counts in memory are one row per job and day).
	jobCountBatch = 200000
)

// countJobs folds the completions after its cursor into report_group_jobs and moves the
// cursor past them, in one transaction per jobCountBatch, and returns how many it counted.
// Counting each completion as it was published cost an upsert per fire for jobs that fire
// every second (a quarter of logsvc's Postgres time at 14,000 fires/s); over jobCountEvery
// such a job's ten fires share one (every 2 s, the upserts still took 5-8 µs of Postgres per
// row, 3 per fire). Replicas take the cursor row's lock (Postgres) or
// the single writer (SQLite) in turn, so a completion is counted once.
func (s *Service) countJobs(ctx context.Context) (int, error) {
	total := 0
	for {
		n := 0
		err := s.inTx(ctx, func(tx *db.Tx) error {
			n = 0
			q := `SELECT position FROM cursors WHERE name = $1`
			if s.store.Dialect() == db.Postgres {
				q += ` FOR UPDATE`
			}
			var from int64
			if err := tx.QueryRowContext(ctx, s.store.Q(q), jobCountCursor).Scan(&from); err != nil {
				return fmt.Errorf("read the per-job count cursor: %w", err)
			}
			rows, err := tx.QueryContext(ctx, s.store.Q(`SELECT cursor, scheduled_ms, group_id, job_id, status, replaces_status
				FROM completions WHERE cursor > $1 ORDER BY cursor LIMIT $2`), from, jobCountBatch)
			if err != nil {
				return fmt.Errorf("read completions to count: %w", err)
			}
			counts := newReportCounts(0)
			to := from
			for rows.Next() {
				var sched, group, job int64
				var st, replaces int32
				if err := rows.Scan(&to, &sched, &group, &job, &st, &replaces); err != nil {
					rows.Close()
					return fmt.Errorf("read completions to count: %w", err)
				}
				counts.addJob(sched, group, job, st, replaces)
				n++
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return fmt.Errorf("read completions to count: %w", err)
			}
			if n == 0 {
				return nil
			}
			var b db.Batch
			s.bumpReports(&b, counts)
			b.Queue(func(err error) error { return fmt.Errorf("move the per-job count cursor: %w", err) },
				s.store.Q(`UPDATE cursors SET position = $1 WHERE name = $2`), to, jobCountCursor)
			return tx.Send(ctx, &b)
		})
		if err != nil {
			return total, err
		}
		total += n
		if n < jobCountBatch {
			return total, nil
		}
	}
}

// jobCounts runs countJobs every jobCountEvery until ctx ends.
func (s *Service) jobCounts(ctx context.Context) {
	every(ctx, jobCountEvery, func() {
		if _, err := s.countJobs(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("counting completions per job failed", "error", err)
		}
	})
}

// counterTables are the upserts of each kind of counter row.
var counterTables = [...]struct {
	table    string
	cols     int    // columns of a row
	columns  string // their names
	conflict string
}{
	perDay: {"report_group_days", 4, `day, group_id, success, fail`,
		` ON CONFLICT (day, group_id) DO UPDATE SET success = report_group_days.success + excluded.success, fail = report_group_days.fail + excluded.fail`},
	perJob: {"report_group_jobs", 5, `day, group_id, job_id, success, fail`,
		` ON CONFLICT (day, group_id, job_id) DO UPDATE SET success = report_group_jobs.success + excluded.success, fail = report_group_jobs.fail + excluded.fail`},
	perMinute: {"report_minutes", 4, `minute, group_id, success, fail`,
		` ON CONFLICT (minute, group_id) DO UPDATE SET success = report_minutes.success + excluded.success, fail = report_minutes.fail + excluded.fail`},
}

// bumpReports queues to b the addition of counts to the report tables. Rows are written in key order, and each kind
// of counter has one kind of writer that serializes on a lock (complete(): the completions
// lock; countJobs: its cursor row), so counter rows never deadlock. Postgres takes each table's
// rows as arrays, in one statement whose text never changes (so it is prepared once).
func (s *Service) bumpReports(b *db.Batch, counts reportCounts) {
	if len(counts.rows) == 0 {
		return
	}
	keys := slices.SortedFunc(maps.Keys(counts.rows), func(a, b reportKey) int {
		return cmp.Or(cmp.Compare(a.kind, b.kind), cmp.Compare(a.at, b.at), cmp.Compare(a.group, b.group), cmp.Compare(a.job, b.job))
	})
	var rows [len(counterTables)][][]int64 // per kind, a row of column values per key
	for _, k := range keys {
		c := counts.rows[k]
		if k.kind == perJob {
			rows[k.kind] = append(rows[k.kind], []int64{k.at, k.group, k.job, c[0], c[1]})
		} else {
			rows[k.kind] = append(rows[k.kind], []int64{k.at, k.group, c[0], c[1]})
		}
	}
	for kind, t := range counterTables {
		if len(rows[kind]) == 0 {
			continue
		}
		insert := `INSERT INTO ` + t.table + ` (` + t.columns + `) `
		countErr := func(err error) error { return fmt.Errorf("count runs in %s: %w", t.table, err) }
		if s.store.Dialect() == db.Postgres {
			cols := make([]any, t.cols)
			types := make([]string, t.cols)
			for c := range t.cols {
				col := make([]int64, len(rows[kind]))
				for i, r := range rows[kind] {
					col[i] = r[c]
				}
				cols[c], types[c] = col, "bigint"
			}
			b.Queue(countErr, insert+`SELECT * FROM `+unnest(types)+t.conflict, cols...)
			continue
		}
		for _, chunk := range chunks(rows[kind], rowsPerStatement) {
			args := make([]any, 0, len(chunk)*t.cols)
			for _, r := range chunk {
				for _, v := range r {
					args = append(args, v)
				}
			}
			b.Queue(countErr, insert+`VALUES `+s.values(len(chunk), t.cols, "")+t.conflict, args...)
		}
	}
}

// pruneMinutes deletes the per-minute counters older than minuteKeep.
func (s *Service) pruneMinutes(ctx context.Context) error {
	cutoff := (s.now().UnixMilli() - minuteKeep) / minuteMs
	if _, err := s.store.ExecContext(ctx, s.store.Q(`DELETE FROM report_minutes WHERE minute < $1`), cutoff); err != nil {
		return fmt.Errorf("prune per-minute counts: %w", err)
	}
	return nil
}

// groupFilter is an optional "AND group_id IN (...)" of a dynamic statement whose placeholders
// before it number first-1.
func (s *Service) groupFilter(groups []int64, first int) (string, []any) {
	if len(groups) == 0 {
		return "", nil
	}
	return ` AND group_id IN ` + s.in(len(groups), first), anys(groups)
}

// checkGroupIDs validates the group filter of a report, the dashboard or a running count.
func checkGroupIDs(groups []int64, bad *apierr.Fields) {
	if len(groups) > 1000 {
		bad.Add("group_ids", "at most 1000, got %d", len(groups))
		return
	}
	for i, g := range groups {
		if g <= 0 {
			bad.Add(fmt.Sprintf("group_ids[%d]", i), "want a positive group id, got %d", g)
		}
	}
}

// sumRows reads (key, success, fail) rows into a map by key, adding rows of the same key.
func sumRows(rows *sql.Rows, err error) (map[int64]*[2]int64, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64]*[2]int64{}
	for rows.Next() {
		var k, ok, fail int64
		if err := rows.Scan(&k, &ok, &fail); err != nil {
			return nil, err
		}
		if out[k] == nil {
			out[k] = new([2]int64)
		}
		out[k][0] += ok
		out[k][1] += fail
	}
	return out, rows.Err()
}

// finishedBy counts finished runs per day or minute in [from, to) of the groups (all when
// empty), from the counters of table (report_group_days or report_minutes, keyed by col).
func (s *Service) finishedBy(ctx context.Context, table, col string, from, to int64, groups []int64) (map[int64]*[2]int64, error) {
	filter, gargs := s.groupFilter(groups, 3)
	q := fmt.Sprintf(`SELECT %[2]s, success, fail FROM %[1]s WHERE %[2]s >= %[3]s AND %[2]s < %[4]s`, table, col, s.ph(1), s.ph(2)) + filter
	out, err := sumRows(s.store.QueryContext(ctx, q, append([]any{from, to}, gargs...)...))
	if err != nil {
		return nil, fmt.Errorf("count finished runs: %w", err)
	}
	return out, nil
}

// runningBy counts running runs of the groups (all when empty) per unit (dayMs or minuteMs) of
// their scheduled time in [from, to) units.
func (s *Service) runningBy(ctx context.Context, unit, from, to int64, groups []int64) (map[int64]int64, error) {
	filter, gargs := s.groupFilter(groups, 3)
	// The literal status keeps the predicate provably inside runs_running's.
	q := fmt.Sprintf(`SELECT scheduled_ms / %d, COUNT(*) FROM runs WHERE status = %d AND scheduled_ms >= %s AND scheduled_ms < %s%s GROUP BY scheduled_ms / %d`,
		unit, statusRunning, s.ph(1), s.ph(2), filter, unit)
	rows, err := s.store.QueryContext(ctx, q, append([]any{from * unit, to * unit}, gargs...)...)
	if err != nil {
		return nil, fmt.Errorf("count running runs: %w", err)
	}
	defer rows.Close()
	out := map[int64]int64{}
	for rows.Next() {
		var at, n int64
		if err := rows.Scan(&at, &n); err != nil {
			return nil, fmt.Errorf("count running runs: %w", err)
		}
		out[at] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count running runs: %w", err)
	}
	return out, nil
}

// GetReport implements LogService: counts by UTC day of the scheduled time, and each job's
// success rate over the range, read from the counters kept as runs complete, with each day's
// workflow instances (from the scheduler, when the service was given it); only the runs and
// instances of group_ids when given.
func (s *Service) GetReport(ctx context.Context, req *logsv1.GetReportRequest) (*logsv1.GetReportResponse, error) {
	var bad apierr.Fields
	start, err := time.Parse(time.DateOnly, req.GetStartDate())
	if err != nil {
		bad.Add("start_date", "want YYYY-MM-DD, got %q", req.GetStartDate())
	} else if start.Year() < 1970 {
		bad.Add("start_date", "want 1970-01-01 or later, got %s", req.GetStartDate())
	}
	end, err := time.Parse(time.DateOnly, req.GetEndDate())
	if err != nil {
		bad.Add("end_date", "want YYYY-MM-DD, got %q", req.GetEndDate())
	}
	if len(bad) == 0 {
		switch days := int(end.Sub(start) / (24 * time.Hour)); {
		case days < 0:
			bad.Add("end_date", "before start_date")
		case days > maxReportDays:
			bad.Add("end_date", "at most %d days after start_date, got %d", maxReportDays, days)
		}
	}
	checkGroupIDs(req.GetGroupIds(), &bad)
	if err := bad.Err(); err != nil {
		return nil, err
	}
	groups := req.GetGroupIds()
	from, to := start.UnixMilli()/dayMs, end.UnixMilli()/dayMs+1
	running, err := s.runningBy(ctx, dayMs, from, to, groups)
	if err != nil {
		return nil, err
	}
	finished, err := s.finishedBy(ctx, "report_group_days", "day", from, to, groups)
	if err != nil {
		return nil, err
	}
	instances := s.workflowDays(ctx, req.GetStartDate(), req.GetEndDate(), groups)
	resp := &logsv1.GetReportResponse{}
	for day := from; day < to; day++ {
		d := &logsv1.DayReport{Date: time.UnixMilli(day * dayMs).UTC().Format(time.DateOnly), Running: running[day]}
		if c := finished[day]; c != nil {
			d.Success, d.Fail = c[0], c[1]
		}
		d.WorkflowInstances = instances[d.Date]
		resp.Days = append(resp.Days, d)
	}
	if _, err := s.countJobs(ctx); err != nil { // the completions the background pass has not counted yet
		return nil, err
	}
	filter, gargs := s.groupFilter(groups, 3)
	q := `SELECT job_id, SUM(success), SUM(fail) FROM report_group_jobs WHERE day >= ` + s.ph(1) + ` AND day < ` + s.ph(2) + filter +
		` GROUP BY job_id ORDER BY job_id`
	rows, err := s.store.QueryContext(ctx, q, append([]any{from, to}, gargs...)...)
	if err != nil {
		return nil, fmt.Errorf("report per job: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		j := &logsv1.JobReport{}
		if err := rows.Scan(&j.JobId, &j.Success, &j.Fail); err != nil {
			return nil, fmt.Errorf("report per job: %w", err)
		}
		if n := j.Success + j.Fail; n > 0 {
			j.SuccessRate = float64(j.Success) / float64(n)
		}
		resp.Jobs = append(resp.Jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("report per job: %w", err)
	}
	return resp, nil
}

// GetDashboard implements LogService: today is the current UTC day. Run counts come from the
// report counters plus the running runs, so they stay cheap on a large table; runs cleared or
// pruned still count, as in XXL-JOB's report. Jobs and today's workflow instances come from the
// scheduler and executors from the registry's live view, when the service was given them. With group_ids, runs and jobs are
// those of the groups.
func (s *Service) GetDashboard(ctx context.Context, req *logsv1.GetDashboardRequest) (*logsv1.GetDashboardResponse, error) {
	var bad apierr.Fields
	checkGroupIDs(req.GetGroupIds(), &bad)
	if err := bad.Err(); err != nil {
		return nil, err
	}
	groups := req.GetGroupIds()
	resp := &logsv1.GetDashboardResponse{}
	nowMs := s.now().UnixMilli()
	today := nowMs / dayMs

	filter, gargs := s.groupFilter(groups, 3)
	var finished, successToday, failToday int64
	err := s.store.QueryRowContext(ctx, `SELECT COALESCE(SUM(success + fail), 0),
			COALESCE(SUM(CASE WHEN day = `+s.ph(1)+` THEN success ELSE 0 END), 0),
			COALESCE(SUM(CASE WHEN day = `+s.ph(2)+` THEN fail ELSE 0 END), 0)
		FROM report_group_days WHERE 1 = 1`+filter, append([]any{today, today}, gargs...)...).Scan(&finished, &successToday, &failToday)
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	// The literal status keeps the predicate provably inside runs_running's.
	err = s.store.QueryRowContext(ctx, fmt.Sprintf(`SELECT COUNT(*),
			COALESCE(SUM(CASE WHEN scheduled_ms >= %s AND scheduled_ms < %s THEN 1 ELSE 0 END), 0)
		FROM runs WHERE status = %d%s`, s.ph(1), s.ph(2), statusRunning, filter),
		append([]any{today * dayMs, (today + 1) * dayMs}, gargs...)...).Scan(&resp.RunningCount, &resp.RunsToday)
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	resp.RunCount = finished + resp.RunningCount
	resp.RunsToday += successToday + failToday
	if n := successToday + failToday; n > 0 {
		resp.SuccessRateToday = float64(successToday) / float64(n)
	}

	lastMinute := nowMs / minuteMs
	firstMinute := lastMinute - dashboardMinutes + 1
	perMinute, err := s.finishedBy(ctx, "report_minutes", "minute", firstMinute, lastMinute+1, groups)
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	runningPerMinute, err := s.runningBy(ctx, minuteMs, firstMinute, lastMinute+1, groups)
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	for m := firstMinute; m <= lastMinute; m++ {
		r := &logsv1.MinuteReport{StartTime: ts(m * minuteMs), Running: runningPerMinute[m]}
		if c := perMinute[m]; c != nil {
			r.Success, r.Fail = c[0], c[1]
		}
		resp.Minutes = append(resp.Minutes, r)
	}

	if s.cfg.Jobs != nil {
		n, err := s.cfg.Jobs.CountJobs(ctx, groups)
		if err != nil {
			s.log.WarnContext(ctx, "dashboard: cannot count jobs", "error", err)
		}
		resp.JobCount = n
	}
	day := time.UnixMilli(today * dayMs).UTC().Format(time.DateOnly)
	resp.WorkflowInstancesToday = s.workflowDays(ctx, day, day, groups)[day]
	if s.cfg.Executors != nil && len(groups) == 0 {
		resp.ExecutorCount = int64(s.cfg.Executors.ExecutorCount())
	}
	return resp, nil
}

// CountRunningRuns implements LogService: the running runs (runs_running) grouped by executor
// address; only the runs of group_ids when given.
func (s *Service) CountRunningRuns(ctx context.Context, req *logsv1.CountRunningRunsRequest) (*logsv1.CountRunningRunsResponse, error) {
	var bad apierr.Fields
	checkGroupIDs(req.GetGroupIds(), &bad)
	if err := bad.Err(); err != nil {
		return nil, err
	}
	filter, gargs := s.groupFilter(req.GetGroupIds(), 1)
	// The literal status keeps the predicate provably inside runs_running's.
	q := fmt.Sprintf(`SELECT executor_address, job_id, COUNT(*) FROM runs WHERE status = %d AND executor_address <> ''%s
		GROUP BY executor_address, job_id ORDER BY executor_address, job_id`, statusRunning, filter)
	rows, err := s.store.QueryContext(ctx, q, gargs...)
	if err != nil {
		return nil, fmt.Errorf("count running runs: %w", err)
	}
	defer rows.Close()
	resp := &logsv1.CountRunningRunsResponse{}
	var cur *logsv1.ExecutorRuns
	for rows.Next() {
		var addr string
		var job, n int64
		if err := rows.Scan(&addr, &job, &n); err != nil {
			return nil, fmt.Errorf("count running runs: %w", err)
		}
		if cur == nil || cur.ExecutorAddress != addr {
			cur = &logsv1.ExecutorRuns{ExecutorAddress: addr}
			resp.Executors = append(resp.Executors, cur)
		}
		cur.Running += n
		if len(cur.JobIds) < maxRunningJobIDs {
			cur.JobIds = append(cur.JobIds, job)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count running runs: %w", err)
	}
	return resp, nil
}
