package scheduler

import (
	"context"
	"fmt"
	"time"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
)

// skippedFire is a fire that does not run: a misfire its job's misfire strategy skipped
// (planMisfires). why is the trigger message its SKIPPED record carries.
type skippedFire struct {
	f   *fire
	why string
}

// misfireReason says why a fire scheduled at fireMs is skipped at nowMs: how late, the
// threshold, and what the strategy did instead (onceNowMs: the FIRE_ONCE_NOW run's scheduled
// time, 0 for none).
func misfireReason(strategy misfireStrategy, jobID, fireMs, onceNowMs, nowMs int64, threshold time.Duration) string {
	msg := fmt.Sprintf("misfire: %v late (misfire threshold %v); ", time.Duration(nowMs-fireMs)*time.Millisecond, threshold)
	if onceNowMs != 0 {
		return msg + fmt.Sprintf("the job's misfire strategy FIRE_ONCE_NOW ran once now for the late fires, as fire %s; this one was skipped",
			TriggerID(jobID, onceNowMs, 0, 0))
	}
	return msg + "the job's misfire strategy " + strategy.String() + " skipped it"
}

// skipFire settles a stored skipped fire (fire.skip) that came due: it delivers its SKIPPED
// record, and its row goes once logsvc has acknowledged the record. A leadership lost meanwhile
// leaves the row to the next leader.
func (s *Service) skipFire(f *fire) {
	if f.lead != nil && !f.lead.begin() {
		return
	}
	s.recordSkipped(context.Background(), skippedFire{f: f, why: f.skip})
	s.settled(f, nil, nil)
}

// recordSkipped sends logsvc the trigger record of a skipped fire, outcome SKIPPED, under the
// fire's own trigger id: logsvc ends its run SKIPPED at the trigger time and publishes its
// completion (a FIX_DELAY job's next fire follows it; no retry, child job or alarm does).
func (s *Service) recordSkipped(ctx context.Context, sk skippedFire) {
	f := sk.f
	params := f.job.Params
	if f.params != nil {
		params = *f.params
	}
	id := TriggerID(f.job.ID, f.fireMs, 0, f.attempt)
	rec := s.record(f, id, 0, 1, "", params)
	rec.TriggerOutcome = logsv1.TriggerOutcome_TRIGGER_OUTCOME_SKIPPED
	rec.TriggerMessage = sk.why
	s.log.WarnContext(ctx, "misfire skipped", "job_id", f.job.ID, "trigger_id", id, "reason", sk.why)
	s.metrics.gaveUp(outcomeSkipped)
	s.deliver(ctx, f, rec)
}
