package bench

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/services/logsvc"
	"github.com/jobmesh/jobmesh/services/scheduler"
)

// TestInsertJobs stores scale's jobs in the scheduler's real schema, in several chunks after a
// few API-made ones: each job once, with its state, its first fire inside one interval after
// the chunk was stored, spread over the interval.
func TestInsertJobs(t *testing.T) {
	t.Parallel()
	url := dbtest.NewPostgres(t)
	dbtest.Open(t, db.Config{URL: url}, "scheduler", scheduler.MigrationsFS())
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	cfg := Config{Scenario: "scale", Bin: "jobmesh"}.withDefaults()
	top := &topology{cfg: cfg, pg: conn, groupID: 7, log: cfg.Log}
	l := newLoad()
	l.next = 3 // as if three jobs had come through the API
	start := time.Now()
	firesFrom, err := top.insertJobs(ctx, l, 25, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := l.jobs(); got != 25 {
		t.Errorf("grids for %d jobs, want 25", got)
	}
	var jobs, states, names int
	if err := conn.QueryRow(ctx, `SELECT count(*), count(DISTINCT name), (SELECT count(*) FROM scheduler.job_state)
		FROM scheduler.jobs WHERE group_id = 7`).Scan(&jobs, &names, &states); err != nil {
		t.Fatal(err)
	}
	if jobs != 25 || names != 25 || states != 25 {
		t.Errorf("stored %d jobs (%d names), %d states; want 25 each", jobs, names, states)
	}
	every := cfg.Interval.Milliseconds()
	var minFirst, maxFirst int64
	for _, g := range l.grids {
		if g.Period != every {
			t.Errorf("grid period %d, want %d", g.Period, every)
		}
		if minFirst == 0 || g.First < minFirst {
			minFirst = g.First
		}
		maxFirst = max(maxFirst, g.First)
	}
	if minFirst != firesFrom.UnixMilli() || minFirst < start.UnixMilli() {
		t.Errorf("first fire %d, want the returned %d, after the start %d", minFirst, firesFrom.UnixMilli(), start.UnixMilli())
	}
	if spread := maxFirst - minFirst; spread < every*8/10 || spread > every+time.Minute.Milliseconds() {
		t.Errorf("first fires spread over %d ms; want about one interval (%d ms)", spread, every)
	}
}

// TestReadStored counts logsvc's rows the way a window does: trigger records by group, results
// by job and trigger id (a result that came first has no group nor scheduled time yet), complete
// runs by their completions.
func TestReadStored(t *testing.T) {
	t.Parallel()
	url := dbtest.NewPostgres(t)
	dbtest.Open(t, db.Config{URL: url}, "logs", logsvc.MigrationsFS())
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	const group = 5
	// Job 1: record and result (complete). Job 2: result only, started after the window.
	// Job 3: record only, still running. Job 4: not a bench job. Job 1 again: a retry, and a fire
	// after the window.
	for _, q := range []string{
		`INSERT INTO logs.runs (trigger_id, job_id, group_id, trigger_type, scheduled_ms, trigger_outcome, status, end_ms) VALUES
			('1-1000-0-0', 1, 5, 2, 1000, 1, 2, 1005),
			('3-1500-0-0', 3, 5, 2, 1500, 1, 1, 0),
			('1-1000-0-1', 1, 5, 3, 1000, 1, 2, 1100),
			('1-9000-0-0', 1, 5, 2, 9000, 1, 2, 9005)`,
		`INSERT INTO logs.runs (trigger_id, job_id, scheduled_ms, status, end_ms) VALUES
			('2-1800-0-0', 2, 2500, 2, 2502), ('4-1800-0-0', 4, 2500, 2, 2502)`,
		`INSERT INTO logs.completions (trigger_id, job_id, group_id, status, trigger_outcome, attempt, shard_index, shard_total,
			scheduled_ms, end_ms, trigger_type, params, created_ms) VALUES
			('1-1000-0-0', 1, 5, 2, 1, 0, 0, 1, 1000, 1005, 2, '', 1040),
			('4-1800-0-0', 4, 6, 2, 1, 0, 0, 1, 1800, 1805, 2, '', 1840),
			('1-1000-0-1', 1, 5, 2, 1, 1, 0, 1, 1000, 1100, 3, '', 1140),
			('1-9000-0-0', 1, 5, 2, 1, 0, 0, 1, 9000, 9005, 2, '', 9040)`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := setBenchJobs(ctx, conn, []int64{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	s, err := readStored(ctx, conn, group, 1000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	want := stored{Dispatched: 2, Stored: 2, Completed: 1, E2E50: 40, E2E99: 40}
	if s != want {
		t.Errorf("readStored = %+v, want %+v", s, want)
	}
	// The polls count the same complete runs from the completions written after a cursor.
	var first int64
	if err := conn.QueryRow(ctx, `SELECT cursor FROM logs.completions WHERE trigger_id = '1-1000-0-0'`).Scan(&first); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		after int64
		want  int
	}{{first - 1, 1}, {first, 0}} {
		if n, err := countCompleted(ctx, conn, group, c.after, 1000, 2000); err != nil || n != c.want {
			t.Errorf("countCompleted(after %d) = %d, %v; want %d", c.after, n, err, c.want)
		}
	}
}
