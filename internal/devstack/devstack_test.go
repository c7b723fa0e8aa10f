package devstack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/devstack"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
)

// startStack brings up the whole stack on free ports with the given store.
func startStack(t *testing.T, databaseURL string) *devstack.Stack {
	t.Helper()
	return startStackWith(t, databaseURL, nil)
}

// startStackWith is startStack with handlers for the stack's agent.
func startStackWith(t *testing.T, databaseURL string, handlers map[string]sdk.HandlerFunc) *devstack.Stack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	any0 := "127.0.0.1:0"
	st, err := devstack.Start(ctx, devstack.Config{
		DataDir: t.TempDir(), DatabaseURL: databaseURL, UnsafeEtcd: true,
		HTTPAddr: any0, SchedulerAddr: any0, RegistryAddr: any0, LogsAddr: any0, AuthAddr: any0, AgentAddr: any0, EtcdAddr: any0,
		AgentHandlers: handlers,
	})
	if err != nil {
		t.Fatalf("devstack.Start: %v", err)
	}
	t.Cleanup(st.Stop)
	// Every call on this stack goes as the first admin unless it names another token (callAs).
	tokens.Store(st.HTTPAddr, login(t, st, "admin", st.AdminPassword))
	t.Cleanup(func() { tokens.Delete(st.HTTPAddr) })
	return st
}

// tokens holds the admin's session token of every running test stack, by gateway address.
var tokens sync.Map

// login logs in over REST and returns the session token.
func login(t *testing.T, st *devstack.Stack, username, password string) string {
	t.Helper()
	var resp struct {
		Token string `json:"token"`
	}
	if code := callAs(t, "", "POST", "http://"+st.HTTPAddr+"/api/v1/auth/login", map[string]any{"username": username, "password": password}, &resp); code != http.StatusOK || resp.Token == "" {
		t.Fatalf("login as %s = %d (token %q), want 200 and a token", username, code, resp.Token)
	}
	return resp.Token
}

// call makes a REST call as the stack's admin and decodes the JSON answer into out (when not nil).
func call(t *testing.T, method, rawURL string, body any, out any) int {
	t.Helper()
	tok := ""
	if u, err := url.Parse(rawURL); err == nil {
		if v, ok := tokens.Load(u.Host); ok {
			tok = v.(string)
		}
	}
	return callAs(t, tok, method, rawURL, body, out)
}

// callAs makes a REST call with the bearer token tok (none when empty).
func callAs(t *testing.T, tok, method, url string, body any, out any) int {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: decode %q: %v", method, url, raw, err)
		}
	}
	return resp.StatusCode
}

type run struct {
	ID             string `json:"id"`
	Status         string `json:"status"`
	TriggerOutcome string `json:"trigger_outcome"`
	TriggerType    string `json:"trigger_type"`
	ExecutorAddr   string `json:"executor_address"`
	ScheduledTime  string `json:"scheduled_time"`
}

// TestOneRealFire is the foundation's end-to-end check, through REST and every real service: a
// FIX_RATE bash job is pre-read by the elected leader, fired from its ring, run by the agent,
// and its result and output reach logsvc.
func TestOneRealFire(t *testing.T) {
	t.Parallel()
	for _, store := range []struct{ name, url string }{
		{"postgres", dbtest.NewPostgres(t)},
		{"sqlite", ""},
	} {
		t.Run(store.name, func(t *testing.T) {
			t.Parallel()
			st := startStack(t, store.url)
			base := "http://" + st.HTTPAddr

			var resp struct {
				Job struct {
					ID string `json:"id"`
				} `json:"job"`
			}
			code := call(t, "POST", base+"/api/v1/jobs", map[string]any{
				"name": "hello", "group_id": st.GroupID,
				"schedule":    map[string]any{"type": "SCHEDULE_TYPE_FIX_RATE", "expression": "1s"},
				"glue_type":   "GLUE_TYPE_GLUE_SHELL",
				"glue_source": "echo \"hello $1 shard $2/$3\"\necho \"job $JOBMESH_JOB_ID\" >&2\n",
				"params":      "world",
				"status":      "JOB_STATUS_RUNNING",
			}, &resp)
			if code != http.StatusOK || resp.Job.ID == "" {
				t.Fatalf("POST /api/v1/jobs = %d (job id %q), want 200 and an id", code, resp.Job.ID)
			}
			created := resp.Job

			// Wait for a fire of the schedule to finish, through the log API.
			var done run
			deadline := time.After(30 * time.Second)
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for done.ID == "" {
				select {
				case <-deadline:
					t.Fatalf("no successful run of job %s within 30s", created.ID)
				case <-tick.C:
				}
				var list struct {
					Runs []run `json:"runs"`
				}
				if code := call(t, "GET", base+"/api/v1/logs?job_id="+created.ID, nil, &list); code != http.StatusOK {
					t.Fatalf("GET /api/v1/logs = %d, want 200", code)
				}
				for _, r := range list.Runs {
					if r.Status == "RUN_STATUS_SUCCESS" && r.TriggerOutcome == "TRIGGER_OUTCOME_OK" {
						done = r
					}
					if r.Status == "RUN_STATUS_FAIL" {
						t.Fatalf("run %s failed: %+v", r.ID, r)
					}
				}
			}
			if done.TriggerType != "TRIGGER_TYPE_CRON" || done.ExecutorAddr != st.AgentAddr {
				t.Errorf("run = %+v, want a scheduled fire (TRIGGER_TYPE_CRON) on the local agent %s", done, st.AgentAddr)
			}

			var lines struct {
				Lines []struct {
					LineNo string `json:"line_no"`
					Text   string `json:"text"`
				} `json:"lines"`
			}
			if code := call(t, "GET", base+"/api/v1/logs/"+done.ID+"/lines", nil, &lines); code != http.StatusOK {
				t.Fatalf("GET lines = %d, want 200", code)
			}
			var texts []string
			for _, l := range lines.Lines {
				texts = append(texts, l.Text)
			}
			got := strings.Join(texts, "\n")
			for _, want := range []string{"hello world shard 0/1", "job " + created.ID} {
				if !strings.Contains(got, want) {
					t.Errorf("output of run %s = %q, want it to contain %q", done.ID, got, want)
				}
			}
		})
	}
}

// TestInvalidJobNamesTheField checks that bad input gets HTTP 400 with the field named.
func TestInvalidJobNamesTheField(t *testing.T) {
	t.Parallel()
	st := startStack(t, "")
	base := "http://" + st.HTTPAddr
	valid := func() map[string]any {
		return map[string]any{
			"name": "x", "group_id": st.GroupID, "handler": "demo",
			"schedule": map[string]any{"type": "SCHEDULE_TYPE_CRON", "expression": "0 * * * * ?"},
		}
	}
	tests := []struct {
		name  string
		edit  func(map[string]any)
		field string
	}{
		{"unknown enum", func(j map[string]any) { j["route_strategy"] = "ROUTE_STRATEGY_NEAREST" }, "route_strategy"},
		{"unknown enum number", func(j map[string]any) { j["block_strategy"] = 42 }, "block_strategy"},
		{"empty handler", func(j map[string]any) { j["handler"] = "" }, "handler"},
		{"bad cron", func(j map[string]any) {
			j["schedule"] = map[string]any{"type": "SCHEDULE_TYPE_CRON", "expression": "0 61 * * * ?"}
		}, "schedule.expression"},
		{"cron read differently by Quartz", func(j map[string]any) {
			j["schedule"] = map[string]any{"type": "SCHEDULE_TYPE_CRON", "expression": "0 0 9 ? * MON-FRI/2"}
		}, "schedule.expression: cron: day-of-week field \"MON-FRI/2\": step after a name is refused: Quartz ignores /2 after MON-FRI and reads all of MON-FRI"},
		{"cron whose Quartz days depend on its start", func(j map[string]any) {
			j["schedule"] = map[string]any{"type": "SCHEDULE_TYPE_CRON", "expression": "0 0 12 29W * ?"}
		}, "schedule.expression: cron: day-of-month field \"29W\": 29W with February in the month field is refused"},
		{"cron that never fires again", func(j map[string]any) {
			j["status"] = "JOB_STATUS_RUNNING"
			j["schedule"] = map[string]any{"type": "SCHEDULE_TYPE_CRON", "expression": "0 0 0 1 1 ? 2001"}
		}, "schedule.expression"},
		{"negative timeout", func(j map[string]any) { j["timeout_seconds"] = -1 }, "timeout_seconds"},
		{"bad time zone", func(j map[string]any) { j["schedule"].(map[string]any)["time_zone"] = "Mars/Olympus" }, "schedule.time_zone"},
		{"unknown group", func(j map[string]any) { j["group_id"] = 9999 }, "group_id"},
		{"sub-100ms rate", func(j map[string]any) {
			j["schedule"] = map[string]any{"type": "SCHEDULE_TYPE_FIX_RATE", "expression": "10ms"}
		}, "schedule.expression"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			j := valid()
			tt.edit(j)
			var e struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			code := call(t, "POST", base+"/api/v1/jobs", j, &e)
			if code != http.StatusBadRequest || e.Code != 3 {
				t.Fatalf("POST /api/v1/jobs = %d (grpc code %d, %q), want 400 (InvalidArgument)", code, e.Code, e.Message)
			}
			if !strings.Contains(e.Message, tt.field) {
				t.Errorf("error message = %q, want it to name %q", e.Message, tt.field)
			}
		})
	}
	// The first admin logs in with the password printed at first start.
	var login struct {
		Token string `json:"token"`
	}
	if code := call(t, "POST", base+"/api/v1/auth/login", map[string]any{"username": "admin", "password": st.AdminPassword}, &login); code != http.StatusOK || login.Token == "" {
		t.Errorf("POST /api/v1/auth/login = %d (token %q), want 200 and a token", code, login.Token)
	}
	if code := call(t, "POST", base+"/api/v1/auth/login", map[string]any{"username": "admin", "password": "123456"}, nil); code != http.StatusUnauthorized {
		t.Errorf("login with a wrong password = %d, want 401", code)
	}
	// And a valid job goes through.
	if code := call(t, "POST", base+"/api/v1/jobs", valid(), nil); code != http.StatusOK {
		t.Errorf("valid job: POST /api/v1/jobs = %d, want 200", code)
	}
}
