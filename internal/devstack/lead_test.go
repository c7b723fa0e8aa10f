package devstack_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
)

// starts records when each fire's handler was entered, against its scheduled time.
type starts struct {
	mu  sync.Mutex
	got map[string][]fireStart // job id → its fires
}

type fireStart struct {
	id               string
	scheduled, enter time.Time
}

func (s *starts) handler(_ context.Context, j *sdk.Job) error {
	enter := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	k := strconv.FormatInt(j.ID, 10)
	s.got[k] = append(s.got[k], fireStart{j.TriggerID, j.ScheduledTime, enter})
	return nil
}

func (s *starts) of(job string) []fireStart {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]fireStart(nil), s.got[job]...)
}

// TestFiresGoOutAheadAndStartOnTime: the leader sends a scheduled fire ahead of its time (its
// trigger time, when the Run call left, is before its scheduled time) to the stack's SDK agent,
// which holds it and starts it no earlier than its scheduled time. A DISCARD_LATER job's fires
// are never sent early: the executor must judge them against the job's state at their time.
func TestFiresGoOutAheadAndStartOnTime(t *testing.T) {
	t.Parallel()
	rec := &starts{got: map[string][]fireStart{}}
	st := startStackWith(t, "", map[string]sdk.HandlerFunc{"clock": rec.handler})
	base := "http://" + st.HTTPAddr + "/api/v1"

	job := func(name, block string) string {
		return createJob(t, base, map[string]any{
			"name": name, "group_id": st.GroupID, "handler": "clock", "block_strategy": block,
			"schedule": map[string]any{"type": "SCHEDULE_TYPE_FIX_RATE", "expression": "300ms"},
			"status":   "JOB_STATUS_RUNNING",
		})
	}
	serial := job("serial", "BLOCK_STRATEGY_SERIAL_EXECUTION")
	discard := job("discard", "BLOCK_STRATEGY_DISCARD_LATER")

	type timedRun struct {
		ID             string `json:"id"`
		Status         string `json:"status"`
		TriggerOutcome string `json:"trigger_outcome"`
		ScheduledTime  string `json:"scheduled_time"`
		TriggerTime    string `json:"trigger_time"`
	}
	// leads polls a job's recorded fires (newest first: the API's order), each as how long
	// before its scheduled time it was sent, until done accepts them or 30 s have passed.
	leads := func(jobID, want string, done func([]time.Duration) bool) []time.Duration {
		var out []time.Duration
		deadline := time.After(30 * time.Second)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			var list struct{ Runs []timedRun }
			call(t, "GET", base+"/logs?job_id="+jobID, nil, &list)
			out = out[:0]
			for _, r := range list.Runs {
				if r.Status != "RUN_STATUS_SUCCESS" || r.TriggerOutcome != "TRIGGER_OUTCOME_OK" {
					continue
				}
				sched, err1 := time.Parse(time.RFC3339Nano, r.ScheduledTime)
				trig, err2 := time.Parse(time.RFC3339Nano, r.TriggerTime)
				if err1 != nil || err2 != nil {
					t.Fatalf("run %s: scheduled %q, trigger %q: %v %v", r.ID, r.ScheduledTime, r.TriggerTime, err1, err2)
				}
				out = append(out, sched.Sub(trig))
			}
			if done(out) {
				return out
			}
			select {
			case <-deadline:
				t.Fatalf("job %s: %s within 30s (leads, newest first: %v)", jobID, want, out)
			case <-tick.C:
			}
		}
	}

	// Each fire normally leaves 180–200 ms ahead. On a loaded machine the job's first pre-read
	// may come late and arm its first fires late, all at once, and a fire may leave late now and
	// then: wait for one sent ahead.
	leads(serial, "no fire was sent ahead of its time", func(ls []time.Duration) bool {
		return slices.ContainsFunc(ls, func(d time.Duration) bool { return d > 0 })
	})
	for _, d := range leads(discard, "10 fires recorded with their result", func(ls []time.Duration) bool { return len(ls) >= 10 }) {
		if d > 0 {
			t.Errorf("DISCARD_LATER job %s: a fire was sent %v ahead of its time", discard, d)
		}
	}
	for _, jobID := range []string{serial, discard} {
		fs := rec.of(jobID)
		if len(fs) == 0 {
			t.Errorf("job %s: its handler never ran", jobID)
		}
		for _, f := range fs {
			if f.enter.Before(f.scheduled) {
				t.Errorf("fire %s started %v before its scheduled time", f.id, f.scheduled.Sub(f.enter))
			}
		}
	}
}
