package registry_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/etcdembed/etcdtest"
	"github.com/jobmesh/jobmesh/internal/grpcserver"
	"github.com/jobmesh/jobmesh/services/registry"
)

// etcd is one embedded server for the package: each data dir costs about 123 MiB of disk.
func TestMain(m *testing.M) { os.Exit(etcdtest.Main(m)) }

// serve runs a registry on a real gRPC server over loopback and returns a client of it.
func serve(t *testing.T, store dbtest.Store) registryv1.RegistryServiceClient {
	t.Helper()
	return serveWith(t, store, etcdtest.Client(t), nil)
}

// serveWith is serve with the registry's own etcd client and logger (nil discards logs).
func serveWith(t *testing.T, store dbtest.Store, cli *clientv3.Client, log *slog.Logger) registryv1.RegistryServiceClient {
	t.Helper()
	return serveConfig(t, store, cli, registry.Config{Logger: log})
}

// serveConfig is serveWith with the whole registry configuration.
func serveConfig(t *testing.T, store dbtest.Store, cli *clientv3.Client, cfg registry.Config) registryv1.RegistryServiceClient {
	t.Helper()
	c, _ := serveAt(t, store, cli, cfg)
	return c
}

// testSecret seals the registrations of the tests' registries (Config.SealSecret).
const testSecret = "registry-test-secret-0123456789abcdef"

// executorByHeader stands in for the guard (auth.ExecutorOf), which the tests of the registry
// alone do not run: a call naming an executor app in its metadata comes from that app's
// executor. The guard's check of the group's token is tested with the guard.
func executorByHeader(ctx context.Context) (int64, string, bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-jobmesh-executor-app"); len(v) == 1 {
		return 1, v[0], true
	}
	return 0, "", false
}

// serveAt is serveConfig that also returns the registry's address. Unset, the configuration's
// SealSecret is testSecret and its Executor executorByHeader.
func serveAt(t *testing.T, store dbtest.Store, cli *clientv3.Client, cfg registry.Config) (registryv1.RegistryServiceClient, string) {
	t.Helper()
	if cfg.SealSecret == "" {
		cfg.SealSecret = testSecret
	}
	if cfg.Executor == nil {
		cfg.Executor = executorByHeader
	}
	d := dbtest.Open(t, store.Config, "registry", registry.MigrationsFS())
	svc, err := registry.New(cfg, d, cli)
	if err != nil {
		t.Fatalf("registry.New: %v", err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(svc.Stop)
	g := grpcserver.New(nil)
	svc.Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return registryv1.NewRegistryServiceClient(conn), ln.Addr().String()
}

// register puts an executor key under a fresh lease and returns the lease.
func register(t *testing.T, cli *clientv3.Client, app, inst, addr string) clientv3.LeaseID {
	t.Helper()
	ctx := context.Background()
	lease, err := cli.Grant(ctx, 10)
	if err != nil {
		t.Fatalf("grant: %v", err)
	}
	key, val, err := registry.Registration(testSecret, &registryv1.Executor{AppName: app, InstanceId: inst, Address: addr, Version: "test", Capacity: 5}, lease.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, key, val, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatalf("put: %v", err)
	}
	return lease.ID
}

func recvWithin(t *testing.T, st grpc.ServerStreamingClient[registryv1.WatchExecutorsResponse]) *registryv1.WatchExecutorsResponse {
	t.Helper()
	return recvWithinOr(t, st, 10*time.Second, "")
}

// recvWithinOr is recvWithin with its own bound; on failure it shows the file at logPath, if any.
func recvWithinOr(t *testing.T, st grpc.ServerStreamingClient[registryv1.WatchExecutorsResponse], d time.Duration, logPath string) *registryv1.WatchExecutorsResponse {
	t.Helper()
	logs := func() string {
		if logPath == "" {
			return ""
		}
		b, _ := os.ReadFile(logPath)
		return "\n" + logPath + ":\n" + string(b)
	}
	type res struct {
		ev  *registryv1.WatchExecutorsResponse
		err error
	}
	ch := make(chan res, 1)
	go func() { ev, err := st.Recv(); ch <- res{ev, err} }()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("watch recv: %v%s", r.err, logs())
		}
		return r.ev
	case <-time.After(d):
		t.Fatalf("no watch event within %v%s", d, logs())
		return nil
	}
}

func TestLiveView(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Client(t)
	c := serve(t, dbtest.Store{Name: "sqlite", Config: db.Config{DataDir: t.TempDir()}})
	ctx := context.Background()
	app := "app-live-" + t.Name()

	st, err := c.WatchExecutors(ctx, &registryv1.WatchExecutorsRequest{AppName: app})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	if ev := recvWithin(t, st); ev.Type != registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_SNAPSHOT || len(ev.Executors) != 0 {
		t.Fatalf("first event = %v, want an empty snapshot", ev)
	}
	lease := register(t, cli, app, "i1", "127.0.0.1:7001")
	ev := recvWithin(t, st)
	if ev.Type != registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_PUT || len(ev.Executors) != 1 || ev.Executors[0].Address != "127.0.0.1:7001" || ev.Executors[0].InstanceId != "i1" {
		t.Fatalf("event = %v, want PUT of i1 at 127.0.0.1:7001", ev)
	}
	list, err := c.ListExecutors(ctx, &registryv1.ListExecutorsRequest{AppName: app})
	if err != nil || len(list.Executors) != 1 {
		t.Fatalf("ListExecutors = %v, %v, want 1 executor", list, err)
	}
	// A revoked lease (graceful stop) leaves the view at once.
	if _, err := cli.Revoke(ctx, lease); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	ev = recvWithin(t, st)
	if ev.Type != registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_DELETE || len(ev.Executors) != 1 {
		t.Fatalf("event = %v, want DELETE of i1", ev)
	}
}

func TestGroups(t *testing.T) {
	t.Parallel()
	for _, store := range dbtest.Stores(t) {
		t.Run(store.Name, func(t *testing.T) {
			t.Parallel()
			cli := etcdtest.Client(t)
			c := serve(t, store)
			ctx := context.Background()
			app := "grp-" + store.Name
			cr, err := c.CreateExecutorGroup(ctx, &registryv1.CreateExecutorGroupRequest{Group: &registryv1.ExecutorGroup{AppName: app, Title: "Group"}})
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			if cr.Group.Id == 0 || cr.Group.AddressType != registryv1.AddressType_ADDRESS_TYPE_AUTO {
				t.Errorf("created = %v, want an id and AUTO", cr.Group)
			}
			_, err = c.CreateExecutorGroup(ctx, &registryv1.CreateExecutorGroupRequest{Group: &registryv1.ExecutorGroup{AppName: app, Title: "Again"}})
			if status.Code(err) != codes.AlreadyExists {
				t.Errorf("duplicate app name: err = %v, want AlreadyExists", err)
			}
			register(t, cli, app, "a", "127.0.0.1:7002")
			register(t, cli, app, "b", "127.0.0.1:7001")
			// The view catches up through the watch; poll the group until both show.
			deadline := time.Now().Add(10 * time.Second)
			for {
				g, err := c.GetExecutorGroup(ctx, &registryv1.GetExecutorGroupRequest{Id: cr.Group.Id})
				if err != nil {
					t.Fatalf("get: %v", err)
				}
				if len(g.Group.Addresses) == 2 {
					if g.Group.Addresses[0] != "127.0.0.1:7001" {
						t.Errorf("addresses = %v, want sorted", g.Group.Addresses)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("addresses = %v, want 2 within 10s", g.Group.Addresses)
				}
				select {
				case <-time.After(20 * time.Millisecond): // the watch applies asynchronously
				case <-ctx.Done():
				}
			}
			up, err := c.UpdateExecutorGroup(ctx, &registryv1.UpdateExecutorGroupRequest{Group: &registryv1.ExecutorGroup{
				Id: cr.Group.Id, AppName: app, Title: "Manual", AddressType: registryv1.AddressType_ADDRESS_TYPE_MANUAL,
				ManualAddresses: []string{"10.0.0.2:9999", "10.0.0.1:9999"},
			}})
			if err != nil {
				t.Fatalf("update: %v", err)
			}
			if got := up.Group.Addresses; len(got) != 2 || got[0] != "10.0.0.1:9999" {
				t.Errorf("manual addresses = %v, want the sorted manual list", got)
			}
			if _, err := c.DeleteExecutorGroup(ctx, &registryv1.DeleteExecutorGroupRequest{Id: cr.Group.Id}); err != nil {
				t.Fatalf("delete: %v", err)
			}
			if _, err := c.GetExecutorGroup(ctx, &registryv1.GetExecutorGroupRequest{Id: cr.Group.Id}); status.Code(err) != codes.NotFound {
				t.Errorf("get after delete: err = %v, want NotFound", err)
			}
		})
	}
}

func TestGroupValidationNamesTheField(t *testing.T) {
	t.Parallel()
	c := serve(t, dbtest.Store{Name: "sqlite", Config: db.Config{DataDir: t.TempDir()}})
	tests := []struct {
		g     *registryv1.ExecutorGroup
		field string
	}{
		{&registryv1.ExecutorGroup{AppName: "bad app", Title: "t"}, "app_name"},
		{&registryv1.ExecutorGroup{AppName: "ok", Title: ""}, "title"},
		{&registryv1.ExecutorGroup{AppName: "ok", Title: "t", AddressType: registryv1.AddressType_ADDRESS_TYPE_MANUAL}, "manual_addresses"},
		{&registryv1.ExecutorGroup{AppName: "ok", Title: "t", AddressType: registryv1.AddressType_ADDRESS_TYPE_MANUAL, ManualAddresses: []string{"nohost"}}, "manual_addresses[0]"},
		{&registryv1.ExecutorGroup{AppName: "ok", Title: "t", AddressType: 9}, "address_type"},
		// Not host:port, though the parts split: a space, a path, a sign, a scheme.
		{&registryv1.ExecutorGroup{AppName: "ok", Title: "t", AddressType: registryv1.AddressType_ADDRESS_TYPE_MANUAL, ManualAddresses: []string{"h:1", "not an address:80"}}, "manual_addresses[1]"},
		{&registryv1.ExecutorGroup{AppName: "ok", Title: "t", AddressType: registryv1.AddressType_ADDRESS_TYPE_MANUAL, ManualAddresses: []string{"evil/path:80"}}, "manual_addresses[0]"},
		{&registryv1.ExecutorGroup{AppName: "ok", Title: "t", AddressType: registryv1.AddressType_ADDRESS_TYPE_MANUAL, ManualAddresses: []string{"h:+80"}}, "manual_addresses[0]"},
		{&registryv1.ExecutorGroup{AppName: "ok", Title: "t", AddressType: registryv1.AddressType_ADDRESS_TYPE_MANUAL, ManualAddresses: []string{"h:1", "h:2", "h:1"}}, "manual_addresses[2]"},
	}
	for _, tt := range tests {
		_, err := c.CreateExecutorGroup(context.Background(), &registryv1.CreateExecutorGroupRequest{Group: tt.g})
		st, _ := status.FromError(err)
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tt.field) {
			t.Errorf("create %v: err = %v, want InvalidArgument naming %s", tt.g, err, tt.field)
		}
	}
}
