package devstack_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestChildJobsStayInTheParentsGroup: through the gateway's guard, an operator of one group
// cannot make another group's job a child of its own (the refusal reads the same as for an id
// that names no job, so it tells nothing about other groups), nor can an admin; and a child that
// left its parent's group after it was linked is not fired when the parent succeeds.
func TestChildJobsStayInTheParentsGroup(t *testing.T) {
	t.Parallel()
	st := startStack(t, "")
	base := "http://" + st.HTTPAddr + "/api/v1"
	mine := strconv.FormatInt(st.GroupID, 10)
	var grp struct {
		Group struct {
			ID string `json:"id"`
		} `json:"group"`
	}
	if code := call(t, "POST", base+"/executor-groups", map[string]any{"app_name": "theirs", "title": "Theirs",
		"address_type": "ADDRESS_TYPE_MANUAL", "manual_addresses": []string{"127.0.0.1:1"}}, &grp); code != http.StatusOK {
		t.Fatalf("create group = %d", code)
	}
	other := grp.Group.ID
	job := func(group, name string, extra map[string]any) map[string]any {
		j := map[string]any{"name": name, "group_id": group, "glue_type": "GLUE_TYPE_GLUE_SHELL", "glue_source": "echo " + name,
			"schedule": map[string]any{"type": "SCHEDULE_TYPE_NONE"}}
		for k, v := range extra {
			j[k] = v
		}
		return j
	}
	theirs := createJob(t, base, job(other, "theirs", nil))
	if code := call(t, "POST", base+"/users", map[string]any{"password": "Quartz-Lantern-93",
		"user": map[string]any{"username": "opal", "role": "ROLE_OPERATOR", "group_ids": []string{mine}}}, nil); code != http.StatusOK {
		t.Fatalf("create user = %d", code)
	}
	operator := login(t, st, "opal", "Quartz-Lantern-93")
	adminTok, _ := tokens.Load(st.HTTPAddr)

	type apiError struct {
		Message string `json:"message"`
	}
	refusal := func(tok, child string) string {
		t.Helper()
		var e apiError
		code := callAs(t, tok, "POST", base+"/jobs", job(mine, "parent", map[string]any{"child_job_ids": []string{child}}), &e)
		if code != http.StatusBadRequest || !strings.Contains(e.Message, "child_job_ids[0]") {
			t.Errorf("a parent with child %s = %d %q, want 400 naming child_job_ids[0]", child, code, e.Message)
		}
		return strings.ReplaceAll(e.Message, child, "N")
	}
	const missing = "987654"
	if a, b := refusal(operator, theirs), refusal(operator, missing); a != b {
		t.Errorf("another group's job is refused with %q, a missing one with %q: the answer tells them apart", a, b)
	}
	refusal(adminTok.(string), theirs)

	// Linked while in the parent's group, then moved away by an admin: not fired. The child that
	// stayed is fired from the same completion, so its run says the completion was handled.
	stays := createJob(t, base, job(mine, "stays", nil))
	moves := createJob(t, base, job(mine, "moves", nil))
	var parent struct{ Job struct{ ID string } }
	if code := callAs(t, operator, "POST", base+"/jobs", job(mine, "parent", map[string]any{"child_job_ids": []string{moves, stays}}), &parent); code != http.StatusOK {
		t.Fatalf("operator's parent with children in its group = %d", code)
	}
	if code := call(t, "PATCH", base+"/jobs/"+moves, map[string]any{"group_id": other}, nil); code != http.StatusOK {
		t.Fatalf("move the child to the other group = %d", code)
	}
	if code := callAs(t, operator, "POST", base+"/jobs/"+parent.Job.ID+":trigger", map[string]any{}, nil); code != http.StatusOK {
		t.Fatalf("trigger the parent = %d", code)
	}
	waitRuns(t, base, stays, func(rs []fullRun) bool { return len(rs) == 1 })
	if rs := waitRuns(t, base, moves, func([]fullRun) bool { return true }); len(rs) != 0 {
		t.Errorf("the child in another group ran: %+v", rs)
	}
}
