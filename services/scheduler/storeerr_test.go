package scheduler

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/route"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/schedule"
)

// TestStoreTranslatesDriverErrors: real failures of real statements, in Postgres and SQLite,
// come out of the store as the package's errors, each as exactly one of them: no row as
// apierr.ErrJobNotFound, a unique violation as errDuplicate, a serialization failure, a
// deadlock or a busy SQLite file as errRetryable, a fenced-off write as errDeposed; any other
// failure as none of them.
func TestStoreTranslatesDriverErrors(t *testing.T) {
	t.Parallel()
	kinds := []error{apierr.ErrJobNotFound, errDuplicate, errRetryable, errDeposed}
	type env struct {
		s   store
		d   *db.DB
		cfg db.Config
	}
	cases := []struct {
		name    string
		dialect db.Dialect // 0: both
		want    error      // nil: none of kinds
		produce func(t *testing.T, e env) error
	}{
		{name: "no such job", want: apierr.ErrJobNotFound, produce: func(t *testing.T, e env) error {
			_, err := e.s.get(t.Context(), 424242)
			return err
		}},
		{name: "unique violation", want: errDuplicate, produce: func(t *testing.T, e env) error {
			insert := func() error {
				_, err := e.d.ExecContext(t.Context(), e.d.Q(`INSERT INTO partition_fence (part, epoch, holder) VALUES ($1, $2, $3)`), 7, 1, "r")
				return err
			}
			if err := insert(); err != nil {
				t.Fatal(err)
			}
			return storeErr(insert(), "insert fence")
		}},
		{name: "fenced off", want: errDeposed, produce: func(t *testing.T, e env) error {
			if err := e.s.raiseFence(t.Context(), 3, 5, "new"); err != nil {
				t.Fatal(err)
			}
			return e.s.raiseFence(t.Context(), 3, 4, "old")
		}},
		{name: "other failure", want: nil, produce: func(t *testing.T, e env) error {
			_, err := e.d.ExecContext(t.Context(), `UPDATE no_such_table SET x = 1`)
			return storeErr(err, "update")
		}},
		{name: "serialization failure", dialect: db.Postgres, want: errRetryable, produce: func(t *testing.T, e env) error {
			ctx := t.Context()
			if err := e.s.raiseFence(ctx, 0, 1, "r"); err != nil {
				t.Fatal(err)
			}
			tx, err := e.d.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			var epoch int64
			if err := tx.QueryRowContext(ctx, `SELECT epoch FROM partition_fence WHERE part = 0`).Scan(&epoch); err != nil {
				t.Fatal(err) // the snapshot is taken here
			}
			if _, err := e.d.ExecContext(ctx, `UPDATE partition_fence SET epoch = 2 WHERE part = 0`); err != nil {
				t.Fatal(err)
			}
			_, err = tx.ExecContext(ctx, `UPDATE partition_fence SET epoch = 3 WHERE part = 0`)
			return storeErr(err, "update fence")
		}},
		{name: "deadlock", dialect: db.Postgres, want: errRetryable, produce: func(t *testing.T, e env) error {
			ctx := t.Context()
			for _, p := range []int{0, 1} {
				if err := e.s.raiseFence(ctx, p, 1, "r"); err != nil {
					t.Fatal(err)
				}
			}
			var txs [2]*sql.Tx
			for i := range txs {
				tx, err := e.d.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback()
				if _, err := tx.ExecContext(ctx, `UPDATE partition_fence SET holder = 'x' WHERE part = $1`, i); err != nil {
					t.Fatal(err)
				}
				txs[i] = tx
			}
			// Each now takes the other's row: Postgres aborts one of them. The victim rolls back
			// at once, so that the other's statement ends.
			lock := func(tx *sql.Tx, part int) error {
				_, err := tx.ExecContext(ctx, `UPDATE partition_fence SET holder = 'y' WHERE part = $1`, part)
				if err != nil {
					tx.Rollback()
				}
				return err
			}
			first := make(chan error, 1)
			go func() { first <- lock(txs[0], 1) }()
			err := errors.Join(lock(txs[1], 0), <-first)
			if err == nil {
				t.Fatal("no deadlock")
			}
			return storeErr(err, "cross locks")
		}},
		{name: "busy file", dialect: db.SQLite, want: errRetryable, produce: func(t *testing.T, e env) error {
			ctx := t.Context()
			// The store holds the write lock; another process's writer that will not wait is
			// refused.
			conn, err := e.d.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
				t.Fatal(err)
			}
			defer conn.ExecContext(context.Background(), `ROLLBACK`)
			other, err := sql.Open("sqlite", "file:"+filepath.Join(e.cfg.DataDir, "scheduler.db")+"?_pragma=busy_timeout(0)")
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			_, err = other.ExecContext(ctx, `INSERT INTO partition_fence (part, epoch, holder) VALUES (9, 1, 'r')`)
			return storeErr(err, "insert fence")
		}},
	}
	for _, dialect := range []db.Dialect{db.Postgres, db.SQLite} {
		t.Run(dialect.String(), func(t *testing.T) {
			t.Parallel()
			for _, c := range cases {
				if c.dialect != 0 && c.dialect != dialect {
					continue // the case's failure is one of the other dialect
				}
				t.Run(c.name, func(t *testing.T) {
					cfg := db.Config{DataDir: t.TempDir()} // a store of its own
					if dialect == db.Postgres {
						cfg = db.Config{URL: dbtest.NewPostgres(t)}
					}
					d := dbtest.Open(t, cfg, "scheduler", MigrationsFS())
					err := c.produce(t, env{s: store{d}, d: d, cfg: cfg})
					if err == nil {
						t.Fatal("no error")
					}
					for _, k := range kinds {
						if got, want := errors.Is(err, k), k == c.want; got != want {
							t.Errorf("errors.Is(%v, %v) = %v, want %v", err, k, got, want)
						}
					}
				})
			}
		})
	}
}

// TestStoredEnumsKeepTheirNumbers: the package's enums are stored by number, and the rows
// written before they existed hold the API's numbers; a renumbering would change what every
// stored job and pending fire means.
func TestStoredEnumsKeepTheirNumbers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		own, wire int32
	}{
		{"stopped", int32(jobStopped), int32(schedulerv1.JobStatus_JOB_STATUS_STOPPED)},
		{"running", int32(jobRunning), int32(schedulerv1.JobStatus_JOB_STATUS_RUNNING)},
		{"status unset", int32(jobStatusUnset), int32(schedulerv1.JobStatus_JOB_STATUS_UNSPECIFIED)},
		{"none", int32(schedule.None), int32(schedulerv1.ScheduleType_SCHEDULE_TYPE_NONE)},
		{"cron", int32(schedule.Cron), int32(schedulerv1.ScheduleType_SCHEDULE_TYPE_CRON)},
		{"fix rate", int32(schedule.FixRate), int32(schedulerv1.ScheduleType_SCHEDULE_TYPE_FIX_RATE)},
		{"fix delay", int32(schedule.FixDelay), int32(schedulerv1.ScheduleType_SCHEDULE_TYPE_FIX_DELAY)},
		{"once", int32(schedule.Once), int32(schedulerv1.ScheduleType_SCHEDULE_TYPE_ONCE)},
		{"manual", int32(triggerManual), int32(schedulerv1.TriggerType_TRIGGER_TYPE_MANUAL)},
		{"cron trigger", int32(triggerCron), int32(schedulerv1.TriggerType_TRIGGER_TYPE_CRON)},
		{"retry", int32(triggerRetry), int32(schedulerv1.TriggerType_TRIGGER_TYPE_RETRY)},
		{"parent", int32(triggerParent), int32(schedulerv1.TriggerType_TRIGGER_TYPE_PARENT)},
		{"api", int32(triggerAPI), int32(schedulerv1.TriggerType_TRIGGER_TYPE_API)},
		{"misfire", int32(triggerMisfire), int32(schedulerv1.TriggerType_TRIGGER_TYPE_MISFIRE)},
		{"do nothing", int32(misfireDoNothing), int32(schedulerv1.MisfireStrategy_MISFIRE_STRATEGY_DO_NOTHING)},
		{"fire once now", int32(misfireFireOnceNow), int32(schedulerv1.MisfireStrategy_MISFIRE_STRATEGY_FIRE_ONCE_NOW)},
		{"first", int32(route.First), int32(schedulerv1.RouteStrategy_ROUTE_STRATEGY_FIRST)},
		{"busyover", int32(route.Busyover), int32(schedulerv1.RouteStrategy_ROUTE_STRATEGY_BUSYOVER)},
		{"sharding broadcast", int32(route.ShardingBroadcast), int32(schedulerv1.RouteStrategy_ROUTE_STRATEGY_SHARDING_BROADCAST)},
		{"serial", int32(blockSerial), int32(schedulerv1.BlockStrategy_BLOCK_STRATEGY_SERIAL_EXECUTION)},
		{"discard later", int32(blockDiscardLater), int32(schedulerv1.BlockStrategy_BLOCK_STRATEGY_DISCARD_LATER)},
		{"cover early", int32(blockCoverEarly), int32(schedulerv1.BlockStrategy_BLOCK_STRATEGY_COVER_EARLY)},
		{"no wait", int32(retryNoWait), int32(schedulerv1.RetryBackoff_RETRY_BACKOFF_NONE)},
		{"fixed", int32(retryFixed), int32(schedulerv1.RetryBackoff_RETRY_BACKOFF_FIXED)},
		{"exponential", int32(retryExponential), int32(schedulerv1.RetryBackoff_RETRY_BACKOFF_EXPONENTIAL)},
		{"bean", int32(glueBean), int32(schedulerv1.GlueType_GLUE_TYPE_BEAN)},
		{"groovy", int32(glueGroovy), int32(schedulerv1.GlueType_GLUE_TYPE_GLUE_GROOVY)},
	} {
		if c.own != c.wire {
			t.Errorf("%s: stored as %d, the API's number is %d", c.name, c.own, c.wire)
		}
	}
}
