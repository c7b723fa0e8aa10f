package devstack_test

import (
	"net/http"
	"testing"
	"time"
)

// fullRun is the part of a run these tests read.
type fullRun struct {
	ID            string `json:"id"`
	Status        string `json:"status"`
	TriggerType   string `json:"trigger_type"`
	Attempt       int    `json:"attempt"`
	RetriesLeft   int    `json:"retries_left"`
	ScheduledTime string `json:"scheduled_time"`
	EndTime       string `json:"end_time"`
}

// waitRuns polls the log API until cond holds for the job's runs (newest first), for at most 30 s.
func waitRuns(t *testing.T, base, jobID string, cond func([]fullRun) bool) []fullRun {
	t.Helper()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		var list struct{ Runs []fullRun }
		if code := call(t, "GET", base+"/logs?job_id="+jobID, nil, &list); code != http.StatusOK {
			t.Fatalf("GET /logs = %d", code)
		}
		if cond(list.Runs) {
			return list.Runs
		}
		select {
		case <-deadline:
			t.Fatalf("runs of job %s = %+v; condition not met within 30s", jobID, list.Runs)
		case <-tick.C:
		}
	}
}

func createJob(t *testing.T, base string, j map[string]any) string {
	t.Helper()
	var resp struct{ Job struct{ ID string } }
	if code := call(t, "POST", base+"/jobs", j, &resp); code != http.StatusOK {
		t.Fatalf("create %v = %d", j["name"], code)
	}
	return resp.Job.ID
}

func finished(rs []fullRun, status string) int {
	n := 0
	for _, r := range rs {
		if r.Status == status {
			n++
		}
	}
	return n
}

// TestRetriesChildrenAndFixDelay checks what happens after a run, through the real services:
// failed fires are retried until the retry count is spent, a success fires the job's children
// (trigger type PARENT), and a FIX_DELAY job's next fire follows its completion.
func TestRetriesChildrenAndFixDelay(t *testing.T) {
	t.Parallel()
	st := startStack(t, "")
	base := "http://" + st.HTTPAddr + "/api/v1"
	script := func(name, src string, extra map[string]any) map[string]any {
		j := map[string]any{
			"name": name, "group_id": st.GroupID, "glue_type": "GLUE_TYPE_GLUE_SHELL", "glue_source": src,
			"schedule": map[string]any{"type": "SCHEDULE_TYPE_NONE"},
		}
		for k, v := range extra {
			j[k] = v
		}
		return j
	}

	t.Run("retries", func(t *testing.T) {
		t.Parallel()
		id := createJob(t, base, script("flaky", "echo failing; exit 3", map[string]any{"retry_count": 2}))
		call(t, "POST", base+"/jobs/"+id+":trigger", map[string]any{}, nil)
		rs := waitRuns(t, base, id, func(rs []fullRun) bool { return finished(rs, "RUN_STATUS_FAIL") >= 3 })
		if len(rs) != 3 {
			t.Fatalf("runs = %+v, want 3 (the fire and 2 retries)", rs)
		}
		for i, r := range rs { // newest first
			attempt := 2 - i
			want := "TRIGGER_TYPE_RETRY"
			if attempt == 0 {
				want = "TRIGGER_TYPE_MANUAL"
			}
			if r.Attempt != attempt || r.TriggerType != want || r.RetriesLeft != 2-attempt {
				t.Errorf("run %d = %+v, want attempt %d of type %s", i, r, attempt, want)
			}
		}
	})

	t.Run("children", func(t *testing.T) {
		t.Parallel()
		child := createJob(t, base, script("child", "echo child", nil))
		parent := createJob(t, base, script("parent", "echo parent", map[string]any{"child_job_ids": []string{child}}))
		call(t, "POST", base+"/jobs/"+parent+":trigger", map[string]any{}, nil)
		rs := waitRuns(t, base, child, func(rs []fullRun) bool { return finished(rs, "RUN_STATUS_SUCCESS") >= 1 })
		if len(rs) != 1 || rs[0].TriggerType != "TRIGGER_TYPE_PARENT" {
			t.Errorf("child runs = %+v, want one PARENT run", rs)
		}
	})

	t.Run("fix delay", func(t *testing.T) {
		t.Parallel()
		id := createJob(t, base, script("delayed", "echo tick", map[string]any{
			"schedule": map[string]any{"type": "SCHEDULE_TYPE_FIX_DELAY", "expression": "1s"},
			"status":   "JOB_STATUS_RUNNING",
		}))
		rs := waitRuns(t, base, id, func(rs []fullRun) bool { return finished(rs, "RUN_STATUS_SUCCESS") >= 2 })
		first, second := rs[len(rs)-1], rs[len(rs)-2]
		end, err1 := time.Parse(time.RFC3339Nano, first.EndTime)
		next, err2 := time.Parse(time.RFC3339Nano, second.ScheduledTime)
		if err1 != nil || err2 != nil {
			t.Fatalf("times: %v %v", err1, err2)
		}
		// One interval after the run ended; later only by how late its completion reached the
		// scheduler, which under the whole suite on two cores has been seconds.
		if gap := next.Sub(end); gap < time.Second || gap > 10*time.Second {
			t.Errorf("second fire scheduled %v after the first ended, want 1s (+ the completion's lateness)", gap)
		}
		call(t, "POST", base+"/jobs/"+id+":stop", map[string]any{}, nil)
	})
}
