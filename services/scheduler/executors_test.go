package scheduler

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/etcdembed/etcdtest"
	"github.com/jobmesh/jobmesh/internal/grpcserver"
	"github.com/jobmesh/jobmesh/internal/seal"
	"github.com/jobmesh/jobmesh/services/registry"
)

// TestRouteViewFollowsTheRegistry runs the scheduler's executor view against a real registry on
// the package's etcd: it routes over the distinct addresses of the online executors (two
// instances may share one), drops an address only when its last instance leaves, and after the
// registry has been away it reconnects and takes a fresh snapshot, so changes made meanwhile
// are not missed.
func TestRouteViewFollowsTheRegistry(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Client(t)
	d := dbtest.Open(t, db.Config{DataDir: t.TempDir()}, "registry", registry.MigrationsFS())
	reg, err := registry.New(registry.Config{SealSecret: viewSealSecret}, d, etcdtest.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	serve := func(ln net.Listener) *grpc.Server {
		g := grpcserver.New(nil)
		reg.Register(g)
		go g.Serve(ln)
		return g
	}
	g := serve(ln)
	t.Cleanup(func() { g.Stop() })
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	rc := registryv1.NewRegistryServiceClient(conn)

	const app = "view-app"
	cr, err := rc.CreateExecutorGroup(t.Context(), &registryv1.CreateExecutorGroupRequest{Group: &registryv1.ExecutorGroup{AppName: app, Title: "view"}})
	if err != nil {
		t.Fatalf("create group: %v", err)
	}
	gid := cr.Group.Id
	v := newRouteView(rc, slog.New(slog.DiscardHandler), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); v.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	waitAddrs := func(want ...string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, _, err := v.addresses(t.Context(), gid)
			if err == nil && slices.Equal(got, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("route addresses = %v (%v), want %v within 30s", got, err, want)
			}
			select {
			case <-time.After(20 * time.Millisecond): // the view follows a stream
			case <-t.Context().Done():
			}
		}
	}

	a := put(t, cli, app, "a", "127.0.0.1:7301")
	b := put(t, cli, app, "b", "127.0.0.1:7301") // a second instance behind the same address
	c := put(t, cli, app, "c", "127.0.0.1:7302")
	put(t, cli, "other-app", "x", "127.0.0.1:7399")
	waitAddrs("127.0.0.1:7301", "127.0.0.1:7302")
	revoke(t, cli, a)
	revoke(t, cli, c)
	waitAddrs("127.0.0.1:7301") // b still serves it

	// The registry goes away; meanwhile b leaves and d joins.
	g.Stop()
	revoke(t, cli, b)
	put(t, cli, app, "d", "127.0.0.1:7303")
	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen again on %s: %v", addr, err)
	}
	g = serve(ln2)
	waitAddrs("127.0.0.1:7303")
}

// put registers an executor key under a fresh lease and returns the lease.
func put(t *testing.T, cli *clientv3.Client, app, inst, addr string) clientv3.LeaseID {
	t.Helper()
	lease, err := cli.Grant(t.Context(), 30)
	if err != nil {
		t.Fatalf("grant: %v", err)
	}
	key, val, err := registry.Registration(viewSealSecret, &registryv1.Executor{AppName: app, InstanceId: inst, Address: addr}, lease.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(t.Context(), key, val, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatalf("put: %v", err)
	}
	t.Cleanup(func() { cli.Revoke(context.Background(), lease.ID) })
	return lease.ID
}

func revoke(t *testing.T, cli *clientv3.Client, id clientv3.LeaseID) {
	t.Helper()
	if _, err := cli.Revoke(t.Context(), id); err != nil {
		t.Fatalf("revoke: %v", err)
	}
}

// viewSealSecret seals the registrations of TestRouteViewFollowsTheRegistry's registry.
const viewSealSecret = "route-view-test-seal-secret-0123456789"

// TestRouteViewRoutesOnlyTheGroupsToken: a group routes over, and presents its token to, only
// the executors that registered with its token now (their credential is its fingerprint): an
// executor that registered with a token the group has since rotated away from gets neither.
func TestRouteViewRoutesOnlyTheGroupsToken(t *testing.T) {
	t.Parallel()
	key := seal.New("route-view-credential-secret-0123456789", seal.Credential)
	v := newRouteView(nil, slog.New(slog.DiscardHandler), key)
	const app = "rotating"
	v.apply(&registryv1.WatchExecutorsResponse{Type: registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_SNAPSHOT, Executors: []*registryv1.Executor{
		{AppName: app, InstanceId: "old", Address: "127.0.0.1:7401", Credential: key.Sum("old token")},
		{AppName: app, InstanceId: "new", Address: "127.0.0.1:7402", Credential: key.Sum("new token")},
		{AppName: app, InstanceId: "none", Address: "127.0.0.1:7403"},
	}})
	g := &registryv1.ExecutorGroup{Id: 9, AppName: app, AddressType: registryv1.AddressType_ADDRESS_TYPE_AUTO, AccessToken: "new token"}
	v.groups[9] = groupEntry{g: g, cred: v.credOfToken(g.AccessToken), fetched: time.Now()}
	addrs, tok, err := v.addresses(t.Context(), 9)
	if err != nil || !slices.Equal(addrs, []string{"127.0.0.1:7402"}) || tok != "new token" {
		t.Fatalf("addresses = %v %q %v, want only the executor of the group's token now", addrs, tok, err)
	}
	for addr, want := range map[string]string{"127.0.0.1:7401": "", "127.0.0.1:7402": "new token", "127.0.0.1:7403": ""} {
		if got := v.tokenFor(t.Context(), 9, addr); got != want {
			t.Errorf("tokenFor(%s) = %q, want %q", addr, got, want)
		}
	}
}
