package uitest_test

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"
)

// TestWorkflows runs e2e/workflows.test.mjs against a fresh stack: draw a diamond workflow in the
// editor (nodes added from the group's jobs, edges drawn by dragging and from the node panel, an
// edge's condition set, a node moved), see a cycle refused while editing, save it, run it and
// watch its nodes succeed, open a node's run; then repair a failing instance (retry, mark done)
// and kill a running one.
func TestWorkflows(t *testing.T) {
	t.Parallel()
	st := startStack(t)
	c := &client{t: t, base: "http://" + st.HTTPAddr + "/api/v1"}
	c.token = c.login("admin", adminPassword)
	group := strconv.FormatInt(st.GroupID, 10)

	// The local agent's jobs the workflows are drawn from: four that succeed, one that fails, one
	// that runs long enough to be killed.
	jobs := map[string]string{}
	for name, src := range map[string]string{
		"wf-a": "echo a\n", "wf-b": "echo b\n", "wf-c": "echo c\n", "wf-d": "echo d\n",
		"wf-fail": "echo failing; exit 3\n", "wf-sleep": "sleep 120\n",
	} {
		var resp struct {
			Job struct {
				ID string `json:"id"`
			} `json:"job"`
		}
		c.do("POST", "/jobs", map[string]any{"name": name, "group_id": group, "glue_type": "GLUE_TYPE_GLUE_SHELL",
			"glue_source": src, "schedule": map[string]any{"type": "SCHEDULE_TYPE_NONE"}}, &resp)
		jobs[name] = resp.Job.ID
	}
	ids, err := json.Marshal(jobs)
	if err != nil {
		t.Fatal(err)
	}

	runScript(t, "workflows.test.mjs", 4*time.Minute,
		"JOBMESH_URL=http://"+st.HTTPAddr,
		"JOBMESH_ADMIN_PASSWORD="+adminPassword,
		"JOBMESH_GROUP_ID="+group,
		"JOBMESH_JOBS="+string(ids),
	)
}
