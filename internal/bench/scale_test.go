package bench

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
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
