package registry_test

import (
	"io"
	"net"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/etcdembed"
	"github.com/jobmesh/jobmesh/internal/etcdembed/etcdtest"
)

// TestWatchSurvivesABrokenConnection cuts every connection between the registry and etcd,
// changes the registrations meanwhile (one executor leaves, one joins), and restores the
// connection. The view must end up exact: resuming from the last revision replays the missed
// delete and put. With compact, etcd's history is compacted past that revision during the cut,
// so the registry cannot resume and must list the prefix again, which its subscribers see as a
// fresh snapshot.
func TestWatchSurvivesABrokenConnection(t *testing.T) {
	t.Parallel()
	for _, compact := range []bool{false, true} {
		name := "resume"
		if compact {
			name = "compacted"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			direct := etcdtest.Client(t)
			if compact {
				// Compaction is global: on the shared server it would break other tests' watches.
				direct = privateEtcd(t, "127.0.0.1:0").client(t)
			}
			px := newProxy(t, direct.Endpoints()[0])
			viaProxy, err := clientv3.New(clientv3.Config{Endpoints: []string{px.addr()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { viaProxy.Close() })
			c := serveWith(t, dbtest.Store{Name: "sqlite", Config: db.Config{DataDir: t.TempDir()}}, viaProxy, nil)
			ctx := t.Context()
			app := "watch-" + name

			leaseA := register(t, direct, app, "a", "127.0.0.1:7101")
			register(t, direct, app, "b", "127.0.0.1:7102")
			waitAddresses(t, c, app, "127.0.0.1:7101", "127.0.0.1:7102")
			st, err := c.WatchExecutors(ctx, &registryv1.WatchExecutorsRequest{AppName: app})
			if err != nil {
				t.Fatalf("watch: %v", err)
			}
			recvWithin(t, st) // the snapshot of a and b

			px.cut()
			if _, err := direct.Revoke(ctx, leaseA); err != nil {
				t.Fatalf("revoke: %v", err)
			}
			register(t, direct, app, "c", "127.0.0.1:7103")
			if compact {
				resp, err := direct.Get(ctx, "compact-marker")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := direct.Compact(ctx, resp.Header.Revision); err != nil {
					t.Fatalf("compact: %v", err)
				}
			}
			// Nothing can have reached the registry through the cut connection.
			if got := addresses(t, c, app); !slices.Equal(got, []string{"127.0.0.1:7101", "127.0.0.1:7102"}) {
				t.Fatalf("addresses during the cut = %v, want the view as before it", got)
			}
			px.restore()
			waitAddresses(t, c, app, "127.0.0.1:7102", "127.0.0.1:7103")

			// The stream that was open through the cut reaches the same view.
			seen := map[string]bool{"127.0.0.1:7101": true, "127.0.0.1:7102": true}
			snapshot := false
			for !(len(seen) == 2 && seen["127.0.0.1:7102"] && seen["127.0.0.1:7103"]) {
				ev := recvWithin(t, st)
				switch ev.Type {
				case registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_SNAPSHOT:
					snapshot = true
					clear(seen)
					fallthrough
				case registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_PUT:
					for _, e := range ev.Executors {
						seen[e.Address] = true
					}
				case registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_DELETE:
					for _, e := range ev.Executors {
						delete(seen, e.Address)
					}
				}
			}
			if compact && !snapshot {
				t.Error("after a compaction the subscriber got no fresh snapshot, want one from the new listing")
			}
		})
	}
}

// etcdServer is an embedded etcd of one test, for what the shared one must not suffer:
// compaction, restarts.
type etcdServer struct {
	dir, addr string
	s         *etcdembed.Server
}

// privateEtcd starts an etcd for this test only, listening on addr, and stops it when the test ends.
func privateEtcd(t *testing.T, addr string) *etcdServer {
	t.Helper()
	e := &etcdServer{dir: t.TempDir(), addr: addr}
	e.start(t)
	t.Cleanup(func() { e.s.Close() })
	return e
}

// start starts (or restarts) the server on its data directory and address.
func (e *etcdServer) start(t *testing.T) {
	t.Helper()
	s, err := etcdembed.Start(t.Context(), etcdembed.Config{Dir: e.dir, ClientAddr: e.addr, Unsafe: true})
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	e.s = s
	if u, err := urlHost(s.Endpoint()); err == nil {
		e.addr = u // a restart comes back on the same port
	}
}

// client returns a client of the server, closed when the test ends (before the server).
func (e *etcdServer) client(t *testing.T) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + e.addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// addresses returns the addresses of app's online executors as ListExecutors reports them.
func addresses(t *testing.T, c registryv1.RegistryServiceClient, app string) []string {
	t.Helper()
	resp, err := c.ListExecutors(t.Context(), &registryv1.ListExecutorsRequest{AppName: app})
	if err != nil {
		t.Fatalf("ListExecutors: %v", err)
	}
	var out []string
	for _, e := range resp.Executors {
		out = append(out, e.Address)
	}
	return out
}

// waitAddresses polls ListExecutors until app's addresses are exactly want (sorted), for at most
// 30 s: the view follows etcd asynchronously, and a reconnect may wait out a dial backoff.
func waitAddresses(t *testing.T, c registryv1.RegistryServiceClient, app string, want ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := addresses(t, c, app)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("addresses of %s = %v, want %v within 30s", app, got, want)
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-t.Context().Done():
		}
	}
}

// proxy is a TCP proxy in front of etcd whose connections the test can cut. While cut, it closes
// every open connection and holds new ones unanswered until restored, so clients reconnect the
// moment it is restored instead of backing off.
type proxy struct {
	ln     net.Listener
	target string

	mu       sync.Mutex
	up       chan struct{} // closed while the proxy passes traffic
	conns    map[net.Conn]struct{}
	stopping bool
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	if u, err := urlHost(target); err == nil {
		target = u
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, up: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.up)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		p.mu.Lock()
		p.stopping = true
		select {
		case <-p.up:
		default:
			close(p.up)
		}
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	})
	return p
}

func (p *proxy) addr() string { return "http://" + p.ln.Addr().String() }

// track remembers c so cut can close it; it refuses (and closes) c once the proxy is stopping.
func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopping {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) serve(in net.Conn) {
	if !p.track(in) {
		return
	}
	p.mu.Lock()
	up := p.up
	p.mu.Unlock()
	<-up
	out, err := net.Dial("tcp", p.target)
	if err != nil {
		in.Close()
		return
	}
	if !p.track(out) {
		in.Close()
		return
	}
	go func() { io.Copy(out, in); out.Close() }()
	io.Copy(in, out)
	in.Close()
}

// cut closes every connection and holds new ones until restore.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up = make(chan struct{})
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// restore lets traffic through again, including the connections held while cut.
func (p *proxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.up)
}

// urlHost turns "http://host:port" into "host:port".
func urlHost(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", err
	}
	return u.Host, nil
}
