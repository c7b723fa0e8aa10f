package devstack_test

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestGroupLimitedOperator checks the issue 7 rules that need runs in two groups, over REST: an
// operator limited to one group sees only its runs on the dashboard and in reports, sees running
// runs per executor of its group only, cannot send a fire of its job to another group's
// executor, and users cannot be given groups that do not exist.
func TestGroupLimitedOperator(t *testing.T) {
	t.Parallel()
	st := startStack(t, "")
	base := "http://" + st.HTTPAddr + "/api/v1"
	mine := strconv.FormatInt(st.GroupID, 10)

	var grp struct {
		Group struct {
			ID string `json:"id"`
		} `json:"group"`
	}
	const elsewhere = "127.0.0.1:1" // nothing listens: its fires fail at once
	if code := call(t, "POST", base+"/executor-groups", map[string]any{"app_name": "elsewhere", "title": "Elsewhere",
		"address_type": "ADDRESS_TYPE_MANUAL", "manual_addresses": []string{elsewhere}}, &grp); code != http.StatusOK {
		t.Fatalf("create group = %d", code)
	}
	other := grp.Group.ID
	newJob := func(group, name, script string) string {
		t.Helper()
		var created struct{ Job job }
		if code := call(t, "POST", base+"/jobs", map[string]any{"name": name, "group_id": group, "glue_type": "GLUE_TYPE_GLUE_SHELL",
			"glue_source": script, "schedule": map[string]any{"type": "SCHEDULE_TYPE_NONE"}}, &created); code != http.StatusOK {
			t.Fatalf("create job %s = %d", name, code)
		}
		return created.Job.ID
	}
	ours, theirs := newJob(mine, "ours", "sleep 60"), newJob(other, "theirs", "echo never")

	var bad struct {
		Message string `json:"message"`
	}
	if code := call(t, "POST", base+"/users", map[string]any{"password": "opal-pass-phrase",
		"user": map[string]any{"username": "opal", "role": "ROLE_OPERATOR", "group_ids": []string{mine, "4242"}}}, &bad); code != http.StatusBadRequest || !strings.Contains(bad.Message, "user.group_ids[1]") {
		t.Errorf("create a user in group 4242 = %d %q, want 400 naming user.group_ids[1]", code, bad.Message)
	}
	if code := call(t, "POST", base+"/users", map[string]any{"password": "opal-pass-phrase",
		"user": map[string]any{"username": "opal", "role": "ROLE_OPERATOR", "group_ids": []string{mine}}}, nil); code != http.StatusOK {
		t.Fatalf("create user = %d", code)
	}
	operator := login(t, st, "opal", "opal-pass-phrase")

	// The other group's job fails twice; ours runs on and on.
	for range 2 {
		if code := call(t, "POST", base+"/jobs/"+theirs+":trigger", map[string]any{}, nil); code != http.StatusOK {
			t.Fatalf("trigger theirs = %d", code)
		}
	}
	var trig struct {
		TriggerIDs []string `json:"trigger_ids"`
	}
	if code := call(t, "POST", base+"/jobs/"+ours+":trigger", map[string]any{}, &trig); code != http.StatusOK || len(trig.TriggerIDs) != 1 {
		t.Fatalf("trigger ours = %d %+v", code, trig)
	}
	t.Cleanup(func() { call(t, "POST", base+"/logs/"+trig.TriggerIDs[0]+":kill", map[string]any{}, nil) })

	type dashboard struct {
		RunsToday    string  `json:"runs_today"`
		RunningCount string  `json:"running_count"`
		SuccessRate  float64 `json:"success_rate_today"`
		JobCount     string  `json:"job_count"`
		Minutes      []struct {
			Running string `json:"running"`
			Fail    string `json:"fail"`
		} `json:"minutes"`
	}
	dash := func(tok, query string) (dashboard, int) {
		t.Helper()
		var d dashboard
		code := callAs(t, tok, "GET", base+"/dashboard"+query, nil, &d)
		return d, code
	}
	adminTok, _ := tokens.Load(st.HTTPAddr)
	// Wait until the admin sees all three runs of today: two failed, ours running.
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, _ := dash(adminTok.(string), "")
		if d.RunsToday == "3" && d.RunningCount == "1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("admin dashboard %+v, want 3 runs today, 1 running, within 30s", d)
		}
		time.Sleep(100 * time.Millisecond)
	}

	t.Run("dashboard and reports", func(t *testing.T) {
		d, code := dash(operator, "")
		if code != http.StatusOK || d.RunsToday != "1" || d.RunningCount != "1" || d.SuccessRate != 0 || d.JobCount != "1" {
			t.Errorf("operator's dashboard = %d %+v, want 1 run today (ours, running), 1 job", code, d)
		}
		var running, failed int
		for _, m := range d.Minutes {
			r, _ := strconv.Atoi(m.Running)
			f, _ := strconv.Atoi(m.Fail)
			running, failed = running+r, failed+f
		}
		if len(d.Minutes) != 60 || running != 1 || failed != 0 {
			t.Errorf("operator's fires per minute: %d minutes, %d running, %d failed; want 60, 1, 0", len(d.Minutes), running, failed)
		}
		if _, code := dash(operator, "?group_ids="+other); code != http.StatusForbidden {
			t.Errorf("operator's dashboard of the other group = %d, want 403", code)
		}
		today := time.Now().UTC().Format(time.DateOnly)
		var rep struct {
			Days []struct {
				Running string `json:"running"`
				Success string `json:"success"`
				Fail    string `json:"fail"`
			} `json:"days"`
			Jobs []struct {
				JobID string `json:"job_id"`
			} `json:"jobs"`
		}
		if code := callAs(t, operator, "GET", base+"/reports?start_date="+today+"&end_date="+today, nil, &rep); code != http.StatusOK || len(rep.Days) != 1 {
			t.Fatalf("operator's report = %d %+v", code, rep)
		}
		if d := rep.Days[0]; d.Running != "1" || d.Fail != "0" || len(rep.Jobs) != 0 {
			t.Errorf("operator's report of today = %+v, jobs %+v; want 1 running, no failure, no finished job", d, rep.Jobs)
		}
		if code := callAs(t, operator, "GET", base+"/reports?start_date="+today+"&end_date="+today+"&group_ids="+other, nil, nil); code != http.StatusForbidden {
			t.Errorf("operator's report of the other group = %d, want 403", code)
		}
	})

	t.Run("running runs per executor", func(t *testing.T) {
		var got struct {
			Executors []struct {
				Address string   `json:"executor_address"`
				Running string   `json:"running"`
				JobIDs  []string `json:"job_ids"`
			} `json:"executors"`
		}
		if code := callAs(t, operator, "GET", base+"/logs:countRunning", nil, &got); code != http.StatusOK || len(got.Executors) != 1 {
			t.Fatalf("operator's running runs = %d %+v, want one executor", code, got)
		}
		if e := got.Executors[0]; e.Address != st.AgentAddr || e.Running != "1" || !slices.Equal(e.JobIDs, []string{ours}) {
			t.Errorf("operator's running runs = %+v, want job %s running once on %s", e, ours, st.AgentAddr)
		}
	})

	t.Run("a fire stays in its job's group", func(t *testing.T) {
		var resp struct {
			Message    string   `json:"message"`
			TriggerIDs []string `json:"trigger_ids"`
		}
		code := callAs(t, operator, "POST", base+"/jobs/"+ours+":trigger", map[string]any{"addresses": []string{elsewhere}}, &resp)
		if code != http.StatusBadRequest || !strings.Contains(resp.Message, "addresses[0]") {
			t.Errorf("operator fires its job on the other group's executor = %d %q, want 400 naming addresses[0]", code, resp.Message)
		}
		if code := call(t, "POST", base+"/jobs/"+ours+":trigger", map[string]any{"addresses": []string{elsewhere}}, nil); code != http.StatusBadRequest {
			t.Errorf("admin fires the job on the other group's executor = %d, want 400 (the rule holds for admins too)", code)
		}
		code = callAs(t, operator, "POST", base+"/jobs/"+ours+":trigger", map[string]any{"addresses": []string{st.AgentAddr}, "params": "x"}, &resp)
		if code != http.StatusOK || len(resp.TriggerIDs) != 1 {
			t.Errorf("operator fires its job on its group's executor = %d %+v, want 200", code, resp)
		} else {
			t.Cleanup(func() { call(t, "POST", base+"/logs/"+resp.TriggerIDs[0]+":kill", map[string]any{}, nil) })
		}
	})
}
