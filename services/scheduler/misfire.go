package scheduler

import (
	"context"
	"time"

	"github.com/jobmesh/jobmesh/internal/db"
)

// misfireStrategy is what a job (or workflow) does with fires later than the misfire threshold,
// as jobs.misfire_strategy stores it; misfireStrategyOf and proto convert at the API's edge.
type misfireStrategy int32

const (
	// misfireDoNothing skips every late fire: each is recorded SKIPPED, none runs.
	misfireDoNothing misfireStrategy = 1
	// misfireFireOnceNow runs once now for all the late fires; the others are recorded SKIPPED.
	misfireFireOnceNow misfireStrategy = 2
)

// String names the strategy as the API does.
func (m misfireStrategy) String() string {
	if m == misfireFireOnceNow {
		return "FIRE_ONCE_NOW"
	}
	return "DO_NOTHING"
}

// isLate reports whether a fire scheduled at fireMs is a misfire at nowMs: later than the
// misfire threshold. A fire exactly threshold late is still on time.
func isLate(fireMs, nowMs int64, threshold time.Duration) bool {
	return nowMs-fireMs > threshold.Milliseconds()
}

// misfirePlan is what happens to a job's owed fires (planMisfires). Times are scheduled fire
// times, Unix ms, ascending.
type misfirePlan struct {
	// send are the fires not later than the threshold: sent as they are, as their own fires
	// (trigger ids and trigger type kept).
	send []int64
	// skip are the late fires that do not run: each is recorded with trigger outcome SKIPPED
	// under its own trigger id (skippedFire).
	skip []int64
	// onceNowMs is the scheduled time of FIRE_ONCE_NOW's one run now for all the late fires,
	// dispatched now with trigger type MISFIRE and this time's trigger id; 0 for none.
	onceNowMs int64
}

// planMisfires decides what happens to the fires a job owes (owed: scheduled times, Unix ms,
// ascending) at nowMs: it is the scheduler's one misfire rule, pure (no clock, no store).
//
//   - A fire not later than threshold (isLate) is sent as it is: plan.send.
//   - DO_NOTHING: every late fire is skipped (plan.skip), and nothing runs for them.
//   - FIRE_ONCE_NOW: one run now stands for all the late fires (plan.onceNowMs); the other late
//     fires are skipped.
//
// The run now takes the trigger id of the latest late fire, so that the decision depends on
// the owed fires alone: a later now only turns fires that were on time into late ones, and the
// latest late fire is then either the fire an earlier decision already ran now or one it sent
// as itself. Either way its trigger id is one logsvc and the executors already know, and a
// second decision over the same owed fires (a second takeover after a crash, a restart) makes
// no second run.
//
// The pre-read calls it with a job's next fire when that is late (the one fire that stands for
// every fire the schedule missed since; firesInWindow). A takeover calls it per job with the
// fires it walks in [armed_from_ms, next_fire_ms) — all of them, including those logsvc or an
// executor already knows, since the choice of the run now must not depend on what a previous
// attempt got through — and then sends nothing for a fire of the plan whose trigger id is known
// (a skipped fire known as run stays run: logsvc keeps the executor's word over a SKIPPED
// record). Fires in the plan's send list are dispatched as today (ring at their own time), the
// run now with trigger type MISFIRE at once, and each skipped one is recorded
// (Service.recordSkipped, with the reason misfireReason gives).
func planMisfires(strategy misfireStrategy, owed []int64, nowMs int64, threshold time.Duration) misfirePlan {
	var p misfirePlan
	var late []int64
	for _, t := range owed {
		if isLate(t, nowMs, threshold) {
			late = append(late, t)
		} else {
			p.send = append(p.send, t)
		}
	}
	if len(late) == 0 {
		return p
	}
	if strategy == misfireFireOnceNow {
		p.onceNowMs = late[len(late)-1]
		late = late[:len(late)-1]
	}
	if len(late) > 0 {
		p.skip = late
	}
	return p
}

// misfireFires turns a plan's late part into fires of job j: the run now (nil for none: a
// scheduled fire of trigger type MISFIRE at the chosen time; the caller arms it due now) and
// the skipped fires, each with why it was skipped.
func misfireFires(j *jobRow, p misfirePlan, nowMs int64, threshold time.Duration) (onceNow *fire, skipped []skippedFire) {
	strategy := j.Misfire
	if p.onceNowMs != 0 {
		onceNow = &fire{job: j, fireMs: p.onceNowMs, kind: kindOnceNow, trigType: triggerMisfire}
	}
	for _, t := range p.skip {
		skipped = append(skipped, skippedFire{
			f:   &fire{job: j, fireMs: t, kind: kindSkipped, trigType: triggerCron},
			why: misfireReason(strategy, j.ID, t, p.onceNowMs, nowMs, threshold),
		})
	}
	return onceNow, skipped
}

// misfired gathers one pre-read's misfire decisions: the FIRE_ONCE_NOW runs and the skipped
// fires of the jobs it read.
type misfired struct {
	onceNow []*fire
	skipped []skippedFire
}

// add gathers one job's decision (onceNow may be nil).
func (m *misfired) add(onceNow *fire, skipped []skippedFire) {
	if onceNow != nil {
		m.onceNow = append(m.onceNow, onceNow)
	}
	m.skipped = append(m.skipped, skipped...)
}

// store keeps, inside the pre-read's fenced transaction, the decisions of the jobs it advanced
// (the others' next fire was moved by the API meanwhile: their misfire is not this scan's), and
// saves each run now and each skipped fire as a pending fire due at nowMs: they are then decided
// with the job's advance, once, and a leader that dies before dispatching the run or delivering
// a skipped fire's record leaves them to the next one (takeOverPending) instead of to the
// takeover's walk of the schedule, which starts past them.
func (m *misfired) store(ctx context.Context, st engineStore, tx *db.Tx, advanced map[int64]bool, nowMs int64) error {
	var rows []dueFire
	kept := m.onceNow[:0]
	for _, f := range m.onceNow {
		if advanced[f.job.ID] {
			rows = append(rows, dueFire{f: f, due: nowMs})
			kept = append(kept, f)
		}
	}
	m.onceNow = kept
	skipped := m.skipped[:0]
	for _, sk := range m.skipped {
		if advanced[sk.f.job.ID] {
			sk.f.skip = sk.why
			rows = append(rows, dueFire{f: sk.f, due: nowMs})
			skipped = append(skipped, sk)
		}
	}
	m.skipped = skipped
	var b db.Batch
	if err := st.addPendings(&b, rows); err != nil {
		return err
	}
	return tx.Send(ctx, &b)
}

// armMisfires acts on a committed pre-read's misfire decisions: it arms each run now and each
// skipped fire, due at nowMs (a skipped fire delivers its SKIPPED record then: skipFire).
func (l *engine) armMisfires(ctx context.Context, m misfired, nowMs int64) {
	s := l.s
	for _, f := range m.onceNow {
		s.log.WarnContext(ctx, "misfire: running once now", "job_id", f.job.ID, "trigger_id", TriggerID(f.job.ID, f.fireMs, 0, 0),
			"late", time.Duration(nowMs-f.fireMs)*time.Millisecond, "strategy", misfireFireOnceNow.String())
		l.armPending(f, nowMs)
	}
	for _, sk := range m.skipped {
		l.armPending(sk.f, nowMs)
	}
}
