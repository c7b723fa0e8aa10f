package scheduler

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/schedule"
)

// preReadLoop scans for due jobs every PreReadInterval (at once again after a full scan) until
// ctx ends or a newer leader fences this one off.
func (l *engine) preReadLoop(ctx context.Context) error {
	s := l.s
	for ctx.Err() == nil {
		start := time.Now() // a measurement, not scheduling: the wall clock
		n, err := l.preRead(ctx)
		if err == nil {
			s.metrics.scanned(time.Since(start), n)
		}
		switch {
		case errors.Is(err, errDeposed):
			return err
		case err != nil && ctx.Err() == nil:
			s.log.Error("pre-read failed", "partition", l.part, "error", err)
		}
		wait := s.cfg.PreReadInterval
		if n >= s.cfg.PreReadBatch {
			wait = 0 // more are due: scan again at once
		}
		if wait > 0 && s.wait(ctx, wait) != nil {
			return nil
		}
	}
	return nil
}

// preRead arms every fire due inside the window, in one fenced transaction: read the due jobs,
// compute each job's fires up to a window past it (misfire policy for fires that are too late), advance
// next_fire, commit, then push the fires into the ring. Then it fires the due workflows, in a
// transaction of their own (preReadWorkflows). It returns how many jobs it read.
func (l *engine) preRead(ctx context.Context) (int, error) {
	s := l.s
	now := s.clk.Now()
	nowMs := now.UnixMilli()
	horizon := nowMs + s.cfg.PreReadWindow.Milliseconds()
	// A job due within the window gets its fires armed up to a second window ahead, so that it
	// is not due again at the next scans: a job that fires every second is read and advanced
	// (a job_state row version) once per window instead of once per scan.
	armTo := horizon + s.cfg.PreReadWindow.Milliseconds()
	tx, err := s.jobs.begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("pre-read: %w", err)
	}
	defer tx.Rollback()
	// The scan's first statements go to the store in one round trip (it holds the partition's
	// fence, and the partition's completions wait for it): the fence, index plans (every read
	// and write of the scan goes by an index, whatever the table statistics say), what changed
	// since the last scan, the due jobs' ids and the due pending fires' keys.
	var (
		b           db.Batch
		dueIDs      []int64
		pendingKeys []pendingKey
	)
	s.jobs.queueFence(&b, l.part, l.epoch, s.cfg.ReplicaID)
	s.jobs.queueIndexPlans(&b)
	refresh := l.queueRefresh(&b, nowMs)
	s.jobs.queueDueIDs(&b, l.part, horizon, s.cfg.PreReadBatch, &dueIDs)
	pendingRead := time.Now() // a measurement: a read older than claimGone/2 is not armed
	s.jobs.queueDuePendingKeys(&b, l.part, horizon, s.cfg.PreReadBatch, &pendingKeys)
	if err := tx.Send(ctx, &b); err != nil {
		return 0, err
	}
	if err := refresh(ctx, tx.Tx); err != nil {
		return 0, err
	}
	// Most pending fires due soon were stored and armed by this leadership (a workflow's
	// nodes, a retry): only the others are read whole, with their jobs.
	var (
		refs       []fireRef
		seen       = map[fireRef]bool{}
		pending    []*fire
		pendingDue []int64
	)
	for _, k := range pendingKeys {
		if r := (fireRef{job: k.job, fireMs: k.fireMs}); !l.claims.taken(k) && !seen[r] {
			seen[r] = true
			refs = append(refs, r)
		}
	}
	if len(refs) > 0 {
		var err error
		if pending, pendingDue, err = s.jobs.duePendingOf(ctx, tx.Tx, refs, horizon); err != nil {
			return 0, err
		}
	}
	due, err := s.jobs.dueJobs(ctx, tx.Tx, dueIDs)
	if err != nil {
		return 0, err
	}
	// Move the armed_from_ms marks of jobs whose owed fires changed; due jobs get theirs below.
	marks := l.owed.takeDirty()
	committed := false
	defer func() {
		if !committed {
			l.owed.restore(marks)
		}
	}()
	var armed []ringEntry
	var misfires misfired
	advances := make([]advance, 0, len(due))
	for _, j := range due {
		sch, err := parseSchedule(j)
		if err != nil {
			// Stored schedules were validated; one that no longer parses is stopped, not retried forever.
			s.log.Error("stopping job with an unreadable schedule", "job_id", j.ID, "error", err)
			if err := s.jobs.stopJob(ctx, tx.Tx, j.ID); err != nil {
				return 0, fmt.Errorf("pre-read: %w", err)
			}
			continue
		}
		fires, onceNow, skipped, last, next := firesInWindow(j, sch, now, armTo, s.cfg.MisfireThreshold)
		misfires.add(onceNow, skipped)
		armedFrom, _ := l.owed.min(j.ID)
		for _, f := range fires {
			f.lead = l
			armed = append(armed, ringEntry{JobID: j.ID, FireAt: f.fireMs, Value: f})
			if armedFrom == 0 || f.fireMs < armedFrom {
				armedFrom = f.fireMs
			}
		}
		advances = append(advances, advance{id: j.ID, readMs: j.NextFireMs, lastMs: last, nextMs: next, armedFromMs: armedFrom})
	}
	advanced, err := s.jobs.advanceAll(ctx, tx.Tx, advances)
	if err != nil {
		return 0, err
	}
	if len(advanced) < len(advances) {
		// The API moved these jobs' next fire after the scan read it: their fires are not ours.
		kept := armed[:0]
		for _, e := range armed {
			if advanced[e.JobID] {
				kept = append(kept, e)
			}
		}
		armed = kept
	}
	if err := misfires.store(ctx, s.jobs, tx, advanced, nowMs); err != nil {
		return 0, err
	}
	// The advanced jobs got their marks with the advance; the others get theirs here, unless
	// this scan was full: then the loop scans again at once (preReadLoop), and the jobs that
	// scan reads get their marks with their advance. A job that fires every second has a fire
	// dispatched between two rounds of scans; moving its mark in the round's first scan and
	// advancing it in a later one wrote its row twice per fire. A mark left behind a moment
	// longer only makes a takeover check fires that were dispatched.
	flush := make(map[int64]int64, len(marks))
	for id, ms := range marks {
		if !advanced[id] {
			flush[id] = ms
		}
	}
	if len(due) >= s.cfg.PreReadBatch {
		l.owed.restore(flush)
		flush = nil
	}
	if err := s.jobs.markArmed(ctx, tx.Tx, flush); err != nil {
		return 0, err
	}
	if err := s.jobs.commit(tx); err != nil {
		return 0, fmt.Errorf("pre-read: %w", err)
	}
	committed = true
	for _, e := range armed {
		// Owed before armed: a ring drained meanwhile refuses the entry, and the fire stays owed
		// for the hand-over (its armed_from_ms mark is already committed).
		l.owed.arm(e.JobID, e.FireAt)
		l.ring.Add(e)
	}
	if age := time.Since(pendingRead); age < claimGone/2 {
		for i, f := range pending {
			l.armPending(f, pendingDue[i])
		}
	} else if len(pending) > 0 {
		s.log.Warn("pending fires read too long ago not armed; the next pre-read reads them again", "partition", l.part,
			"fires", len(pending), "read_ago", age)
	}
	l.armMisfires(ctx, misfires, nowMs)
	if len(armed) > 0 {
		s.log.Debug("pre-read armed fires", "partition", l.part, "jobs", len(due), "fires", len(armed), "epoch", l.epoch)
	}
	return len(due), l.preReadWorkflows(ctx, horizon)
}

// preReadWorkflows fires the partition's workflows due up to horizon (Unix ms) in a fenced
// transaction of its own (fireWorkflows), after the jobs' scan: the partition's completions wait
// for one part of the scan at a time (a completion batch passes over a busy fence, and its
// completions of the partition wait for it), and for none when no workflow is due.
func (l *engine) preReadWorkflows(ctx context.Context, horizon int64) error {
	s := l.s
	now := s.clk.Now() // after the jobs' scan: lateness is judged now
	tx, err := s.jobs.begin(ctx)
	if err != nil {
		return fmt.Errorf("pre-read workflows: %w", err)
	}
	defer tx.Rollback()
	if err := s.jobs.indexPlans(ctx, tx.Tx); err != nil {
		return err
	}
	// A scan that arms nothing may still have written (skipped instances, advanced or stopped
	// workflows): it commits whatever it found.
	arm, err := l.fireWorkflows(ctx, tx, now, horizon)
	if err != nil {
		return err
	}
	if err := s.jobs.commit(tx); err != nil {
		return fmt.Errorf("pre-read workflows: %w", err)
	}
	for _, f := range arm {
		f()
	}
	return nil
}

// queueRefresh queues to b the reads of a refresh of the fires already armed, and returns what
// applies API changes made on any replica to them once b is sent: a deleted job's fires are
// disarmed (its tombstone says so), a stopped or rescheduled job's scheduled fires too (the API
// moved its next fire), and any other change (params, handler, GLUE source…) reaches the armed
// fires. It reads jobs changed since the previous scan, with a second of overlap.
func (l *engine) queueRefresh(b *db.Batch, nowMs int64) func(ctx context.Context, tx *sql.Tx) error {
	s := l.s
	since := l.lastScanMs - 1000
	// The next scan reads from this one's time only once this one has read and applied the
	// changes: a scan that fails leaves the next to read them again.
	if l.ring.Len() == 0 {
		return func(context.Context, *sql.Tx) error {
			l.lastScanMs = nowMs
			return nil
		}
	}
	prune := nowMs-l.lastPruneMs >= time.Minute.Milliseconds()
	if prune {
		s.jobs.queuePruneTombstones(b, nowMs)
	}
	var deleted, changedIDs []int64
	s.jobs.queueTombstonesSince(b, since, &deleted)
	s.jobs.queueChangedSince(b, since, l.ring.HasJob, &changedIDs) // only armed jobs have fires to refresh
	return func(ctx context.Context, tx *sql.Tx) error {
		if prune {
			l.lastPruneMs = nowMs
		}
		for _, id := range deleted {
			for _, e := range l.ring.RemoveJob(id) {
				l.disarmEntry(e)
			}
		}
		changed, err := s.jobs.jobsOf(ctx, tx, changedIDs)
		if err != nil {
			return err
		}
		l.applyChanged(changed)
		l.lastScanMs = nowMs
		return nil
	}
}

// applyChanged brings the armed fires of changed jobs up to date (queueRefresh).
func (l *engine) applyChanged(changed []*jobRow) {
	for _, j := range changed {
		for _, e := range l.ring.RemoveJob(j.ID) {
			old := e.Value.job
			// A retry or child fire outlives a stop or a new schedule (as a manual trigger
			// would); a scheduled fire does not.
			if e.Value.kind.owed() && (j.Status != jobRunning || j.ScheduleType != old.ScheduleType ||
				j.ScheduleExpr != old.ScheduleExpr || j.TimeZone != old.TimeZone) {
				l.disarmEntry(e)
				continue
			}
			f := *e.Value
			f.job = j
			e.Value = &f
			l.ring.Add(e)
		}
	}
}

// firesInWindow computes a job's fires from its next_fire up to horizon (Unix ms). It returns the
// fires to arm, the misfire's FIRE_ONCE_NOW run (nil for none: armed now as a pending fire), the
// misfire's skipped fires, the last fire armed (0 if none) and the job's new next fire (0 for
// none). A next_fire later than the misfire threshold stands for every fire the schedule
// missed since (later than threshold): planMisfires decides for it, and the schedule carries on
// from now. It is pure: no clock, no store.
func firesInWindow(j *jobRow, sch *schedule.Schedule, now time.Time, horizon int64, threshold time.Duration) (fires []*fire, onceNow *fire, skipped []skippedFire, last, next int64) {
	nowMs := now.UnixMilli()
	t := j.NextFireMs
	for t != 0 && t <= horizon {
		if isLate(t, nowMs, threshold) {
			p := planMisfires(j.Misfire, []int64{t}, nowMs, threshold)
			onceNow, skipped = misfireFires(j, p, nowMs, threshold)
			if onceNow != nil {
				last = onceNow.fireMs
			}
			t = nextAfter(sch, now)
			if sch.Type() == schedule.FixDelay {
				t = 0 // the next one follows the completion of the misfire's run, or of its SKIPPED record
			}
			continue
		}
		fires = append(fires, &fire{job: j, fireMs: t, kind: kindScheduled, trigType: triggerCron})
		last = t
		if sch.Type() == schedule.FixDelay {
			return fires, onceNow, skipped, last, 0 // the next fire is set when this one completes
		}
		t = nextAfter(sch, time.UnixMilli(t))
	}
	return fires, onceNow, skipped, last, t
}

func nextAfter(sch *schedule.Schedule, t time.Time) int64 {
	n, ok := sch.Next(t)
	if !ok {
		return 0
	}
	return n.UnixMilli()
}
