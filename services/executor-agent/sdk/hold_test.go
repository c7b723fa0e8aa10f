package sdk_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk/sdktest"
)

// held is a fire sent ahead of its time: the executor starts it delay after receiving it.
func held(tr *executorv1.Trigger, delay time.Duration) *executorv1.Trigger {
	tr.StartDelayUs = delay.Microseconds()
	return tr
}

// entries records when the "clock" handler's fires started.
type entries struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (en *entries) handler(_ context.Context, job *sdk.Job) error {
	en.mu.Lock()
	defer en.mu.Unlock()
	en.at[job.TriggerID] = time.Now()
	return nil
}

func (en *entries) get(id string) (time.Time, bool) {
	en.mu.Lock()
	defer en.mu.Unlock()
	at, ok := en.at[id]
	return at, ok
}

// TestHeldFireStartsWhenDue: a fire with a start delay is accepted (and seen) at once and starts
// no earlier than the delay after the call; fires of one call due at different times start each
// at its own; a second send of a held fire is a duplicate.
func TestHeldFireStartsWhenDue(t *testing.T) {
	t.Parallel()
	h := start(t, nil)
	en := &entries{at: map[string]time.Time{}}
	h.exec.Handle("clock", en.handler)

	sent := time.Now()
	acks := h.run(t,
		held(bean("81-1-0-0", 81, "clock", ""), 300*time.Millisecond),
		held(bean("82-1-0-0", 82, "clock", ""), 150*time.Millisecond),
		bean("83-1-0-0", 83, "clock", ""),
	)
	for _, a := range acks {
		if a.GetOutcome() != executorv1.RunOutcome_RUN_OUTCOME_ACCEPTED {
			t.Fatalf("fire %s: got %v %q, want ACCEPTED", a.GetTriggerId(), a.GetOutcome(), a.GetMessage())
		}
	}
	seen, err := h.cli.Seen(ctxFor(t), &executorv1.SeenRequest{TriggerIds: []string{"81-1-0-0", "82-1-0-0"}})
	if err != nil || len(seen.GetSeenTriggerIds()) != 2 {
		t.Fatalf("Seen of held fires: got %v %v, want both", seen, err)
	}
	if ack := h.run(t, held(bean("81-1-0-0", 81, "clock", ""), 300*time.Millisecond))[0]; ack.GetOutcome() != executorv1.RunOutcome_RUN_OUTCOME_DUPLICATE {
		t.Fatalf("held fire sent again: got %v, want DUPLICATE", ack.GetOutcome())
	}
	for id, delay := range map[string]time.Duration{"81-1-0-0": 300 * time.Millisecond, "82-1-0-0": 150 * time.Millisecond, "83-1-0-0": 0} {
		h.wantResult(t, id, logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
		at, ok := en.get(id)
		if !ok {
			t.Fatalf("fire %s succeeded without its handler running", id)
		}
		if at.Before(sent.Add(delay)) {
			t.Errorf("fire %s started %v after the call was sent, want at least its delay %v", id, at.Sub(sent), delay)
		}
	}
}

// TestHeldFireKilledBeforeDue: Kill by trigger id or by job id ends a held fire KILLED, and it
// never starts; Stop ends the held fires as it ends queued ones.
func TestHeldFireKilledBeforeDue(t *testing.T) {
	t.Parallel()
	h := start(t, nil)
	en := &entries{at: map[string]time.Time{}}
	h.exec.Handle("clock", en.handler)
	const delay = 200 * time.Millisecond
	h.accept(t, held(bean("84-1-0-0", 84, "clock", ""), delay))
	h.accept(t, held(bean("85-1-0-0", 85, "clock", ""), delay))
	h.accept(t, held(bean("85-2-0-0", 85, "clock", ""), 2*delay))

	resp, err := h.cli.Kill(ctxFor(t), &executorv1.KillRequest{TriggerId: "84-1-0-0"})
	if err != nil || !resp.GetKilled() {
		t.Fatalf("Kill by trigger id: got %v %v, want killed", resp, err)
	}
	resp, err = h.cli.Kill(ctxFor(t), &executorv1.KillRequest{JobId: 85})
	if err != nil || !resp.GetKilled() {
		t.Fatalf("Kill by job id: got %v %v, want killed", resp, err)
	}
	for _, id := range []string{"84-1-0-0", "85-1-0-0", "85-2-0-0"} {
		h.wantResult(t, id, logsv1.RunStatus_RUN_STATUS_KILLED, "killed by request")
	}
	// Past the fires' time, their handler has not run: their release found them gone.
	h.accept(t, held(bean("86-1-0-0", 86, "clock", ""), 3*delay))
	h.wantResult(t, "86-1-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS, "") // due after the killed fires
	for _, id := range []string{"84-1-0-0", "85-1-0-0", "85-2-0-0"} {
		if _, ran := en.get(id); ran {
			t.Errorf("killed held fire %s ran", id)
		}
	}

	if ack := h.run(t, held(bean("87-2-0-0", 87, "clock", ""), 2*time.Minute))[0]; ack.GetOutcome() != executorv1.RunOutcome_RUN_OUTCOME_REJECTED || !strings.Contains(ack.GetMessage(), "start_delay_us") {
		t.Fatalf("fire held for 2 minutes: got %v %q, want REJECTED naming start_delay_us", ack.GetOutcome(), ack.GetMessage())
	}
	h.accept(t, held(bean("87-1-0-0", 87, "clock", ""), 30*time.Second))
	if err := sdktest.Stop(h.exec); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if r, ok := h.ingest.Result("87-1-0-0"); !ok || r.GetStatus() != logsv1.RunStatus_RUN_STATUS_KILLED || !strings.Contains(r.GetMessage(), "executor stopping") {
		t.Fatalf("held fire after Stop: got %v %v, want KILLED by the stop", r, ok)
	}
}

// TestHeldFireBlockStrategyAppliesWhenDue: a held COVER_EARLY fire kills the job's running fire
// when it comes due, not when it arrives; a held SERIAL_EXECUTION fire queues behind it then.
func TestHeldFireBlockStrategyAppliesWhenDue(t *testing.T) {
	t.Parallel()
	h := start(t, nil)
	const delay = 200 * time.Millisecond
	h.accept(t, bean("88-1-0-0", 88, "gate", ""))
	h.gates.waitStarted(t, "88-1-0-0")
	cover := held(bean("88-2-0-0", 88, "gate", ""), delay)
	cover.BlockStrategy = schedulerv1.BlockStrategy_BLOCK_STRATEGY_COVER_EARLY
	sent := time.Now()
	h.accept(t, cover)
	first := h.wantResult(t, "88-1-0-0", logsv1.RunStatus_RUN_STATUS_KILLED, "COVER_EARLY")
	if end := time.UnixMilli(first.GetEndUnixMs()); end.Before(sent.Add(delay).Truncate(time.Millisecond)) {
		t.Fatalf("covered fire ended %v after the held fire was sent, before its delay %v", end.Sub(sent), delay)
	}
	h.gates.waitStarted(t, "88-2-0-0")

	serial := held(bean("88-3-0-0", 88, "gate", ""), delay)
	h.accept(t, serial)
	beat, err := h.cli.Beat(ctxFor(t), &executorv1.BeatRequest{})
	if err != nil || beat.GetRunning() != 1 {
		t.Fatalf("Beat: got %v %v, want one running", beat, err)
	}
	h.gates.release("88-2-0-0")
	h.wantResult(t, "88-2-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	h.gates.waitStarted(t, "88-3-0-0")
	h.gates.release("88-3-0-0")
	h.wantResult(t, "88-3-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
}
