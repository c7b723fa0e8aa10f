package devstack_test

import (
	"context"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
)

// TestWorkflowDataBetweenNodes runs, through REST and every real service, a workflow whose
// nodes pass data: A (a Go handler) and S (a shell script, with a ::jobmesh-output line and its
// output file) publish outputs; D (a Go handler) joins them, reads them in its context with the
// trigger's params, and publishes a total; T (a shell script) reads D's total from its
// environment and publishes through its output file. The instance view shows every node's
// outputs.
func TestWorkflowDataBetweenNodes(t *testing.T) {
	t.Parallel()
	seen := make(chan *sdk.Job, 1)
	st := startStackWith(t, "", map[string]sdk.HandlerFunc{
		"wf-publish": func(_ context.Context, job *sdk.Job) error {
			return job.SetOutput("rows", "10")
		},
		"wf-join": func(_ context.Context, job *sdk.Job) error {
			seen <- job
			return job.SetOutput("total", job.Context["A.rows"]+"+"+job.Context["S.files"])
		},
	})
	base := "http://" + st.HTTPAddr + "/api/v1"
	bean := func(name, handler string) string {
		return createJob(t, base, map[string]any{"name": name, "group_id": st.GroupID, "handler": handler,
			"schedule": map[string]any{"type": "SCHEDULE_TYPE_NONE"}})
	}
	script := func(name, src string) string {
		return createJob(t, base, map[string]any{"name": name, "group_id": st.GroupID, "glue_type": "GLUE_TYPE_GLUE_SHELL",
			"glue_source": src, "schedule": map[string]any{"type": "SCHEDULE_TYPE_NONE"}})
	}
	a, d := bean("data-a", "wf-publish"), bean("data-d", "wf-join")
	s := script("data-s", `echo "::jobmesh-output files=3"; echo "from=file" > "$JOBMESH_OUTPUT_FILE"`)
	tj := script("data-t", `echo "total is $JOBMESH_CTX_TOTAL on $JOBMESH_CTX_DAY"; printf 'seen=%s\n' "$JOBMESH_CTX_D_TOTAL" > "$JOBMESH_OUTPUT_FILE"`)
	wf := map[string]any{
		"name": "data", "group_id": st.GroupID, "schedule": map[string]any{"type": "SCHEDULE_TYPE_NONE"},
		"params": map[string]string{"day": "0"},
		"nodes":  []map[string]any{{"id": "A", "job_id": a}, {"id": "S", "job_id": s}, {"id": "D", "job_id": d}, {"id": "T", "job_id": tj}},
		"edges":  []map[string]any{{"from": "A", "to": "D"}, {"from": "S", "to": "D"}, {"from": "D", "to": "T"}},
	}
	var created struct{ Workflow struct{ ID string } }
	if code := call(t, "POST", base+"/workflows", wf, &created); code != http.StatusOK {
		t.Fatalf("create = %d", code)
	}
	var trig struct{ Instance struct{ ID string } }
	if code := call(t, "POST", base+"/workflows/"+created.Workflow.ID+":trigger", map[string]any{"params": map[string]string{"day": "2026-11-28"}}, &trig); code != http.StatusOK {
		t.Fatalf("trigger = %d", code)
	}

	type node struct {
		NodeID    string            `json:"node_id"`
		Status    string            `json:"status"`
		TriggerID string            `json:"trigger_id"`
		Outputs   map[string]string `json:"outputs"`
	}
	var in struct {
		Instance struct {
			Status string `json:"status"`
			Nodes  []node `json:"nodes"`
		}
	}
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if code := call(t, "GET", base+"/workflow-instances/"+trig.Instance.ID, nil, &in); code != http.StatusOK {
			t.Fatalf("GET instance = %d", code)
		}
		if in.Instance.Status != "WORKFLOW_INSTANCE_STATUS_RUNNING" {
			break
		}
		select {
		case <-deadline:
			t.Fatalf("instance %+v still running after 30s", in.Instance)
		case <-tick.C:
		}
	}
	if in.Instance.Status != "WORKFLOW_INSTANCE_STATUS_SUCCESS" {
		t.Fatalf("instance = %+v; want SUCCESS", in.Instance)
	}

	var job *sdk.Job
	select {
	case job = <-seen:
	default:
		t.Fatal("D's handler never ran")
	}
	wantCtx := map[string]string{"day": "2026-11-28", "A.rows": "10", "rows": "10", "S.files": "3", "files": "3", "S.from": "file", "from": "file"}
	if !maps.Equal(job.Context, wantCtx) || job.WorkflowInstanceID != trig.Instance.ID || job.WorkflowNodeID != "D" {
		t.Fatalf("D's fire: context %q instance %q node %q; want %q %q D", job.Context, job.WorkflowInstanceID, job.WorkflowNodeID, wantCtx, trig.Instance.ID)
	}
	want := map[string]map[string]string{
		"A": {"rows": "10"},
		"S": {"files": "3", "from": "file"},
		"D": {"total": "10+3"},
		"T": {"seen": "10+3"},
	}
	var tTrigger string
	for _, n := range in.Instance.Nodes {
		if !maps.Equal(n.Outputs, want[n.NodeID]) {
			t.Errorf("node %s outputs = %q; want %q", n.NodeID, n.Outputs, want[n.NodeID])
		}
		if n.NodeID == "T" {
			tTrigger = n.TriggerID
		}
	}
	// Reports count the instance on the day of its scheduled time (its id's milliseconds).
	_, msText, _ := strings.Cut(trig.Instance.ID, "-")
	ms, err := strconv.ParseInt(msText, 10, 64)
	if err != nil {
		t.Fatalf("instance id %q: %v", trig.Instance.ID, err)
	}
	day := time.UnixMilli(ms).UTC().Format(time.DateOnly)
	type counts struct{ Running, Success, Failed string }
	var rep struct {
		Days []struct {
			Date              string `json:"date"`
			WorkflowInstances counts `json:"workflow_instances"`
		} `json:"days"`
	}
	if code := call(t, "GET", base+"/reports?start_date="+day+"&end_date="+day, nil, &rep); code != http.StatusOK ||
		len(rep.Days) != 1 || rep.Days[0].WorkflowInstances != (counts{Running: "0", Success: "1", Failed: "0"}) {
		t.Errorf("report of %s = %d %+v; want one day with 1 successful instance", day, code, rep)
	}
	if day == time.Now().UTC().Format(time.DateOnly) { // else midnight passed: today is another day
		var dash struct {
			Today counts `json:"workflow_instances_today"`
		}
		if code := call(t, "GET", base+"/dashboard", nil, &dash); code != http.StatusOK || dash.Today != (counts{Running: "0", Success: "1", Failed: "0"}) {
			t.Errorf("dashboard = %d %+v; want 1 successful instance today", code, dash)
		}
	}

	// T's log line shows what its environment held (lines may reach logsvc after the result).
	for {
		var log struct {
			Lines []struct{ Text string } `json:"lines"`
		}
		if code := call(t, "GET", base+"/logs/"+tTrigger+"/lines", nil, &log); code != http.StatusOK {
			t.Fatalf("GET T's log = %d", code)
		}
		if len(log.Lines) > 0 {
			if got := log.Lines[0].Text; got != "total is 10+3 on 2026-11-28" {
				t.Fatalf("T's log line = %q; want the total and the day", got)
			}
			return
		}
		select {
		case <-deadline:
			t.Fatal("T's log line never came")
		case <-tick.C:
		}
	}
}
