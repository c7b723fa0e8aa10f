package firecheck

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
)

// Tally is an SDK handler that records every fire it gets as an Execution and does nothing else,
// so what it measures is the scheduler's delivery, not the handler. It keeps the fires in memory
// the garbage collector never scans (no pointers: trigger ids back to back in one byte slice),
// so a bench agent that has recorded millions costs no more per fire than one that has recorded
// a few.
type Tally struct {
	mu       sync.Mutex
	recs     []tallied
	ids      []byte        // the trigger ids of recs, back to back
	types    []string      // the trigger types seen; tallied.ttype indexes it
	lastNs   int64         // latest arrival, Unix ns
	maxSched int64         // latest scheduled time seen, Unix ms
	changed  chan struct{} // closed and replaced on an execution once a waiter has taken it
	watched  bool          // a waiter took changed
}

// tallied is one recorded fire; its trigger id is ids[previous record's idEnd:idEnd].
type tallied struct {
	job, schedMs, arrivedNs int64
	idEnd                   int
	ttype                   int
}

// NewTally returns an empty tally.
func NewTally() *Tally { return &Tally{changed: make(chan struct{})} }

// Handle is the sdk.HandlerFunc that records job's fire.
func (tl *Tally) Handle(_ context.Context, job *sdk.Job) error {
	tl.Record(Execution{JobID: job.ID, TriggerID: job.TriggerID, ScheduledMs: job.ScheduledTime.UnixMilli(),
		ArrivedNs: time.Now().UnixNano(), TriggerType: job.TriggerType})
	return nil
}

// Record records an execution seen elsewhere (a script that reported its own fire).
func (tl *Tally) Record(e Execution) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tt := slices.Index(tl.types, e.TriggerType)
	if tt < 0 {
		tt = len(tl.types)
		tl.types = append(tl.types, e.TriggerType)
	}
	tl.ids = append(tl.ids, e.TriggerID...)
	tl.recs = append(tl.recs, tallied{job: e.JobID, schedMs: e.ScheduledMs, arrivedNs: e.ArrivedNs, idEnd: len(tl.ids), ttype: tt})
	tl.lastNs = max(tl.lastNs, e.ArrivedNs)
	tl.maxSched = max(tl.maxSched, e.ScheduledMs)
	if tl.watched {
		close(tl.changed)
		tl.changed, tl.watched = make(chan struct{}), false
	}
}

// watchLocked returns the channel the next execution closes.
func (tl *Tally) watchLocked() chan struct{} {
	tl.watched = true
	return tl.changed
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
	return Stats{Executions: len(tl.recs), LastArrivedNs: tl.lastNs, MaxScheduledMs: tl.maxSched}
}

// Snapshot returns the executions recorded so far whose scheduled time is within [fromMs, toMs].
func (tl *Tally) Snapshot(fromMs, toMs int64) []Execution {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	out := make([]Execution, 0, len(tl.recs))
	start := 0
	for _, r := range tl.recs {
		if r.schedMs >= fromMs && r.schedMs <= toMs {
			out = append(out, Execution{JobID: r.job, TriggerID: string(tl.ids[start:r.idEnd]), ScheduledMs: r.schedMs,
				ArrivedNs: r.arrivedNs, TriggerType: tl.types[r.ttype]})
		}
		start = r.idEnd
	}
	return out
}

// Count returns how many executions recorded so far were scheduled within [fromMs, toMs].
func (tl *Tally) Count(fromMs, toMs int64) int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	n := 0
	for _, r := range tl.recs {
		if r.schedMs >= fromMs && r.schedMs <= toMs {
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
		ok, ch := tl.maxSched > t.UnixMilli(), tl.watchLocked()
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
		since, ch := time.Since(time.Unix(0, tl.lastNs)), tl.watchLocked()
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
