package logsvc

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/cluster"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
)

// fillRuns stores n runs in one INSERT … SELECT: 1,000 jobs in 20 groups on 50 executors, one
// run in 100 still running, one in 10 failed, scheduled a second apart.
func fillRuns(tb testing.TB, d *db.DB, n int) {
	tb.Helper()
	ctx := context.Background()
	_, err := d.ExecContext(ctx, `INSERT INTO runs (trigger_id, job_id, group_id, trigger_type, scheduled_ms, trigger_ms,
			executor_address, handler, params, route_strategy, trigger_outcome, trigger_message, status, handle_message,
			start_ms, end_ms)
		SELECT 'r' || g, g % 1000 + 1, g % 20 + 1, g % 5 + 1, CAST($1 AS BIGINT) + g * 1000, CAST($1 AS BIGINT) + g * 1000 + 2,
			'10.0.' || (g % 50) || '.1:9999', 'demo', '', 1, 1, 'route FIRST', CASE WHEN g % 100 = 0 THEN 1 WHEN g % 10 = 0 THEN 3 ELSE 2 END,
			'', CAST($1 AS BIGINT) + g * 1000 + 3, CASE WHEN g % 100 = 0 THEN 0 ELSE CAST($1 AS BIGINT) + g * 1000 + 50 END
		FROM generate_series(1, CAST($2 AS BIGINT)) g`, base, n)
	if err != nil {
		tb.Fatalf("fill runs: %v", err)
	}
	if _, err := d.ExecContext(ctx, `ANALYZE runs`); err != nil {
		tb.Fatalf("analyze: %v", err)
	}
}

func explain(tb testing.TB, d *db.DB, q string, args ...any) string {
	tb.Helper()
	return explainTx(tb, d, "", q, args...)
}

// TestListRunsUsesIndexes checks on Postgres with 200,000 runs that every list filter the UI
// uses, and the sweeps, read through an index and never scan the table.
func TestListRunsUsesIndexes(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, dbtest.Store{Name: "postgres", Config: db.Config{URL: dbtest.NewPostgres(t)}}, Config{Retention: -1}, false)
	fillRuns(t, e.db, 200_000)
	from := time.UnixMilli(base + 50_000*1000)
	for _, c := range []struct {
		name  string
		req   *logsv1.ListRunsRequest
		index string // "" when any index will do
	}{
		{"all", &logsv1.ListRunsRequest{}, "runs_pkey"},
		{"next page", &logsv1.ListRunsRequest{PageToken: encodePageToken(150_000)}, "runs_pkey"},
		{"job", &logsv1.ListRunsRequest{JobId: 7}, "runs_job_seq"},
		{"job next page", &logsv1.ListRunsRequest{JobId: 7, PageToken: encodePageToken(150_000)}, "runs_job_seq"},
		{"group", &logsv1.ListRunsRequest{GroupId: 3}, ""},
		{"running", &logsv1.ListRunsRequest{Status: logsv1.RunStatus_RUN_STATUS_RUNNING}, ""},
		{"failed", &logsv1.ListRunsRequest{Status: logsv1.RunStatus_RUN_STATUS_FAIL}, ""},
		{"trigger type", &logsv1.ListRunsRequest{TriggerType: schedulerv1.TriggerType_TRIGGER_TYPE_MANUAL}, ""},
		// A busy executor's runs are found fastest walking seq; a rare one's through its index.
		{"busy address", &logsv1.ListRunsRequest{ExecutorAddress: "10.0.7.1:9999"}, ""},
		{"rare address", &logsv1.ListRunsRequest{ExecutorAddress: "10.9.9.9:9999"}, "runs_address_seq"},
		{"time range", &logsv1.ListRunsRequest{StartTime: timestamppb.New(from), EndTime: timestamppb.New(from.Add(time.Hour))}, ""},
		{"job and time", &logsv1.ListRunsRequest{JobId: 7, StartTime: timestamppb.New(from), EndTime: timestamppb.New(from.Add(24 * time.Hour))}, ""},
	} {
		q, err := e.svc.listRunsQuery(c.req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		plan := explain(t, e.db, q.page, q.pageArgs...)
		if strings.Contains(plan, "Seq Scan") || !strings.Contains(plan, "Index") || (c.index != "" && !strings.Contains(plan, c.index)) {
			t.Errorf("list runs by %s: plan\n%s\nwant an index scan (%s) and no sequential scan", c.name, plan, c.index)
		}
	}
	// The count of matching runs stops at its cap, and a filtered count reads an index too.
	all, err := e.svc.ListRuns(t.Context(), &logsv1.ListRunsRequest{PageSize: 1})
	if err != nil || all.GetTotalSize() != runCountCap || !all.GetTotalSizeCapped() {
		t.Errorf("ListRuns of every run: total %d (capped %v), %v; want %d, capped", all.GetTotalSize(), all.GetTotalSizeCapped(), err, runCountCap)
	}
	one, err := e.svc.ListRuns(t.Context(), &logsv1.ListRunsRequest{JobId: 7, PageSize: 1})
	if err != nil || one.GetTotalSize() != 200 || one.GetTotalSizeCapped() {
		t.Errorf("ListRuns of job 7: total %d (capped %v), %v; want 200, not capped", one.GetTotalSize(), one.GetTotalSizeCapped(), err)
	}
	q, err := e.svc.listRunsQuery(&logsv1.ListRunsRequest{JobId: 7})
	if err != nil {
		t.Fatal(err)
	}
	if plan := explain(t, e.db, q.count, q.countArgs...); strings.Contains(plan, "Seq Scan") || !strings.Contains(plan, "runs_job_seq") {
		t.Errorf("count runs of a job: plan\n%s\nwant runs_job_seq and no sequential scan", plan)
	}
	lost := explain(t, e.db, fmt.Sprintf(`SELECT scheduled_ms, seq, trigger_id, executor_address, trigger_ms
		FROM runs WHERE status = %d AND scheduled_ms <= $1 AND (scheduled_ms, seq) > ($2, $3)
		ORDER BY scheduled_ms, seq LIMIT $4`, statusRunning), base+1e9, -1, 0, deleteBatch)
	if !strings.Contains(lost, "runs_running") {
		t.Errorf("lost-run scan: plan\n%s\nwant runs_running", lost)
	}
	unrecorded := explain(t, e.db, fmt.Sprintf(`SELECT trigger_id FROM runs
		WHERE trigger_outcome = %d AND status > %d AND end_ms <= $1 ORDER BY end_ms LIMIT $2`, outcomeNone, statusRunning), base, 1000)
	if !strings.Contains(unrecorded, "runs_unrecorded") {
		t.Errorf("missing-record scan: plan\n%s\nwant runs_unrecorded", unrecorded)
	}
}

// TestAlarmPassReadsOnlyUnsuccessfulCompletions checks on Postgres with 200,000 completions, one
// in a hundred failed, that the alarm pass finds the failed ones through
// completions_unsuccessful, not by reading every completion after its cursor.
func TestAlarmPassReadsOnlyUnsuccessfulCompletions(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, dbtest.Store{Name: "postgres", Config: db.Config{URL: dbtest.NewPostgres(t)}}, Config{Retention: -1}, false)
	ctx := context.Background()
	if _, err := e.db.ExecContext(ctx, `INSERT INTO completions (trigger_id, job_id, status, trigger_outcome, attempt,
			shard_index, shard_total, scheduled_ms, end_ms, trigger_type, params, created_ms, group_id)
		SELECT 'c' || g, g % 1000 + 1, CASE WHEN g % 100 = 0 THEN 3 ELSE 2 END, 1, 0, 0, 1,
			CAST($1 AS BIGINT) + g, CAST($1 AS BIGINT) + g + 50, 1, '', CAST($1 AS BIGINT) + g + 60, 1
		FROM generate_series(1, 200000) g`, base); err != nil {
		t.Fatalf("fill completions: %v", err)
	}
	if _, err := e.db.ExecContext(ctx, `ANALYZE completions`); err != nil {
		t.Fatalf("analyze: %v", err)
	}
	for _, from := range []int64{0, 199_990} { // from the start, and near the end
		if plan := explain(t, e.db, failedAfterQuery, from, 500); !strings.Contains(plan, "completions_unsuccessful") {
			t.Errorf("alarm pass after %d: plan\n%s\nwant completions_unsuccessful", from, plan)
		}
	}
	// 2,000 failed: batches of 500, each ending at its last failure.
	var want int64
	if err := e.db.QueryRowContext(ctx, `SELECT cursor FROM completions WHERE trigger_id = 'c50000'`).Scan(&want); err != nil {
		t.Fatal(err)
	}
	failed, to, err := e.svc.failedAfter(ctxFor(t), 0)
	if err != nil || len(failed) != 500 || failed[0] != "c100" || failed[499] != "c50000" || to != want {
		t.Fatalf("first alarm batch: %d failed, to %d, %v; want c100 … c50000, to its cursor %d", len(failed), to, err, want)
	}
	failed, _, err = e.svc.failedAfter(ctxFor(t), to)
	if err != nil || len(failed) != 500 || failed[0] != "c50100" {
		t.Fatalf("second alarm batch: %d failed, %v; want 500 from c50100", len(failed), err)
	}
	var last int64
	if err := e.db.QueryRowContext(ctx, `SELECT cursor FROM completions WHERE trigger_id = 'c200000'`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	if failed, to, err = e.svc.failedAfter(ctxFor(t), last); err != nil || len(failed) != 0 || to != last {
		t.Fatalf("after the last failure: %v, to %d, %v; want none, the cursor kept", failed, to, err)
	}
}

// newBenchEnv is a logsvc over the Postgres database at url, its background work off.
func newBenchEnv(b *testing.B, url string) *env {
	b.Helper()
	return newEnvWith(b, dbtest.Store{Name: "postgres", Config: db.Config{URL: url}}, Config{Retention: -1}, false)
}

// BenchmarkIngest measures results and lines stored per second through the gRPC streams into
// Postgres, 1,000 per batch on one stream, each batch acknowledged after its commit.
func BenchmarkIngest(b *testing.B) {
	url := dbtest.NewPostgres(b)
	n := 0 // ids stay unique across the runs of each sub-benchmark
	for _, kind := range []string{"results", "lines"} {
		b.Run(kind, func(b *testing.B) {
			e := newBenchEnv(b, url)
			ctx := context.Background()
			const per = 1000
			switch kind {
			case "results":
				st, err := e.ingest.IngestResults(ctx)
				if err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for i := range b.N {
					req := &logsv1.IngestResultsRequest{BatchId: uint64(i)}
					for range per {
						n++
						req.Results = append(req.Results, result("b-"+strconv.Itoa(n), int64(n%1000+1), logsv1.RunStatus_RUN_STATUS_SUCCESS, base+int64(n)))
					}
					if err := st.Send(req); err != nil {
						b.Fatal(err)
					}
					if _, err := st.Recv(); err != nil {
						b.Fatal(err)
					}
				}
			case "lines":
				st, err := e.ingest.IngestLogLines(ctx)
				if err != nil {
					b.Fatal(err)
				}
				text := strings.Repeat("x", 100)
				b.ResetTimer()
				for i := range b.N {
					req := &logsv1.IngestLogLinesRequest{BatchId: uint64(i)}
					for range per {
						n++
						req.Lines = append(req.Lines, &logsv1.LogLine{TriggerId: "l-" + strconv.Itoa(n/100), LineNo: int64(n%100 + 1), UnixMs: base, Text: text})
					}
					if err := st.Send(req); err != nil {
						b.Fatal(err)
					}
					if _, err := st.Recv(); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.N*per)/b.Elapsed().Seconds(), kind+"/s")
		})
	}
}

// BenchmarkIngestFires measures fires stored per second as a cluster sends them: per fire a
// trigger record on the scheduler's stream and a RUNNING and a final result on one of two
// agents' streams, as many items per batch on every stream, the three streams sending at once without waiting for
// acknowledgements (as ackstream does). The streams race, so a fire's result often comes before
// its record. The alarm passes over the completions run after the last acknowledgement, inside
// the measurement. It reports fires/s, allocations per fire (client and server together) and, when Postgres runs
// on the same host, the CPU its server processes spent per fire (pg-µs/fire).
//
// The runs table starts empty, unless JOBMESH_BENCH_STORED_RUNS says how many runs it holds
// first (a deployment keeps days of them; lookups by trigger id that scan the table show only
// then).
func BenchmarkIngestFires(b *testing.B) {
	// 500 is a sender's largest batch (ackstream's MaxBatch), what it sends once behind; 50 is
	// what it sends at 5,000 fires/s when it keeps up (a batch per 10 ms linger).
	for _, perBatch := range []int{500, 50} {
		b.Run(fmt.Sprintf("batch=%d", perBatch), func(b *testing.B) { benchIngestFires(b, perBatch) })
	}
}

func benchIngestFires(b *testing.B, perBatch int) {
	u := dbtest.NewPostgres(b)
	e := newBenchEnv(b, u)
	if v := os.Getenv("JOBMESH_BENCH_STORED_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatalf("JOBMESH_BENCH_STORED_RUNS: %v", err)
		}
		fillRuns(b, e.db, n)
	}
	ctx := context.Background()
	fires := (b.N + perBatch - 1) / perBatch * perBatch
	var recs []*logsv1.IngestTriggerRecordsRequest
	var res [2][]*logsv1.IngestResultsRequest
	for i := 0; i < fires; i += perBatch {
		rr := &logsv1.IngestTriggerRecordsRequest{BatchId: uint64(len(recs))}
		for j := i; j < i+perBatch; j++ {
			job, sched := int64(j%1000+1), base+int64(j)
			id := benchTriggerID(job, sched)
			r := record(id, job, sched)
			r.GroupId = int64(j%20 + 1)
			rr.Records = append(rr.Records, r)
		}
		recs = append(recs, rr)
		for a := range res { // agent a runs the fires j with j%2 == a
			q := &logsv1.IngestResultsRequest{BatchId: uint64(len(res[a]))}
			for j := i + a; j < i+perBatch; j += 2 {
				job, sched := int64(j%1000+1), base+int64(j)
				id := benchTriggerID(job, sched)
				q.Results = append(q.Results, result(id, job, logsv1.RunStatus_RUN_STATUS_RUNNING, sched+3),
					result(id, job, logsv1.RunStatus_RUN_STATUS_SUCCESS, sched+3))
			}
			res[a] = append(res[a], q)
		}
	}
	pgCPU := postgresCPU(b, e.db, u)
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	wg.Go(func() { errs <- pipeline(ctx, e.ingest.IngestTriggerRecords, recs) })
	for a := range res {
		wg.Go(func() { errs <- pipeline(ctx, e.ingest.IngestResults, res[a]) })
	}
	wg.Wait()
	// The alarm passes count too (every fire here succeeds: they find nothing to alarm).
	for {
		n, err := e.svc.alarmPass(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	b.StopTimer()
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	if pg := pgCPU(); pg > 0 {
		b.ReportMetric(float64(pg.Microseconds())/float64(fires), "pg-µs/fire")
	}
	var done int
	if err := e.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM completions`).Scan(&done); err != nil {
		b.Fatal(err)
	}
	if done != fires {
		b.Fatalf("completions: got %d, want %d (every fire has its record and final result)", done, fires)
	}
	b.ReportMetric(float64(fires)/b.Elapsed().Seconds(), "fires/s")
	// Runs written twice (inserted, then updated: a record and its result in different cycles)
	// leave a dead row version each; pgstattuple counts them exactly (PostgreSQL's contrib).
	if _, err := e.db.ExecContext(ctx, `CREATE EXTENSION IF NOT EXISTS pgstattuple SCHEMA public`); err != nil {
		b.Fatal(err)
	}
	var dead int64
	if err := e.db.QueryRowContext(ctx, `SELECT dead_tuple_count FROM public.pgstattuple('runs')`).Scan(&dead); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(dead)/float64(fires), "dead/fire")
}

// benchTriggerID is a fire's trigger id as the scheduler makes it (scheduler.TriggerID): the
// length and shape of the keys the indexes compare are part of what a fire costs.
func benchTriggerID(job, schedMs int64) string {
	return strconv.FormatInt(job, 10) + "-" + strconv.FormatInt(schedMs, 10) + "-0-0"
}

// pipeline sends reqs on a new stream without waiting for acknowledgements and returns once
// every batch is acknowledged.
func pipeline[Req, Resp any, S bidi[Req, Resp]](ctx context.Context, open func(context.Context, ...grpc.CallOption) (S, error), reqs []*Req) error {
	st, err := open(ctx)
	if err != nil {
		return err
	}
	sent := make(chan error, 1)
	go func() {
		for _, r := range reqs {
			if err := st.Send(r); err != nil {
				sent <- err
				return
			}
		}
		sent <- st.CloseSend()
	}()
	for range reqs {
		if _, err := st.Recv(); err != nil {
			return fmt.Errorf("ack: %w", err)
		}
	}
	return <-sent
}

// postgresCPU notes the CPU time of the Postgres server processes serving the database at dbURL
// and returns a function that gives what they have used since (processes that started since
// count whole); it gives 0 when they cannot be read (a server on another machine).
func postgresCPU(b *testing.B, d *db.DB, dbURL string) func() time.Duration {
	b.Helper()
	pu, err := url.Parse(dbURL)
	if err != nil {
		b.Fatal(err)
	}
	name := strings.TrimPrefix(pu.Path, "/")
	read := func() map[int]time.Duration {
		rows, err := d.QueryContext(context.Background(), `SELECT pid FROM pg_stat_activity WHERE datname = $1`, name)
		if err != nil {
			b.Fatal(err)
		}
		defer rows.Close()
		out := map[int]time.Duration{}
		for rows.Next() {
			var pid int
			if err := rows.Scan(&pid); err != nil {
				b.Fatal(err)
			}
			if u, err := cluster.ReadUsage(pid); err == nil {
				out[pid] = u.CPU
			}
		}
		return out
	}
	before := read()
	return func() time.Duration {
		var sum time.Duration
		for pid, cpu := range read() {
			sum += cpu - before[pid]
		}
		return sum
	}
}

// BenchmarkListRuns measures the log list's latency over JOBMESH_BENCH_RUNS runs (default
// 100,000; set 10000000 for the figure, whose setup takes minutes).
func BenchmarkListRuns(b *testing.B) {
	n := 100_000
	if v := os.Getenv("JOBMESH_BENCH_RUNS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatalf("JOBMESH_BENCH_RUNS: %v", err)
		}
	}
	e := newBenchEnv(b, dbtest.NewPostgres(b))
	start := time.Now()
	fillRuns(b, e.db, n)
	b.Logf("stored %d runs in %v", n, time.Since(start).Round(time.Second))
	mid := time.UnixMilli(base + int64(n/2)*1000)
	for _, c := range []struct {
		name string
		req  *logsv1.ListRunsRequest
	}{
		{"first_page", &logsv1.ListRunsRequest{}},
		{"deep_page", &logsv1.ListRunsRequest{PageToken: encodePageToken(int64(n / 2))}},
		{"job", &logsv1.ListRunsRequest{JobId: 7}},
		{"group", &logsv1.ListRunsRequest{GroupId: 3}},
		{"running", &logsv1.ListRunsRequest{Status: logsv1.RunStatus_RUN_STATUS_RUNNING}},
		{"address", &logsv1.ListRunsRequest{ExecutorAddress: "10.0.7.1:9999"}},
		{"hour", &logsv1.ListRunsRequest{StartTime: timestamppb.New(mid), EndTime: timestamppb.New(mid.Add(time.Hour))}},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			for b.Loop() {
				resp, err := e.logs.ListRuns(ctx, c.req)
				if err != nil {
					b.Fatal(err)
				}
				if len(resp.GetRuns()) == 0 {
					b.Fatal("no runs")
				}
			}
		})
	}
}

// TestIngestLookupsUseIndexes checks on Postgres with 200,000 runs that a write cycle, with the
// plan settings it makes, reads and updates the runs of 3,500 trigger ids (most not stored)
// through the trigger id index and never scans the table, as Postgres would for that many ids
// without them.
func TestIngestLookupsUseIndexes(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, dbtest.Store{Name: "postgres", Config: db.Config{URL: dbtest.NewPostgres(t)}}, Config{Retention: -1}, false)
	fillRuns(t, e.db, 200_000)
	var ids []string
	for i := range 3500 {
		if i%10 == 0 {
			ids = append(ids, "r"+strconv.Itoa(i*50+1)) // stored
		} else {
			ids = append(ids, "new-"+strconv.Itoa(i))
		}
	}
	slices.Sort(ids)
	plan := explainTx(t, e.db, db.IndexPlans, readRunsPG, ids)
	if strings.Contains(plan, "Seq Scan") || !strings.Contains(plan, "runs_trigger_id_key") {
		var short []string // the plan without its 3,500 ids
		for l := range strings.Lines(plan) {
			if len(l) > 120 {
				l = l[:120] + "…\n"
			}
			short = append(short, l)
		}
		t.Errorf("read runs: plan\n%s\nwant an index scan of runs_trigger_id_key and no sequential scan", strings.Join(short, ""))
	}
	// A backlog of results for runs whose records were stored long before updates a cycle's
	// thousands of runs.
	var updates []*run
	for i := range 3500 {
		updates = append(updates, &run{id: "r" + strconv.Itoa(i*50+1), status: statusSuccess})
	}
	slices.SortFunc(updates, func(a, b *run) int { return strings.Compare(a.id, b.id) })
	plan = explainTx(t, e.db, db.IndexPlans, updateRunsPG, runColumnar(updates)...)
	if strings.Contains(plan, "Seq Scan") || !strings.Contains(plan, "runs_trigger_id_key") {
		t.Errorf("update runs: plan\n%s\nwant an index scan of runs_trigger_id_key and no sequential scan", plan)
	}
}

// explainTx explains q in a transaction after setup (none when ""), as the write cycle runs it.
func explainTx(tb testing.TB, d *db.DB, setup, q string, args ...any) string {
	tb.Helper()
	ctx := context.Background()
	tx, err := d.BeginTx(ctx, nil)
	if err != nil {
		tb.Fatalf("begin: %v", err)
	}
	defer tx.Rollback()
	if setup != "" {
		if _, err := tx.ExecContext(ctx, setup); err != nil {
			tb.Fatalf("%s: %v", setup, err)
		}
	}
	rows, err := tx.QueryContext(ctx, "EXPLAIN "+q, args...)
	if err != nil {
		tb.Fatalf("explain: %v\n%s", err, q)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			tb.Fatalf("explain: %v", err)
		}
		plan = append(plan, l)
	}
	return strings.Join(plan, "\n")
}
