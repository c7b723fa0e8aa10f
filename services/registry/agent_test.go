package registry_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/encoding/protojson"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/etcdembed/etcdtest"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/registry"
)

// The agent's registration is tested here, on the package's embedded etcd: the agent module may
// not link the etcd server, and a test must never skip for want of an etcd binary.

func TestRegistrationSurvivesLeaseLossAndIsRevokedOnStop(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Client(t)
	e, err := sdk.New(sdk.Config{
		AppName: "reg-app", InstanceID: "i1", ListenAddr: "127.0.0.1:0", LogDir: t.TempDir(), Etcd: cli,
		RegistrationTTL: 2 * time.Second, Version: "v1.2.3", Labels: map[string]string{"zone": "eu"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(e.Stop)
	key := registry.KeyPrefix + "reg-app/i1"

	resp, err := cli.Get(t.Context(), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("Get %s: got %v %v, want one key", key, resp, err)
	}
	var got registryv1.Executor
	if err := protojson.Unmarshal(resp.Kvs[0].Value, &got); err != nil {
		t.Fatalf("value: %v", err)
	}
	if got.GetAddress() != e.AdvertiseAddr() || got.GetVersion() != "v1.2.3" || got.GetCapacity() != 100 || got.GetLabels()["zone"] != "eu" ||
		got.GetStartTime() == nil || resp.Kvs[0].Lease == 0 {
		t.Fatalf("registration: got %v (lease %x)", &got, resp.Kvs[0].Lease)
	}

	// Lose the lease (as after an etcd restart or expiry): the executor registers again.
	rev, err := cli.Revoke(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease))
	if err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	wctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	events := cli.Watch(wctx, key, clientv3.WithRev(rev.Header.Revision+1))
	select {
	case w := <-events:
		if len(w.Events) == 0 || w.Events[0].Type != mvccpb.PUT || w.Events[0].Kv.Lease == resp.Kvs[0].Lease {
			t.Fatalf("after losing the lease: got %v, want a PUT under a new lease", w.Events)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("executor did not register again after losing its lease")
	}

	e.Stop()
	resp, err = cli.Get(t.Context(), key)
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("after Stop: got %v %v, want the key gone", resp.Kvs, fmt.Sprint(err))
	}
}

// TestAgentJoinsAndLeavesTheView runs a real agent against the registry: it shows up in the live
// view, and leaves it the moment it stops (its lease is revoked).
func TestAgentJoinsAndLeavesTheView(t *testing.T) {
	t.Parallel()
	c := serve(t, dbtest.Store{Name: "sqlite", Config: db.Config{DataDir: t.TempDir()}})
	e, err := sdk.New(sdk.Config{AppName: "view-app", InstanceID: "a1", ListenAddr: "127.0.0.1:0", LogDir: t.TempDir(), Etcd: etcdtest.Client(t)})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.WatchExecutors(t.Context(), &registryv1.WatchExecutorsRequest{AppName: "view-app"})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	recvWithin(t, st) // the snapshot
	if err := e.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(e.Stop)
	if ev := recvWithin(t, st); ev.Type != registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_PUT || ev.Executors[0].Address != e.AdvertiseAddr() {
		t.Fatalf("event = %v, want PUT of %s", ev, e.AdvertiseAddr())
	}
	e.Stop()
	if ev := recvWithin(t, st); ev.Type != registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_DELETE {
		t.Fatalf("event after Stop = %v, want DELETE", ev)
	}
}
