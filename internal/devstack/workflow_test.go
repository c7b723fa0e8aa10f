package devstack_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// wfInstance is the part of a workflow instance this test reads.
type wfInstance struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Nodes  []struct {
		NodeID    string `json:"node_id"`
		Status    string `json:"status"`
		TriggerID string `json:"trigger_id"`
	} `json:"nodes"`
}

// TestWorkflowOverREST defines, validates, triggers and follows a workflow through REST and
// every real service: A (a script that fails) → B on success, → E on failure; B is skipped, E
// runs, and the instance succeeds (the failure had its ON_FAILURE path). The validate call
// names the node of an unknown job.
func TestWorkflowOverREST(t *testing.T) {
	t.Parallel()
	st := startStack(t, "")
	base := "http://" + st.HTTPAddr + "/api/v1"
	script := func(name, src string) string {
		return createJob(t, base, map[string]any{"name": name, "group_id": st.GroupID, "glue_type": "GLUE_TYPE_GLUE_SHELL",
			"glue_source": src, "schedule": map[string]any{"type": "SCHEDULE_TYPE_NONE"}})
	}
	a, b, e := script("wf-a", "echo a; exit 3"), script("wf-b", "echo b"), script("wf-e", "echo e")
	wf := map[string]any{
		"name": "wf", "group_id": st.GroupID, "schedule": map[string]any{"type": "SCHEDULE_TYPE_NONE"},
		"nodes": []map[string]any{{"id": "A", "job_id": a}, {"id": "B", "job_id": b}, {"id": "E", "job_id": "999999"}},
		"edges": []map[string]any{{"from": "A", "to": "B"}, {"from": "A", "to": "E", "condition": "EDGE_CONDITION_ON_FAILURE"}},
	}
	var v struct {
		Violations []struct{ Field, Description string }
	}
	if code := call(t, "POST", base+"/workflows:validate", wf, &v); code != http.StatusOK || len(v.Violations) != 1 ||
		v.Violations[0].Field != "nodes[2].job_id" || !strings.Contains(v.Violations[0].Description, `node "E"`) {
		t.Fatalf("validate = %d %+v; want one violation at nodes[2].job_id naming node E", code, v)
	}
	var bad map[string]any
	if code := call(t, "POST", base+"/workflows", wf, &bad); code != http.StatusBadRequest {
		t.Fatalf("create an invalid workflow = %d %v; want 400", code, bad)
	}
	wf["nodes"].([]map[string]any)[2]["job_id"] = e
	var created struct{ Workflow struct{ ID, Version string } }
	if code := call(t, "POST", base+"/workflows", wf, &created); code != http.StatusOK || created.Workflow.Version != "1" {
		t.Fatalf("create = %d %+v", code, created)
	}
	var trig struct{ Instance wfInstance }
	if code := call(t, "POST", base+"/workflows/"+created.Workflow.ID+":trigger", map[string]any{"params": map[string]string{"day": "1"}}, &trig); code != http.StatusOK {
		t.Fatalf("trigger = %d", code)
	}
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var in struct{ Instance wfInstance }
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
	got := in.Instance.Status
	for _, n := range in.Instance.Nodes {
		got += " " + n.NodeID + "=" + strings.TrimPrefix(n.Status, "WORKFLOW_NODE_STATUS_")
	}
	if want := "WORKFLOW_INSTANCE_STATUS_SUCCESS A=FAILED B=SKIPPED E=SUCCESS"; got != want {
		t.Fatalf("instance = %s; want %s", got, want)
	}
	// E's run is in the log, under its node trigger id.
	rs := waitRuns(t, base, e, func(rs []fullRun) bool { return finished(rs, "RUN_STATUS_SUCCESS") == 1 })
	if rs[0].ID != in.Instance.Nodes[2].TriggerID {
		t.Errorf("E's run %s; the instance says %s", rs[0].ID, in.Instance.Nodes[2].TriggerID)
	}
	var list struct{ Instances []wfInstance }
	if code := call(t, "GET", base+"/workflow-instances?workflow_id="+created.Workflow.ID, nil, &list); code != http.StatusOK || len(list.Instances) != 1 {
		t.Errorf("list instances = %d %+v; want the one", code, list)
	}
}
