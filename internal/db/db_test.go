package db_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
)

func TestMigrateAndRebind(t *testing.T) {
	t.Parallel()
	migrations := fstest.MapFS{
		"postgres/00001_init.sql": {Data: []byte("-- +goose Up\nCREATE TABLE t (id BIGINT PRIMARY KEY, a TEXT NOT NULL, b TEXT NOT NULL);\n")},
		"sqlite/00001_init.sql":   {Data: []byte("-- +goose Up\nCREATE TABLE t (id INTEGER PRIMARY KEY, a TEXT NOT NULL, b TEXT NOT NULL);\n")},
	}
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			d := dbtest.Open(t, st.Config, "dbtest", migrations)
			ctx := context.Background()
			// $2 before $1 and a repeated $1: SQLite must bind by number, not by order of appearance.
			if _, err := d.ExecContext(ctx, d.Q("INSERT INTO t (b, a, id) VALUES ($2, $1, $3)"), "A", "B", 1); err != nil {
				t.Fatalf("insert: %v", err)
			}
			var a, b string
			if err := d.QueryRowContext(ctx, d.Q("SELECT a, b FROM t WHERE id = $1 AND a = $2 AND $1 = 1"), 1, "A").Scan(&a, &b); err != nil {
				t.Fatalf("select: %v", err)
			}
			if a != "A" || b != "B" {
				t.Errorf("got a=%q b=%q, want a=A b=B", a, b)
			}
			// Migrating twice is a no-op.
			if err := d.Migrate(ctx, migrations); err != nil {
				t.Errorf("second migrate: %v", err)
			}
		})
	}
}

// TestConcurrentMigrate: replicas started together on a fresh database all migrate cleanly.
func TestConcurrentMigrate(t *testing.T) {
	t.Parallel()
	url := dbtest.NewPostgres(t)
	migrations := fstest.MapFS{
		"postgres/00001_a.sql": {Data: []byte("-- +goose Up\nCREATE TABLE a (id BIGINT PRIMARY KEY);\n")},
		"postgres/00002_b.sql": {Data: []byte("-- +goose Up\nCREATE TABLE b (id BIGINT PRIMARY KEY);\n")},
	}
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			d, err := db.Open(context.Background(), db.Config{URL: url, Schema: "race"})
			if err != nil {
				errs <- err
				return
			}
			defer d.Close()
			errs <- d.Migrate(context.Background(), migrations)
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Errorf("concurrent migrate: %v", err)
		}
	}
}

// TestSQLiteDataDirWithURIMarks: a data dir whose name holds '%', '?' or '#' (a test named
// "x#01", a user's folder) keeps its SQLite file where it says, not cut at the mark.
func TestSQLiteDataDirWithURIMarks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a#b?c%d")
	d, err := db.Open(t.Context(), db.Config{DataDir: dir, Schema: "marks"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.ExecContext(t.Context(), "CREATE TABLE x (a INTEGER)"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "marks.db")); err != nil {
		t.Errorf("the store is not in its data dir: %v", err)
	}
}

// TestWarmOpensThePool: after Warm a Postgres pool holds all its connections, open and idle.
func TestWarmOpensThePool(t *testing.T) {
	t.Parallel()
	migrations := fstest.MapFS{"postgres/00001_init.sql": {Data: []byte("-- +goose Up\nCREATE TABLE t (id BIGINT PRIMARY KEY);\n")}}
	d := dbtest.Open(t, db.Config{URL: dbtest.NewPostgres(t), MaxConns: 4}, "warm", migrations)
	if err := d.Warm(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); st.OpenConnections != 4 || st.Idle != 4 {
		t.Errorf("after Warm: %d open, %d idle; want 4 and 4", st.OpenConnections, st.Idle)
	}
}

// TestPoolSizeFromTheURL: the database URL's pool_max_conns sizes the pool (and is not sent to
// Postgres as a setting); Config.MaxConns wins over it; a bad value is refused by name.
func TestPoolSizeFromTheURL(t *testing.T) {
	t.Parallel()
	migrations := fstest.MapFS{"postgres/00001_init.sql": {Data: []byte("-- +goose Up\nCREATE TABLE t (id BIGINT PRIMARY KEY);\n")}}
	url := dbtest.NewPostgres(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	d := dbtest.Open(t, db.Config{URL: url + sep + "pool_max_conns=3"}, "sized", migrations)
	if err := d.Warm(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); st.MaxOpenConnections != 3 || st.OpenConnections != 3 {
		t.Errorf("pool_max_conns=3: max %d, %d open after Warm; want 3 and 3", st.MaxOpenConnections, st.OpenConnections)
	}
	byConfig := dbtest.Open(t, db.Config{URL: url + sep + "pool_max_conns=3", MaxConns: 2}, "sized", migrations)
	if n := byConfig.Stats().MaxOpenConnections; n != 2 {
		t.Errorf("MaxConns 2 with pool_max_conns=3: max %d; want 2", n)
	}
	for _, bad := range []string{"0", "-1", "many"} {
		_, err := db.Open(t.Context(), db.Config{URL: url + sep + "pool_max_conns=" + bad, Schema: "sized"})
		if err == nil || !strings.Contains(err.Error(), "pool_max_conns") {
			t.Errorf("pool_max_conns=%s: err %v; want one naming pool_max_conns", bad, err)
		}
	}
}
