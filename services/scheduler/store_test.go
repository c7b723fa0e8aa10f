package scheduler

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/schedule"
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
				if err := s.fence(ctx, tx, 0, epoch, "r"); err != nil {
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

// TestFenceWaitsForTheOldLeader: a newer leader's raise waits for the old leader's fenced
// transaction still open, and the old leader's next transaction is deposed; so a takeover that
// raises the fence before reading sees everything the old leader committed.
func TestFenceWaitsForTheOldLeader(t *testing.T) {
	t.Parallel()
	d := dbtest.Open(t, db.Config{URL: dbtest.NewPostgres(t)}, "scheduler", MigrationsFS())
	s := store{d}
	ctx := context.Background()
	old, err := d.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Rollback()
	if err := s.fence(ctx, old, 0, 5, "r1"); err != nil {
		t.Fatal(err)
	}
	raised := make(chan error, 1)
	go func() { raised <- s.raiseFence(ctx, 0, 6, "r2") }()
	// The raise must be waiting for the old leader's lock: wait until Postgres says so.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting int
		if err := d.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO partition_fence%'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == 1 {
			break
		}
		select {
		case err := <-raised:
			t.Fatalf("the newer leader raised the fence while the old leader's transaction was open (err %v)", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the newer leader's raise never waited for the fence")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := old.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-raised; err != nil {
		t.Fatalf("raise to 6 after the old leader's commit: %v", err)
	}
	tx, err := d.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := s.fence(ctx, tx, 0, 5, "r1"); !errors.Is(err, errDeposed) {
		t.Fatalf("fence(5) after epoch 6 = %v, want deposed", err)
	}
	tx.Rollback() // a refused fence still locks the row (ON CONFLICT DO UPDATE … WHERE) until its tx ends
	if err := s.raiseFence(ctx, 0, 5, "r1"); !errors.Is(err, errDeposed) {
		t.Fatalf("raiseFence(5) after epoch 6 = %v, want deposed", err)
	}
}

// TestDueScanUsesTheDueIndex: the pre-read's cost must follow the due jobs, not all jobs, so
// Postgres must answer it from the partial index job_state_part_due.
func TestDueScanUsesTheDueIndex(t *testing.T) {
	t.Parallel()
	for _, stale := range []bool{false, true} {
		t.Run(fmt.Sprintf("stale statistics %v", stale), func(t *testing.T) {
			t.Parallel()
			// 20,000 jobs, one in a hundred running.
			dueScanPlan(t, planJobsAnalyzed(t, 100, stale))
		})
	}
}

// dueScanPlan checks the plan of the due scan on d.
func dueScanPlan(t *testing.T, d *db.DB) {
	t.Helper()
	ctx := context.Background()
	tx, err := d.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := (store{d}).indexPlans(ctx, tx); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.QueryContext(ctx, `EXPLAIN `+dueIDsQuery, 3, 1005000, 5000)
	if err != nil {
		t.Fatal(err)
	}
	if got := planOf(t, rows); !strings.Contains(got, "job_state_part_due") || strings.Contains(got, "Seq Scan") {
		t.Errorf("due scan plan:\n%s\nwant an index scan of job_state_part_due and no sequential scan", got)
	}
}

// planJobs opens a Postgres store with 20,000 jobs, every runningEvery-th one running with a
// next fire in job_state, and fresh statistics: the tables the plan tests EXPLAIN against.
func planJobs(t *testing.T, runningEvery int) *db.DB {
	t.Helper()
	return planJobsAnalyzed(t, runningEvery, false)
}

// planJobsAnalyzed is planJobs; with staleStats the statistics are taken before the jobs are
// inserted, as after a bulk import that autovacuum has not analyzed yet.
func planJobsAnalyzed(t *testing.T, runningEvery int, staleStats bool) *db.DB {
	t.Helper()
	d := dbtest.Open(t, db.Config{URL: dbtest.NewPostgres(t)}, "scheduler", MigrationsFS())
	ctx := context.Background()
	analyze := `ANALYZE jobs; ANALYZE job_state`
	if staleStats {
		if _, err := d.ExecContext(ctx, analyze); err != nil {
			t.Fatal(err)
		}
		analyze = `SELECT 1`
	}
	for _, q := range []string{
		`INSERT INTO jobs (group_id, name, schedule_type, schedule_expr, misfire_strategy, route_strategy,
			block_strategy, retry_backoff, glue_type, status, create_ms, update_ms)
			SELECT 1, 'j' || g, 3, '1s', 1, 1, 1, 1, 1, CASE WHEN g % ` + strconv.Itoa(runningEvery) + ` = 0 THEN 2 ELSE 1 END, 0, 0
			FROM generate_series(1, 20000) g`,
		`INSERT INTO job_state (job_id, next_fire_ms, part) SELECT id, CASE WHEN status = 2 THEN 1000000 + id END, id % 16 FROM jobs`,
		analyze,
	} {
		if _, err := d.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// planOf reads the lines of an EXPLAIN and closes rows.
func planOf(t *testing.T, rows *sql.Rows) string {
	t.Helper()
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "\n")
}

// TestBatchWritesProbeAnIndex: the pre-read's advance and mark moves name thousands of jobs
// through arrays; after indexPlans Postgres must find each through an index of job_state, never
// scan the whole table into a hash (it did without: a cost that grew with every job and every
// dead row version, not with the batch).
func TestBatchWritesProbeAnIndex(t *testing.T) {
	t.Parallel()
	d := planJobs(t, 1) // all 20,000 running
	ctx := context.Background()
	ids := make([]int64, 3000)
	for i := range ids {
		ids[i] = int64(i*5 + 1)
	}
	for _, c := range []struct {
		name string
		q    string
		args []any
	}{
		{"advance", advanceAllPG, []any{ids, ids, ids, ids, ids}},
		{"mark moves", markArmedPG, []any{ids, ids}},
	} {
		tx, err := d.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := (store{d}).indexPlans(ctx, tx); err != nil {
			t.Fatal(err)
		}
		rows, err := tx.QueryContext(ctx, `EXPLAIN `+c.q, c.args...)
		if err != nil {
			t.Fatal(err)
		}
		got := planOf(t, rows)
		tx.Rollback()
		if !strings.Contains(got, "Index Scan using job_state_") || strings.Contains(got, "Seq Scan") || strings.Contains(got, "Hash") {
			t.Errorf("%s plan:\n%s\nwant probes of a job_state index per job, no sequential scan or hash", c.name, got)
		}
	}
}

// TestAdvanceLeavesJobsTheAPIMoved: the pre-read takes no row locks, so a start, stop or new
// schedule committed between its due scan and its advance must win: advanceAll moves only the
// jobs whose next fire is still the one read, and says which.
func TestAdvanceLeavesJobsTheAPIMoved(t *testing.T) {
	t.Parallel()
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			d := dbtest.Open(t, st.Config, "scheduler", MigrationsFS())
			s := store{d}
			ctx := context.Background()
			var ids []int64
			for i := range 3 {
				j := &jobRow{GroupID: 1, Name: "j", ScheduleType: schedule.FixRate, ScheduleExpr: "1s", Misfire: 1, Route: 1, Block: 1,
					RetryBackoff: 1, GlueType: 1, Handler: "h", Status: jobRunning, NextFireMs: 1000 + int64(i)}
				id, err := s.insert(ctx, j, 1)
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			tx, err := d.Begin(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			var (
				b      db.Batch
				dueIDs []int64
			)
			s.queueDueIDs(&b, 0, 5000, 10, &dueIDs)
			if err := tx.Send(ctx, &b); err != nil {
				t.Fatal(err)
			}
			due, err := s.dueJobs(ctx, tx.Tx, dueIDs)
			if err != nil || len(due) != 3 {
				t.Fatalf("due = %d jobs, %v; want 3", len(due), err)
			}
			// The API reschedules the second job and stops the third, on another connection,
			// before the pre-read advances (SQLite has one writer: there the change goes first).
			moved := func() {
				for i, next := range map[int]int64{1: 9000, 2: 0} {
					atx, err := d.BeginTx(ctx, nil)
					if err != nil {
						t.Fatal(err)
					}
					if err := s.setNextFire(ctx, atx, ids[i], next); err != nil {
						t.Fatal(err)
					}
					if err := atx.Commit(); err != nil {
						t.Fatal(err)
					}
				}
			}
			var as []advance
			for _, j := range due {
				as = append(as, advance{id: j.ID, readMs: j.NextFireMs, lastMs: j.NextFireMs, nextMs: j.NextFireMs + 60000, armedFromMs: j.NextFireMs})
			}
			if d.Dialect() == db.Postgres {
				moved()
			} else {
				tx.Rollback()
				moved()
				if tx, err = d.Begin(ctx, nil); err != nil {
					t.Fatal(err)
				}
			}
			done, err := s.advanceAll(ctx, tx.Tx, as)
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			if !done[ids[0]] || done[ids[1]] || done[ids[2]] || len(done) != 1 {
				t.Errorf("advanced %v, want only job %d", done, ids[0])
			}
			for i, want := range []int64{61000, 9000, 0} {
				j, err := s.get(ctx, ids[i])
				if err != nil {
					t.Fatal(err)
				}
				if j.NextFireMs != want {
					t.Errorf("job %d next fire = %d, want %d", ids[i], j.NextFireMs, want)
				}
			}
		})
	}
}

// TestGetManyReadsTheNamedJobs: the completion handler reads a batch's jobs in one query; it
// must return exactly the jobs named, with their scheduling state, on both dialects.
func TestGetManyReadsTheNamedJobs(t *testing.T) {
	t.Parallel()
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			d := dbtest.Open(t, st.Config, "scheduler", MigrationsFS())
			s := store{d}
			ctx := context.Background()
			var ids []int64
			for i := range 5 {
				id, err := s.insert(ctx, &jobRow{GroupID: 1, Name: "j" + string(rune('a'+i)), ScheduleType: schedule.FixRate, ScheduleExpr: "1s",
					Misfire: 1, Route: 1, Block: 1, RetryBackoff: 1, GlueType: 1, Status: jobRunning, ChildJobIDs: "7,8", NextFireMs: int64(1000 + i)}, 1)
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			tx, err := d.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			got, err := s.getMany(ctx, tx, []int64{ids[0], ids[3], ids[3], 999_999})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 || got[ids[0]] == nil || got[ids[3]] == nil {
				t.Fatalf("getMany = %v, want jobs %d and %d", got, ids[0], ids[3])
			}
			for _, id := range []int64{ids[0], ids[3]} {
				want, err := s.getIn(ctx, tx, id)
				if err != nil {
					t.Fatal(err)
				}
				if g := got[id]; g.Name != want.Name || g.NextFireMs != want.NextFireMs || g.ChildJobIDs != "7,8" {
					t.Errorf("job %d = %+v, want %+v", id, g, want)
				}
			}
			if none, err := s.getMany(ctx, tx, nil); err != nil || len(none) != 0 {
				t.Errorf("getMany(nil) = %v, %v", none, err)
			}
		})
	}
}

// TestManualFireTimesAreReservedOnce: reserving a manual trigger's time on both stores gives a
// time after the last one even when the clock says an earlier one, and never a whole second
// (a cron fire's time).
func TestManualFireTimesAreReservedOnce(t *testing.T) {
	t.Parallel()
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			d := dbtest.Open(t, st.Config, "scheduler", MigrationsFS())
			s := store{d}
			id, err := s.insert(t.Context(), &jobRow{Name: "m", GroupID: 1}, 1)
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			for _, now := range []int64{5998, 5998, 5998, 4000, 7000} {
				ms, err := s.reserveManualFire(t.Context(), id, now)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, ms)
			}
			if want := []int64{5998, 5999, 6001, 6002, 7001}; !slices.Equal(got, want) {
				t.Errorf("reserved %v, want %v", got, want)
			}
		})
	}
}

// TestManualFiresAreClaimedOnce: on both stores, a manual trigger reserved for forwarding is
// claimed by the first replica that asks, and by no other; a time not reserved for forwarding
// (a trigger dispatched where it was received, or none) is no claim's; a job's claims an hour
// older than a newly forwarded trigger go.
func TestManualFiresAreClaimedOnce(t *testing.T) {
	t.Parallel()
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			d := dbtest.Open(t, st.Config, "scheduler", MigrationsFS())
			s := store{d}
			ctx := t.Context()
			id, err := s.insert(ctx, &jobRow{Name: "m", GroupID: 1}, 1)
			if err != nil {
				t.Fatal(err)
			}
			forwarded := func(now int64) int64 {
				t.Helper()
				ms, err := s.reserveForwardedFire(ctx, id, now)
				if err != nil {
					t.Fatal(err)
				}
				return ms
			}
			first, second := forwarded(5001), forwarded(5001)
			local, err := s.reserveManualFire(ctx, id, 5001)
			if err != nil {
				t.Fatal(err)
			}
			if first != 5001 || second != 5002 || local != 5003 {
				t.Fatalf("reserved %d, %d, %d; want 5001, 5002, 5003", first, second, local)
			}
			claim := func(ms int64, replica string, want bool, wantErr error) {
				t.Helper()
				got, err := s.claimManualFire(ctx, id, ms, replica)
				if got != want || !errors.Is(err, wantErr) {
					t.Errorf("claim of fire %d by %s = %v, %v; want %v, %v", ms, replica, got, err, want, wantErr)
				}
			}
			claim(first, "a", true, nil)
			claim(first, "b", false, nil)
			claim(second, "b", true, nil)
			claim(second, "b", false, nil) // a second claim by the same replica is refused too
			claim(local, "a", false, errNotForwarded)
			claim(9001, "a", false, errNotForwarded)
			// An hour and more later, the job's older claims go with the next forwarded trigger.
			late := forwarded(second + manualClaimKeep.Milliseconds() + 1)
			claim(first, "a", false, errNotForwarded)
			claim(late, "a", true, nil)
			var n int
			if err := d.QueryRowContext(ctx, d.Q(`SELECT COUNT(*) FROM manual_claims WHERE job_id = $1`), id).Scan(&n); err != nil || n != 1 {
				t.Errorf("claims of job %d after an hour: %d, %v; want 1", id, n, err)
			}
		})
	}
}

// TestListFiltersMatchWhatIsTyped: on both stores, % and _ in a job list filter match only
// themselves, not any text.
func TestListFiltersMatchWhatIsTyped(t *testing.T) {
	t.Parallel()
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			s := store{dbtest.Open(t, st.Config, "scheduler", MigrationsFS())}
			for _, name := range []string{"backup 50%", "backup 500", "a_c", "abc", `x\y`} {
				if _, err := s.insert(t.Context(), &jobRow{Name: name, GroupID: 1, Handler: name, Author: name}, 1); err != nil {
					t.Fatal(err)
				}
			}
			for _, tt := range []struct {
				filter string
				want   []string
			}{
				{"50%", []string{"backup 50%"}},
				{"a_c", []string{"a_c"}},
				{"%", []string{"backup 50%"}},
				{`\`, []string{`x\y`}},
				{"backup", []string{"backup 500", "backup 50%"}},
			} {
				for _, f := range []jobFilter{{Name: tt.filter}, {Handler: tt.filter}, {Author: tt.filter}} {
					f.Limit = 10
					rows, _, err := s.list(t.Context(), f)
					if err != nil {
						t.Fatal(err)
					}
					var got []string
					for _, r := range rows {
						got = append(got, r.Name)
					}
					if !slices.Equal(got, tt.want) {
						t.Errorf("filter %+v matched %q, want %q", f, got, tt.want)
					}
				}
			}
		})
	}
}

// TestListSkipsToAPage: on both stores a job list jumps to a page by skipping the jobs before
// it, alone or after a cursor, and the total stays the count of every matching job.
func TestListSkipsToAPage(t *testing.T) {
	t.Parallel()
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			s := store{dbtest.Open(t, st.Config, "scheduler", MigrationsFS())}
			var ids []int64 // newest first
			for i := range 7 {
				id, err := s.insert(t.Context(), &jobRow{Name: "job-" + strconv.Itoa(i), GroupID: 1}, 1)
				if err != nil {
					t.Fatal(err)
				}
				ids = append([]int64{id}, ids...)
			}
			for _, tt := range []struct {
				f    jobFilter
				want []int64
			}{
				{jobFilter{Limit: 3}, ids[0:3]},
				{jobFilter{Limit: 3, Skip: 3}, ids[3:6]},
				{jobFilter{Limit: 3, Skip: 6}, ids[6:]},
				{jobFilter{Limit: 3, Skip: 7}, nil},
				{jobFilter{Limit: 3, Skip: 2, BeforeID: ids[1]}, ids[4:7]},
			} {
				rows, total, err := s.list(t.Context(), tt.f)
				if err != nil {
					t.Fatal(err)
				}
				var got []int64
				for _, r := range rows {
					got = append(got, r.ID)
				}
				if !slices.Equal(got, tt.want) || total != 7 {
					t.Errorf("list %+v = %v of %d, want %v of 7", tt.f, got, total, tt.want)
				}
			}
		})
	}
}

// TestListJobsRefusesABadSkip: a skip below 0 or above apierr.MaxSkip is InvalidArgument naming
// skip, before the store is asked.
func TestListJobsRefusesABadSkip(t *testing.T) {
	t.Parallel()
	s := &Service{}
	for _, skip := range []int32{-1, apierr.MaxSkip + 1} {
		_, err := s.ListJobs(t.Context(), &schedulerv1.ListJobsRequest{Skip: skip})
		if st := status.Convert(apierr.ToStatus(err)); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "skip") {
			t.Errorf("ListJobs with skip %d: %v, want InvalidArgument naming skip", skip, err)
		}
	}
}

// TestCursorSaysWhetherThePartitionStarted: on both stores, a partition that never followed
// completions reads cursor 0, not started; one whose stream started when logsvc had none (0
// saved) reads 0, started; a later save moves it forward only.
func TestCursorSaysWhetherThePartitionStarted(t *testing.T) {
	t.Parallel()
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			d := dbtest.Open(t, st.Config, "scheduler", MigrationsFS())
			s := store{d}
			ctx := t.Context()
			read := func() (int64, bool) {
				t.Helper()
				c, started, err := s.cursor(ctx, 3)
				if err != nil {
					t.Fatal(err)
				}
				return c, started
			}
			save := func(c int64) {
				t.Helper()
				tx, err := s.begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback()
				var b db.Batch
				s.saveCursors(&b, []term{{part: 3, epoch: 1}}, c)
				if err := tx.Send(ctx, &b); err != nil {
					t.Fatal(err)
				}
				if err := s.commit(tx); err != nil {
					t.Fatal(err)
				}
			}
			if c, started := read(); c != 0 || started {
				t.Errorf("new partition: cursor %d, started %v; want 0, not started", c, started)
			}
			save(0)
			if c, started := read(); c != 0 || !started {
				t.Errorf("after saving 0: cursor %d, started %v; want 0, started", c, started)
			}
			save(42)
			save(7)
			if c, started := read(); c != 42 || !started {
				t.Errorf("after saving 42 then 7: cursor %d, started %v; want 42, started", c, started)
			}
		})
	}
}
