// Command client uses the Go client that oapi-codegen generates from the gateway's OpenAPI
// document (package jobmeshclient/client, made by TestGeneratedClient) against a running gateway:
// it logs in, creates a job, reads it back and fires it, checks the documented error responses
// on the way, and prints what it made as JSON. Any surprise exits 1 with a message.
//
//	client <base URL> <user> <password> <executor group id>
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"

	"jobmeshclient/client"
)

func main() {
	if len(os.Args) != 5 {
		fail("usage: client <base URL> <user> <password> <executor group id>")
	}
	base, user, password, group := os.Args[1], os.Args[2], os.Args[3], os.Args[4]
	ctx := context.Background()
	anon, err := client.NewClientWithResponses(base)
	check(err)

	wrong := "not the password"
	bad, err := anon.AuthServiceLoginWithResponse(ctx, client.LoginRequest{Username: &user, Password: &wrong})
	check(err)
	expect("login with a wrong password", bad.StatusCode(), bad.Body, http.StatusUnauthorized, bad.JSON401, "LOGIN_FAILED")

	noToken, err := anon.JobServiceListJobsWithResponse(ctx, &client.JobServiceListJobsParams{})
	check(err)
	expect("listing jobs without a token", noToken.StatusCode(), noToken.Body, http.StatusUnauthorized, noToken.JSON401, "TOKEN_MISSING")

	login, err := anon.AuthServiceLoginWithResponse(ctx, client.LoginRequest{Username: &user, Password: &password})
	check(err)
	if login.JSON200 == nil || login.JSON200.Token == nil || *login.JSON200.Token == "" {
		fail("login: HTTP %d %s, want 200 and a token", login.StatusCode(), login.Body)
	}
	token := *login.JSON200.Token
	api, err := client.NewClientWithResponses(base, client.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+token)
		return nil
	}))
	check(err)

	name, remark, source := "made by the generated client", "first version", "echo generated client"
	cron, tz := "0 0 3 * * ?", "Europe/Berlin"
	scheduleType, glueType := client.ScheduleType("SCHEDULE_TYPE_CRON"), client.GlueType("GLUE_TYPE_GLUE_SHELL")
	created, err := api.JobServiceCreateJobWithResponse(ctx, client.Job{
		GroupId: &group, Name: &name,
		Schedule: &client.Schedule{Type: &scheduleType, Expression: &cron, TimeZone: &tz},
		GlueType: &glueType, GlueSource: &source, GlueRemark: &remark,
	})
	check(err)
	if created.JSON200 == nil || created.JSON200.Job == nil || created.JSON200.Job.Id == nil {
		fail("create job: HTTP %d %s, want 200 and the job", created.StatusCode(), created.Body)
	}
	id := *created.JSON200.Job.Id

	got, err := api.JobServiceGetJobWithResponse(ctx, id)
	check(err)
	if got.JSON200 == nil || got.JSON200.Job == nil || got.JSON200.Job.Name == nil || *got.JSON200.Job.Name != name {
		fail("get job %s: HTTP %d %s, want 200 and the job named %q", id, got.StatusCode(), got.Body, name)
	}
	missing, err := api.JobServiceGetJobWithResponse(ctx, "999999999")
	check(err)
	expect("getting a job that does not exist", missing.StatusCode(), missing.Body, http.StatusNotFound, missing.JSON404, "JOB_NOT_FOUND")

	// A stream's error comes wrapped, as the document says: {"error": Status}.
	tail, err := api.LogServiceTailRunWithResponse(ctx, "no-such-run", &client.LogServiceTailRunParams{})
	check(err)
	if tail.JSON404 == nil {
		fail("tailing a run that does not exist: HTTP %d %s, want 404 with the stream error schema", tail.StatusCode(), tail.Body)
	}
	expect("tailing a run that does not exist", tail.StatusCode(), tail.Body, http.StatusNotFound, tail.JSON404.Error, "RUN_NOT_FOUND")

	params, triggerType := "from the generated client", client.TriggerType("TRIGGER_TYPE_API")
	fired, err := api.JobServiceTriggerJobWithResponse(ctx, id, client.JobServiceTriggerJobBody{Params: &params, TriggerType: &triggerType})
	check(err)
	if fired.JSON200 == nil || fired.JSON200.TriggerIds == nil || len(*fired.JSON200.TriggerIds) == 0 {
		fail("trigger job %s: HTTP %d %s, want 200 and trigger ids", id, fired.StatusCode(), fired.Body)
	}
	check(json.NewEncoder(os.Stdout).Encode(map[string]any{"job_id": id, "trigger_ids": *fired.JSON200.TriggerIds}))
}

// expect checks an error response: its status, that it decoded as the documented error schema,
// and the reason of its ErrorInfo.
func expect(what string, code int, body []byte, wantCode int, st *client.Status, wantReason string) {
	if code != wantCode || st == nil || st.Details == nil {
		fail("%s: HTTP %d %s, want %d with the error schema", what, code, body, wantCode)
	}
	for _, d := range *st.Details {
		if d.Type != nil && *d.Type == "type.googleapis.com/google.rpc.ErrorInfo" {
			if d.AdditionalProperties["reason"] != wantReason || d.AdditionalProperties["domain"] != "jobmesh.dev" {
				fail("%s: ErrorInfo %v, want reason %s in domain jobmesh.dev", what, d.AdditionalProperties, wantReason)
			}
			return
		}
	}
	fail("%s: %s has no ErrorInfo", what, body)
}

func check(err error) {
	if err != nil {
		fail("%v", err)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}
