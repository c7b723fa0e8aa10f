package failover_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/internal/cluster"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/devstack"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
)

var (
	rssJobs  = flag.Int("rss-jobs", 0, "TestSchedulerRSS: jobs stored (0 skips the measurement)")
	rssEvery = flag.Duration("rss-every", time.Hour, "TestSchedulerRSS: each job's FIX_RATE interval; fires spread evenly over it")
	rssRun   = flag.Duration("rss-run", 30*time.Second, "TestSchedulerRSS: how long the scheduler runs before RSS is read")
)

// TestSchedulerRSS is a measurement, not a check: it stores -rss-jobs jobs (FIX_RATE -rss-every,
// their fires spread evenly over the interval) and reports the resident memory of one
// `jobmesh scheduler` process after it has led for -rss-run, with every fire dispatched to a real
// agent and recorded in logsvc. It runs only when asked:
//
//	go test ./internal/failover -run TestSchedulerRSS -v -args -rss-jobs=1000000
func TestSchedulerRSS(t *testing.T) {
	if *rssJobs <= 0 {
		t.Skip("a measurement: run with -args -rss-jobs=1000000")
	}
	bin := buildJobmesh(t)
	logDir := t.TempDir()
	dbURL := dbtest.NewPostgres(t)
	stackLog, err := os.Create(filepath.Join(logDir, "stack.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stackLog.Close() })
	var ran atomic.Int64
	any0 := "127.0.0.1:0"
	startCtx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	st, err := devstack.Start(startCtx, devstack.Config{
		DataDir: t.TempDir(), DatabaseURL: dbURL, UnsafeEtcd: true, NoScheduler: true,
		HTTPAddr: any0, RegistryAddr: any0, LogsAddr: any0, AuthAddr: any0, AgentAddr: any0, EtcdAddr: any0,
		Logger: slog.New(slog.NewTextHandler(stackLog, &slog.HandlerOptions{Level: slog.LevelWarn})),
		AgentHandlers: map[string]sdk.HandlerFunc{
			"noop": func(context.Context, *sdk.Job) error { ran.Add(1); return nil },
		},
	})
	if err != nil {
		t.Fatalf("devstack.Start: %v", err)
	}
	t.Cleanup(st.Stop)
	c := &replicaSet{t: t, bin: bin, logDir: logDir, token: st.InternalToken, tls: st.TLS, args: append([]string{
		"scheduler", "--grpc-addr", any0, "--etcd-endpoints", st.EtcdEndpoint, "--database-url", dbURL,
		"--registry-addr", st.RegistryAddr, "--logs-addr", st.LogsAddr, "--log-level", "warn",
		"--internal-token", st.InternalToken, "--auth-addr", st.AuthAddr,
	}, tlsArgs(st)...)}
	t.Cleanup(func() {
		if t.Failed() {
			c.dumpLogs()
		}
	})
	r := c.start("rss")
	c.waitLeader()
	idle := rss(t, r.proc)

	store, err := db.Open(t.Context(), db.Config{URL: dbURL, Schema: "scheduler"})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	n, every := *rssJobs, rssEvery.Milliseconds()
	start := time.Now().Add(5 * time.Second).UnixMilli()
	if _, err := store.ExecContext(t.Context(), `INSERT INTO jobs (group_id, name, schedule_type, schedule_expr,
		misfire_strategy, route_strategy, block_strategy, retry_backoff, glue_type, handler, status,
		create_ms, update_ms)
		SELECT $1, 'rss-' || g, 3, $2, 1, 1, 1, 1, 1, 'noop', 2, 0, 0
		FROM generate_series(1, $3) g`, st.GroupID, rssEvery.String(), n); err != nil {
		t.Fatal(err)
	}
	// Fire times spread evenly over one period (the scheduling state is in job_state).
	if _, err := store.ExecContext(t.Context(), `INSERT INTO job_state (job_id, next_fire_ms)
		SELECT id, $1::bigint + (id * $2::bigint / $3::bigint) FROM jobs WHERE name LIKE 'rss-%'`, start, every, n); err != nil {
		t.Fatal(err)
	}
	for _, tbl := range []string{"jobs", "job_state"} {
		if _, err := store.ExecContext(t.Context(), `VACUUM ANALYZE `+tbl); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d jobs stored, FIX_RATE %v: %.0f fires/s", n, *rssEvery, float64(n)/rssEvery.Seconds())
	time.Sleep(*rssRun) // the measurement's duration
	got := rss(t, r.proc)
	t.Logf("scheduler RSS: idle %s; after %v with %d jobs: %s (%d fires executed)", idle, *rssRun, n, got, ran.Load())
	c.stopAll()
}

// rss reads a process's resident and peak resident memory.
func rss(t *testing.T, p *cluster.Proc) string {
	t.Helper()
	u, err := p.Usage()
	if err != nil {
		t.Fatalf("read the scheduler's memory: %v", err)
	}
	return fmt.Sprintf("VmRSS %.1f MB, VmHWM %.1f MB", float64(u.RSS)/(1<<20), float64(u.PeakRSS)/(1<<20))
}
