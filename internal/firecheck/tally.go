package firecheck

import (
	"context"
	"sync"
	"time"

	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
)

// Tally is an SDK handler that records every fire it gets as an Execution and does nothing else,
// so what it measures is the scheduler's delivery, not the handler.
type Tally struct {
	mu       sync.Mutex
	execs    []Execution
	lastNs   int64         // latest arrival, Unix ns
	maxSched int64         // latest scheduled time seen, Unix ms
	changed  chan struct{} // closed and replaced on every execution
}

// NewTally returns an empty tally.
func NewTally() *Tally { return &Tally{changed: make(chan struct{})} }

// Handle is the sdk.HandlerFunc that records job's fire.
func (tl *Tally) Handle(_ context.Context, job *sdk.Job) error {
	now := time.Now().UnixNano()
	sched := job.ScheduledTime.UnixMilli()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.execs = append(tl.execs, Execution{JobID: job.ID, TriggerID: job.TriggerID, ScheduledMs: sched, ArrivedNs: now, TriggerType: job.TriggerType})
	tl.lastNs = now
	tl.maxSched = max(tl.maxSched, sched)
	close(tl.changed)
	tl.changed = make(chan struct{})
	return nil
}

// Stats is a tally's running summary.
type Stats struct {
	// Executions is how many fires it recorded.
	Executions int `json:"executions"`
	// LastArrivedNs is the latest arrival, Unix ns; 0 before the first.
	LastArrivedNs int64 `json:"last_arrived_ns"`
	// MaxScheduledMs is the latest scheduled time among the fires, Unix ms.
	MaxScheduledMs int64 `json:"max_scheduled_ms"`
}

// Stats returns the running summary.
func (tl *Tally) Stats() Stats {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return Stats{Executions: len(tl.execs), LastArrivedNs: tl.lastNs, MaxScheduledMs: tl.maxSched}
}

// Snapshot returns the executions recorded so far whose scheduled time is within [fromMs, toMs].
func (tl *Tally) Snapshot(fromMs, toMs int64) []Execution {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	out := make([]Execution, 0, len(tl.execs))
	for _, e := range tl.execs {
		if e.ScheduledMs >= fromMs && e.ScheduledMs <= toMs {
			out = append(out, e)
		}
	}
	return out
}

// Count returns how many executions recorded so far were scheduled within [fromMs, toMs].
func (tl *Tally) Count(fromMs, toMs int64) int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	n := 0
	for _, e := range tl.execs {
		if e.ScheduledMs >= fromMs && e.ScheduledMs <= toMs {
			n++
		}
	}
	return n
}

// WaitScheduledAfter waits until a fire scheduled after t has been recorded.
func (tl *Tally) WaitScheduledAfter(t time.Time, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		tl.mu.Lock()
		ok, ch := tl.maxSched > t.UnixMilli(), tl.changed
		tl.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return false
		}
	}
}

// WaitQuiet waits until no fire has arrived for d.
func (tl *Tally) WaitQuiet(d, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		tl.mu.Lock()
		since, ch := time.Since(time.Unix(0, tl.lastNs)), tl.changed
		tl.mu.Unlock()
		if since >= d {
			return true
		}
		quietEnd := time.NewTimer(d - since)
		select {
		case <-ch: // another arrival: measure again
		case <-quietEnd.C:
		case <-deadline.C:
			quietEnd.Stop()
			return false
		}
		quietEnd.Stop()
	}
}
