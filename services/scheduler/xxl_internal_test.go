package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/clock"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/xxltest"
)

// TestXxlExecutorExactlyOnce drives a test executor through the pool's XXL-JOB client on a real
// Postgres store: a trigger id is sent once, and a re-send (a re-fire after a takeover, by any
// replica) is DUPLICATE and never reaches the executor; Seen answers from xxl_runs; fires the
// executor did not take (a rejection, a refused token, nobody listening) can be sent again.
func TestXxlExecutorExactlyOnce(t *testing.T) {
	t.Parallel()
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		testXxlExecutorExactlyOnce(t, dbtest.Open(t, db.Config{URL: dbtest.NewPostgres(t)}, "scheduler", MigrationsFS()))
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		testXxlExecutorExactlyOnce(t, dbtest.Open(t, db.Config{DataDir: t.TempDir()}, "scheduler", MigrationsFS()))
	})
}

func testXxlExecutorExactlyOnce(t *testing.T, store *db.DB) {
	d := newXxlDriver(store, nil, Config{Clock: clock.Real(), Logger: slog.New(slog.DiscardHandler), XxlLogPoll: time.Second}, nil)
	pool := newExecutorPool(nil)
	pool.xxl = d
	ex, err := xxltest.New(xxltest.Config{AccessToken: "tok", LogDir: t.TempDir(), Groovy: func(src string) (xxltest.Handler, error) {
		return func(_ context.Context, j *xxltest.Job) { j.Success("groovy ran " + src) }, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	ex.Handle("demoJobHandler", func(context.Context, *xxltest.Job) {})
	if err := ex.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ex.Stop)
	cli, err := pool.client(ex.Address())
	if err != nil {
		t.Fatal(err)
	}
	ctx := withAccessToken(t.Context(), "tok")
	trig := func(id, handler string) *executorv1.Trigger {
		return &executorv1.Trigger{TriggerId: id, JobId: 5, GroupId: 1, Handler: handler, GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN,
			ScheduledUnixMs: 1795628003792, ShardTotal: 1}
	}
	outcomes := func(resp *executorv1.RunResponse) []executorv1.RunOutcome {
		var out []executorv1.RunOutcome
		for _, a := range resp.GetAcks() {
			out = append(out, a.GetOutcome())
		}
		return out
	}
	logID := func(id string) int64 {
		var n int64
		if err := store.QueryRowContext(t.Context(), store.Q(`SELECT log_id FROM xxl_runs WHERE trigger_id = $1`), id).Scan(&n); err != nil {
			t.Fatalf("row of %s: %v", id, err)
		}
		return n
	}

	resp, err := cli.Run(ctx, &executorv1.RunRequest{Triggers: []*executorv1.Trigger{trig("a", "demoJobHandler"), trig("b", "noSuchHandler")}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := outcomes(resp), []executorv1.RunOutcome{executorv1.RunOutcome_RUN_OUTCOME_ACCEPTED, executorv1.RunOutcome_RUN_OUTCOME_REJECTED}; !slices.Equal(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	if msg := resp.GetAcks()[1].GetMessage(); msg != "job handler [noSuchHandler] not found." {
		t.Errorf("rejection message %q", msg)
	}
	a := logID("a")
	// The same trigger id again, with a new one: "a" is DUPLICATE and not sent; "b" (rejected,
	// so not taken) and "c" are sent.
	resp, err = cli.Run(ctx, &executorv1.RunRequest{Triggers: []*executorv1.Trigger{trig("a", "demoJobHandler"), trig("b", "demoJobHandler"), trig("c", "demoJobHandler")}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := outcomes(resp), []executorv1.RunOutcome{executorv1.RunOutcome_RUN_OUTCOME_DUPLICATE, executorv1.RunOutcome_RUN_OUTCOME_ACCEPTED, executorv1.RunOutcome_RUN_OUTCOME_ACCEPTED}; !slices.Equal(got, want) {
		t.Fatalf("outcomes of the re-send %v, want %v", got, want)
	}
	if n := ex.RunCount(a); n != 1 {
		t.Errorf("/run calls with log id %d: %d, want 1", a, n)
	}
	if b := logID("b"); ex.RunCount(b) != 1 {
		t.Errorf("the re-sent rejected fire: %d /run calls with its new log id, want 1", ex.RunCount(b))
	}
	seen, err := cli.Seen(ctx, &executorv1.SeenRequest{TriggerIds: []string{"a", "b", "c", "never"}})
	if err != nil || !slices.Equal(seen.GetSeenTriggerIds(), []string{"a", "b", "c"}) {
		t.Errorf("Seen = %v %v, want a b c", seen.GetSeenTriggerIds(), err)
	}

	// A wrong token: Unauthenticated, the fire not kept.
	_, err = cli.Run(withAccessToken(t.Context(), "nope"), &executorv1.RunRequest{Triggers: []*executorv1.Trigger{trig("d", "demoJobHandler")}})
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("wrong token: %v, want Unauthenticated", err)
	}
	// Nobody listening: a connection error, as for an agent, the fire not kept.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String() + "/"
	ln.Close()
	deadCli, _ := pool.client(dead)
	_, err = deadCli.Run(ctx, &executorv1.RunRequest{Triggers: []*executorv1.Trigger{trig("e", "demoJobHandler")}})
	if !connectionRefused(err) {
		t.Errorf("dead executor: %v, want a refused connection", err)
	}
	for _, id := range []string{"d", "e"} {
		if r, err := d.runByTrigger(t.Context(), id); err != nil || r != nil {
			t.Errorf("fire %s not taken keeps a row: %v %v", id, r, err)
		}
	}
	// Seen on another address: what went elsewhere is not seen here.
	if s, err := deadCli.Seen(ctx, &executorv1.SeenRequest{TriggerIds: []string{"a"}}); err != nil || len(s.GetSeenTriggerIds()) != 0 {
		t.Errorf("Seen on another executor = %v %v, want none", s.GetSeenTriggerIds(), err)
	}

	// A GLUE job: no handler name, the glue type, source and version as XXL-JOB names them.
	glue := &executorv1.Trigger{TriggerId: "g", JobId: 6, GroupId: 1, Handler: "ignored", Params: "p", GlueType: schedulerv1.GlueType_GLUE_TYPE_GLUE_GROOVY,
		GlueSource: "class G {}", GlueUpdatedUnixMs: 42, TimeoutSeconds: 3, BlockStrategy: schedulerv1.BlockStrategy_BLOCK_STRATEGY_COVER_EARLY,
		ScheduledUnixMs: 1795628003000, ShardIndex: 1, ShardTotal: 2}
	resp, err = cli.Run(ctx, &executorv1.RunRequest{Triggers: []*executorv1.Trigger{glue}})
	if err != nil || resp.GetAcks()[0].GetOutcome() != executorv1.RunOutcome_RUN_OUTCOME_ACCEPTED {
		t.Fatalf("GLUE_GROOVY: %v %v", resp, err)
	}
	runs := ex.RequestsTo("/run")
	want := fmt.Sprintf(`{"jobId":6,"executorHandler":"","executorParams":"p","executorBlockStrategy":"COVER_EARLY","executorTimeout":3,`+
		`"logId":%d,"logDateTime":1795628003000,"glueType":"GLUE_GROOVY","glueSource":"class G {}","glueUpdatetime":42,"broadcastIndex":1,"broadcastTotal":2}`, logID("g"))
	if got := string(runs[len(runs)-1].Body); got != want {
		t.Errorf("GLUE_GROOVY /run\n got %s\nwant %s", got, want)
	}

	// The probes: Beat for FAILOVER, IdleBeat for BUSYOVER, through the pool's route.Prober.
	if err := pool.Beat(ctx, ex.Address()); err != nil {
		t.Errorf("Beat: %v", err)
	}
	if err := pool.Beat(ctx, dead); !connectionRefused(err) {
		t.Errorf("Beat of a dead executor: %v", err)
	}
	idle, _, err := pool.IdleBeat(ctx, ex.Address(), 999)
	if err != nil || !idle {
		t.Errorf("IdleBeat of an idle job: %v %v", idle, err)
	}
	// The log of a fire, by trigger id.
	cctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := ex.Wait(cctx, func() bool { return !ex.Running(5) }); err != nil {
		t.Fatal(err)
	}
	lr, err := cli.Log(ctx, &executorv1.LogRequest{TriggerId: "a", FromLine: 1})
	if err != nil || lr.GetToLine() < 2 || len(lr.GetLines()) != int(lr.GetToLine()) {
		t.Errorf("Log = %v %v", lr, err)
	}
}

// TestXxlSeenAfterASenderDied: a replica killed between a fire's xxl_runs row and its /run left
// a row for a fire the executor never got. The takeover's Seen asks the executor: a fire whose
// job is idle there and that has no log file was never received, so it is not seen, loses its
// row and is sent again; a fire that ran (its log file), one queued behind a busy run, one of a
// busy job and one on an executor that does not answer are seen, never risked twice.
func TestXxlSeenAfterASenderDied(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, url string }{{"postgres", dbtest.NewPostgres(t)}, {"sqlite", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := db.Config{URL: tc.url}
			if tc.url == "" {
				cfg.DataDir = t.TempDir()
			}
			testXxlSeenAfterASenderDied(t, dbtest.Open(t, cfg, "scheduler", MigrationsFS()))
		})
	}
}

func testXxlSeenAfterASenderDied(t *testing.T, store *db.DB) {
	d := newXxlDriver(store, nil, Config{Clock: clock.Real(), Logger: slog.New(slog.DiscardHandler), XxlLogPoll: time.Second}, nil)
	pool := newExecutorPool(nil)
	pool.xxl = d
	ex, err := xxltest.New(xxltest.Config{AccessToken: "tok", LogDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	ex.Handle("quick", func(context.Context, *xxltest.Job) {})
	ex.Handle("hold", func(ctx context.Context, _ *xxltest.Job) {
		select {
		case <-release:
		case <-ctx.Done():
		}
	})
	if err := ex.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ex.Stop)
	t.Cleanup(func() { close(release) })
	cli, err := pool.client(ex.Address())
	if err != nil {
		t.Fatal(err)
	}
	ctx := withAccessToken(t.Context(), "tok")
	trig := func(id string, job int64, handler string) *executorv1.Trigger {
		return &executorv1.Trigger{TriggerId: id, JobId: job, GroupId: 1, Handler: handler, GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN,
			ScheduledUnixMs: 1795628003792, ShardTotal: 1}
	}
	run := func(ts ...*executorv1.Trigger) {
		t.Helper()
		resp, err := cli.Run(ctx, &executorv1.RunRequest{Triggers: ts})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range resp.GetAcks() {
			if a.GetOutcome() != executorv1.RunOutcome_RUN_OUTCOME_ACCEPTED {
				t.Fatalf("fire %s: %v %s, want ACCEPTED", a.GetTriggerId(), a.GetOutcome(), a.GetMessage())
			}
		}
	}
	wctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	// "ran": job 1 ran it. "held" runs on job 2 and "queued" waits behind it.
	run(trig("ran", 1, "quick"))
	if err := ex.Wait(wctx, func() bool { return !ex.Running(1) }); err != nil {
		t.Fatal(err)
	}
	run(trig("held", 2, "hold"), trig("queued", 2, "hold"))
	// Rows a killed sender left: written, never sent. Job 1 is idle, job 2 busy.
	if _, err := d.claim(t.Context(), ex.Address(), []*executorv1.Trigger{trig("unsent-idle", 1, "quick"), trig("unsent-busy", 2, "hold")}); err != nil {
		t.Fatal(err)
	}
	seen, err := cli.Seen(ctx, &executorv1.SeenRequest{TriggerIds: []string{"ran", "held", "queued", "unsent-idle", "unsent-busy", "never"}})
	if err != nil {
		t.Fatal(err)
	}
	got := slices.Sorted(slices.Values(seen.GetSeenTriggerIds()))
	if want := []string{"held", "queued", "ran", "unsent-busy"}; !slices.Equal(got, want) {
		t.Errorf("Seen = %v, want %v (not the fire of an idle job without a log)", got, want)
	}
	if r, err := d.runByTrigger(t.Context(), "unsent-idle"); err != nil || r != nil {
		t.Errorf("row of the fire the executor never got = %+v %v, want none", r, err)
	}
	// The takeover sends it again: now it runs, once.
	run(trig("unsent-idle", 1, "quick"))
	r, err := d.runByTrigger(t.Context(), "unsent-idle")
	if err != nil || r == nil {
		t.Fatalf("row of the re-sent fire: %v %v", r, err)
	}
	if n := ex.RunCount(r.logID); n != 1 {
		t.Errorf("the re-sent fire reached the executor %d times, want once", n)
	}
	// Asked again, everything sent is seen: the re-sent fire once its log exists.
	if err := ex.Wait(wctx, func() bool { return !ex.Running(1) }); err != nil {
		t.Fatal(err)
	}
	seen, err = cli.Seen(ctx, &executorv1.SeenRequest{TriggerIds: []string{"unsent-idle", "queued"}})
	if got := slices.Sorted(slices.Values(seen.GetSeenTriggerIds())); err != nil || !slices.Equal(got, []string{"queued", "unsent-idle"}) {
		t.Errorf("Seen after the re-send = %v %v, want both", got, err)
	}

	// An executor that does not answer: its rows are seen (it may hold them).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String() + "/"
	ln.Close()
	if _, err := d.claim(t.Context(), dead, []*executorv1.Trigger{trig("on-dead", 3, "quick")}); err != nil {
		t.Fatal(err)
	}
	deadCli, _ := pool.client(dead)
	if s, err := deadCli.Seen(ctx, &executorv1.SeenRequest{TriggerIds: []string{"on-dead"}}); err != nil || !slices.Equal(s.GetSeenTriggerIds(), []string{"on-dead"}) {
		t.Errorf("Seen on an executor that does not answer = %v %v, want on-dead", s.GetSeenTriggerIds(), err)
	}
}
