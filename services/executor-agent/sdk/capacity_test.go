package sdk_test

import (
	"context"
	"sync"
	"testing"
	"time"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
)

// TestCapacityRefusesAsBusyAndForgets: an executor runs at most Capacity fires at once. A Run
// call's fires beyond the free slots are refused as busy, and not remembered: the same fire sent
// again once a slot is free is accepted and runs. A fire it holds already is answered DUPLICATE
// even while it is full, so a scheduler that re-sends a fire it had no answer for learns the
// truth. Every answer carries the executor's load.
func TestCapacityRefusesAsBusyAndForgets(t *testing.T) {
	t.Parallel()
	h := start(t, func(c *sdk.Config) { c.Capacity = 2 })
	resp, err := h.cli.Run(ctxFor(t), &executorv1.RunRequest{Triggers: []*executorv1.Trigger{
		bean("c1", 1, "gate", ""), bean("c2", 2, "gate", ""), bean("c3", 3, "gate", ""),
	}})
	if err != nil {
		t.Fatal(err)
	}
	acks := resp.GetAcks()
	for i, want := range []executorv1.RunOutcome{executorv1.RunOutcome_RUN_OUTCOME_ACCEPTED, executorv1.RunOutcome_RUN_OUTCOME_ACCEPTED, executorv1.RunOutcome_RUN_OUTCOME_REJECTED} {
		if got := acks[i].GetOutcome(); got != want || acks[i].GetBusy() != (i == 2) {
			t.Fatalf("fire %d: got %v busy=%v %q, want %v busy=%v", i+1, got, acks[i].GetBusy(), acks[i].GetMessage(), want, i == 2)
		}
	}
	if l := resp.GetLoad(); l.GetCapacity() != 2 || l.GetRunning() != 2 || l.GetFree() != 0 {
		t.Fatalf("load after two fires of two slots: %v, want capacity 2, running 2, free 0", l)
	}
	h.gates.waitStarted(t, "c1")
	h.gates.waitStarted(t, "c2")

	seen, err := h.cli.Seen(ctxFor(t), &executorv1.SeenRequest{TriggerIds: []string{"c1", "c3"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := seen.GetSeenTriggerIds(); len(got) != 1 || got[0] != "c1" {
		t.Fatalf("Seen(c1, c3) = %v, want [c1]: a busy refusal is not remembered", got)
	}
	acks = h.run(t, bean("c1", 1, "gate", ""), bean("c3", 3, "gate", ""))
	if acks[0].GetOutcome() != executorv1.RunOutcome_RUN_OUTCOME_DUPLICATE || !acks[1].GetBusy() {
		t.Fatalf("c1 and c3 again while full: %v, %v; want DUPLICATE, then busy", acks[0], acks[1])
	}

	h.gates.release("c1")
	h.wantResult(t, "c1", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	h.accept(t, bean("c3", 3, "gate", ""))
	h.gates.waitStarted(t, "c3")
	h.gates.release("c2")
	h.gates.release("c3")
	h.wantResult(t, "c3", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
}

// TestFireDueWhileFullWaitsForASlot: a fire accepted while a slot was free that comes due when
// none is (here one held until its time) waits for a slot instead of running beyond the
// capacity, counts as waiting in the executor's load, and starts when the slot frees.
func TestFireDueWhileFullWaitsForASlot(t *testing.T) {
	t.Parallel()
	var (
		mu            sync.Mutex
		running, most int
	)
	h := start(t, func(c *sdk.Config) { c.Capacity = 1 })
	h.exec.Handle("count", func(ctx context.Context, j *sdk.Job) error {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		defer func() { mu.Lock(); running--; mu.Unlock() }()
		return h.gates.handler(ctx, j)
	})
	due := bean("w2", 2, "count", "")
	due.StartDelayUs = 1 // its timer starts once the call has placed w1
	acks := h.run(t, due, bean("w1", 1, "count", ""))
	for _, a := range acks {
		if a.GetOutcome() != executorv1.RunOutcome_RUN_OUTCOME_ACCEPTED {
			t.Fatalf("%s: %v, want ACCEPTED", a.GetTriggerId(), a)
		}
	}
	h.gates.waitStarted(t, "w1")
	h.waitLoad(t, "w1", func(l *executorv1.ExecutorLoad) bool { return l.GetWaiting() == 1 && l.GetFree() == 0 })
	if ack := h.run(t, bean("w3", 3, "count", ""))[0]; !ack.GetBusy() {
		t.Fatalf("w3 while w2 waits for the only slot: %v, want busy", ack)
	}
	h.gates.release("w1")
	h.gates.waitStarted(t, "w2")
	h.gates.release("w2")
	h.wantResult(t, "w2", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	mu.Lock()
	defer mu.Unlock()
	if most != 1 {
		t.Fatalf("%d fires ran at once, want the capacity 1", most)
	}
}

// TestKilledWaitingFireFreesItsSlot: a fire killed while it waits for a run slot leaves the wait,
// and the slot goes to the next fire instead of staying with its worker.
func TestKilledWaitingFireFreesItsSlot(t *testing.T) {
	t.Parallel()
	h := start(t, func(c *sdk.Config) { c.Capacity = 1 })
	due := bean("k2", 2, "gate", "")
	due.StartDelayUs = 1
	h.run(t, due, bean("k1", 1, "gate", ""))
	h.gates.waitStarted(t, "k1")
	h.waitLoad(t, "k1", func(l *executorv1.ExecutorLoad) bool { return l.GetWaiting() == 1 })
	if _, err := h.cli.Kill(ctxFor(t), &executorv1.KillRequest{TriggerId: "k2"}); err != nil {
		t.Fatal(err)
	}
	h.wantResult(t, "k2", logsv1.RunStatus_RUN_STATUS_KILLED, "")
	h.waitLoad(t, "k1", func(l *executorv1.ExecutorLoad) bool { return l.GetWaiting() == 0 })
	h.gates.release("k1")
	h.wantResult(t, "k1", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	h.accept(t, bean("k3", 3, "gate", ""))
	h.gates.waitStarted(t, "k3")
	h.gates.release("k3")
	h.wantResult(t, "k3", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
}

// waitLoad waits until the load the executor reports in a Run answer satisfies ok, sending the
// fire id of job 1, which it already holds (answered DUPLICATE), to ask.
func (h *harness) waitLoad(t *testing.T, id string, ok func(*executorv1.ExecutorLoad) bool) {
	t.Helper()
	giveUp := time.After(wait)
	for {
		resp, err := h.cli.Run(ctxFor(t), &executorv1.RunRequest{Triggers: []*executorv1.Trigger{bean(id, 1, "gate", "")}})
		if err != nil {
			t.Fatal(err)
		}
		if ok(resp.GetLoad()) {
			return
		}
		select {
		case <-giveUp:
			t.Fatalf("executor load %v: not as wanted within %v", resp.GetLoad(), wait)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
