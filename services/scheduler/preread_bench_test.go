package scheduler

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/internal/clock"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/ring"
)

// BenchmarkPreRead measures one pre-read scan (fence, due query, advancing every due job, commit,
// arming the fires) with JOBMESH_BENCH_JOBS stored jobs (default 1,000,000) of which
// JOBMESH_BENCH_DUE are due (default 10,000), on Postgres:
//
//	go test -run '^$' -bench BenchmarkPreRead -benchtime 10x ./services/scheduler/
func BenchmarkPreRead(b *testing.B) {
	total, due := envInt("JOBMESH_BENCH_JOBS", 1_000_000), envInt("JOBMESH_BENCH_DUE", 10_000)
	d := dbtest.Open(b, db.Config{URL: dbtest.NewPostgres(b)}, "scheduler", MigrationsFS())
	ctx := context.Background()
	now := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	nowMs := now.UnixMilli()
	// Every job runs FIX_RATE 60s; `due` of them fall inside the window, the rest later.
	if _, err := d.ExecContext(ctx, `INSERT INTO jobs (group_id, name, schedule_type, schedule_expr, misfire_strategy, route_strategy,
		block_strategy, retry_backoff, glue_type, handler, status, create_ms, update_ms)
		SELECT 1, 'j' || g, 3, '60s', 1, 1, 1, 1, 1, 'h', 2, 0, 0
		FROM generate_series(1, $1) g`, total); err != nil {
		b.Fatal(err)
	}
	if _, err := d.ExecContext(ctx, `INSERT INTO job_state (job_id, next_fire_ms)
		SELECT id, CASE WHEN id <= $2 THEN $1::bigint + (id % 4000) ELSE $1::bigint + 30000 + (id % 30000) END FROM jobs`,
		nowMs, due); err != nil {
		b.Fatal(err)
	}
	for _, t := range []string{"jobs", "job_state"} {
		if _, err := d.ExecContext(ctx, `VACUUM ANALYZE `+t); err != nil {
			b.Fatal(err)
		}
	}
	clk := clock.NewFake(now)
	s := &Service{cfg: Config{PreReadWindow: 5 * time.Second, PreReadBatch: due, MisfireThreshold: 5 * time.Second, ReplicaID: "bench"},
		log: slog.New(slog.DiscardHandler), clk: clk, jobs: store{d}}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		// Make the same jobs due again, and start with an empty ring.
		if _, err := d.ExecContext(ctx, `UPDATE job_state SET next_fire_ms = $1::bigint + (job_id % 4000), armed_from_ms = NULL WHERE job_id <= $2`, nowMs, due); err != nil {
			b.Fatal(err)
		}
		l := &engine{s: s, epoch: 1, ring: ring.New(clk, func([]ringEntry) {}), owed: newOwed(), lastScanMs: nowMs}
		b.StartTimer()
		n, err := l.preRead(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if n != due {
			b.Fatalf("pre-read %d jobs, want %d", n, due)
		}
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
