package scheduler_test

import (
	"strings"
	"testing"
	"time"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/logtest"
	"github.com/jobmesh/jobmesh/services/scheduler"
)

// TestTakeoverMisfiresFollowTheJobsStrategy: a replica that takes over (after a restart, a
// crash or a hand-over) fires that were owed for longer than the misfire threshold follows each
// job's misfire strategy, as the pre-read does: DO_NOTHING records every late fire SKIPPED and
// runs none; FIRE_ONCE_NOW runs the latest late fire once now (trigger type MISFIRE) and records
// the others SKIPPED. A fire owed within the threshold is sent as itself.
func TestTakeoverMisfiresFollowTheJobsStrategy(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := t.Context()
	g, err := registryv1.NewRegistryServiceClient(c.regConn).CreateExecutorGroup(ctx, &registryv1.CreateExecutorGroupRequest{
		Group: &registryv1.ExecutorGroup{AppName: "misfire-app", Title: "misfire-app"}})
	if err != nil {
		t.Fatal(err)
	}
	a := c.replica(t, "a")
	waitLeader(t, a)
	newJob := func(m schedulerv1.MisfireStrategy) int64 {
		t.Helper()
		j, err := a.CreateJob(ctx, &schedulerv1.CreateJobRequest{Job: &schedulerv1.Job{
			GroupId: g.Group.Id, Name: m.String(), Handler: "count", GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN,
			Schedule:        &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_FIX_RATE, Expression: "10s"},
			MisfireStrategy: m, Status: schedulerv1.JobStatus_JOB_STATUS_STOPPED,
		}})
		if err != nil {
			t.Fatal(err)
		}
		return j.Job.Id
	}
	doNothing := newJob(schedulerv1.MisfireStrategy_MISFIRE_STRATEGY_DO_NOTHING)
	onceNow := newJob(schedulerv1.MisfireStrategy_MISFIRE_STRATEGY_FIRE_ONCE_NOW)
	a.Stop()

	// What the stopped leader left: each job owes its fires from 52 s ago on, every 10 s; the
	// last of them (2 s ago) is within the 5 s misfire threshold, the next is 8 s ahead.
	now := time.Now().UnixMilli()
	from := now - 52_000
	for _, job := range []int64{doNothing, onceNow} {
		if _, err := c.store.ExecContext(ctx, `UPDATE jobs SET status = $1 WHERE id = $2`, int32(schedulerv1.JobStatus_JOB_STATUS_RUNNING), job); err != nil {
			t.Fatal(err)
		}
		if _, err := c.store.ExecContext(ctx, `UPDATE job_state SET armed_from_ms = $2, next_fire_ms = $3 WHERE job_id = $1`,
			job, from, from+60_000); err != nil {
			t.Fatal(err)
		}
	}

	rec := logtest.New()
	b := c.replicaWith(t, scheduler.Config{ReplicaID: "b", Logger: rec.Logger(), MisfireThreshold: 5 * time.Second})
	waitLeader(t, b)
	rec.Wait(t, 30*time.Second, "took over from the previous leader", "fires_checked=12", "fires_refired=3", "misfires_skipped=9")

	logs := logsv1.NewLogServiceClient(c.logsConn)
	runOf := func(id string) *logsv1.Run {
		var r *logsv1.Run
		eventually(t, 30*time.Second, "the run "+id+" in logsvc", func() bool {
			resp, err := logs.GetRun(ctx, &logsv1.GetRunRequest{Id: id})
			r = resp.GetRun()
			return err == nil && r.GetGroupId() != 0
		})
		return r
	}
	for k := range int64(6) {
		fireMs := from + k*10_000
		late := k < 5
		for _, job := range []int64{doNothing, onceNow} {
			r := runOf(scheduler.TriggerID(job, fireMs, 0, 0))
			skipped := late && !(job == onceNow && k == 4)
			switch {
			case skipped:
				if r.GetStatus() != logsv1.RunStatus_RUN_STATUS_SKIPPED || r.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_SKIPPED ||
					!strings.Contains(r.GetTriggerMessage(), "misfire") {
					t.Errorf("job %d, fire %d s ago: %s/%s %q, want SKIPPED as a misfire", job, (now-fireMs)/1000, r.GetStatus(), r.GetTriggerOutcome(), r.GetTriggerMessage())
				}
			case late: // FIRE_ONCE_NOW's run now: the latest late fire
				if r.GetTriggerType() != schedulerv1.TriggerType_TRIGGER_TYPE_MISFIRE || r.GetStatus() == logsv1.RunStatus_RUN_STATUS_SKIPPED {
					t.Errorf("FIRE_ONCE_NOW job, fire %d s ago: %s %s, want the one MISFIRE run", (now-fireMs)/1000, r.GetTriggerType(), r.GetStatus())
				}
			default: // within the threshold: sent as itself
				if r.GetTriggerType() != schedulerv1.TriggerType_TRIGGER_TYPE_CRON || r.GetStatus() == logsv1.RunStatus_RUN_STATUS_SKIPPED {
					t.Errorf("job %d, fire %d s ago: %s %s, want a CRON run", job, (now-fireMs)/1000, r.GetTriggerType(), r.GetStatus())
				}
			}
		}
	}
}
