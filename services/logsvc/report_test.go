package logsvc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
)

// groupJobs counts jobs per executor group, as the scheduler would.
type groupJobs map[int64]int64

func (g groupJobs) Job(context.Context, int64) (JobInfo, error) {
	return JobInfo{}, errors.New("no jobs in this test")
}

func (g groupJobs) CountJobs(_ context.Context, groups []int64) (int64, error) {
	var n int64
	for id, c := range g {
		if len(groups) == 0 || slices.Contains(groups, id) {
			n += c
		}
	}
	return n, nil
}

// TestReportsByGroup: the dashboard, the report and the running counts are limited to the
// executor groups asked for, and the dashboard counts the last hour's fires per minute.
func TestReportsByGroup(t *testing.T) {
	t.Parallel()
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnvWith(t, st, Config{Retention: -1, Jobs: groupJobs{1: 5, 2: 7}}, false)
			now := time.Date(2030, 1, 2, 10, 30, 15, 0, time.UTC)
			e.svc.now = func() time.Time { return now }
			ctx := ctxFor(t)
			at := func(d time.Duration) int64 { return now.Add(d).UnixMilli() }
			in := func(group int64, addr string, r *logsv1.TriggerRecord) *logsv1.TriggerRecord {
				r.GroupId, r.ExecutorAddress = group, addr
				return r
			}
			const a, b = "10.0.0.1:9999", "10.0.0.2:9999"
			e.mustRecords(t,
				in(1, a, record("201-a", 201, at(-5*time.Minute))), in(1, a, record("201-b", 201, at(-5*time.Minute))),
				in(1, a, record("201-c", 201, at(-5*time.Minute))), in(1, a, record("201-d", 201, at(-time.Minute))),
				in(2, b, record("301-a", 301, at(-5*time.Minute))), in(2, b, record("301-b", 301, at(-2*time.Minute))),
				in(2, b, record("301-c", 301, at(-2*time.Minute))), in(2, a, record("302-a", 302, at(-3*time.Minute))),
				in(2, b, record("301-y", 301, at(-25*time.Hour))))
			done := func(id string, job int64, st logsv1.RunStatus) *logsv1.RunResult {
				return result(id, job, st, at(-4*time.Minute))
			}
			e.mustResults(t, done("201-a", 201, logsv1.RunStatus_RUN_STATUS_SUCCESS), done("201-b", 201, logsv1.RunStatus_RUN_STATUS_SUCCESS),
				done("201-c", 201, logsv1.RunStatus_RUN_STATUS_FAIL), done("301-a", 301, logsv1.RunStatus_RUN_STATUS_SUCCESS),
				done("301-y", 301, logsv1.RunStatus_RUN_STATUS_SUCCESS))

			dashboard := func(groups ...int64) string {
				t.Helper()
				d, err := e.logs.GetDashboard(ctx, &logsv1.GetDashboardRequest{GroupIds: groups})
				if err != nil {
					t.Fatalf("GetDashboard(%v): %v", groups, err)
				}
				var busy []string
				for _, m := range d.GetMinutes() {
					if m.GetRunning()+m.GetSuccess()+m.GetFail() > 0 {
						busy = append(busy, fmt.Sprintf("%s %d/%d/%d", m.GetStartTime().AsTime().Format("15:04"), m.GetRunning(), m.GetSuccess(), m.GetFail()))
					}
				}
				if n := len(d.GetMinutes()); n != 60 || !d.GetMinutes()[59].GetStartTime().AsTime().Equal(now.Truncate(time.Minute)) {
					t.Errorf("dashboard(%v) minutes: %d ending %v, want 60 ending at the current minute", groups, n, d.GetMinutes()[n-1].GetStartTime().AsTime())
				}
				return fmt.Sprintf("today %d rate %.2f running %d stored %d jobs %d executors %d minutes %v", d.GetRunsToday(), d.GetSuccessRateToday(),
					d.GetRunningCount(), d.GetRunCount(), d.GetJobCount(), d.GetExecutorCount(), busy)
			}
			for _, tt := range []struct {
				groups []int64
				want   string
			}{
				{[]int64{1}, "today 4 rate 0.67 running 1 stored 4 jobs 5 executors 0 minutes [10:25 0/2/1 10:29 1/0/0]"},
				{[]int64{2}, "today 4 rate 1.00 running 3 stored 5 jobs 7 executors 0 minutes [10:25 0/1/0 10:27 1/0/0 10:28 2/0/0]"},
				{nil, "today 8 rate 0.75 running 4 stored 9 jobs 12 executors 0 minutes [10:25 0/3/1 10:27 1/0/0 10:28 2/0/0 10:29 1/0/0]"},
				{[]int64{1, 2}, "today 8 rate 0.75 running 4 stored 9 jobs 12 executors 0 minutes [10:25 0/3/1 10:27 1/0/0 10:28 2/0/0 10:29 1/0/0]"},
				{[]int64{3}, "today 0 rate 0.00 running 0 stored 0 jobs 0 executors 0 minutes []"},
			} {
				if got := dashboard(tt.groups...); got != tt.want {
					t.Errorf("dashboard of groups %v:\n got %s\nwant %s", tt.groups, got, tt.want)
				}
			}

			report := func(groups ...int64) []string {
				t.Helper()
				rep, err := e.logs.GetReport(ctx, &logsv1.GetReportRequest{StartDate: "2030-01-01", EndDate: "2030-01-02", GroupIds: groups})
				if err != nil {
					t.Fatalf("GetReport(%v): %v", groups, err)
				}
				var out []string
				for _, d := range rep.GetDays() {
					out = append(out, fmt.Sprintf("%s %d/%d/%d", d.GetDate(), d.GetRunning(), d.GetSuccess(), d.GetFail()))
				}
				for _, j := range rep.GetJobs() {
					out = append(out, fmt.Sprintf("job %d %d/%d", j.GetJobId(), j.GetSuccess(), j.GetFail()))
				}
				return out
			}
			for _, tt := range []struct {
				groups []int64
				want   []string
			}{
				{[]int64{1}, []string{"2030-01-01 0/0/0", "2030-01-02 1/2/1", "job 201 2/1"}},
				{[]int64{2}, []string{"2030-01-01 0/1/0", "2030-01-02 3/1/0", "job 301 2/0"}},
				{nil, []string{"2030-01-01 0/1/0", "2030-01-02 4/3/1", "job 201 2/1", "job 301 2/0"}},
			} {
				if got := report(tt.groups...); !slices.Equal(got, tt.want) {
					t.Errorf("report of groups %v: got %v, want %v", tt.groups, got, tt.want)
				}
			}

			running := func(groups ...int64) string {
				t.Helper()
				resp, err := e.logs.CountRunningRuns(ctx, &logsv1.CountRunningRunsRequest{GroupIds: groups})
				if err != nil {
					t.Fatalf("CountRunningRuns(%v): %v", groups, err)
				}
				var out []string
				for _, x := range resp.GetExecutors() {
					out = append(out, fmt.Sprintf("%s %d %v", x.GetExecutorAddress(), x.GetRunning(), x.GetJobIds()))
				}
				return strings.Join(out, "; ")
			}
			for _, tt := range []struct {
				groups []int64
				want   string
			}{
				{nil, "10.0.0.1:9999 2 [201 302]; 10.0.0.2:9999 2 [301]"},
				{[]int64{1}, "10.0.0.1:9999 1 [201]"},
				{[]int64{2}, "10.0.0.1:9999 1 [302]; 10.0.0.2:9999 2 [301]"},
			} {
				if got := running(tt.groups...); got != tt.want {
					t.Errorf("running runs of groups %v: got %q, want %q", tt.groups, got, tt.want)
				}
			}

			for name, call := range map[string]func() error{
				"GetDashboard": func() error {
					_, err := e.logs.GetDashboard(ctx, &logsv1.GetDashboardRequest{GroupIds: []int64{1, -2}})
					return err
				},
				"GetReport": func() error {
					_, err := e.logs.GetReport(ctx, &logsv1.GetReportRequest{StartDate: "2030-01-01", EndDate: "2030-01-02", GroupIds: []int64{1, -2}})
					return err
				},
				"CountRunningRuns": func() error {
					_, err := e.logs.CountRunningRuns(ctx, &logsv1.CountRunningRunsRequest{GroupIds: []int64{1, -2}})
					return err
				},
			} {
				if code, field := fieldOf(call()); field != "group_ids[1]" {
					t.Errorf("%s with group -2: %v naming %q, want InvalidArgument naming group_ids[1]", name, code, field)
				}
			}

			// Per-minute counts are kept for a day: a late run older than that counts per day
			// only, and a day later the sweep's prune leaves no minute row.
			e.mustResults(t, done("301-b", 301, logsv1.RunStatus_RUN_STATUS_SUCCESS))
			minuteRows := func() int {
				t.Helper()
				var n int
				if err := e.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM report_minutes`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			if n := minuteRows(); n != 3 { // 10:25 in groups 1 and 2, 10:28 in group 2, none for yesterday's run
				t.Errorf("%d per-minute rows, want 3", n)
			}
			now = now.Add(24*time.Hour + 10*time.Minute)
			if err := e.svc.pruneMinutes(ctx); err != nil {
				t.Fatal(err)
			}
			if n := minuteRows(); n != 0 {
				t.Errorf("%d per-minute rows a day later, want 0", n)
			}
		})
	}
}

// TestGroupReportsMigration: the counters kept before reports knew groups move to the group of
// each job's newest run, or group 0 when none is left, and keep their sums.
func TestGroupReportsMigration(t *testing.T) {
	t.Parallel()
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			old := fstest.MapFS{}
			err := fs.WalkDir(MigrationsFS(), ".", func(path string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() || d.Name() >= "00003_" { // the migrations before 00003
					return err
				}
				b, err := fs.ReadFile(MigrationsFS(), path)
				old[path] = &fstest.MapFile{Data: b}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			d := dbtest.Open(t, st.Config, "logs", old)
			ctx := ctxFor(t)
			for _, q := range []string{
				`INSERT INTO runs (trigger_id, job_id, group_id, status) VALUES ('a', 10, 4, 2), ('b', 10, 5, 2), ('c', 11, 4, 3)`,
				`INSERT INTO report_days (day, success, fail) VALUES (100, 3, 1), (101, 2, 0)`,
				`INSERT INTO report_jobs (day, job_id, success, fail) VALUES (100, 10, 2, 0), (100, 11, 0, 1), (100, 12, 1, 0), (101, 10, 2, 0)`,
			} {
				if _, err := d.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			if err := d.Migrate(ctx, MigrationsFS()); err != nil {
				t.Fatalf("migrate: %v", err)
			}
			rows, err := d.QueryContext(ctx, `SELECT day, group_id, job_id, success, fail FROM report_group_jobs ORDER BY day, group_id, job_id`)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for rows.Next() {
				var day, group, job, ok, fail int64
				if err := rows.Scan(&day, &group, &job, &ok, &fail); err != nil {
					t.Fatal(err)
				}
				got = append(got, fmt.Sprintf("%d g%d j%d %d/%d", day, group, job, ok, fail))
			}
			rows.Close()
			// job 10's newest run ('b') is in group 5; job 12 has no run left.
			if want := []string{"100 g0 j12 1/0", "100 g4 j11 0/1", "100 g5 j10 2/0", "101 g5 j10 2/0"}; !slices.Equal(got, want) {
				t.Errorf("report_group_jobs: got %v, want %v", got, want)
			}
			var days string
			if err := d.QueryRowContext(ctx, `SELECT COUNT(*) || ' ' || SUM(success) || '/' || SUM(fail) FROM report_group_days`).Scan(&days); err != nil {
				t.Fatal(err)
			}
			if days != "4 5/1" {
				t.Errorf("report_group_days: got %s (rows, success/fail), want 4 5/1", days)
			}
		})
	}
}

// TestJobCountsCountEachCompletionOnce: the per-job counters follow completions; passes that
// run at once (replicas, GetReport beside the background pass) count each completion once.
func TestJobCountsCountEachCompletionOnce(t *testing.T) {
	t.Parallel()
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnvWith(t, st, Config{Retention: -1}, false)
			const fires = 30
			for i := range fires {
				id := fmt.Sprintf("170-%d", i)
				job, sched := int64(170+i%3), base+int64(i)
				e.mustRecords(t, record(id, job, sched))
				status := logsv1.RunStatus_RUN_STATUS_SUCCESS
				if i%5 == 0 {
					status = logsv1.RunStatus_RUN_STATUS_FAIL
				}
				e.mustResults(t, result(id, job, status, sched+1))
			}
			ctx := ctxFor(t)
			// Each pass holds its transaction open a moment, so that the four overlap.
			e.svc.beforeCommit = func(context.Context, *db.Tx) { time.Sleep(50 * time.Millisecond) }
			var wg sync.WaitGroup
			counted := make([]int, 4)
			for i := range counted {
				wg.Go(func() {
					n, err := e.svc.countJobs(ctx)
					if err != nil {
						t.Errorf("countJobs: %v", err)
					}
					counted[i] = n
				})
			}
			wg.Wait()
			if sum := counted[0] + counted[1] + counted[2] + counted[3]; sum != fires {
				t.Errorf("completions counted by four passes at once: %v, want %d in all", counted, fires)
			}
			var success, fail int64
			if err := e.db.QueryRowContext(ctx, `SELECT SUM(success), SUM(fail) FROM report_group_jobs`).Scan(&success, &fail); err != nil {
				t.Fatal(err)
			}
			if success != 24 || fail != 6 {
				t.Errorf("report_group_jobs: got %d successes, %d failures, want 24, 6", success, fail)
			}
			if n, err := e.svc.countJobs(ctx); err != nil || n != 0 {
				t.Errorf("another pass: counted %d, %v; want 0", n, err)
			}
		})
	}
}
