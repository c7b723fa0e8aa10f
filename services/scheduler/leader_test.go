package scheduler_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/namespace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/etcdembed/etcdtest"
	"github.com/jobmesh/jobmesh/internal/grpcserver"
	"github.com/jobmesh/jobmesh/services/logsvc"
	"github.com/jobmesh/jobmesh/services/registry"
	"github.com/jobmesh/jobmesh/services/scheduler"
)

func TestMain(m *testing.M) { os.Exit(etcdtest.Main(m)) }

// serveGRPC serves register on loopback and returns a connection to it.
func serveGRPC(t *testing.T, register func(*grpc.Server)) *grpc.ClientConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, ln, register)
	c, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// serveOn serves register on ln until the test ends, or the returned server is stopped.
func serveOn(t *testing.T, ln net.Listener, register func(*grpc.Server)) *grpc.Server {
	t.Helper()
	g := grpcserver.New(nil)
	register(g)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return g
}

// cluster is the scheduler's world: a real registry and logsvc, one shared scheduler store.
type cluster struct {
	ns                string // the etcd namespace of its schedulers
	store             *db.DB
	regConn, logsConn *grpc.ClientConn
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	sqlite := func() db.Config { return db.Config{DataDir: t.TempDir()} }
	cli := etcdtest.Client(t)
	// The schedulers are the registry's only callers here: they read groups' access tokens in clear.
	reveal := func(context.Context) bool { return true }
	// They also register the tests' executors (RegisterExecutor), as services may.
	reg, err := registry.New(registry.Config{RevealTokens: reveal, SealSecret: testSealSecret}, dbtest.Open(t, sqlite(), "registry", registry.MigrationsFS()), cli)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	logs, err := logsvc.New(logsvc.Config{}, dbtest.Open(t, sqlite(), "logs", logsvc.MigrationsFS()), noKill{})
	if err != nil {
		t.Fatal(err)
	}
	if err := logs.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(logs.Stop)
	return &cluster{
		ns:       fmt.Sprintf("/test-%d-%s/", time.Now().UnixNano(), t.Name()),
		store:    dbtest.Open(t, db.Config{URL: dbtest.NewPostgres(t)}, "scheduler", scheduler.MigrationsFS()),
		regConn:  serveGRPC(t, reg.Register),
		logsConn: serveGRPC(t, logs.Register),
	}
}

// replica starts one scheduler replica of the cluster.
func (c *cluster) replica(t *testing.T, id string) *scheduler.Service {
	t.Helper()
	return c.replicaWith(t, scheduler.Config{ReplicaID: id})
}

// replicaWith starts a scheduler replica of the cluster with cfg (a 1 s session TTL unless set).
func (c *cluster) replicaWith(t *testing.T, cfg scheduler.Config) *scheduler.Service {
	t.Helper()
	return c.replicaIngesting(t, cfg, c.logsConn)
}

// replicaIngesting starts a scheduler replica as replicaWith does, whose trigger records go
// through ingest.
func (c *cluster) replicaIngesting(t *testing.T, cfg scheduler.Config, ingest *grpc.ClientConn) *scheduler.Service {
	t.Helper()
	return c.replicaOf(t, cfg, ingest, logsv1.NewLogServiceClient(c.logsConn))
}

// replicaOf starts a scheduler replica as replicaWith does, whose trigger records go through
// ingest and which asks logs for the rest of what logsvc answers.
func (c *cluster) replicaOf(t *testing.T, cfg scheduler.Config, ingest *grpc.ClientConn, logs logsv1.LogServiceClient) *scheduler.Service {
	t.Helper()
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = time.Second
	}
	if cfg.Partitions == 0 {
		cfg.Partitions = 1 // one leader at a time, unless a test asks for more partitions
	}
	cli := etcdtest.Client(t)
	// The package's tests share one etcd: each cluster campaigns in a namespace of its own.
	cli.KV, cli.Watcher, cli.Lease = namespace.NewKV(cli.KV, c.ns), namespace.NewWatcher(cli.Watcher, c.ns), namespace.NewLease(cli.Lease, c.ns)
	s, err := scheduler.New(cfg, scheduler.Deps{
		Store: c.store, Etcd: cli, Registry: registryv1.NewRegistryServiceClient(c.regConn),
		Ingest: logsv1.NewIngestServiceClient(ingest), Logs: logs,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// testSealSecret seals the registrations of the tests' registries.
const testSealSecret = "scheduler-test-seal-secret-0123456789"

type noKill struct{}

func (noKill) KillTrigger(context.Context, string, int64, string) (bool, string, error) {
	return false, "no scheduler in this test", nil
}

// waitLeader waits until exactly one of the replicas says it leads and returns it.
func waitLeader(t *testing.T, rs ...*scheduler.Service) (*scheduler.Service, *schedulerv1.GetStatusResponse) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var lead *scheduler.Service
		var st *schedulerv1.GetStatusResponse
		n := 0
		for _, r := range rs {
			s, err := r.GetStatus(t.Context(), &schedulerv1.GetStatusRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if s.Leader {
				lead, st, n = r, s, n+1
			}
		}
		if n > 1 {
			t.Fatalf("%d replicas lead at once", n)
		}
		if n == 1 {
			return lead, st
		}
		select {
		case <-deadline:
			t.Fatal("no leader within 15s")
		case <-tick.C:
		}
	}
}

// TestOneLeaderAndTakeover: two replicas, one leads; when it stops (resigns), the other takes
// over with a higher epoch, which fences the old one's writes.
func TestOneLeaderAndTakeover(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	a, b := c.replica(t, "a"), c.replica(t, "b")
	first, st1 := waitLeader(t, a, b)
	other := b
	if first == b {
		other = a
	}
	first.Stop()
	_, st2 := waitLeader(t, other)
	if st2.Epoch <= st1.Epoch {
		t.Errorf("new leader's epoch %d, want more than the old leader's %d", st2.Epoch, st1.Epoch)
	}
	if st2.ReplicaId == st1.ReplicaId {
		t.Errorf("leader %s again, want the other replica", st2.ReplicaId)
	}
	// The new leader raises the fence in its first pre-read.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var epoch int64
		var holder string
		if err := c.store.QueryRowContext(t.Context(), `SELECT epoch, holder FROM partition_fence WHERE part = 0`).Scan(&epoch, &holder); err != nil {
			t.Fatal(err)
		}
		if epoch == st2.Epoch && holder == st2.ReplicaId {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fence = epoch %d held by %q, want %d held by %q", epoch, holder, st2.Epoch, st2.ReplicaId)
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-t.Context().Done():
		}
	}
}
