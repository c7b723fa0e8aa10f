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
)

// Reports are kept as runs complete: complete() counts every completion it publishes into
// report_days and report_jobs in the same transaction, so a report reads a few counter rows
// instead of scanning runs. A run's day is the UTC day of its scheduled time. Running runs are
// a live state, not an event: they are counted through runs_running, a partial index that holds
// only running rows.

// reportKey is one counter row: a day, and a job (0 for report_days).
type reportKey struct{ day, job int64 }

// reportCounts accumulates the completions of one transaction.
type reportCounts map[reportKey]*[2]int64 // success, fail

func (c reportCounts) add(schedMs, job int64, st int32) {
	i := 1
	if st == int32(logsv1.RunStatus_RUN_STATUS_SUCCESS) {
		i = 0
	}
	for _, k := range []reportKey{{schedMs / dayMs, 0}, {schedMs / dayMs, job}} {
		if c[k] == nil {
			c[k] = new([2]int64)
		}
		c[k][i]++
	}
}

// bumpReports adds counts to the report tables. Rows are written in key order; on Postgres the
// caller holds the completions lock, so counter rows never deadlock.
func (s *Service) bumpReports(ctx context.Context, tx *sql.Tx, counts reportCounts) error {
	if len(counts) == 0 {
		return nil
	}
	keys := slices.SortedFunc(maps.Keys(counts), func(a, b reportKey) int {
		return cmp.Or(cmp.Compare(a.day, b.day), cmp.Compare(a.job, b.job))
	})
	var days, jobs []any
	for _, k := range keys {
		c := counts[k]
		if k.job == 0 {
			days = append(days, k.day, c[0], c[1])
		}
	}
	for _, k := range keys {
		if c := counts[k]; k.job != 0 {
			jobs = append(jobs, k.day, k.job, c[0], c[1])
		}
	}
	for _, chunk := range chunks(days, 3*rowsPerStatement) {
		q := `INSERT INTO report_days (day, success, fail) VALUES ` + s.values(len(chunk)/3, 3, "") + `
			ON CONFLICT (day) DO UPDATE SET success = report_days.success + excluded.success, fail = report_days.fail + excluded.fail`
		if _, err := tx.ExecContext(ctx, q, chunk...); err != nil {
			return fmt.Errorf("count runs per day: %w", err)
		}
	}
	for _, chunk := range chunks(jobs, 4*rowsPerStatement) {
		q := `INSERT INTO report_jobs (day, job_id, success, fail) VALUES ` + s.values(len(chunk)/4, 4, "") + `
			ON CONFLICT (day, job_id) DO UPDATE SET success = report_jobs.success + excluded.success, fail = report_jobs.fail + excluded.fail`
		if _, err := tx.ExecContext(ctx, q, chunk...); err != nil {
			return fmt.Errorf("count runs per job: %w", err)
		}
	}
	return nil
}

// runningByDay counts running runs per day in [fromDay, toDay).
func (s *Service) runningByDay(ctx context.Context, fromDay, toDay int64) (map[int64]int64, error) {
	// The literal status keeps the predicate provably inside runs_running's.
	rows, err := s.store.QueryContext(ctx, s.store.Q(fmt.Sprintf(`SELECT scheduled_ms / 86400000, COUNT(*) FROM runs
		WHERE status = %d AND scheduled_ms >= $1 AND scheduled_ms < $2 GROUP BY scheduled_ms / 86400000`, statusRunning)),
		fromDay*dayMs, toDay*dayMs)
	if err != nil {
		return nil, fmt.Errorf("count running runs: %w", err)
	}
	defer rows.Close()
	out := map[int64]int64{}
	for rows.Next() {
		var day, n int64
		if err := rows.Scan(&day, &n); err != nil {
			return nil, fmt.Errorf("count running runs: %w", err)
		}
		out[day] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count running runs: %w", err)
	}
	return out, nil
}

// GetReport implements LogService: counts by UTC day of the scheduled time, and each job's
// success rate over the range, read from the counters kept as runs complete.
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
	if err := bad.Err(); err != nil {
		return nil, err
	}
	from, to := start.UnixMilli()/dayMs, end.UnixMilli()/dayMs+1
	running, err := s.runningByDay(ctx, from, to)
	if err != nil {
		return nil, err
	}
	counts := map[int64]*logsv1.DayReport{}
	rows, err := s.store.QueryContext(ctx, s.store.Q(`SELECT day, success, fail FROM report_days WHERE day >= $1 AND day < $2`), from, to)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	for rows.Next() {
		var day int64
		d := &logsv1.DayReport{}
		if err := rows.Scan(&day, &d.Success, &d.Fail); err != nil {
			rows.Close()
			return nil, fmt.Errorf("report: %w", err)
		}
		counts[day] = d
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	resp := &logsv1.GetReportResponse{}
	for day := from; day < to; day++ {
		d := counts[day]
		if d == nil {
			d = &logsv1.DayReport{}
		}
		d.Running = running[day]
		d.Date = time.UnixMilli(day * dayMs).UTC().Format(time.DateOnly)
		resp.Days = append(resp.Days, d)
	}
	rows, err = s.store.QueryContext(ctx, s.store.Q(`SELECT job_id, SUM(success), SUM(fail) FROM report_jobs
		WHERE day >= $1 AND day < $2 GROUP BY job_id ORDER BY job_id`), from, to)
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
// pruned still count, as in XXL-JOB's report. Jobs come from the scheduler and executors from
// the registry's live view, when the service was given them.
func (s *Service) GetDashboard(ctx context.Context, _ *logsv1.GetDashboardRequest) (*logsv1.GetDashboardResponse, error) {
	resp := &logsv1.GetDashboardResponse{}
	today := s.now().UnixMilli() / dayMs
	var finished, successToday, failToday int64
	err := s.store.QueryRowContext(ctx, s.store.Q(`SELECT COALESCE(SUM(success + fail), 0),
			COALESCE(SUM(CASE WHEN day = $1 THEN success ELSE 0 END), 0),
			COALESCE(SUM(CASE WHEN day = $1 THEN fail ELSE 0 END), 0)
		FROM report_days`), today).Scan(&finished, &successToday, &failToday)
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	err = s.store.QueryRowContext(ctx, s.store.Q(fmt.Sprintf(`SELECT COUNT(*),
			COALESCE(SUM(CASE WHEN scheduled_ms >= $1 AND scheduled_ms < $2 THEN 1 ELSE 0 END), 0)
		FROM runs WHERE status = %d`, statusRunning)), today*dayMs, (today+1)*dayMs).Scan(&resp.RunningCount, &resp.RunsToday)
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	resp.RunCount = finished + resp.RunningCount
	resp.RunsToday += successToday + failToday
	if n := successToday + failToday; n > 0 {
		resp.SuccessRateToday = float64(successToday) / float64(n)
	}
	if s.cfg.Jobs != nil {
		n, err := s.cfg.Jobs.CountJobs(ctx)
		if err != nil {
			s.log.WarnContext(ctx, "dashboard: cannot count jobs", "error", err)
		}
		resp.JobCount = n
	}
	if s.cfg.Executors != nil {
		resp.ExecutorCount = int64(s.cfg.Executors.ExecutorCount())
	}
	return resp, nil
}
