package devstack_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	"github.com/jobmesh/jobmesh/internal/devstack"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk/sdktest"
	"github.com/jobmesh/jobmesh/services/gateway/auth"
)

// startTokenExecutor runs an SDK executor of app on the stack with accessToken (which it expects
// from the scheduler and presents to the registry and logsvc), with the given handlers. It
// registers with the registry unless unregistered (an executor only a MANUAL group names).
func startTokenExecutor(t *testing.T, st *devstack.Stack, app, accessToken string, unregistered bool, handlers map[string]sdk.HandlerFunc) *sdk.Executor {
	t.Helper()
	e, err := newTokenExecutor(t, st, app, accessToken, unregistered)
	if err != nil {
		t.Fatal(err)
	}
	for name, h := range handlers {
		e.Handle(name, h)
	}
	if err := e.Start(t.Context()); err != nil {
		t.Fatalf("start executor of %s: %v", app, err)
	}
	t.Cleanup(func() { sdktest.Stop(e) })
	return e
}

func newTokenExecutor(t *testing.T, st *devstack.Stack, app, accessToken string, unregistered bool) (*sdk.Executor, error) {
	regAddr := st.RegistryAddr
	if unregistered {
		regAddr = ""
	}
	return sdk.New(sdk.Config{
		AppName: app, InstanceID: app + "-1", ListenAddr: "127.0.0.1:0", RegistryAddr: regAddr, LogsvcAddr: st.LogsAddr,
		AccessToken: accessToken, LogDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler), TLS: st.TLS,
	})
}

// TestExecutorAccessToken runs the real scheduler, registry and logsvc against SDK executors
// that expect an access token. The scheduler reads each group's token from the registry as a
// service and presents it on Run, Beat and Kill: an executor given its group's token runs fires
// and can be killed; one expecting another token refuses every fire, which is recorded as a
// failed trigger saying so and retried like any failed fire; once the group's token is rotated
// to the executor's, fires run within the scheduler's group refresh. A gRPC client without the
// token is refused by the executor. People, admins included, read the token only masked, over
// REST and gRPC, and editing a group the way the console does (sending the mask back) keeps it.
func TestExecutorAccessToken(t *testing.T) {
	t.Parallel()
	st := startStack(t, "")
	base := "http://" + st.HTTPAddr + "/api/v1"
	const (
		goodToken  = "secured-group-token-4f1c"
		groupToken = "the-group-says-this-token"
		agentToken = "the-executor-wants-this-token"
	)

	createGroup := func(app, token string, manual ...string) string {
		t.Helper()
		group := map[string]any{"app_name": app, "title": app, "access_token": token}
		if len(manual) > 0 {
			group["address_type"], group["manual_addresses"] = "ADDRESS_TYPE_MANUAL", manual
		}
		var resp struct {
			Group struct {
				ID          string `json:"id"`
				AccessToken string `json:"access_token"`
			} `json:"group"`
		}
		if code := call(t, "POST", base+"/executor-groups", group, &resp); code != http.StatusOK {
			t.Fatalf("create group %s = %d", app, code)
		}
		if resp.Group.AccessToken != "****" {
			t.Errorf("create group %s answered token %q, want it masked", app, resp.Group.AccessToken)
		}
		return resp.Group.ID
	}
	secured := createGroup("secured", goodToken)

	var ran, blocked atomic.Int32
	started := make(chan string, 1)
	good := startTokenExecutor(t, st, "secured", goodToken, false, map[string]sdk.HandlerFunc{
		"hello": func(_ context.Context, j *sdk.Job) error {
			ran.Add(1)
			j.Logf("hello from %s", j.TriggerID)
			return nil
		},
		"block": func(ctx context.Context, j *sdk.Job) error {
			blocked.Add(1)
			started <- j.TriggerID
			<-ctx.Done()
			return ctx.Err()
		},
	})
	var refusedRan atomic.Int32
	// An executor that wants another token than its group's cannot register (its credential is
	// refused), so it is one only a MANUAL group names.
	other := startTokenExecutor(t, st, "mismatched", agentToken, true, map[string]sdk.HandlerFunc{
		"hello": func(context.Context, *sdk.Job) error { refusedRan.Add(1); return nil },
	})
	mismatched := createGroup("mismatched", groupToken, other.AdvertiseAddr())
	waitGroupAddresses(t, base, secured, good.AdvertiseAddr())
	waitGroupAddresses(t, base, mismatched, other.AdvertiseAddr())

	t.Run("an executor without its group's token cannot register", func(t *testing.T) {
		for _, tok := range []string{groupToken, st.InternalToken} {
			e, err := newTokenExecutor(t, st, "secured", tok, false)
			if err != nil {
				t.Fatal(err)
			}
			err = e.Start(t.Context())
			if err == nil {
				sdktest.Stop(e)
				t.Fatalf("an executor of secured with token %q registered", tok)
			}
			if !strings.Contains(err.Error(), "Unauthenticated") {
				t.Errorf("registering with token %q: %v, want Unauthenticated", tok, err)
			}
		}
		waitGroupAddresses(t, base, secured, good.AdvertiseAddr()) // and the real one stays alone in the view
	})

	t.Run("the group's token runs scheduled fires", func(t *testing.T) {
		id := createJob(t, base, map[string]any{
			"name": "secured-hello", "group_id": secured, "handler": "hello", "status": "JOB_STATUS_RUNNING",
			"schedule": map[string]any{"type": "SCHEDULE_TYPE_FIX_RATE", "expression": "1s"},
		})
		runs := waitRouted(t, base, id, func(rs []routedRun) bool {
			n := 0
			for _, r := range rs {
				if r.Status == "RUN_STATUS_SUCCESS" {
					n++
				}
			}
			return n >= 2
		})
		if code := call(t, "POST", base+"/jobs/"+id+":stop", map[string]any{}, nil); code != http.StatusOK {
			t.Fatalf("stop job = %d", code)
		}
		for _, r := range runs {
			if r.TriggerOutcome == "TRIGGER_OUTCOME_FAILED" {
				t.Errorf("run %s failed to trigger: %q", r.ID, r.TriggerMessage)
			}
		}
		if ran.Load() < 2 {
			t.Errorf("handler ran %d times, want at least 2", ran.Load())
		}
	})

	t.Run("a kill presents the token", func(t *testing.T) {
		id := createJob(t, base, map[string]any{
			"name": "secured-block", "group_id": secured, "handler": "block",
			"schedule": map[string]any{"type": "SCHEDULE_TYPE_NONE"},
		})
		var trig struct {
			TriggerIDs []string `json:"trigger_ids"`
		}
		if code := call(t, "POST", base+"/jobs/"+id+":trigger", map[string]any{}, &trig); code != http.StatusOK || len(trig.TriggerIDs) != 1 {
			t.Fatalf("trigger = %d %+v", code, trig)
		}
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("the blocking handler did not start within 30s")
		}
		// logsvc must know the run's executor before it can ask the scheduler to kill it.
		waitRouted(t, base, id, func(rs []routedRun) bool { return len(rs) == 1 && rs[0].ExecutorAddr != "" })
		var kill struct {
			Killed  bool   `json:"killed"`
			Message string `json:"message"`
		}
		if code := call(t, "POST", base+"/logs/"+trig.TriggerIDs[0]+":kill", map[string]any{}, &kill); code != http.StatusOK || !kill.Killed {
			t.Fatalf("kill = %d %+v, want killed", code, kill)
		}
		waitRouted(t, base, id, func(rs []routedRun) bool { return len(rs) == 1 && rs[0].Status == "RUN_STATUS_KILLED" })
	})

	t.Run("a manual trigger's address gets the token", func(t *testing.T) {
		id := createJob(t, base, map[string]any{
			"name": "secured-manual", "group_id": secured, "handler": "hello",
			"schedule": map[string]any{"type": "SCHEDULE_TYPE_NONE"},
		})
		if code := call(t, "POST", base+"/jobs/"+id+":trigger", map[string]any{"addresses": []string{good.AdvertiseAddr()}}, nil); code != http.StatusOK {
			t.Fatalf("trigger on %s = %d", good.AdvertiseAddr(), code)
		}
		runs := waitRouted(t, base, id, func(rs []routedRun) bool {
			return len(rs) == 1 && (rs[0].Status == "RUN_STATUS_SUCCESS" || rs[0].Status == "RUN_STATUS_FAIL")
		})
		if r := runs[0]; r.Status != "RUN_STATUS_SUCCESS" || r.ExecutorAddr != good.AdvertiseAddr() {
			t.Errorf("run = %+v, want SUCCESS on %s", r, good.AdvertiseAddr())
		}
		// Another group's executor is no address of this job: the token never reaches it.
		var e struct{ Message string }
		if code := call(t, "POST", base+"/jobs/"+id+":trigger", map[string]any{"addresses": []string{other.AdvertiseAddr()}}, &e); code != http.StatusBadRequest {
			t.Errorf("trigger on another group's executor = %d %q, want 400", code, e.Message)
		}
	})

	t.Run("a token the executor refuses fails the trigger and is retried", func(t *testing.T) {
		id := createJob(t, base, map[string]any{
			"name": "refused", "group_id": mismatched, "handler": "hello", "retry_count": 1,
			"schedule": map[string]any{"type": "SCHEDULE_TYPE_NONE"},
		})
		if code := call(t, "POST", base+"/jobs/"+id+":trigger", map[string]any{}, nil); code != http.StatusOK {
			t.Fatalf("trigger = %d", code)
		}
		runs := waitRouted(t, base, id, func(rs []routedRun) bool { return len(rs) >= 2 })
		if len(runs) != 2 {
			t.Fatalf("runs = %+v, want the fire and its one retry", runs)
		}
		attempts := map[int]bool{}
		for _, r := range runs {
			attempts[r.Attempt] = true
			if r.TriggerOutcome != "TRIGGER_OUTCOME_FAILED" || r.ExecutorAddr != other.AdvertiseAddr() ||
				!strings.Contains(r.TriggerMessage, "refused the access token of executor group "+mismatched) ||
				!strings.Contains(r.TriggerMessage, "(Unauthenticated)") {
				t.Errorf("run = %+v, want a failed trigger on %s saying the executor refused the token (Unauthenticated)", r, other.AdvertiseAddr())
			}
		}
		if !attempts[0] || !attempts[1] {
			t.Errorf("attempts = %v, want 0 and 1", attempts)
		}
		if n := refusedRan.Load(); n != 0 {
			t.Errorf("the refusing executor ran its handler %d times, want 0", n)
		}
	})

	t.Run("a rotated token takes effect", func(t *testing.T) {
		if code := call(t, "PATCH", base+"/executor-groups/"+mismatched, map[string]any{"access_token": agentToken}, nil); code != http.StatusOK {
			t.Fatalf("rotate token = %d", code)
		}
		// The console's edit form sends the masked token back with the other fields: that keeps it.
		if code := call(t, "PATCH", base+"/executor-groups/"+mismatched, map[string]any{"title": "renamed", "access_token": "****"}, nil); code != http.StatusOK {
			t.Fatalf("edit title = %d", code)
		}
		id := createJob(t, base, map[string]any{
			"name": "rotated", "group_id": mismatched, "handler": "hello",
			"schedule": map[string]any{"type": "SCHEDULE_TYPE_NONE"},
		})
		// The scheduler re-reads the group within its refresh; fire until a run succeeds.
		deadline := time.Now().Add(30 * time.Second)
		for refusedRan.Load() == 0 {
			if time.Now().After(deadline) {
				var list struct{ Runs []routedRun }
				call(t, "GET", base+"/logs?job_id="+id, nil, &list)
				t.Fatalf("no run on the rotated token within 30s; runs %+v", list.Runs)
			}
			if code := call(t, "POST", base+"/jobs/"+id+":trigger", map[string]any{}, nil); code != http.StatusOK {
				t.Fatalf("trigger = %d", code)
			}
			time.Sleep(250 * time.Millisecond)
		}
		waitRouted(t, base, id, func(rs []routedRun) bool {
			for _, r := range rs {
				if r.Status == "RUN_STATUS_SUCCESS" && r.TriggerOutcome == "TRIGGER_OUTCOME_OK" {
					return true
				}
			}
			return false
		})
	})

	t.Run("a client without the token is refused", func(t *testing.T) {
		for _, tok := range []string{"", st.InternalToken, groupToken} {
			cli := sdktest.ClientTLS(t, good.AdvertiseAddr(), tok, st.TLS)
			_, err := cli.Beat(t.Context(), &executorv1.BeatRequest{})
			wantCode(t, "Beat with token "+strconv.Quote(tok), err, codes.Unauthenticated)
			_, err = cli.Run(t.Context(), &executorv1.RunRequest{Triggers: []*executorv1.Trigger{{TriggerId: "1-1-0-0", JobId: 1, Handler: "hello", ShardTotal: 1}}})
			wantCode(t, "Run with token "+strconv.Quote(tok), err, codes.Unauthenticated)
			_, err = cli.Kill(t.Context(), &executorv1.KillRequest{JobId: 1})
			wantCode(t, "Kill with token "+strconv.Quote(tok), err, codes.Unauthenticated)
		}
	})

	t.Run("people never see the token", func(t *testing.T) {
		for _, g := range []string{secured, mismatched} {
			var one struct {
				Group struct {
					AccessToken string `json:"access_token"`
				}
			}
			if code := call(t, "GET", base+"/executor-groups/"+g, nil, &one); code != http.StatusOK || one.Group.AccessToken != "****" {
				t.Errorf("admin GET /executor-groups/%s = %d, token %q; want it masked", g, code, one.Group.AccessToken)
			}
		}
		var list map[string]any
		if code := call(t, "GET", base+"/executor-groups", nil, &list); code != http.StatusOK {
			t.Fatalf("GET /executor-groups = %d", code)
		}
		var audit map[string]any
		if code := call(t, "GET", base+"/audit-events", nil, &audit); code != http.StatusOK {
			t.Fatalf("GET /audit-events = %d", code)
		}
		for what, v := range map[string]any{"the group list": list, "the audit trail": audit} {
			b, _ := json.Marshal(v)
			for _, tok := range []string{goodToken, groupToken, agentToken} {
				if strings.Contains(string(b), tok) {
					t.Errorf("%s shows an access token to the admin: %s", what, b)
				}
			}
		}

		conn, err := grpc.NewClient(st.RegistryAddr, st.TLS.DialOption())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		reg := registryv1.NewRegistryServiceClient(conn)
		v, _ := tokens.Load(st.HTTPAddr)
		as := func(tok string) context.Context {
			return metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+tok)
		}
		gl, err := reg.ListExecutorGroups(as(v.(string)), &registryv1.ListExecutorGroupsRequest{AppName: "secured"})
		if err != nil || len(gl.GetGroups()) != 1 || gl.GetGroups()[0].GetAccessToken() != "****" {
			t.Errorf("admin's gRPC ListExecutorGroups = %v %v, want the group with its token masked", gl, err)
		}
		sid, _ := strconv.ParseInt(secured, 10, 64)
		gg, err := reg.GetExecutorGroup(as(v.(string)), &registryv1.GetExecutorGroupRequest{Id: sid})
		if err != nil || gg.GetGroup().GetAccessToken() != "****" {
			t.Errorf("admin's gRPC GetExecutorGroup = %v %v, want the token masked", gg, err)
		}
		// Only a service, with the internal token, reads it: that is how the scheduler learns it.
		gg, err = reg.GetExecutorGroup(as(st.InternalToken), &registryv1.GetExecutorGroupRequest{Id: sid})
		if err != nil || gg.GetGroup().GetAccessToken() != goodToken {
			t.Errorf("GetExecutorGroup with the internal token = %v %v, want the token in clear", gg, err)
		}
		// An executor's credential is no service's.
		_, err = reg.GetExecutorGroup(metadata.AppendToOutgoingContext(as(goodToken), auth.ExecutorAppHeader, "secured"), &registryv1.GetExecutorGroupRequest{Id: sid})
		if s, _ := status.FromError(err); s.Code() != codes.PermissionDenied {
			t.Errorf("GetExecutorGroup with an executor's credential: %v, want PermissionDenied", err)
		}
	})
	if blocked.Load() != 1 {
		t.Errorf("blocking handler ran %d times, want 1", blocked.Load())
	}
}

// waitGroupAddresses waits until the executor group's live addresses, read through REST at base,
// are want: the registry follows etcd asynchronously, and the view has no event to wait on here.
func waitGroupAddresses(t *testing.T, base, groupID string, want ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var g struct{ Group struct{ Addresses []string } }
		if code := call(t, "GET", base+"/executor-groups/"+groupID, nil, &g); code != http.StatusOK {
			t.Fatalf("GET group %s = %d", groupID, code)
		}
		if slices.Equal(g.Group.Addresses, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s addresses = %v, want %v within 30s", groupID, g.Group.Addresses, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
