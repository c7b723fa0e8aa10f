package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
)

// createDatabase creates a uniquely named database on the server at adminURL and returns its URL
// and a function that drops it.
func createDatabase(ctx context.Context, adminURL string) (dbURL, name string, drop func() error, err error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", "", nil, fmt.Errorf("--admin-url: connect: %w", err)
	}
	defer conn.Close(ctx)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name = "jobmesh_bench_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", "", nil, fmt.Errorf("create database %s: %w", name, err)
	}
	u, err := url.Parse(adminURL)
	if err != nil {
		return "", "", nil, fmt.Errorf("--admin-url: %w", err)
	}
	u.Path = "/" + name
	drop = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		return nil
	}
	return u.String(), name, drop, nil
}

// stored is what logsvc holds for the fires of a window.
type stored struct {
	// Dispatched and DispatchFailed count trigger records with outcome OK and FAILED.
	Dispatched, DispatchFailed int
	// Stored counts successful results stored (whether or not their trigger record has come).
	Stored int
	// Completed counts runs with both their trigger record and their result stored: logsvc
	// published them as completions.
	Completed int
	// E2E50 and E2E99 are percentiles of scheduled → completion published, in ms.
	E2E50, E2E99 float64
}

// readStored counts, in logsvc's tables, the scheduled fires of group scheduled within
// [fromMs, toMs]; the temporary table bench_jobs (setBenchJobs) lists the group's jobs.
func readStored(ctx context.Context, conn *pgx.Conn, group, fromMs, toMs int64) (stored, error) {
	var s stored
	// One snapshot for the three counts, so they agree with each other.
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return s, fmt.Errorf("count runs: %w", err)
	}
	defer tx.Rollback(ctx)
	err = tx.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE trigger_outcome = $4),
			count(*) FILTER (WHERE trigger_outcome = $5)
		FROM logs.runs WHERE group_id = $1 AND trigger_type = $6 AND scheduled_ms BETWEEN $2 AND $3`,
		group, fromMs, toMs, int32(logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK), int32(logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED),
		int32(schedulerv1.TriggerType_TRIGGER_TYPE_CRON)).Scan(&s.Dispatched, &s.DispatchFailed)
	if err != nil {
		return s, fmt.Errorf("count trigger records: %w", err)
	}
	// A result that came before its trigger record has neither the group, nor the trigger type,
	// nor the scheduled time: find results by job (bench_jobs) and by their trigger id,
	// <job>-<scheduled ms>-<shard>-<attempt> (triggerid), first attempts of the jobs' own fires
	// only (a child fire's id has a fifth field, its parent).
	err = tx.QueryRow(ctx, `SELECT count(*) FROM logs.runs r JOIN bench_jobs b ON b.id = r.job_id
		WHERE r.status = $3 AND split_part(r.trigger_id, '-', 4) = '0' AND split_part(r.trigger_id, '-', 5) = ''
			AND split_part(r.trigger_id, '-', 2)::bigint BETWEEN $1 AND $2`,
		fromMs, toMs, int32(logsv1.RunStatus_RUN_STATUS_SUCCESS)).Scan(&s.Stored)
	if err != nil {
		return s, fmt.Errorf("count results: %w", err)
	}
	var p50, p99 *float64
	err = tx.QueryRow(ctx, `SELECT count(*),
			percentile_disc(0.5) WITHIN GROUP (ORDER BY c.created_ms - c.scheduled_ms)::float8,
			percentile_disc(0.99) WITHIN GROUP (ORDER BY c.created_ms - c.scheduled_ms)::float8
		FROM logs.completions c JOIN logs.runs r USING (trigger_id)
		WHERE r.group_id = $1 AND c.trigger_type = $4 AND c.status = $5 AND c.scheduled_ms BETWEEN $2 AND $3`,
		group, fromMs, toMs, int32(schedulerv1.TriggerType_TRIGGER_TYPE_CRON), int32(logsv1.RunStatus_RUN_STATUS_SUCCESS)).Scan(&s.Completed, &p50, &p99)
	if err != nil {
		return s, fmt.Errorf("count completions: %w", err)
	}
	if p50 != nil {
		s.E2E50, s.E2E99 = *p50, *p99
	}
	return s, nil
}

// countCompleted counts the successful completions of group's scheduled fires within
// [fromMs, toMs] that logsvc wrote after completion cursor after (an index range, however big
// logsvc's tables have grown).
func countCompleted(ctx context.Context, conn *pgx.Conn, group, after, fromMs, toMs int64) (int, error) {
	var n int
	err := conn.QueryRow(ctx, `SELECT count(*) FROM logs.completions WHERE cursor > $1 AND group_id = $2
		AND trigger_type = $3 AND status = $4 AND scheduled_ms BETWEEN $5 AND $6`,
		after, group, int32(schedulerv1.TriggerType_TRIGGER_TYPE_CRON), int32(logsv1.RunStatus_RUN_STATUS_SUCCESS), fromMs, toMs).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count completions: %w", err)
	}
	return n, nil
}

// setBenchJobs fills the session's temporary table bench_jobs with the bench's job ids.
func setBenchJobs(ctx context.Context, conn *pgx.Conn, ids []int64) error {
	if _, err := conn.Exec(ctx, `CREATE TEMP TABLE IF NOT EXISTS bench_jobs (id BIGINT PRIMARY KEY)`); err != nil {
		return fmt.Errorf("bench_jobs: %w", err)
	}
	if _, err := conn.Exec(ctx, `TRUNCATE bench_jobs`); err != nil {
		return fmt.Errorf("bench_jobs: %w", err)
	}
	rows := make([][]any, len(ids))
	for i, id := range ids {
		rows[i] = []any{id}
	}
	if _, err := conn.CopyFrom(ctx, pgx.Identifier{"bench_jobs"}, []string{"id"}, pgx.CopyFromRows(rows)); err != nil {
		return fmt.Errorf("bench_jobs: %w", err)
	}
	if _, err := conn.Exec(ctx, `ANALYZE bench_jobs`); err != nil {
		return fmt.Errorf("bench_jobs: %w", err)
	}
	return nil
}

// appNamePrefix marks the application_name the bench gives each service's database
// connections, so that Postgres CPU can be told apart by client.
const appNamePrefix = "jobmesh:"

// withAppName returns the database URL (or key=value DSN) dsn with application_name set to name.
func withAppName(dsn, name string) string {
	if dsn == "" {
		return ""
	}
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		q.Set("application_name", appNamePrefix+name)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn + " application_name=" + appNamePrefix + name
}

// backends returns the Postgres server processes serving database name, by pid, each with who
// it works for: the service named by its connection's application_name (withAppName), or else
// its backend type (autovacuum worker, …) or "other".
func backends(ctx context.Context, conn *pgx.Conn, name string) (map[int]string, error) {
	rows, err := conn.Query(ctx, `SELECT pid, coalesce(application_name, ''), coalesce(backend_type, '')
		FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, name)
	if err != nil {
		return nil, fmt.Errorf("list postgres backends: %w", err)
	}
	defer rows.Close()
	out := map[int]string{}
	for rows.Next() {
		var pid int32
		var app, typ string
		if err := rows.Scan(&pid, &app, &typ); err != nil {
			return nil, fmt.Errorf("list postgres backends: %w", err)
		}
		switch {
		case strings.HasPrefix(app, appNamePrefix):
			out[int(pid)] = strings.TrimPrefix(app, appNamePrefix)
		case typ != "" && typ != "client backend":
			out[int(pid)] = typ
		default:
			out[int(pid)] = "other"
		}
	}
	return out, rows.Err()
}
