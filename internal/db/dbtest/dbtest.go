// Package dbtest gives tests real stores: a fresh, uniquely named Postgres database per test
// (dropped afterwards) and a fresh SQLite directory, so one conformance suite runs against both.
// A Postgres server that cannot be reached fails the test: CI never skips a dependency.
package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobmesh/jobmesh/internal/db"
)

// AdminURL is the URL tests use to create and drop their databases: JOBMESH_TEST_DATABASE_URL,
// or the local server at 127.0.0.1:5432 as user postgres.
func AdminURL() string {
	if u := os.Getenv("JOBMESH_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// NewPostgres creates an empty database with a unique name and returns its URL. The database is
// dropped when the test ends.
func NewPostgres(tb testing.TB) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := AdminURL()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		tb.Fatalf("dbtest: connect to test postgres %s (set JOBMESH_TEST_DATABASE_URL, or run make test, which starts one): %v", admin, err)
	}
	defer conn.Close(ctx)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "jobmesh_test_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("dbtest: create database %s: %v", name, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			tb.Errorf("dbtest: drop database %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			tb.Errorf("dbtest: drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		tb.Fatalf("dbtest: admin url: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// Store is one kind of store a conformance suite runs against.
type Store struct {
	// Name is "postgres" or "sqlite", for subtest names.
	Name string
	// Config opens it (Schema left for the caller).
	Config db.Config
}

// Stores returns a fresh Postgres database and a fresh SQLite directory.
func Stores(tb testing.TB) []Store {
	tb.Helper()
	return []Store{
		{Name: "postgres", Config: db.Config{URL: NewPostgres(tb)}},
		{Name: "sqlite", Config: db.Config{DataDir: tb.TempDir()}},
	}
}

// Open opens cfg with the given schema and applies the migrations in fsys (see db.DB.Migrate);
// the store is closed when the test ends.
func Open(tb testing.TB, cfg db.Config, schema string, fsys fs.FS) *db.DB {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg.Schema = schema
	d, err := db.Open(ctx, cfg)
	if err != nil {
		tb.Fatalf("dbtest: %v", err)
	}
	tb.Cleanup(func() { d.Close() })
	if err := d.Migrate(ctx, fsys); err != nil {
		tb.Fatalf("dbtest: %v", err)
	}
	return d
}
