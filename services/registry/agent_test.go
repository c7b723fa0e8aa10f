package registry_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/etcdembed/etcdtest"
	"github.com/jobmesh/jobmesh/internal/logtest"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk/sdktest"
	"github.com/jobmesh/jobmesh/services/registry"
)

// The agent's registration is tested here, on the package's embedded etcd: the agent module may
// not link the etcd server, and a test must never skip for want of an etcd binary. Agents
// register through the registry (RegisterExecutor), which writes their keys.

func sqliteStore(t *testing.T) dbtest.Store {
	return dbtest.Store{Name: "sqlite", Config: db.Config{DataDir: t.TempDir()}}
}

// agentToken is the access token of the groups newAgent makes, and its executors'.
const agentToken = "a group token"

// newAgent is an SDK executor of app that registers with the registry c at regAddr, in a group
// of app it creates (if not there yet) with agentToken.
func newAgent(t *testing.T, c registryv1.RegistryServiceClient, regAddr, app, inst string, configure func(*sdk.Config)) *sdk.Executor {
	t.Helper()
	ensureGroup(t, c, app)
	cfg := sdk.Config{AppName: app, InstanceID: inst, ListenAddr: "127.0.0.1:0", LogDir: t.TempDir(), RegistryAddr: regAddr,
		AccessToken: agentToken}
	if configure != nil {
		configure(&cfg)
	}
	e, err := sdk.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestRegistrationSurvivesLeaseLossAndIsRevokedOnStop(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Client(t)
	c, regAddr := serveAt(t, sqliteStore(t), cli, registry.Config{ExecutorTTL: 2 * time.Second})
	rec := logtest.New()
	e := newAgent(t, c, regAddr, "reg-app", "i1", func(c *sdk.Config) {
		c.Version, c.Labels, c.Logger = "v1.2.3", map[string]string{"zone": "eu"}, rec.Logger()
	})
	if err := e.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { sdktest.Stop(e) })
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
		got.GetStartTime() == nil || got.GetSeal() == "" || resp.Kvs[0].Lease == 0 {
		t.Fatalf("registration: got %v (lease %x)", &got, resp.Kvs[0].Lease)
	}

	// Lose the lease (as after an etcd restart or expiry): the registry ends the registration
	// and the executor registers again.
	rev, err := cli.Revoke(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease))
	if err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	wctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	events := cli.Watch(wctx, key, clientv3.WithRev(rev.Header.Revision+1))
	select {
	case w := <-events:
		if len(w.Events) == 0 || w.Events[0].Type != clientv3.EventTypePut || w.Events[0].Kv.Lease == resp.Kvs[0].Lease {
			t.Fatalf("after losing the lease: got %v, want a PUT under a new lease", w.Events)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("executor did not register again after losing its lease")
	}
	// And it said why.
	rec.Wait(t, 10*time.Second, "WARN executor registration lost", "lease was lost")
	rec.Wait(t, 10*time.Second, "executor registered again")

	if err := sdktest.Stop(e); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	waitGone(t, cli, key)
}

// waitGone waits for key to leave etcd (the registry revokes when the stream ends).
func waitGone(t *testing.T, cli *clientv3.Client, key string) {
	t.Helper()
	resp, err := cli.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for w := range cli.Watch(ctx, key, clientv3.WithRev(resp.Header.Revision+1)) {
		for _, ev := range w.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return
			}
		}
	}
	t.Fatalf("%s still registered 20s after the executor stopped", key)
}

// TestRegistrationSurvivesEtcdRestart stops etcd for longer than the registration's TTL, so the
// registry loses the registration's lease, then starts it again on the same data and port: the
// executor registers again, the registry's view follows, and the executor leaves when it stops.
func TestRegistrationSurvivesEtcdRestart(t *testing.T) {
	t.Parallel()
	srv := privateEtcd(t, "127.0.0.1:0")
	regCli := srv.client(t)
	c, regAddr := serveAt(t, sqliteStore(t), regCli, registry.Config{ExecutorTTL: 2 * time.Second})
	rec := logtest.New()
	const app = "restart-app"
	e := newAgent(t, c, regAddr, app, "r1", func(c *sdk.Config) { c.Logger = rec.Logger() })
	if err := e.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { sdktest.Stop(e) })
	waitAddresses(t, c, app, e.AdvertiseAddr())

	srv.s.Close()
	rec.Wait(t, 30*time.Second, "WARN executor registration lost")
	srv.start(t)
	rec.Wait(t, 30*time.Second, "executor registered again")
	waitAddresses(t, c, app, e.AdvertiseAddr())

	if err := sdktest.Stop(e); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	waitAddresses(t, c, app)
}

// TestAgentJoinsAndLeavesTheView runs a real agent against the registry: it shows up in the live
// view, and leaves it the moment it stops (the registry revokes its lease).
func TestAgentJoinsAndLeavesTheView(t *testing.T) {
	t.Parallel()
	c, regAddr := serveAt(t, sqliteStore(t), etcdtest.Client(t), registry.Config{})
	e := newAgent(t, c, regAddr, "view-app", "a1", nil)
	st, err := c.WatchExecutors(t.Context(), &registryv1.WatchExecutorsRequest{AppName: "view-app"})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	recvWithin(t, st) // the snapshot
	if err := e.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { sdktest.Stop(e) })
	if ev := recvWithin(t, st); ev.Type != registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_PUT || ev.Executors[0].Address != e.AdvertiseAddr() ||
		ev.Executors[0].GetSeal() != "" {
		t.Fatalf("event = %v, want PUT of %s without its seal", ev, e.AdvertiseAddr())
	}
	if err := sdktest.Stop(e); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if ev := recvWithin(t, st); ev.Type != registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_DELETE {
		t.Fatalf("event after Stop = %v, want DELETE", ev)
	}
}

// TestRegistrationRefusals: an executor registers only under its own credential's app, with a
// valid registration; a caller that is neither an executor nor a service registers nothing.
func TestRegistrationRefusals(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Client(t)
	_, regAddr := serveAt(t, sqliteStore(t), cli, registry.Config{})
	conn, err := grpc.NewClient(regAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := registryv1.NewRegistryServiceClient(conn)
	as := func(app string) context.Context {
		if app == "" {
			return t.Context()
		}
		return metadata.AppendToOutgoingContext(t.Context(), "x-jobmesh-executor-app", app)
	}
	for _, tc := range []struct {
		name   string
		caller string
		e      *registryv1.Executor
		want   codes.Code
	}{
		{"another group's app", "app-a", &registryv1.Executor{AppName: "app-b", InstanceId: "x", Address: "127.0.0.1:1"}, codes.PermissionDenied},
		{"no credential", "", &registryv1.Executor{AppName: "app-a", InstanceId: "x", Address: "127.0.0.1:1"}, codes.PermissionDenied},
		{"address not host:port", "app-a", &registryv1.Executor{AppName: "app-a", InstanceId: "x", Address: "nowhere"}, codes.InvalidArgument},
		{"instance id with a slash", "app-a", &registryv1.Executor{AppName: "app-a", InstanceId: "x/../y", Address: "127.0.0.1:1"}, codes.InvalidArgument},
		{"no registration", "app-a", nil, codes.InvalidArgument},
	} {
		st, err := c.RegisterExecutor(as(tc.caller))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&registryv1.RegisterExecutorRequest{Executor: tc.e}); err != nil {
			t.Fatalf("%s: send: %v", tc.name, err)
		}
		_, err = st.Recv()
		if status.Code(err) != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	for _, app := range []string{"app-a/", "app-b/"} { // the package's etcd is shared: only these apps'
		resp, err := cli.Get(t.Context(), registry.KeyPrefix+app, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || resp.Count != 0 {
			t.Fatalf("keys under %s written by refused registrations: %v %v, want none", app, resp.Count, err)
		}
	}
}

// TestSilentRegistrationIsRemoved: an executor whose heartbeats stop (a host that vanished
// without closing its connection) leaves the view after the registry's TTL.
func TestSilentRegistrationIsRemoved(t *testing.T) {
	t.Parallel()
	c, regAddr := serveAt(t, sqliteStore(t), etcdtest.Client(t), registry.Config{ExecutorTTL: time.Second})
	conn, err := grpc.NewClient(regAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	st, err := registryv1.NewRegistryServiceClient(conn).RegisterExecutor(
		metadata.AppendToOutgoingContext(t.Context(), "x-jobmesh-executor-app", "silent-app"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&registryv1.RegisterExecutorRequest{Executor: &registryv1.Executor{AppName: "silent-app", InstanceId: "s1", Address: "127.0.0.1:7"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatalf("registration answer: %v", err)
	}
	waitAddresses(t, c, "silent-app", "127.0.0.1:7")
	// No heartbeat: the registry ends the stream and removes the executor.
	if _, err := st.Recv(); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("stream after silence: %v, want DeadlineExceeded", err)
	}
	waitAddresses(t, c, "silent-app")
}

// TestUnsealedKeyIsNotAnExecutor: a key written into etcd by anyone but a registry (a host with
// etcd access) is not in the live view: unsealed, sealed with another secret, a sealed value
// copied under another key, or put back without its lease or under another one (a registration
// replayed after its executor left); and a sealed registration replaced by an unsealed value
// leaves it.
func TestUnsealedKeyIsNotAnExecutor(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Client(t)
	c := serveWith(t, sqliteStore(t), cli, nil)
	const app = "forged-app"
	register(t, cli, app, "real", "127.0.0.1:11")
	waitAddresses(t, c, app, "127.0.0.1:11")
	put := func(key, val string, opts ...clientv3.OpOption) {
		t.Helper()
		if _, err := cli.Put(t.Context(), key, val, opts...); err != nil {
			t.Fatal(err)
		}
	}
	grant := func() clientv3.LeaseID {
		t.Helper()
		l, err := cli.Grant(t.Context(), 30)
		if err != nil {
			t.Fatal(err)
		}
		return l.ID
	}
	plain, _ := protojson.Marshal(&registryv1.Executor{Address: "127.0.0.1:12"})
	put(registry.KeyPrefix+app+"/plain", string(plain))
	lease := grant()
	key, val, _ := registry.Registration("a secret that is not the registry's", &registryv1.Executor{AppName: app, InstanceId: "other-secret", Address: "127.0.0.1:13"}, lease)
	put(key, val, clientv3.WithLease(lease))
	// A sealed value copied under another instance's key: the seal covers the key.
	lease = grant()
	_, val, _ = registry.Registration(testSecret, &registryv1.Executor{AppName: app, InstanceId: "real", Address: "127.0.0.1:14"}, lease)
	put(registry.KeyPrefix+app+"/copied", val, clientv3.WithLease(lease))
	// A sealed value put without a lease, or under another lease than it was sealed for: the
	// seal covers the lease, so a copy cannot outlive the registration it came from.
	key, val, _ = registry.Registration(testSecret, &registryv1.Executor{AppName: app, InstanceId: "replayed", Address: "127.0.0.1:16"}, grant())
	put(key, val)
	key, val, _ = registry.Registration(testSecret, &registryv1.Executor{AppName: app, InstanceId: "moved", Address: "127.0.0.1:17"}, grant())
	put(key, val, clientv3.WithLease(grant()))
	// A registration the tests seal as the registry would: it joins, so the forged ones were
	// seen and left out by then (the watch delivers in order).
	register(t, cli, app, "later", "127.0.0.1:15")
	waitAddresses(t, c, app, "127.0.0.1:11", "127.0.0.1:15")

	// An unsealed value written over a registration removes it.
	put(registry.KeyPrefix+app+"/real", string(plain))
	waitAddresses(t, c, app, "127.0.0.1:15")
}

// ensureGroup creates app's AUTO group with agentToken unless it exists.
func ensureGroup(t *testing.T, c registryv1.RegistryServiceClient, app string) {
	t.Helper()
	_, err := c.CreateExecutorGroup(t.Context(), &registryv1.CreateExecutorGroupRequest{Group: &registryv1.ExecutorGroup{
		AppName: app, Title: app, AccessToken: agentToken}})
	if err != nil && status.Code(err) != codes.AlreadyExists {
		t.Fatalf("create group %s: %v", app, err)
	}
}

// rawRegistration opens a RegisterExecutor stream as app's executor with token and registers e;
// it returns the stream after the registry's answer (or the error that refused it).
func rawRegistration(t *testing.T, regAddr, app, token string, e *registryv1.Executor) (grpc.BidiStreamingClient[registryv1.RegisterExecutorRequest, registryv1.RegisterExecutorResponse], error) {
	t.Helper()
	conn, err := grpc.NewClient(regAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-jobmesh-executor-app", app, "authorization", "Bearer "+token)
	st, err := registryv1.NewRegistryServiceClient(conn).RegisterExecutor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&registryv1.RegisterExecutorRequest{Executor: e}); err != nil {
		t.Fatal(err)
	}
	_, err = st.Recv()
	return st, err
}

// TestRegistrationBounds: a registration too big for the live view, one more executor than a
// group may have, a second registration of a live instance, and a stream that never registers
// are each refused, and leave the registrations there were alone.
func TestRegistrationBounds(t *testing.T) {
	t.Parallel()
	c, regAddr := serveAt(t, sqliteStore(t), etcdtest.Client(t), registry.Config{MaxExecutorsPerGroup: 2, ExecutorTTL: time.Second})
	const app = "bounded-app"
	ensureGroup(t, c, app)
	ex := func(inst, addr string) *registryv1.Executor {
		return &registryv1.Executor{AppName: app, InstanceId: inst, Address: addr}
	}
	labels := map[string]string{}
	for i := range 33 {
		labels[fmt.Sprint("k", i)] = "v"
	}
	for _, tc := range []struct {
		name string
		e    *registryv1.Executor
	}{
		{"a 1 MiB version", &registryv1.Executor{AppName: app, InstanceId: "big", Address: "127.0.0.1:1", Version: strings.Repeat("v", 1<<20)}},
		{"33 labels", &registryv1.Executor{AppName: app, InstanceId: "big", Address: "127.0.0.1:1", Labels: labels}},
		{"a huge label", &registryv1.Executor{AppName: app, InstanceId: "big", Address: "127.0.0.1:1", Labels: map[string]string{"k": strings.Repeat("v", 8<<10)}}},
	} {
		if _, err := rawRegistration(t, regAddr, app, agentToken, tc.e); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", tc.name, err)
		}
	}
	for i, inst := range []string{"a", "b"} {
		st, err := rawRegistration(t, regAddr, app, agentToken, ex(inst, fmt.Sprintf("127.0.0.1:%d", 21+i)))
		if err != nil {
			t.Fatalf("register %s: %v", inst, err)
		}
		go func() { // heartbeats keep it while the test runs
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for range tick.C {
				if st.Send(&registryv1.RegisterExecutorRequest{}) != nil {
					return
				}
				if _, err := st.Recv(); err != nil {
					return
				}
			}
		}()
	}
	waitAddresses(t, c, app, "127.0.0.1:21", "127.0.0.1:22")
	if _, err := rawRegistration(t, regAddr, app, agentToken, ex("c", "127.0.0.1:23")); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a third executor of a group capped at 2: %v, want ResourceExhausted", err)
	}
	if _, err := rawRegistration(t, regAddr, app, agentToken, ex("a", "127.0.0.1:24")); status.Code(err) != codes.AlreadyExists {
		t.Errorf("a second registration of a live instance: %v, want AlreadyExists", err)
	}
	waitAddresses(t, c, app, "127.0.0.1:21", "127.0.0.1:22")

	// A stream that never sends its registration is cut after the TTL.
	conn, err := grpc.NewClient(regAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	st, err := registryv1.NewRegistryServiceClient(conn).RegisterExecutor(metadata.AppendToOutgoingContext(t.Context(), "x-jobmesh-executor-app", app))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("a stream that registers nothing: %v, want DeadlineExceeded", err)
	}
}

// TestRotatedTokenRemovesRegistration: an executor registered with its group's token is removed
// once the group's token changes (a leaked token is rotated to lock its holder out), and so is
// one whose group is deleted; each registration carries the fingerprint of the token it used.
func TestRotatedTokenRemovesRegistration(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Client(t)
	c, regAddr := serveAt(t, sqliteStore(t), cli, registry.Config{})
	const app = "rotated-app"
	ensureGroup(t, c, app)
	st, err := rawRegistration(t, regAddr, app, agentToken, &registryv1.Executor{AppName: app, InstanceId: "r1", Address: "127.0.0.1:31"})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(t.Context(), registry.KeyPrefix+app+"/r1")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("registration: %v %v", resp, err)
	}
	var stored registryv1.Executor
	if err := protojson.Unmarshal(resp.Kvs[0].Value, &stored); err != nil || stored.GetCredential() == "" || strings.Contains(string(resp.Kvs[0].Value), agentToken) {
		t.Fatalf("stored registration %s: want a credential fingerprint and not the token (%v)", resp.Kvs[0].Value, err)
	}
	l, err := c.ListExecutorGroups(t.Context(), &registryv1.ListExecutorGroupsRequest{AppName: app})
	if err != nil || len(l.GetGroups()) != 1 {
		t.Fatal(l, err)
	}
	if _, err := c.UpdateExecutorGroup(t.Context(), &registryv1.UpdateExecutorGroupRequest{
		Group: &registryv1.ExecutorGroup{Id: l.GetGroups()[0].GetId(), AccessToken: "the rotated token"}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"access_token"}},
	}); err != nil {
		t.Fatal(err)
	}
	// Within the TTL (no heartbeat needed), the registry ends the registration for the rotated
	// token.
	if _, err := st.Recv(); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("registration after the rotation ended with %v, want Unauthenticated", err)
	}
	waitAddresses(t, c, app)
}

// TestStartWaitsForItsInstanceToBeFree: an executor that restarts before the registry saw its
// previous registration end waits for the instance id rather than failing to start.
func TestStartWaitsForItsInstanceToBeFree(t *testing.T) {
	t.Parallel()
	c, regAddr := serveAt(t, sqliteStore(t), etcdtest.Client(t), registry.Config{})
	const app = "restarting-app"
	ensureGroup(t, c, app)
	old, err := rawRegistration(t, regAddr, app, agentToken, &registryv1.Executor{AppName: app, InstanceId: "i1", Address: "127.0.0.1:51"})
	if err != nil {
		t.Fatal(err)
	}
	rec := logtest.New()
	e := newAgent(t, c, regAddr, app, "i1", func(c *sdk.Config) { c.Logger = rec.Logger() })
	started := make(chan error, 1)
	go func() { started <- e.Start(t.Context()) }()
	rec.Wait(t, 10*time.Second, "executor instance still registered by an earlier stream; waiting")
	if err := old.CloseSend(); err != nil { // the old registration ends
		t.Fatal(err)
	}
	if err := <-started; err != nil {
		t.Fatalf("Start while the instance was held, then freed: %v", err)
	}
	t.Cleanup(func() { sdktest.Stop(e) })
	waitAddresses(t, c, app, e.AdvertiseAddr())
}
