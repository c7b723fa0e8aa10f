package devstack_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/devstack"
)

// TestAccessRules checks the rules of issue 7 end to end on the store `jobmesh dev` uses, over
// REST and over gRPC straight to the scheduler: no token is 401, a viewer cannot edit, an
// operator limited to one executor group neither sees nor touches another's jobs, runs and
// groups, a revoked API token stops working, logins are throttled, and changes reach the audit
// trail.
func TestAccessRules(t *testing.T) {
	t.Parallel()
	st := startStack(t, "")
	base := "http://" + st.HTTPAddr + "/api/v1"
	mine := strconv.FormatInt(st.GroupID, 10)

	for _, tok := range []string{"", "jms_made-up"} {
		if code := callAs(t, tok, "GET", base+"/jobs", nil, nil); code != http.StatusUnauthorized {
			t.Errorf("GET /jobs with token %q = %d, want 401", tok, code)
		}
	}

	// The admin sets up a second group, a job in each group, and two users limited to the first.
	var grp struct {
		Group struct {
			ID string `json:"id"`
		} `json:"group"`
	}
	if code := call(t, "POST", base+"/executor-groups", map[string]any{"app_name": "elsewhere", "title": "Elsewhere",
		"address_type": "ADDRESS_TYPE_MANUAL", "manual_addresses": []string{"127.0.0.1:1"}}, &grp); code != http.StatusOK {
		t.Fatalf("create group = %d", code)
	}
	other := grp.Group.ID
	newJob := func(group, name string) map[string]any {
		return map[string]any{"name": name, "group_id": group, "handler": "demo",
			"schedule": map[string]any{"type": "SCHEDULE_TYPE_CRON", "expression": "0 0 3 * * ?"}}
	}
	var created struct{ Job job }
	if code := call(t, "POST", base+"/jobs", newJob(mine, "ours"), &created); code != http.StatusOK {
		t.Fatalf("create job = %d", code)
	}
	ours := created.Job.ID
	if code := call(t, "POST", base+"/jobs", newJob(other, "theirs"), &created); code != http.StatusOK {
		t.Fatalf("create job = %d", code)
	}
	theirs := created.Job.ID
	for _, u := range []struct{ name, role string }{{"vic", "ROLE_VIEWER"}, {"opal", "ROLE_OPERATOR"}} {
		if code := call(t, "POST", base+"/users", map[string]any{"password": u.name + "-pass-phrase",
			"user": map[string]any{"username": u.name, "role": u.role, "group_ids": []string{mine}}}, nil); code != http.StatusOK {
			t.Fatalf("create user %s = %d", u.name, code)
		}
	}
	viewer := login(t, st, "vic", "vic-pass-phrase")
	operator := login(t, st, "opal", "opal-pass-phrase")

	// A run of the other group's job, for the run checks below.
	var trig struct {
		TriggerIDs []string `json:"trigger_ids"`
	}
	if code := call(t, "POST", base+"/jobs/"+theirs+":trigger", map[string]any{}, &trig); code != http.StatusOK || len(trig.TriggerIDs) != 1 {
		t.Fatalf("trigger = %d %+v", code, trig)
	}
	theirRun := trig.TriggerIDs[0]
	deadline := time.Now().Add(30 * time.Second)
	for call(t, "GET", base+"/logs/"+theirRun, nil, nil) != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatalf("run %s not recorded within 30s", theirRun)
		}
		time.Sleep(50 * time.Millisecond)
	}

	listed := func(tok, query string) []string {
		t.Helper()
		var list struct{ Jobs []job }
		if code := callAs(t, tok, "GET", base+"/jobs"+query, nil, &list); code != http.StatusOK {
			t.Fatalf("GET /jobs%s = %d, want 200", query, code)
		}
		var names []string
		for _, j := range list.Jobs {
			names = append(names, j.Name)
		}
		slices.Sort(names)
		return names
	}

	t.Run("viewer reads, cannot edit", func(t *testing.T) {
		if got := listed(viewer, ""); !slices.Equal(got, []string{"ours"}) {
			t.Errorf("the viewer lists %v, want [ours]", got)
		}
		for _, c := range []struct{ method, path string }{
			{"POST", "/jobs"}, {"PATCH", "/jobs/" + ours}, {"POST", "/jobs/" + ours + ":trigger"},
			{"DELETE", "/jobs/" + ours}, {"POST", "/executor-groups"}, {"GET", "/users"}, {"GET", "/audit-events"},
		} {
			body := map[string]any{}
			if c.path == "/jobs" {
				body = newJob(mine, "nope")
			}
			if code := callAs(t, viewer, c.method, base+c.path, body, nil); code != http.StatusForbidden {
				t.Errorf("viewer %s %s = %d, want 403", c.method, c.path, code)
			}
		}
	})

	t.Run("operator limited to one group", func(t *testing.T) {
		if got := listed(operator, ""); !slices.Equal(got, []string{"ours"}) {
			t.Errorf("the operator lists %v, want [ours]", got)
		}
		for _, c := range []struct {
			method, path string
			body         any
		}{
			{"GET", "/jobs?group_id=" + other, nil},
			{"GET", "/jobs/" + theirs, nil},
			{"POST", "/jobs", newJob(other, "sneaky")},
			{"PATCH", "/jobs/" + theirs, map[string]any{"params": "x"}},
			{"PATCH", "/jobs/" + ours, map[string]any{"group_id": other}},
			{"POST", "/jobs/" + theirs + ":trigger", map[string]any{}},
			{"POST", "/jobs/" + theirs + ":stop", map[string]any{}},
			{"POST", "/jobs/" + theirs + ":copy", map[string]any{}},
			{"DELETE", "/jobs/" + theirs, nil},
			{"GET", "/jobs/" + theirs + "/glue-versions", nil},
			{"GET", "/executor-groups/" + other, nil},
			{"GET", "/logs?job_id=" + theirs, nil},
			{"GET", "/logs?group_id=" + other, nil},
			{"GET", "/logs/" + theirRun, nil},
			{"GET", "/logs/" + theirRun + "/lines", nil},
			{"POST", "/logs/" + theirRun + ":kill", map[string]any{}},
			{"POST", "/logs:clear", map[string]any{"group_id": other, "keep_newest": 1}},
		} {
			if code := callAs(t, operator, c.method, base+c.path, c.body, nil); code != http.StatusForbidden {
				t.Errorf("operator %s %s = %d, want 403", c.method, c.path, code)
			}
		}
		// What is theirs still exists and is unchanged.
		var got struct{ Job job }
		if code := call(t, "GET", base+"/jobs/"+theirs, nil, &got); code != http.StatusOK || got.Job.Params != "" {
			t.Errorf("their job after the operator's attempts = %d %+v", code, got.Job)
		}
		// Its own group works.
		if code := callAs(t, operator, "POST", base+"/jobs", newJob(mine, "by-opal"), nil); code != http.StatusOK {
			t.Errorf("operator creates a job in its group = %d, want 200", code)
		}
		if code := callAs(t, operator, "POST", base+"/jobs/"+ours+":start", map[string]any{}, nil); code != http.StatusOK {
			t.Errorf("operator starts its group's job = %d, want 200", code)
		}
		var runs struct{ Runs []fullRun }
		if code := callAs(t, operator, "GET", base+"/logs", nil, &runs); code != http.StatusOK {
			t.Errorf("operator lists runs = %d, want 200", code)
		}
		for _, r := range runs.Runs {
			if r.ID == theirRun {
				t.Errorf("the operator's run list holds the other group's run %s", theirRun)
			}
		}
		var groups struct {
			Groups []struct {
				ID string `json:"id"`
			} `json:"groups"`
		}
		if code := callAs(t, operator, "GET", base+"/executor-groups", nil, &groups); code != http.StatusOK || len(groups.Groups) != 1 || groups.Groups[0].ID != mine {
			t.Errorf("operator lists groups = %d %+v, want only group %s", code, groups, mine)
		}
	})

	t.Run("gRPC clients meet the same rules", func(t *testing.T) {
		conn, err := grpc.NewClient(st.SchedulerAddr, st.TLS.DialOption())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		jobs := schedulerv1.NewJobServiceClient(conn)
		as := func(tok string) context.Context {
			return metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+tok)
		}
		id := func(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }
		_, err = jobs.ListJobs(t.Context(), &schedulerv1.ListJobsRequest{})
		wantCode(t, "ListJobs without a token", err, codes.Unauthenticated)
		_, err = jobs.StopJob(as(viewer), &schedulerv1.StopJobRequest{Id: id(ours)})
		wantCode(t, "StopJob as a viewer", err, codes.PermissionDenied)
		_, err = jobs.TriggerJob(as(operator), &schedulerv1.TriggerJobRequest{Id: id(theirs)})
		wantCode(t, "TriggerJob of another group as the operator", err, codes.PermissionDenied)
		list, err := jobs.ListJobs(as(operator), &schedulerv1.ListJobsRequest{})
		if err != nil {
			t.Fatalf("ListJobs as the operator: %v", err)
		}
		for _, j := range list.GetJobs() {
			if j.GetGroupId() != st.GroupID {
				t.Errorf("the operator's ListJobs holds job %d of group %d", j.GetId(), j.GetGroupId())
			}
		}
		if _, err := jobs.GetJob(as(viewer), &schedulerv1.GetJobRequest{Id: id(ours)}); err != nil {
			t.Errorf("GetJob of its group as a viewer: %v", err)
		}

		// Streams are checked on the request they carry.
		lconn, err := grpc.NewClient(st.LogsAddr, st.TLS.DialOption())
		if err != nil {
			t.Fatal(err)
		}
		defer lconn.Close()
		tail, err := logsv1.NewLogServiceClient(lconn).TailRun(as(operator), &logsv1.TailRunRequest{Id: theirRun})
		if err == nil {
			_, err = tail.Recv()
		}
		wantCode(t, "TailRun of another group's run as the operator", err, codes.PermissionDenied)
		rconn, err := grpc.NewClient(st.RegistryAddr, st.TLS.DialOption())
		if err != nil {
			t.Fatal(err)
		}
		defer rconn.Close()
		reg := registryv1.NewRegistryServiceClient(rconn)
		watch, err := reg.WatchExecutors(as(operator), &registryv1.WatchExecutorsRequest{AppName: "elsewhere"})
		if err == nil {
			_, err = watch.Recv()
		}
		wantCode(t, "WatchExecutors of another group's app as the operator", err, codes.PermissionDenied)
		wctx, cancel := context.WithCancel(as(operator))
		defer cancel()
		watch, err = reg.WatchExecutors(wctx, &registryv1.WatchExecutorsRequest{AppName: devstack.DevApp})
		if err == nil {
			_, err = watch.Recv()
		}
		if err != nil {
			t.Errorf("WatchExecutors of its group's app as the operator: %v", err)
		}
	})

	t.Run("a revoked API token stops working", func(t *testing.T) {
		var tok struct {
			Token struct {
				ID string `json:"id"`
			} `json:"token"`
			Secret string `json:"secret"`
		}
		if code := callAs(t, operator, "POST", base+"/api-tokens", map[string]any{"token": map[string]any{"name": "ci"}}, &tok); code != http.StatusOK || tok.Secret == "" {
			t.Fatalf("create API token = %d, want 200 and a secret", code)
		}
		if got := listed(tok.Secret, ""); !slices.Contains(got, "ours") || slices.Contains(got, "theirs") {
			t.Errorf("jobs listed with the operator's API token = %v, want its group's", got)
		}
		if code := callAs(t, operator, "DELETE", base+"/api-tokens/"+tok.Token.ID, nil, nil); code != http.StatusOK {
			t.Fatalf("revoke = %d", code)
		}
		if code := callAs(t, tok.Secret, "GET", base+"/jobs", nil, nil); code != http.StatusUnauthorized {
			t.Errorf("GET /jobs with a revoked token = %d, want 401", code)
		}
	})

	t.Run("audit trail", func(t *testing.T) {
		var audit struct {
			Events []struct {
				Username string `json:"username"`
				Action   string `json:"action"`
				Resource string `json:"resource"`
			} `json:"events"`
		}
		if code := call(t, "GET", base+"/audit-events?page_size=1000", nil, &audit); code != http.StatusOK {
			t.Fatalf("GET /audit-events = %d", code)
		}
		var got []string
		for _, e := range audit.Events {
			got = append(got, fmt.Sprintf("%s %s %s", e.Username, e.Action[strings.LastIndex(e.Action, "/")+1:], e.Resource))
		}
		all := strings.Join(got, "\n")
		for _, want := range []string{
			"admin CreateExecutorGroup executor-groups/" + other, "admin CreateJob jobs/" + theirs, "admin CreateUser users/",
			"admin TriggerJob jobs/" + theirs, "opal StartJob jobs/" + ours, "opal CreateJob jobs/", "opal RevokeApiToken api-tokens/",
		} {
			if !strings.Contains(all, want) {
				t.Errorf("audit events:\n%s\nwant one like %q", all, want)
			}
		}
		if strings.Contains(all, "opal PatchJob") || strings.Contains(all, "opal UpdateJob jobs/"+theirs) {
			t.Error("a denied change was audited as done")
		}
	})

	t.Run("login throttling", func(t *testing.T) {
		for range 5 {
			if code := callAs(t, "", "POST", base+"/auth/login", map[string]any{"username": "vic", "password": "guess-again"}, nil); code != http.StatusUnauthorized {
				t.Fatalf("wrong password = %d, want 401", code)
			}
		}
		if code := callAs(t, "", "POST", base+"/auth/login", map[string]any{"username": "vic", "password": "vic-pass-phrase"}, nil); code != http.StatusTooManyRequests {
			t.Errorf("the right password after 5 failures = %d, want 429", code)
		}
	})
}

func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Errorf("%s: %v (%v), want %v", what, got, err, want)
	}
}
