// Package db opens a service's store: its own schema in Postgres, or its own file in SQLite for
// `jobmesh dev`, and applies the service's embedded goose migrations. Each service passes its
// schema name and touches nothing else; queries are written once with $n placeholders and
// portable SQL, and Rebind adapts them to SQLite.
package db

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"go.opentelemetry.io/otel/metric"
	"modernc.org/sqlite" // the embedded store of jobmesh dev
	sqlite3 "modernc.org/sqlite/lib"
)

// Dialect is the SQL flavour of a store.
type Dialect int

const (
	// Postgres is the production store.
	Postgres Dialect = iota + 1
	// SQLite is the embedded store of jobmesh dev.
	SQLite
)

// String names the dialect as goose and the migration folders do.
func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case SQLite:
		return "sqlite"
	}
	return "unknown"
}

// IndexPlans is a Postgres statement that makes every plan of the rest of the transaction probe
// indexes: no scan of a whole table, no hash or merge join. A batch statement that names
// thousands of rows by key through array parameters (WHERE id = ANY($1), FROM unnest(...))
// is planned with the arrays' real sizes, and Postgres then rather scans the whole table into a
// hash than probes its index thousands of times, a cost that grows with the table (and with
// its dead row versions) instead of with the batch.
const IndexPlans = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_hashjoin', 'off', true),
	set_config('enable_mergejoin', 'off', true)`

// Config says where a service's data lives.
type Config struct {
	// URL is a Postgres URL (postgres://…). Empty means SQLite under DataDir.
	URL string
	// DataDir holds the SQLite file <Schema>.db when URL is empty.
	DataDir string
	// Schema is the service's schema (Postgres) or file name (SQLite): [a-z_]+.
	Schema string
	// MaxConns caps the pool; 0 means the URL's pool_max_conns parameter, else 10, for
	// Postgres. SQLite always uses one connection so writers never meet SQLITE_BUSY.
	MaxConns int
}

// DB is a service's handle on its store.
type DB struct {
	*sql.DB
	dialect Dialect
	schema  string
	conn    *pgx.ConnConfig     // Postgres: how to open a connection of one's own (Listen)
	rebind  sync.Map            // query → rebound query (SQLite)
	metrics metric.Registration // the pool stats callback; nil when not registered
}

var schemaName = regexp.MustCompile(`^[a-z_]+$`)

// Open connects to the store and makes sure the service's schema exists.
func Open(ctx context.Context, cfg Config) (*DB, error) {
	if !schemaName.MatchString(cfg.Schema) {
		return nil, fmt.Errorf("db: schema %q: want [a-z_]+", cfg.Schema)
	}
	if cfg.URL == "" {
		return openSQLite(ctx, cfg)
	}
	return openPostgres(ctx, cfg)
}

func openPostgres(ctx context.Context, cfg Config) (*DB, error) {
	pc, err := pgx.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("db: database url: %w", err)
	}
	n, err := poolSize(cfg.MaxConns, pc.RuntimeParams)
	if err != nil {
		return nil, err
	}
	// Create the schema with a plain connection first: search_path must name an existing schema.
	boot, err := pgx.ConnectConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("db: connect to postgres %s: %w", redact(cfg.URL), err)
	}
	_, err = boot.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+cfg.Schema)
	boot.Close(ctx)
	if err != nil && !IsUniqueViolation(err) { // concurrent CREATE SCHEMA IF NOT EXISTS can race
		return nil, fmt.Errorf("db: create schema %s: %w", cfg.Schema, err)
	}
	pc.RuntimeParams["search_path"] = cfg.Schema
	// Every query of ours is a short indexed read or a batch write. A parallel plan costs the
	// launch of a worker process (10–30 ms), more than the work itself: the pre-read's due query
	// took 37 ms planned with one worker and 5 ms without. The URL may still ask for them.
	if _, ok := pc.RuntimeParams["max_parallel_workers_per_gather"]; !ok {
		pc.RuntimeParams["max_parallel_workers_per_gather"] = "0"
	}
	sdb := stdlib.OpenDB(*pc)
	sdb.SetMaxOpenConns(n)
	sdb.SetMaxIdleConns(n)
	if err := sdb.PingContext(ctx); err != nil {
		sdb.Close()
		return nil, fmt.Errorf("db: ping postgres: %w", err)
	}
	return withPoolMetrics(&DB{DB: sdb, dialect: Postgres, schema: cfg.Schema, conn: pc.Copy()}), nil
}

// poolURLParam is the database URL parameter that sizes a service's pool (the name pgxpool gives
// it), so that an operator sharing one Postgres between many processes can give each fewer
// connections than the default 10 (or more) without a flag per service.
const poolURLParam = "pool_max_conns"

// poolSize is the pool's size: maxConns when set, else the URL's pool_max_conns, else 10. The
// parameter is taken out of params: it is not a Postgres setting.
func poolSize(maxConns int, params map[string]string) (int, error) {
	v, ok := params[poolURLParam]
	delete(params, poolURLParam)
	switch {
	case maxConns > 0:
		return maxConns, nil
	case !ok:
		return 10, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("db: database url: %s=%q: want a whole number of connections, at least 1", poolURLParam, v)
	}
	return n, nil
}

func openSQLite(ctx context.Context, cfg Config) (*DB, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("db: data dir: required when no database url is given")
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("db: data dir: %w", err)
	}
	path := filepath.Join(cfg.DataDir, cfg.Schema+".db")
	// The path is a URI's: a data dir with '%', '?' or '#' in its name must not end it early.
	uriPath := strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(path)
	dsn := "file:" + uriPath + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(ON)"
	sdb, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("db: open sqlite %s: %w", path, err)
	}
	sdb.SetMaxOpenConns(1)
	if err := sdb.PingContext(ctx); err != nil {
		sdb.Close()
		return nil, fmt.Errorf("db: open sqlite %s: %w", path, err)
	}
	return withPoolMetrics(&DB{DB: sdb, dialect: SQLite, schema: cfg.Schema}), nil
}

// withPoolMetrics registers d's pool metrics; a store works without them.
func withPoolMetrics(d *DB) *DB {
	_ = d.observePool() // fails only with a broken MeterProvider, which then reports nothing anyway
	return d
}

// Dialect tells which SQL flavour the store speaks.
func (d *DB) Dialect() Dialect { return d.dialect }

// Migrate applies the service's migrations: fsys holds a folder per dialect ("postgres",
// "sqlite") of goose SQL files. The version table lives in the service's schema. On Postgres it
// holds a session advisory lock per schema, so replicas started together on a fresh database do
// not race through the same migration.
func (d *DB) Migrate(ctx context.Context, fsys fs.FS) error {
	sub, err := fs.Sub(fsys, d.dialect.String())
	if err != nil {
		return fmt.Errorf("db: migrations for %s: %w", d.dialect, err)
	}
	gd := goose.DialectPostgres
	var opts []goose.ProviderOption
	if d.dialect == SQLite {
		gd = goose.DialectSQLite3
	} else {
		h := fnv.New64a()
		h.Write([]byte("jobmesh migrations " + d.schema))
		locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(int64(h.Sum64()>>1)), lock.WithLockTimeout(1, 300))
		if err != nil {
			return fmt.Errorf("db: migration lock: %w", err)
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	}
	p, err := goose.NewProvider(gd, d.DB, sub, opts...)
	if err != nil {
		return fmt.Errorf("db: migrations of %s: %w", d.schema, err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("db: migrate %s: %w", d.schema, err)
	}
	return nil
}

var placeholder = regexp.MustCompile(`\$(\d+)`)

// Q adapts a query written with $n placeholders to the store: SQLite binds them as ?n.
func (d *DB) Q(query string) string {
	if d.dialect != SQLite {
		return query
	}
	if q, ok := d.rebind.Load(query); ok {
		return q.(string)
	}
	q := placeholder.ReplaceAllString(query, "?$1")
	d.rebind.Store(query, q)
	return q
}

// redact hides a URL's password for error messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable url)"
	}
	return u.Redacted()
}

// IsUniqueViolation reports whether err is a unique-constraint violation in either dialect, so
// services can turn it into apierr.ErrAlreadyExists.
func IsUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "23505"
	}
	var se *sqlite.Error
	return errors.As(err, &se) && (se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY)
}

// IsRetryable reports whether err says the transaction lost a race with another and may
// succeed when run again: a serialization failure or deadlock in Postgres (40001, 40P01), a
// busy or locked database in SQLite.
func IsRetryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "40001" || pe.Code == "40P01"
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff { // the primary code of an extended one
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return true
		}
	}
	return false
}

// Contains returns the LIKE pattern of the values that contain s as it is typed, for a
// `LIKE $n ESCAPE '\'` clause (both dialects): %, _ and \ in s match only themselves. It
// returns "" for an empty s, so an empty parameter still means "no filter".
func Contains(s string) string {
	if s == "" {
		return ""
	}
	return "%" + Escape(s) + "%"
}

// Escape is s as a LIKE pattern (with ESCAPE '\') that matches s alone: its wildcards and
// backslashes are escaped.
func Escape(s string) string {
	return likeEscaper.Replace(s)
}

var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// Warm opens the connections the pool may hold and nobody holds now, concurrently, and leaves
// them idle in it: a burst of work as a process starts (a scheduler replica that takes partitions
// over as it joins) then does not wait for Postgres to start a backend per connection. It never
// waits for a connection another caller holds. SQLite's single connection is open already.
func (d *DB) Warm(ctx context.Context) error {
	if d.dialect != Postgres {
		return nil
	}
	st := d.Stats()
	n := st.MaxOpenConnections - st.InUse
	if n <= 0 {
		return nil
	}
	conns := make([]*sql.Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c, err := d.Conn(ctx)
			if err == nil {
				err = c.PingContext(ctx)
			}
			conns[i], errs[i] = c, err
		})
	}
	wg.Wait()
	failed := 0
	var first error
	for i, c := range conns {
		if c != nil {
			c.Close()
		}
		if errs[i] != nil {
			failed++
			first = cmp.Or(first, errs[i])
		}
	}
	if failed > 0 {
		return fmt.Errorf("db: %d of %d connections not opened: %w", failed, n, first)
	}
	return nil
}
