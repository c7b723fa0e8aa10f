package devstack_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/jobmesh/jobmesh/internal/db/dbtest"
)

type job struct {
	ID           string   `json:"id"`
	Name         string   `json:"name"`
	Status       string   `json:"status"`
	Version      string   `json:"version"`
	GlueSource   string   `json:"glue_source"`
	Params       string   `json:"params"`
	NextFireTime string   `json:"next_fire_time"`
	ChildJobIDs  []string `json:"child_job_ids"`
}

// TestJobAPI walks the job resource through REST on Postgres: create, get, list with filters,
// patch with optimistic concurrency, start/stop, copy, GLUE versions, manual trigger, preview,
// delete.
func TestJobAPI(t *testing.T) {
	t.Parallel()
	st := startStack(t, dbtest.NewPostgres(t))
	base := "http://" + st.HTTPAddr + "/api/v1"

	var created struct{ Job job }
	if code := call(t, "POST", base+"/jobs", map[string]any{
		"name": "report", "group_id": st.GroupID, "author": "ana",
		"schedule":  map[string]any{"type": "SCHEDULE_TYPE_CRON", "expression": "0 0 3 * * ?", "time_zone": "Europe/Berlin"},
		"glue_type": "GLUE_TYPE_GLUE_SHELL", "glue_source": "echo v1", "glue_remark": "first",
	}, &created); code != http.StatusOK {
		t.Fatalf("create = %d", code)
	}
	j := created.Job
	if j.Status != "JOB_STATUS_STOPPED" || j.Version != "1" || j.NextFireTime != "" {
		t.Errorf("created = %+v, want STOPPED, version 1, no next fire", j)
	}

	var got struct{ Job job }
	if code := call(t, "GET", base+"/jobs/"+j.ID, nil, &got); code != http.StatusOK || got.Job.Name != "report" {
		t.Errorf("get = %d %+v", code, got.Job)
	}
	if code := call(t, "GET", base+"/jobs/424242", nil, nil); code != http.StatusNotFound {
		t.Errorf("get missing = %d, want 404", code)
	}

	var list struct {
		Jobs      []job  `json:"jobs"`
		TotalSize string `json:"total_size"`
	}
	call(t, "GET", base+"/jobs?name=REP&author=an", nil, &list)
	if len(list.Jobs) != 1 || list.TotalSize != "1" {
		t.Errorf("list by name and author = %+v, want the job", list)
	}
	call(t, "GET", base+"/jobs?name=nothing", nil, &list)
	if len(list.Jobs) != 0 {
		t.Errorf("list by another name = %d jobs, want none", len(list.Jobs))
	}

	// PATCH changes only the fields sent; a stale version is refused with 409.
	var patched struct{ Job job }
	if code := call(t, "PATCH", base+"/jobs/"+j.ID, map[string]any{"glue_source": "echo v2", "glue_remark": "second", "version": "1"}, &patched); code != http.StatusOK {
		t.Fatalf("patch = %d", code)
	}
	if patched.Job.GlueSource != "echo v2" || patched.Job.Name != "report" || patched.Job.Version != "2" {
		t.Errorf("patched = %+v, want new source, same name, version 2", patched.Job)
	}
	if code := call(t, "PATCH", base+"/jobs/"+j.ID, map[string]any{"params": "x", "version": "1"}, nil); code != http.StatusConflict {
		t.Errorf("patch at a stale version = %d, want 409", code)
	}

	var versions struct {
		Versions []struct {
			Version    string `json:"version"`
			GlueSource string `json:"glue_source"`
		} `json:"versions"`
	}
	call(t, "GET", base+"/jobs/"+j.ID+"/glue-versions", nil, &versions)
	if len(versions.Versions) != 2 || versions.Versions[0].GlueSource != "echo v2" {
		t.Fatalf("glue versions = %+v, want 2, newest first", versions.Versions)
	}
	var restored struct{ Job job }
	call(t, "POST", base+"/jobs/"+j.ID+"/glue-versions/"+versions.Versions[1].Version+":restore", map[string]any{}, &restored)
	if restored.Job.GlueSource != "echo v1" {
		t.Errorf("restored source = %q, want echo v1", restored.Job.GlueSource)
	}

	var started struct{ Job job }
	call(t, "POST", base+"/jobs/"+j.ID+":start", map[string]any{}, &started)
	if started.Job.Status != "JOB_STATUS_RUNNING" || started.Job.NextFireTime == "" {
		t.Errorf("started = %+v, want RUNNING with a next fire", started.Job)
	}
	var stopped struct{ Job job }
	call(t, "POST", base+"/jobs/"+j.ID+":stop", map[string]any{}, &stopped)
	if stopped.Job.Status != "JOB_STATUS_STOPPED" || stopped.Job.NextFireTime != "" {
		t.Errorf("stopped = %+v, want STOPPED without a next fire", stopped.Job)
	}

	var trig struct {
		TriggerIDs []string `json:"trigger_ids"`
	}
	if code := call(t, "POST", base+"/jobs/"+j.ID+":trigger", map[string]any{"params": "once"}, &trig); code != http.StatusOK || len(trig.TriggerIDs) != 1 {
		t.Fatalf("trigger = %d %+v, want one trigger id", code, trig)
	}
	if code := call(t, "POST", base+"/jobs/"+j.ID+":trigger", map[string]any{"addresses": []string{"nohost"}}, nil); code != http.StatusBadRequest {
		t.Errorf("trigger with a bad address = %d, want 400", code)
	}

	var cp struct{ Job job }
	call(t, "POST", base+"/jobs/"+j.ID+":copy", map[string]any{}, &cp)
	if cp.Job.ID == j.ID || cp.Job.Name != "report (copy)" || cp.Job.Status != "JOB_STATUS_STOPPED" {
		t.Errorf("copy = %+v", cp.Job)
	}
	// Child links: no self, no cycle.
	if code := call(t, "PATCH", base+"/jobs/"+j.ID, map[string]any{"child_job_ids": []string{cp.Job.ID}}, nil); code != http.StatusOK {
		t.Errorf("set child = %d", code)
	}
	var e struct{ Message string }
	if code := call(t, "PATCH", base+"/jobs/"+cp.Job.ID, map[string]any{"child_job_ids": []string{j.ID}}, &e); code != http.StatusBadRequest || !strings.Contains(e.Message, "cycle") {
		t.Errorf("child cycle = %d %q, want 400 naming the cycle", code, e.Message)
	}

	var preview struct {
		FireTimes []string `json:"fire_times"`
	}
	call(t, "POST", base+"/schedules:preview", map[string]any{
		"schedule":   map[string]any{"type": "SCHEDULE_TYPE_CRON", "expression": "0 15 10 ? * 6L", "time_zone": "UTC"},
		"count":      3,
		"start_time": "2026-01-01T00:00:00Z",
	}, &preview)
	want := []string{"2026-01-30T10:15:00Z", "2026-02-27T10:15:00Z", "2026-03-27T10:15:00Z"}
	if strings.Join(preview.FireTimes, ",") != strings.Join(want, ",") {
		t.Errorf("preview of the last Friday = %v, want %v", preview.FireTimes, want)
	}

	if code := call(t, "DELETE", base+"/jobs/"+cp.Job.ID, nil, nil); code != http.StatusOK {
		t.Errorf("delete = %d", code)
	}
	if code := call(t, "GET", base+"/jobs/"+cp.Job.ID, nil, nil); code != http.StatusNotFound {
		t.Errorf("get after delete = %d, want 404", code)
	}
}
