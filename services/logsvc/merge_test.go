package logsvc

import (
	"slices"
	"testing"
	"time"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
)

// TestRunSetWritesAFireOnce checks that a fire's record, RUNNING and final result applied in one
// cycle, in any order, make one new row holding all of them, completed, with no alarm needed.
func TestRunSetWritesAFireOnce(t *testing.T) {
	t.Parallel()
	rec := record("150-a", 150, base)
	start := result("150-a", 150, logsv1.RunStatus_RUN_STATUS_RUNNING, base+3)
	end := result("150-a", 150, logsv1.RunStatus_RUN_STATUS_SUCCESS, base+3)
	for _, order := range [][]op{
		{{id: "150-a", rec: rec}, {id: "150-a", res: start}, {id: "150-a", res: end}},
		{{id: "150-a", res: start}, {id: "150-a", res: end}, {id: "150-a", rec: rec}},
		{{id: "150-a", res: start}, {id: "150-a", rec: rec}, {id: "150-a", res: end}},
	} {
		rs := newRunSet(map[string]run{}, base+100)
		for _, o := range order {
			if !rs.apply(o) {
				t.Fatalf("order %v: %v refused", order, o)
			}
		}
		inserts, updates := rs.changes()
		if len(inserts) != 1 || len(updates) != 0 {
			t.Fatalf("order %v: got %d inserts and %d updates, want one insert", order, len(inserts), len(updates))
		}
		got := *inserts[0]
		want := run{id: "150-a", job: 150, group: 1, triggerType: int32(rec.GetTriggerType()), schedMs: base, trigMs: base + 2,
			address: "10.0.0.1:9999", handler: "demo", params: "p", shardTotal: 1, retriesLeft: 2, route: int32(rec.GetRouteStrategy()),
			outcome: outcomeOK, triggerMsg: rec.GetTriggerMessage(), status: statusSuccess, handleMsg: end.GetMessage(),
			startMs: base + 3, endMs: base + 53, traceID: rec.GetTraceId(), alarm: alarmNotNeeded}
		if got != want {
			t.Errorf("order %v: row\ngot  %+v\nwant %+v", order, got, want)
		}
		if !slices.Equal(rs.done, []string{"150-a"}) {
			t.Errorf("order %v: completed %v, want [150-a]", order, rs.done)
		}
	}
}

// TestRunSetStoredRun checks the rules on a run already stored: a second final result is
// refused and changes nothing, and a record for a run that ended without one completes it.
func TestRunSetStoredRun(t *testing.T) {
	t.Parallel()
	stored := run{id: "151-a", job: 151, schedMs: base, status: statusSuccess, startMs: base, endMs: base + 50,
		address: "10.0.0.1:9999", shardTotal: 1, alarm: alarmPending}
	rs := newRunSet(map[string]run{"151-a": stored}, base+100)
	if rs.apply(op{id: "151-a", res: result("151-a", 151, logsv1.RunStatus_RUN_STATUS_FAIL, base)}) {
		t.Errorf("second final result: taken, want refused")
	}
	if inserts, updates := rs.changes(); len(inserts)+len(updates) != 0 {
		t.Errorf("after a refused result: got %d inserts and %d updates, want none", len(inserts), len(updates))
	}
	rs.apply(op{id: "151-a", rec: record("151-a", 151, base)})
	_, updates := rs.changes()
	if len(updates) != 1 || updates[0].outcome != outcomeOK || updates[0].status != statusSuccess || updates[0].alarm != alarmNotNeeded {
		t.Fatalf("record after the result: got %+v, want one update, outcome OK, SUCCESS, no alarm needed", updates)
	}
	if !slices.Equal(rs.done, []string{"151-a"}) {
		t.Errorf("completed %v, want [151-a]", rs.done)
	}
}

func TestMayWait(t *testing.T) {
	t.Parallel()
	failed := record("152-a", 152, base)
	failed.TriggerOutcome = logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED
	rec := op{id: "152-a", rec: record("152-a", 152, base)}
	res := op{id: "152-a", res: result("152-a", 152, logsv1.RunStatus_RUN_STATUS_SUCCESS, base)}
	old := rec
	old.parked = time.Now().Add(-parkFor)
	recent := res
	recent.parked = time.Now()
	for _, c := range []struct {
		name   string
		ops    []op
		stored bool
		want   bool
	}{
		{"record alone", []op{rec}, false, true},
		{"results alone", []op{res, res}, false, true},
		{"record and result", []op{res, rec}, false, false},
		{"stored run", []op{res}, true, false},
		{"failed record", []op{{id: "152-a", rec: failed}}, false, false},
		{"parked a moment ago", []op{recent}, false, true},
		{"parked long enough", []op{old}, false, false},
	} {
		stored := map[string]run{}
		if c.stored {
			stored["152-a"] = run{id: "152-a"}
		}
		if got := mayWait(c.ops, stored)["152-a"]; got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}
