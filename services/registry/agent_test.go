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
	"github.com/jobmesh/jobmesh/internal/logtest"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/registry"
)

// The agent's registration is tested here, on the package's embedded etcd: the agent module may
// not link the etcd server, and a test must never skip for want of an etcd binary.

func TestRegistrationSurvivesLeaseLossAndIsRevokedOnStop(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Client(t)
	rec := logtest.New()
	e, err := sdk.New(sdk.Config{
		AppName: "reg-app", InstanceID: "i1", ListenAddr: "127.0.0.1:0", LogDir: t.TempDir(), Etcd: cli,
		RegistrationTTL: 2 * time.Second, Version: "v1.2.3", Labels: map[string]string{"zone": "eu"},
		Logger: rec.Logger(), Insecure: true,
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
	// And it said why.
	rec.Wait(t, 10*time.Second, "WARN executor registration lost", "reason=lease expired or revoked")
	rec.Wait(t, 10*time.Second, "executor registered again")

	e.Stop()
	resp, err = cli.Get(t.Context(), key)
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("after Stop: got %v %v, want the key gone", resp.Kvs, fmt.Sprint(err))
	}
}

// TestRegistrationSurvivesEtcdRestart stops etcd for longer than the registration's TTL, so the
// executor's keepalive gives up, then starts it again on the same data and port: the executor
// registers again (saying why it had to), the registry's view follows, and the key outlives the
// old lease, which etcd restored at restart and then let expire.
func TestRegistrationSurvivesEtcdRestart(t *testing.T) {
	t.Parallel()
	srv := privateEtcd(t, "127.0.0.1:0")
	agentCli, regCli := srv.client(t), srv.client(t)
	c := serveWith(t, dbtest.Store{Name: "sqlite", Config: db.Config{DataDir: t.TempDir()}}, regCli, nil)
	rec := logtest.New()
	const app = "restart-app"
	e, err := sdk.New(sdk.Config{
		AppName: app, InstanceID: "r1", ListenAddr: "127.0.0.1:0", LogDir: t.TempDir(), Etcd: agentCli,
		RegistrationTTL: 2 * time.Second, Logger: rec.Logger(), Insecure: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(e.Stop)
	waitAddresses(t, c, app, e.AdvertiseAddr())
	key := registry.KeyPrefix + app + "/r1"
	resp, err := agentCli.Get(t.Context(), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("Get %s: got %v %v, want one key", key, resp, err)
	}
	oldLease := clientv3.LeaseID(resp.Kvs[0].Lease)

	srv.s.Close()
	rec.Wait(t, 30*time.Second, "WARN executor registration lost", "reason=keepalive ended and etcd is unreachable")
	srv.start(t)
	rec.Wait(t, 30*time.Second, "executor registered again")

	// The old lease came back with etcd and expires within its TTL; the key, now under the new
	// lease, must stay.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ttl, err := agentCli.TimeToLive(t.Context(), oldLease)
		if err == nil && ttl.TTL == -1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("old lease %x still alive 30s after the restart: %v %v", oldLease, ttl, err)
		}
		select {
		case <-time.After(100 * time.Millisecond): // a lease expires in its own time
		case <-t.Context().Done():
		}
	}
	resp, err = agentCli.Get(t.Context(), key)
	if err != nil || len(resp.Kvs) != 1 || clientv3.LeaseID(resp.Kvs[0].Lease) == oldLease {
		t.Fatalf("after the old lease expired: Get %s = %v %v, want the key under a new lease", key, resp, err)
	}
	waitAddresses(t, c, app, e.AdvertiseAddr())

	e.Stop()
	waitAddresses(t, c, app)
}

// TestAgentJoinsAndLeavesTheView runs a real agent against the registry: it shows up in the live
// view, and leaves it the moment it stops (its lease is revoked).
func TestAgentJoinsAndLeavesTheView(t *testing.T) {
	t.Parallel()
	c := serve(t, dbtest.Store{Name: "sqlite", Config: db.Config{DataDir: t.TempDir()}})
	e, err := sdk.New(sdk.Config{AppName: "view-app", InstanceID: "a1", ListenAddr: "127.0.0.1:0", LogDir: t.TempDir(), Etcd: etcdtest.Client(t), Insecure: true})
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
