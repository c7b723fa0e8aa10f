package logsvc

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
)

// TestSkippedRecordIsASkippedRunWithACompletion: a trigger record with outcome SKIPPED (a
// misfire its job's strategy skipped) makes a run ended SKIPPED at its trigger time, with no
// alarm to send, found by the run list's SKIPPED filter, and publishes its completion once; a
// repeat of the record changes nothing, and an executor cannot report SKIPPED.
func TestSkippedRecordIsASkippedRunWithACompletion(t *testing.T) {
	t.Parallel()
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, st)
			const job = 701
			id, next := "701-a", "701-b"
			w, cancel := watch(t, e, 0)
			defer cancel()
			rec := record(id, job, base)
			rec.ExecutorAddress, rec.TriggerUnixMs = "", base+58_000
			rec.TriggerOutcome = logsv1.TriggerOutcome_TRIGGER_OUTCOME_SKIPPED
			rec.TriggerMessage = "misfire: 58s late (misfire threshold 5s); the job's misfire strategy DO_NOTHING skipped it"
			e.mustRecords(t, rec)
			e.mustRecords(t, rec) // a repeat (a second leader deciding the same misfire)
			r := e.run(t, id)
			if r.GetStatus() != logsv1.RunStatus_RUN_STATUS_SKIPPED || r.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_SKIPPED ||
				r.GetEndTime().AsTime().UnixMilli() != base+58_000 || r.GetStartTime() != nil ||
				r.GetAlarmStatus() != logsv1.AlarmStatus_ALARM_STATUS_NOT_NEEDED ||
				!strings.Contains(r.GetHandleMessage(), "skipped") || r.GetTriggerMessage() != rec.GetTriggerMessage() {
				t.Errorf("run of a SKIPPED record: got %v, want SKIPPED, ended at its trigger time, no alarm needed", r)
			}
			e.mustRecords(t, record(next, job, base+60_000))
			e.mustResults(t, result(next, job, logsv1.RunStatus_RUN_STATUS_SUCCESS, base+60_000))
			cs := collect(t, w, job, next)
			if got, want := ids(cs), []string{id + "=SKIPPED", next + "=SUCCESS"}; !slices.Equal(got, want) {
				t.Errorf("completions: got %v, want %v", got, want)
			}
			if c := cs[0]; c.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_SKIPPED || c.GetScheduledUnixMs() != base ||
				c.GetEndUnixMs() != base+58_000 {
				t.Errorf("completion of the skipped run: got %v", c)
			}
			list, err := e.logs.ListRuns(ctxFor(t), &logsv1.ListRunsRequest{JobId: job, Status: logsv1.RunStatus_RUN_STATUS_SKIPPED})
			if err != nil {
				t.Fatal(err)
			}
			if len(list.GetRuns()) != 1 || list.GetRuns()[0].GetId() != id {
				t.Errorf("runs listed as SKIPPED: got %v, want only %s", list.GetRuns(), id)
			}
			res := result(next, job, logsv1.RunStatus_RUN_STATUS_SKIPPED, base+60_000)
			if _, err := e.results(t, res); err == nil {
				t.Error("an executor's SKIPPED result was taken, want it refused")
			} else if code, field := fieldOf(err); code != codes.InvalidArgument || field != "results[0].status" {
				t.Errorf("an executor's SKIPPED result: got %v %q, want InvalidArgument on results[0].status", code, field)
			}
		})
	}
}
