package devstack_test

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/internal/devstack"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk/sdktest"
)

// shardCalls records which shard each executor ran, by executor address.
type shardCalls struct {
	mu    sync.Mutex
	calls map[string][][2]int // address → (index, total) per call
}

func (s *shardCalls) handler(addr func() string) sdk.HandlerFunc {
	return func(_ context.Context, j *sdk.Job) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.calls[addr()] = append(s.calls[addr()], [2]int{j.ShardIndex, j.ShardTotal})
		return nil
	}
}

func (s *shardCalls) snapshot() map[string][][2]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][][2]int, len(s.calls))
	for a, c := range s.calls {
		out[a] = slices.Clone(c)
	}
	return out
}

// routedRun is the part of a run the routing tests read.
type routedRun struct {
	ID             string `json:"id"`
	Status         string `json:"status"`
	TriggerOutcome string `json:"trigger_outcome"`
	TriggerMessage string `json:"trigger_message"`
	TriggerType    string `json:"trigger_type"`
	ExecutorAddr   string `json:"executor_address"`
	ShardIndex     int    `json:"shard_index"`
	ShardTotal     int    `json:"shard_total"`
	Attempt        int    `json:"attempt"`
	RouteStrategy  string `json:"route_strategy"`
}

// waitRouted polls the log API until cond holds for the job's runs, for at most 30 s.
func waitRouted(t *testing.T, base, jobID string, cond func([]routedRun) bool) []routedRun {
	t.Helper()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		var list struct{ Runs []routedRun }
		if code := call(t, "GET", base+"/logs?job_id="+jobID, nil, &list); code != http.StatusOK {
			t.Fatalf("GET /logs = %d", code)
		}
		if cond(list.Runs) {
			return list.Runs
		}
		select {
		case <-deadline:
			t.Fatalf("runs of job %s = %+v; condition not met within 30s", jobID, list.Runs)
		case <-tick.C:
		}
	}
}

// TestRoutingThroughTheLiveView runs the real scheduler, registry and three SDK executors (the
// stack's own agent and two more in the same group): a SHARDING_BROADCAST fire runs once on
// every online executor with its own shard index of 3, and its trigger records say which
// strategy chose which address; FAILOVER beats past a dead address of a MANUAL group; a group
// with no executor online records a failed trigger that is retried like any failed fire; and
// the group API shows the online executors over REST.
func TestRoutingThroughTheLiveView(t *testing.T) {
	t.Parallel()
	calls := &shardCalls{calls: map[string][][2]int{}}
	var localAddr string
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	any0 := "127.0.0.1:0"
	st, err := devstack.Start(ctx, devstack.Config{
		DataDir: t.TempDir(), UnsafeEtcd: true,
		HTTPAddr: any0, SchedulerAddr: any0, RegistryAddr: any0, LogsAddr: any0, AuthAddr: any0, AgentAddr: any0, EtcdAddr: any0,
		AgentHandlers: map[string]sdk.HandlerFunc{"shard": calls.handler(func() string { return localAddr })},
	})
	if err != nil {
		t.Fatalf("devstack.Start: %v", err)
	}
	t.Cleanup(st.Stop)
	tokens.Store(st.HTTPAddr, login(t, st, "admin", st.AdminPassword))
	t.Cleanup(func() { tokens.Delete(st.HTTPAddr) })
	localAddr = st.AgentAddr
	base := "http://" + st.HTTPAddr + "/api/v1"

	// Two more executors of the stack's group, with its access token.
	addrs := []string{st.AgentAddr}
	for _, inst := range []string{"extra-1", "extra-2"} {
		e, err := sdk.New(sdk.Config{
			AppName: devstack.DevApp, InstanceID: inst, ListenAddr: any0, RegistryAddr: st.RegistryAddr, LogsvcAddr: st.LogsAddr,
			AccessToken: st.GroupToken, LogDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler), TLS: st.TLS,
		})
		if err != nil {
			t.Fatal(err)
		}
		e.Handle("shard", calls.handler(e.AdvertiseAddr))
		if err := e.Start(ctx); err != nil {
			t.Fatalf("start %s: %v", inst, err)
		}
		t.Cleanup(func() { sdktest.Stop(e) })
		addrs = append(addrs, e.AdvertiseAddr())
	}
	slices.Sort(addrs)

	// The group shows all three online, with last-seen times, over REST.
	type executor struct {
		InstanceID   string `json:"instance_id"`
		Address      string `json:"address"`
		LastSeenTime string `json:"last_seen_time"`
	}
	var group struct {
		Group struct {
			AppName     string     `json:"app_name"`
			AddressType string     `json:"address_type"`
			Addresses   []string   `json:"addresses"`
			Executors   []executor `json:"executors"`
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if code := call(t, "GET", base+"/executor-groups/"+strconv.FormatInt(st.GroupID, 10), nil, &group); code != http.StatusOK {
			t.Fatalf("GET group = %d", code)
		}
		if slices.Equal(group.Group.Addresses, addrs) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("group addresses = %v, want %v within 30s", group.Group.Addresses, addrs)
		}
		select {
		case <-time.After(50 * time.Millisecond): // the registry follows etcd asynchronously
		case <-ctx.Done():
		}
	}
	if group.Group.AddressType != "ADDRESS_TYPE_AUTO" || len(group.Group.Executors) != 3 {
		t.Errorf("group = %+v, want AUTO with 3 executors", group.Group)
	}
	for _, e := range group.Group.Executors {
		if ts, err := time.Parse(time.RFC3339Nano, e.LastSeenTime); err != nil || time.Since(ts) > time.Minute {
			t.Errorf("executor %s last seen %q, want a recent time", e.InstanceID, e.LastSeenTime)
		}
	}

	var online struct{ Executors []executor }
	if code := call(t, "GET", base+"/executors?app_name="+devstack.DevApp, nil, &online); code != http.StatusOK || len(online.Executors) != 3 {
		t.Errorf("GET /executors?app_name=%s = %d, %+v, want the 3 executors", devstack.DevApp, code, online.Executors)
	}

	t.Run("sharding broadcast", func(t *testing.T) {
		id := createJob(t, base, map[string]any{
			"name": "sharded", "group_id": st.GroupID, "handler": "shard",
			"route_strategy": "ROUTE_STRATEGY_SHARDING_BROADCAST",
			"schedule":       map[string]any{"type": "SCHEDULE_TYPE_NONE"},
		})
		if code := call(t, "POST", base+"/jobs/"+id+":trigger", map[string]any{}, nil); code != http.StatusOK {
			t.Fatalf("trigger = %d", code)
		}
		runs := waitRouted(t, base, id, func(rs []routedRun) bool {
			n := 0
			for _, r := range rs {
				// A shard's result can reach logsvc before its trigger record: wait for both.
				if r.Status == "RUN_STATUS_SUCCESS" && r.TriggerOutcome != "" && r.TriggerOutcome != "TRIGGER_OUTCOME_UNSPECIFIED" {
					n++
				}
			}
			return n >= 3
		})
		if len(runs) != 3 {
			t.Fatalf("runs = %+v, want one per executor", runs)
		}
		slices.SortFunc(runs, func(a, b routedRun) int { return a.ShardIndex - b.ShardIndex })
		for i, r := range runs {
			// XXL-JOB gives shard i to the i-th executor in address order.
			if r.ShardIndex != i || r.ShardTotal != 3 || r.ExecutorAddr != addrs[i] || r.TriggerOutcome != "TRIGGER_OUTCOME_OK" {
				t.Errorf("run %d = %+v, want shard %d of 3 on %s, triggered OK", i, r, i, addrs[i])
			}
			if r.RouteStrategy != "ROUTE_STRATEGY_SHARDING_BROADCAST" ||
				!strings.Contains(r.TriggerMessage, "route SHARDING_BROADCAST over 3 executors") ||
				!strings.Contains(r.TriggerMessage, "executor "+addrs[i]) {
				t.Errorf("run %d trigger message = %q (strategy %s), want the strategy, its choice and the address", i, r.TriggerMessage, r.RouteStrategy)
			}
		}
		got := calls.snapshot()
		for i, a := range addrs {
			if want := [][2]int{{i, 3}}; !slices.Equal(got[a], want) {
				t.Errorf("handler calls on %s = %v, want %v", a, got[a], want)
			}
		}
	})

	t.Run("failover skips a dead address", func(t *testing.T) {
		// A MANUAL group whose first address has nothing listening: FAILOVER beats it, fails,
		// and sends the fire to the next one, saying so in the trigger message.
		dead := "127.0.0.1:1"
		var manual struct{ Group struct{ ID string } }
		if code := call(t, "POST", base+"/executor-groups", map[string]any{
			"app_name": "manual-failover", "title": "manual", "address_type": "ADDRESS_TYPE_MANUAL",
			"manual_addresses": []string{addrs[1], dead}, "access_token": st.GroupToken, // what its executors expect
		}, &manual); code != http.StatusOK {
			t.Fatalf("create group = %d", code)
		}
		id := createJob(t, base, map[string]any{
			"name": "failover", "group_id": manual.Group.ID, "handler": "shard",
			"route_strategy": "ROUTE_STRATEGY_FAILOVER",
			"schedule":       map[string]any{"type": "SCHEDULE_TYPE_NONE"},
		})
		call(t, "POST", base+"/jobs/"+id+":trigger", map[string]any{}, nil)
		// The result may arrive before the trigger record: wait for both.
		runs := waitRouted(t, base, id, func(rs []routedRun) bool {
			return len(rs) == 1 && rs[0].Status == "RUN_STATUS_SUCCESS" && rs[0].TriggerOutcome != "" && rs[0].TriggerOutcome != "TRIGGER_OUTCOME_UNSPECIFIED"
		})
		r := runs[0]
		if r.ExecutorAddr != addrs[1] || !strings.Contains(r.TriggerMessage, "beat "+dead+": failed") ||
			!strings.Contains(r.TriggerMessage, "beat "+addrs[1]+": ok; chose "+addrs[1]) {
			t.Errorf("run = %+v, want FAILOVER past %s to %s, with both beats in the trigger message", r, dead, addrs[1])
		}
	})

	t.Run("no executors online", func(t *testing.T) {
		var empty struct{ Group struct{ ID string } }
		if code := call(t, "POST", base+"/executor-groups", map[string]any{"app_name": "nobody-home", "title": "empty"}, &empty); code != http.StatusOK {
			t.Fatalf("create group = %d", code)
		}
		id := createJob(t, base, map[string]any{
			"name": "orphan", "group_id": empty.Group.ID, "handler": "shard", "retry_count": 2,
			"route_strategy": "ROUTE_STRATEGY_ROUND",
			"schedule":       map[string]any{"type": "SCHEDULE_TYPE_NONE"},
		})
		call(t, "POST", base+"/jobs/"+id+":trigger", map[string]any{}, nil)
		runs := waitRouted(t, base, id, func(rs []routedRun) bool { return len(rs) >= 3 })
		if len(runs) != 3 {
			t.Fatalf("runs = %+v, want the fire and its 2 retries", runs)
		}
		for _, r := range runs {
			if r.TriggerOutcome != "TRIGGER_OUTCOME_FAILED" || r.ExecutorAddr != "" ||
				!strings.Contains(r.TriggerMessage, "no executors online") || !strings.Contains(r.TriggerMessage, "ROUND") {
				t.Errorf("run = %+v, want a failed trigger saying ROUND found no executors online", r)
			}
		}
	})

	t.Run("bad group input names the field", func(t *testing.T) {
		tests := []struct {
			body  map[string]any
			field string
		}{
			{map[string]any{"app_name": "bad app", "title": "t"}, "app_name"},
			{map[string]any{"app_name": "m", "title": "t", "address_type": "ADDRESS_TYPE_MANUAL", "manual_addresses": []string{"nohost"}}, "manual_addresses[0]"},
		}
		for _, tt := range tests {
			var e struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if code := call(t, "POST", base+"/executor-groups", tt.body, &e); code != http.StatusBadRequest || e.Code != 3 || !strings.Contains(e.Message, tt.field) {
				t.Errorf("POST /executor-groups %v = %d (grpc code %d, %q), want 400 naming %s", tt.body, code, e.Code, e.Message, tt.field)
			}
		}
	})
}
