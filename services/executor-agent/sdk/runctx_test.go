package sdk

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
)

// TestRunLeavesTheFiresOfAnEndedCall: Run takes no fire once its call's context has ended (the
// scheduler stopped waiting for the answer and will send the fire again), and does not remember
// it, so the fire sent again runs, once.
func TestRunLeavesTheFiresOfAnEndedCall(t *testing.T) {
	t.Parallel()
	results := make(chan Result, 1)
	e, err := New(Config{AppName: "ctx-app", ListenAddr: "127.0.0.1:0", LogDir: t.TempDir(), Insecure: true,
		Logger: slog.New(slog.DiscardHandler), OnResult: func(r Result) { results <- r }})
	if err != nil {
		t.Fatal(err)
	}
	e.Handle("noop", func(context.Context, *Job) error { return nil })
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop(context.Background()) })
	svc := &service{e: e}
	req := &executorv1.RunRequest{Triggers: []*executorv1.Trigger{{TriggerId: "7-1-0-0", JobId: 7, Handler: "noop",
		GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN, ShardTotal: 1}}}

	ended, cancel := context.WithCancel(t.Context())
	cancel()
	resp, err := svc.Run(ended, req)
	if err != nil {
		t.Fatal(err)
	}
	if a := resp.GetAcks()[0]; a.GetOutcome() != executorv1.RunOutcome_RUN_OUTCOME_REJECTED || !strings.Contains(a.GetMessage(), "not taken") {
		t.Fatalf("fire of an ended call: %v, want REJECTED, not taken", a)
	}
	if seen := e.seen([]string{"7-1-0-0"}); len(seen) != 0 {
		t.Fatalf("the fire of an ended call is remembered: Seen = %v", seen)
	}
	resp, err = svc.Run(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if a := resp.GetAcks()[0]; a.GetOutcome() != executorv1.RunOutcome_RUN_OUTCOME_ACCEPTED {
		t.Fatalf("the fire sent again: %v, want ACCEPTED", a)
	}
	select {
	case r := <-results:
		if r.TriggerID != "7-1-0-0" || r.Status != StatusSuccess {
			t.Fatalf("result %+v, want 7-1-0-0 SUCCESS", r)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the fire sent again did not run")
	}
}
