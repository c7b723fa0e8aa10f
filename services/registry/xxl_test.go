package registry_test

import (
	"context"
	"net"
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

// serviceKey marks a test's calls as a jobmesh service's (the guard's internal caller), which
// the XXL-JOB registrations require; xxlRegistry's RevealTokens looks for it.
const serviceKey = "x-test-service"

// asService is ctx as a jobmesh service's call.
func asService(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, serviceKey, "1")
}

// xxlRegistry runs a registry on d and cli behind a real gRPC server and returns its client and a
// stop that ends both (also run at cleanup), so a test can start another on the same stores.
func xxlRegistry(t *testing.T, d *db.DB, cli *clientv3.Client, cfg registry.Config) (registryv1.RegistryServiceClient, func()) {
	t.Helper()
	cfg.SealSecret = testSecret
	cfg.RevealTokens = func(ctx context.Context) bool {
		md, _ := metadata.FromIncomingContext(ctx)
		return len(md.Get(serviceKey)) == 1
	}
	svc, err := registry.New(cfg, d, cli)
	if err != nil {
		t.Fatalf("registry.New: %v", err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	g := grpcserver.New(nil)
	svc.Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	stop := func() {
		conn.Close()
		g.Stop()
		svc.Stop()
	}
	t.Cleanup(stop)
	return registryv1.NewRegistryServiceClient(conn), stop
}

// xxlGroup creates an executor group of app as a service.
func xxlGroup(t *testing.T, c registryv1.RegistryServiceClient, app string, typ registryv1.AddressType, token string) {
	t.Helper()
	g := &registryv1.ExecutorGroup{AppName: app, Title: app, AddressType: typ, AccessToken: token}
	if typ == registryv1.AddressType_ADDRESS_TYPE_MANUAL {
		g.ManualAddresses = []string{"127.0.0.1:1"}
	}
	if _, err := c.CreateExecutorGroup(asService(t.Context()), &registryv1.CreateExecutorGroupRequest{Group: g}); err != nil {
		t.Fatalf("create group %s: %v", app, err)
	}
}

// leaseOf is the lease the key of app's executor inst lives under, and its remaining TTL in
// seconds (0, 0 when the key is gone).
func leaseOf(t *testing.T, cli *clientv3.Client, app, inst string) (clientv3.LeaseID, int64) {
	t.Helper()
	got, err := cli.Get(t.Context(), registry.KeyPrefix+app+"/"+inst)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) == 0 {
		return 0, 0
	}
	id := clientv3.LeaseID(got.Kvs[0].Lease)
	ttl, err := cli.TimeToLive(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return id, ttl.TTL
}

// TestXxlRegistrationLifecycle: an XXL-JOB executor's registration joins the live view with its
// kind and credential, a second call renews its lease instead of writing it again, silence for
// the dead time removes it, and registryRemove removes it at once.
func TestXxlRegistrationLifecycle(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Client(t)
	d := dbtest.Open(t, sqliteStore(t).Config, "registry", registry.MigrationsFS())
	c, _ := xxlRegistry(t, d, cli, registry.Config{XxlMinDeadTime: time.Second})
	ctx := asService(t.Context())
	const app = "xxl-life"
	xxlGroup(t, c, app, registryv1.AddressType_ADDRESS_TYPE_AUTO, "tok")
	watch, err := c.WatchExecutors(ctx, &registryv1.WatchExecutorsRequest{AppName: app})
	if err != nil {
		t.Fatal(err)
	}
	if ev := recvWithin(t, watch); ev.Type != registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_SNAPSHOT || len(ev.Executors) != 0 {
		t.Fatalf("first event = %v, want an empty snapshot", ev)
	}
	reg := &registryv1.RegisterXxlExecutorRequest{AppName: app, Address: "http://127.0.0.1:28081", DeadTimeSeconds: 3, AccessToken: "tok"}
	resp, err := c.RegisterXxlExecutor(ctx, reg)
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	e := resp.GetExecutor()
	if !resp.GetCreated() || e.GetKind() != registryv1.ExecutorKind_EXECUTOR_KIND_XXL_JOB || e.GetAddress() != "http://127.0.0.1:28081/" ||
		e.GetInstanceId() != "xxl-127.0.0.1:28081" || e.GetCredential() == "" || e.GetHoldsFires() {
		t.Fatalf("register = %v, want created, kind XXL_JOB, address with a trailing slash, instance xxl-127.0.0.1:28081, a credential, no held fires", resp)
	}
	ev := recvWithin(t, watch)
	if ev.Type != registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_PUT || len(ev.Executors) != 1 ||
		ev.Executors[0].GetKind() != registryv1.ExecutorKind_EXECUTOR_KIND_XXL_JOB || ev.Executors[0].GetCredential() != e.GetCredential() ||
		ev.Executors[0].GetAddress() != "http://127.0.0.1:28081/" {
		t.Fatalf("watch event = %v, want a PUT of the XXL-JOB executor with its credential", ev)
	}
	list, err := c.ListExecutors(ctx, &registryv1.ListExecutorsRequest{AppName: app})
	if err != nil || len(list.GetExecutors()) != 1 || list.Executors[0].GetKind() != registryv1.ExecutorKind_EXECUTOR_KIND_XXL_JOB {
		t.Fatalf("ListExecutors = %v, %v, want the XXL-JOB executor", list, err)
	}

	// Renewal: once the lease has run down, a call refreshes the same lease.
	lease, _ := leaseOf(t, cli, app, e.GetInstanceId())
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, ttl := leaseOf(t, cli, app, e.GetInstanceId()); ttl > 0 && ttl <= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the registration's lease did not run down within 10s")
		}
		pollPause(t)
	}
	again, err := c.RegisterXxlExecutor(ctx, reg)
	if err != nil || again.GetCreated() {
		t.Fatalf("second register = %v, %v, want a renewal (created false)", again, err)
	}
	if renewed, ttl := leaseOf(t, cli, app, e.GetInstanceId()); renewed != lease || ttl < 2 {
		t.Fatalf("after renewal: lease %x with %d s left, want the same lease %x refreshed to about 3 s", renewed, ttl, lease)
	}

	// Silence for the dead time: gone.
	if ev := recvWithin(t, watch); ev.Type != registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_DELETE {
		t.Fatalf("event after silence = %v, want a DELETE", ev)
	}
	if list, _ := c.ListExecutors(ctx, &registryv1.ListExecutorsRequest{AppName: app}); len(list.GetExecutors()) != 0 {
		t.Fatalf("ListExecutors after the dead time = %v, want none", list)
	}

	// Back, then registryRemove: gone at once (long before its dead time).
	reg.DeadTimeSeconds = 60
	if resp, err := c.RegisterXxlExecutor(ctx, reg); err != nil || !resp.GetCreated() {
		t.Fatalf("register after expiry = %v, %v, want created", resp, err)
	}
	if ev := recvWithin(t, watch); ev.Type != registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_PUT {
		t.Fatalf("event = %v, want a PUT", ev)
	}
	rm, err := c.RemoveXxlExecutor(ctx, &registryv1.RemoveXxlExecutorRequest{AppName: app, Address: "http://127.0.0.1:28081/"})
	if err != nil || !rm.GetRemoved() {
		t.Fatalf("remove = %v, %v, want removed", rm, err)
	}
	if ev := recvWithinOr(t, watch, 2*time.Second, ""); ev.Type != registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_DELETE {
		t.Fatalf("event after remove = %v, want a DELETE", ev)
	}
	if rm, err := c.RemoveXxlExecutor(ctx, &registryv1.RemoveXxlExecutorRequest{AppName: app, Address: "http://127.0.0.1:28081/"}); err != nil || rm.GetRemoved() {
		t.Fatalf("second remove = %v, %v, want removed false", rm, err)
	}
}

// pollPause waits a little between polls of a condition with a deadline.
func pollPause(t *testing.T) {
	select {
	case <-time.After(50 * time.Millisecond):
	case <-t.Context().Done():
	}
}

// TestXxlRegistrationSurvivesRegistryRestart: the registration lives in etcd, so a new registry
// on the same etcd and store shows it, and the executor's next call renews it there.
func TestXxlRegistrationSurvivesRegistryRestart(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Client(t)
	d := dbtest.Open(t, sqliteStore(t).Config, "registry", registry.MigrationsFS())
	c, stop := xxlRegistry(t, d, cli, registry.Config{})
	ctx := asService(t.Context())
	const app = "xxl-restart"
	xxlGroup(t, c, app, registryv1.AddressType_ADDRESS_TYPE_AUTO, "")
	reg := &registryv1.RegisterXxlExecutorRequest{AppName: app, Address: "http://10.0.0.5:9999/"}
	if resp, err := c.RegisterXxlExecutor(ctx, reg); err != nil || !resp.GetCreated() || resp.GetExecutor().GetCredential() != "" {
		t.Fatalf("register = %v, %v, want created with no credential (a group without a token)", resp, err)
	}
	lease, _ := leaseOf(t, cli, app, "xxl-10.0.0.5:9999")
	stop()

	c2, _ := xxlRegistry(t, d, etcdtest.Client(t), registry.Config{})
	list, err := c2.ListExecutors(ctx, &registryv1.ListExecutorsRequest{AppName: app})
	if err != nil || len(list.GetExecutors()) != 1 || list.Executors[0].GetAddress() != "http://10.0.0.5:9999/" {
		t.Fatalf("after restart ListExecutors = %v, %v, want the XXL-JOB executor", list, err)
	}
	resp, err := c2.RegisterXxlExecutor(ctx, reg)
	if err != nil || resp.GetCreated() {
		t.Fatalf("renew after restart = %v, %v, want created false", resp, err)
	}
	if got, ttl := leaseOf(t, cli, app, "xxl-10.0.0.5:9999"); got != lease || ttl < 80 {
		t.Fatalf("after renewal: lease %x with %d s left, want %x with about 90 s (the default dead time)", got, ttl, lease)
	}
}

// TestXxlRegistrationRefusals: bad input names its field, an unknown group is NotFound, only
// services register, an agent cannot claim the XXL-JOB kind, and nothing refused is stored.
func TestXxlRegistrationRefusals(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Client(t)
	d := dbtest.Open(t, sqliteStore(t).Config, "registry", registry.MigrationsFS())
	c, _ := xxlRegistry(t, d, cli, registry.Config{MaxExecutorsPerGroup: 1})
	ctx := asService(t.Context())
	const auto, manual = "xxl-refuse", "xxl-refuse-manual"
	xxlGroup(t, c, auto, registryv1.AddressType_ADDRESS_TYPE_AUTO, "")
	xxlGroup(t, c, manual, registryv1.AddressType_ADDRESS_TYPE_MANUAL, "")
	for _, tc := range []struct {
		name  string
		req   *registryv1.RegisterXxlExecutorRequest
		code  codes.Code
		field string
	}{
		{"unknown group", &registryv1.RegisterXxlExecutorRequest{AppName: "xxl-nosuch", Address: "http://h:1/"}, codes.NotFound, "xxl-nosuch"},
		{"manual group", &registryv1.RegisterXxlExecutorRequest{AppName: manual, Address: "http://h:1/"}, codes.InvalidArgument, "app_name"},
		{"bad app name", &registryv1.RegisterXxlExecutorRequest{AppName: "a b", Address: "http://h:1/"}, codes.InvalidArgument, "app_name"},
		{"no address", &registryv1.RegisterXxlExecutorRequest{AppName: auto}, codes.InvalidArgument, "address"},
		{"host:port", &registryv1.RegisterXxlExecutorRequest{AppName: auto, Address: "127.0.0.1:9999"}, codes.InvalidArgument, "address"},
		{"ftp", &registryv1.RegisterXxlExecutorRequest{AppName: auto, Address: "ftp://h:1/"}, codes.InvalidArgument, "address"},
		{"no host", &registryv1.RegisterXxlExecutorRequest{AppName: auto, Address: "http://:9999/"}, codes.InvalidArgument, "address"},
		{"port 0", &registryv1.RegisterXxlExecutorRequest{AppName: auto, Address: "http://h:0/"}, codes.InvalidArgument, "address"},
		{"user", &registryv1.RegisterXxlExecutorRequest{AppName: auto, Address: "http://u:p@h:1/"}, codes.InvalidArgument, "address"},
		{"query", &registryv1.RegisterXxlExecutorRequest{AppName: auto, Address: "http://h:1/?x=1"}, codes.InvalidArgument, "address"},
		{"fragment", &registryv1.RegisterXxlExecutorRequest{AppName: auto, Address: "http://h:1/#x"}, codes.InvalidArgument, "address"},
		{"no host", &registryv1.RegisterXxlExecutorRequest{AppName: auto, Address: "http://:1/"}, codes.InvalidArgument, "address"},
		{"long", &registryv1.RegisterXxlExecutorRequest{AppName: auto, Address: "http://h:1/" + strings.Repeat("a", 600)}, codes.InvalidArgument, "address"},
		{"short dead time", &registryv1.RegisterXxlExecutorRequest{AppName: auto, Address: "http://h:1/", DeadTimeSeconds: 5}, codes.InvalidArgument, "dead_time_seconds"},
		{"long dead time", &registryv1.RegisterXxlExecutorRequest{AppName: auto, Address: "http://h:1/", DeadTimeSeconds: 3601}, codes.InvalidArgument, "dead_time_seconds"},
	} {
		_, err := c.RegisterXxlExecutor(ctx, tc.req)
		if st := status.Convert(err); st.Code() != tc.code || !strings.Contains(st.Message(), tc.field) {
			t.Errorf("%s: got %v, want %v naming %s", tc.name, err, tc.code, tc.field)
		}
	}
	if _, err := c.RemoveXxlExecutor(ctx, &registryv1.RemoveXxlExecutorRequest{AppName: auto, Address: "h:1"}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "address") {
		t.Errorf("remove with a bad address: %v, want InvalidArgument naming address", err)
	}
	// Only services: the gateway has checked the executor's token; nobody else may vouch for one.
	if _, err := c.RegisterXxlExecutor(t.Context(), &registryv1.RegisterXxlExecutorRequest{AppName: auto, Address: "http://h:1/"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("register by a non-service: %v, want PermissionDenied", err)
	}
	if _, err := c.RemoveXxlExecutor(t.Context(), &registryv1.RemoveXxlExecutorRequest{AppName: auto, Address: "http://h:1/"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("remove by a non-service: %v, want PermissionDenied", err)
	}
	// The group's bound holds for XXL-JOB executors too.
	if _, err := c.RegisterXxlExecutor(ctx, &registryv1.RegisterXxlExecutorRequest{AppName: auto, Address: "http://h:1/"}); err != nil {
		t.Fatalf("first executor: %v", err)
	}
	waitAddresses(t, c, auto, "http://h:1/")
	if _, err := c.RegisterXxlExecutor(ctx, &registryv1.RegisterXxlExecutorRequest{AppName: auto, Address: "http://h:2/"}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("second executor over a bound of 1: %v, want ResourceExhausted", err)
	}
	// An agent (RegisterExecutor) cannot pass for an XXL-JOB executor.
	st, err := c.RegisterExecutor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&registryv1.RegisterExecutorRequest{Executor: &registryv1.Executor{AppName: auto, InstanceId: "a1", Address: "127.0.0.1:1",
		Kind: registryv1.ExecutorKind_EXECUTOR_KIND_XXL_JOB}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "executor.kind") {
		t.Errorf("agent registration claiming kind XXL_JOB: %v, want InvalidArgument naming executor.kind", err)
	}
	for _, app := range []string{"xxl-nosuch/", manual + "/", "a b/"} {
		resp, err := cli.Get(t.Context(), registry.KeyPrefix+app, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || resp.Count != 0 {
			t.Errorf("keys under %s after refused registrations: %d %v, want none", app, resp.Count, err)
		}
	}
	if resp, _ := cli.Get(t.Context(), registry.KeyPrefix+auto+"/", clientv3.WithPrefix(), clientv3.WithCountOnly()); resp.Count != 1 {
		t.Errorf("keys under %s: %d, want only the one accepted", auto, resp.Count)
	}
}

func TestXxlAddress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, addr, inst string }{
		{"http://10.0.0.5:9999", "http://10.0.0.5:9999/", "xxl-10.0.0.5:9999"},
		{"http://10.0.0.5:9999/", "http://10.0.0.5:9999/", "xxl-10.0.0.5:9999"},
		{"http://exec.example:80/", "http://exec.example:80/", "xxl-exec.example:80"},
		{"https://exec.example:443/xxl", "https://exec.example:443/xxl/", ""},
		{"http://[::1]:9999/", "http://[::1]:9999/", ""},
	} {
		addr, inst, err := registry.XxlAddress(tc.in)
		if err != nil || addr != tc.addr || (tc.inst != "" && inst != tc.inst) || !strings.HasPrefix(inst, "xxl-") || len(inst) > 128 {
			t.Errorf("XxlAddress(%q) = %q, %q, %v; want %q, %q", tc.in, addr, inst, err, tc.addr, tc.inst)
		}
	}
	// Distinct addresses get distinct instance ids, so they are distinct executors.
	_, a, _ := registry.XxlAddress("https://exec.example:443/a/")
	_, b, _ := registry.XxlAddress("https://exec.example:443/b/")
	if a == b {
		t.Errorf("two addresses share the instance id %q", a)
	}
}
