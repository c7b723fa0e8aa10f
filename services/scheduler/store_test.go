package scheduler

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
)

func TestFenceRefusesAnOlderEpoch(t *testing.T) {
	t.Parallel()
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			d := dbtest.Open(t, st.Config, "scheduler", MigrationsFS())
			s := store{d}
			ctx := context.Background()
			fence := func(epoch int64) error {
				tx, err := d.BeginTx(ctx, nil)
				if err != nil {
					t.Fatalf("begin: %v", err)
				}
				defer tx.Rollback()
				if err := s.fence(ctx, tx, epoch, "r"); err != nil {
					return err
				}
				return tx.Commit()
			}
			for _, step := range []struct {
				epoch   int64
				deposed bool
			}{{5, false}, {5, false}, {3, true}, {6, false}, {5, true}} {
				err := fence(step.epoch)
				if got := errors.Is(err, errDeposed); got != step.deposed || (err != nil && !got) {
					t.Errorf("fence(%d) = %v, want deposed=%v", step.epoch, err, step.deposed)
				}
			}
		})
	}
}

// TestDueScanUsesTheDueIndex: the pre-read's cost must follow the due jobs, not all jobs, so
// Postgres must answer it from the partial index jobs_due.
func TestDueScanUsesTheDueIndex(t *testing.T) {
	t.Parallel()
	d := dbtest.Open(t, db.Config{URL: dbtest.NewPostgres(t)}, "scheduler", MigrationsFS())
	ctx := context.Background()
	// 20,000 stopped jobs and 200 running ones, then fresh statistics.
	_, err := d.ExecContext(ctx, `INSERT INTO jobs (group_id, name, schedule_type, schedule_expr, misfire_strategy, route_strategy,
		block_strategy, retry_backoff, glue_type, status, next_fire_ms, create_ms, update_ms)
		SELECT 1, 'j' || g, 3, '1s', 1, 1, 1, 1, 1, CASE WHEN g % 100 = 0 THEN 2 ELSE 1 END,
			CASE WHEN g % 100 = 0 THEN 1000000 + g ELSE NULL END, 0, 0
		FROM generate_series(1, 20000) g`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.ExecContext(ctx, `ANALYZE jobs`); err != nil {
		t.Fatal(err)
	}
	rows, err := d.QueryContext(ctx, `EXPLAIN SELECT `+jobColumns+` FROM jobs
		WHERE status = 2 AND next_fire_ms <= $1 ORDER BY next_fire_ms LIMIT $2 FOR UPDATE`, 1005000, 5000)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if got := strings.Join(plan, "\n"); !strings.Contains(got, "jobs_due") || strings.Contains(got, "Seq Scan") {
		t.Errorf("due scan plan:\n%s\nwant an index scan of jobs_due and no sequential scan", got)
	}
}
