package scheduler

import (
	"slices"
	"sync"
)

// owed tracks, while a replica leads, the fires it armed and has not dispatched yet: per job, the
// scheduled times in the ring or the trigger pools. Its per-job minimum is what the store's
// armed_from_ms must not pass, so that a new leader knows where to look after a crash.
type owed struct {
	mu    sync.Mutex
	fires map[int64][]int64  // job → pending scheduled times (Unix ms), ascending
	dirty map[int64]struct{} // jobs whose minimum changed since the last flush
}

func newOwed() *owed {
	return &owed{fires: map[int64][]int64{}, dirty: map[int64]struct{}{}}
}

// add records an armed fire whose armed_from_ms mark is not written yet.
func (o *owed) add(job, ms int64) {
	o.arm(job, ms)
	o.mu.Lock()
	o.dirty[job] = struct{}{}
	o.mu.Unlock()
}

// arm records an armed fire whose mark the caller already committed.
func (o *owed) arm(job, ms int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fs := o.fires[job]
	i, found := slices.BinarySearch(fs, ms)
	if found {
		return
	}
	o.fires[job] = slices.Insert(fs, i, ms)
}

// done records that a fire was dispatched (or disarmed).
func (o *owed) done(job, ms int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fs := o.fires[job]
	i, ok := slices.BinarySearch(fs, ms)
	if !ok {
		return
	}
	if fs = slices.Delete(fs, i, i+1); len(fs) == 0 {
		delete(o.fires, job)
	} else {
		o.fires[job] = fs
	}
	o.dirty[job] = struct{}{}
}

// min returns a job's earliest owed fire.
func (o *owed) min(job int64) (int64, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if fs := o.fires[job]; len(fs) > 0 {
		return fs[0], true
	}
	return 0, false
}

// touch marks a job for the next flush even when nothing changed in memory (after a takeover,
// to clear what the old leader left).
func (o *owed) touch(job int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.dirty[job] = struct{}{}
}

// takeDirty returns, for every job changed since the last call, its earliest owed fire (0 for
// none), and forgets them. If the flush that follows fails, call restore.
func (o *owed) takeDirty() map[int64]int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[int64]int64, len(o.dirty))
	for job := range o.dirty {
		if fs := o.fires[job]; len(fs) > 0 {
			out[job] = fs[0]
		} else {
			out[job] = 0
		}
	}
	clear(o.dirty)
	return out
}

// restore marks jobs dirty again after a failed flush.
func (o *owed) restore(jobs map[int64]int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for job := range jobs {
		o.dirty[job] = struct{}{}
	}
}
