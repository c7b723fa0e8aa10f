package db_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
)

// TestSend: a batch's statements run in order inside the transaction (a later one sees an
// earlier one's row, the transaction's own reads see them all, a rollback takes them back), the
// first that fails names itself through its wrap and keeps the driver's error, queries and
// counts reach their callbacks, a callback's error comes back as it is, and the batch is empty
// after Send; on Postgres and on SQLite.
func TestSend(t *testing.T) {
	t.Parallel()
	migrations := fstest.MapFS{
		"postgres/00001_init.sql": {Data: []byte("-- +goose Up\nCREATE TABLE t (id TEXT PRIMARY KEY, n BIGINT NOT NULL);\n")},
		"sqlite/00001_init.sql":   {Data: []byte("-- +goose Up\nCREATE TABLE t (id TEXT PRIMARY KEY, n BIGINT NOT NULL);\n")},
	}
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			d := dbtest.Open(t, st.Config, "batchtest", migrations)
			ctx := context.Background()
			total := func(tx *db.Tx) (n int, s int64) {
				t.Helper()
				var err error
				if tx != nil {
					err = tx.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(n), 0) FROM t`).Scan(&n, &s)
				} else {
					err = d.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(n), 0) FROM t`).Scan(&n, &s)
				}
				if err != nil {
					t.Fatal(err)
				}
				return n, s
			}
			named := func(what string) func(error) error {
				return func(err error) error { return fmt.Errorf("%s: %w", what, err) }
			}

			// In order, seen by the transaction, kept by the commit.
			tx, err := d.Begin(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var b db.Batch
			b.Queue(named("a"), d.Q(`INSERT INTO t (id, n) VALUES ($1, $2)`), "a", int64(1))
			b.Queue(named("b"), d.Q(`INSERT INTO t (id, n) SELECT $1, n + 1 FROM t WHERE id = $2`), "b", "a")
			b.Queue(nil, d.Q(`UPDATE t SET n = n * 10 WHERE id = $1`), "b")
			if b.Len() != 3 {
				t.Fatalf("queued %d statements; want 3", b.Len())
			}
			if err := tx.Send(ctx, &b); err != nil {
				t.Fatal(err)
			}
			if b.Len() != 0 {
				t.Errorf("batch holds %d statements after Send; want none", b.Len())
			}
			if n, s := total(tx); n != 2 || s != 21 {
				t.Errorf("inside the transaction: %d rows summing to %d; want 2 summing to 21 (b read a's row)", n, s)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			if n, s := total(nil); n != 2 || s != 21 {
				t.Errorf("committed: %d rows summing to %d; want 2 summing to 21", n, s)
			}

			// The first failure is returned, named, with the driver's error; the rest never runs
			// and the transaction keeps nothing.
			tx, err = d.Begin(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			b.Queue(named("c"), d.Q(`INSERT INTO t (id, n) VALUES ($1, $2)`), "c", int64(100))
			b.Queue(named("again a"), d.Q(`INSERT INTO t (id, n) VALUES ($1, $2)`), "a", int64(1000))
			b.Queue(named("d"), d.Q(`INSERT INTO t (id, n) VALUES ($1, $2)`), "d", int64(10000))
			err = tx.Send(ctx, &b)
			if err == nil || !strings.HasPrefix(err.Error(), "again a: ") || !db.IsUniqueViolation(err) {
				t.Fatalf("send: %v; want the unique violation of the second statement, named \"again a\"", err)
			}
			if b.Len() != 0 {
				t.Errorf("batch holds %d statements after a failed Send; want none", b.Len())
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			if n, s := total(nil); n != 2 || s != 21 {
				t.Errorf("after the failed batch: %d rows summing to %d; want 2 summing to 21", n, s)
			}

			// Rows and counts reach their callbacks in order, between statements; a callback's
			// error is returned as it is and ends the batch.
			tx, err = d.Begin(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var (
				ids     []string
				changed []int64
			)
			b.QueueAffected(named("bump"), func(n int64) error { changed = append(changed, n); return nil },
				d.Q(`UPDATE t SET n = n + 1 WHERE n < $1`), int64(100))
			b.QueueRows(named("ids"), func(r db.Row) error {
				var id string
				var n int64
				if err := r.Scan(&id, &n); err != nil {
					return err
				}
				ids = append(ids, fmt.Sprintf("%s=%d", id, n))
				return nil
			}, d.Q(`SELECT id, n FROM t ORDER BY id`))
			b.QueueAffected(named("none"), func(n int64) error { changed = append(changed, n); return nil },
				d.Q(`UPDATE t SET n = 0 WHERE id = $1`), "nobody")
			if err := tx.Send(ctx, &b); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(ids, " "); got != "a=2 b=21" || fmt.Sprint(changed) != "[2 0]" {
				t.Errorf("rows %q, counts %v; want \"a=2 b=21\" and [2 0]", got, changed)
			}
			errRefused := errors.New("refused")
			ran := false
			b.QueueRows(named("refuse"), func(db.Row) error { return errRefused }, d.Q(`SELECT id FROM t`))
			b.QueueAffected(named("after"), func(int64) error { ran = true; return nil }, d.Q(`UPDATE t SET n = 7`))
			if err := tx.Send(ctx, &b); err != errRefused || ran {
				t.Errorf("send: %v, later statement's callback ran: %v; want the callback's own error and no later callback", err, ran)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}

			// An empty batch is nothing; a transaction that ended refuses one.
			tx, err = d.Begin(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.Send(ctx, &b); err != nil {
				t.Errorf("empty batch: %v", err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			b.Queue(nil, d.Q(`INSERT INTO t (id, n) VALUES ($1, $2)`), "e", int64(1))
			if err := tx.Send(ctx, &b); !errors.Is(err, sql.ErrTxDone) {
				t.Errorf("send after the commit: %v; want sql.ErrTxDone", err)
			}
		})
	}
}
