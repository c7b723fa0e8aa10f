package partition_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobmesh/jobmesh/services/scheduler/internal/partition"
)

// stopper is a Config.PeerStopped the test drives: a watch of addr returns once the test calls
// stop(addr). It counts the watches of each address that are running.
type stopper struct {
	mu       sync.Mutex
	stopped  map[string]chan struct{}
	watching map[string]int
}

func newStopper() *stopper {
	return &stopper{stopped: map[string]chan struct{}{}, watching: map[string]int{}}
}

func (s *stopper) ch(addr string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped[addr] == nil {
		s.stopped[addr] = make(chan struct{})
	}
	return s.stopped[addr]
}

func (s *stopper) watch(ctx context.Context, _, addr string) error {
	ch := s.ch(addr)
	s.mu.Lock()
	s.watching[addr]++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.watching[addr]--
		s.mu.Unlock()
	}()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *stopper) stop(addr string) { close(s.ch(addr)) }

func (s *stopper) watches(addr string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watching[addr]
}

// TestStoppedPeerIsRevoked: a replica whose process is gone (its etcd client closed, its keys
// left under a 60 s lease) loses its session as soon as a peer sees it stopped, and the peer
// takes its partitions over, long before the lease would expire.
func TestStoppedPeerIsRevoked(t *testing.T) {
	t.Parallel()
	tr := newTracker(t)
	prefix := "/test/" + t.Name()
	st := newStopper()
	a := startWith(t, tr, prefix, "a", 4, func(c *partition.Config) { c.Address, c.PeerStopped = "a:1", st.watch })
	// a first, so that b (whose leads are young for two of its TTLs) gets its share from a.
	eventually(t, 10*time.Second, "a leads all", balanced(tr, 4, 4, 4, a))
	b := startWith(t, tr, prefix, "b", 4, func(c *partition.Config) { c.Address, c.SessionTTL = "b:1", time.Minute })
	eventually(t, 10*time.Second, "a and b share", balanced(tr, 4, 2, 2, a, b))
	eventually(t, 10*time.Second, "a watches b", func() string {
		if n := st.watches("b:1"); n != 1 {
			return fmt.Sprintf("%d watches of b:1", n)
		}
		return ""
	})
	if n := st.watches("a:1"); n != 0 {
		t.Errorf("a watches itself (%d)", n)
	}
	// b dies: no keep-alives, nothing deleted, nothing revoked.
	if err := b.cli.Close(); err != nil {
		t.Fatal(err)
	}
	st.stop("b:1")
	// (The Revoke's answer may reach a after the watch events it caused.)
	eventually(t, 10*time.Second, "a revoked b's session and leads all", func() string {
		if st := a.m.Status(); len(st.Led) != 4 || st.Revoked != 1 {
			return fmt.Sprintf("a leads %d, revoked %d", len(st.Led), st.Revoked)
		}
		return ""
	})
}

// TestStoppingPeerIsNotRevoked: a replica that withdraws its address (StopAdvertising, as a
// replica does before it stops serving) is no longer watched, keeps its session and hands its
// partitions over itself.
func TestStoppingPeerIsNotRevoked(t *testing.T) {
	t.Parallel()
	tr := newTracker(t)
	prefix := "/test/" + t.Name()
	st := newStopper()
	a := startWith(t, tr, prefix, "a", 4, func(c *partition.Config) { c.Address, c.PeerStopped = "a:1", st.watch })
	b := startWith(t, tr, prefix, "b", 4, func(c *partition.Config) { c.Address = "b:1" })
	eventually(t, 10*time.Second, "a and b share, a watches b", func() string {
		if why := balanced(tr, 4, 2, 2, a, b)(); why != "" {
			return why
		}
		if n := st.watches("b:1"); n != 1 {
			return fmt.Sprintf("%d watches of b:1", n)
		}
		return ""
	})
	resp, err := b.cli.Get(t.Context(), prefix+"/members/b")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("b's member key: %v, %v", resp, err)
	}
	lease := clientv3.LeaseID(resp.Kvs[0].Lease)

	if err := b.m.StopAdvertising(t.Context()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "a stops watching b", func() string {
		if addrs := a.m.Status().Addresses; addrs["b"] != "" {
			return fmt.Sprintf("a sees b at %q", addrs["b"])
		}
		if n := st.watches("b:1"); n != 0 {
			return fmt.Sprintf("%d watches of b:1", n)
		}
		return ""
	})
	st.stop("b:1") // b's server stops listening: nobody is watching any more
	ttl, err := b.cli.TimeToLive(t.Context(), lease)
	if err != nil || ttl.TTL < 0 { // -1: revoked or expired; a live 1 s lease may show 0
		t.Fatalf("b's lease after it withdrew its address: %+v, %v; want it alive", ttl, err)
	}
	b.leave(t)
	eventually(t, 10*time.Second, "a leads all", func() string {
		if n := len(a.m.Status().Led); n != 4 {
			return fmt.Sprintf("a leads %d", n)
		}
		return ""
	})
	if got := a.m.Status().Revoked; got != 0 {
		t.Errorf("Revoked = %d, want 0", got)
	}
	// A replica that stopped advertising joins its next sessions without an address too.
	if err := a.m.StopAdvertising(t.Context()); err != nil {
		t.Fatal(err)
	}
	resp, err = a.cli.Get(t.Context(), prefix+"/members/a")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != `{"id":"a"}` {
		t.Fatalf("a's member key after StopAdvertising: %v, %v; want {\"id\":\"a\"}", resp, err)
	}
}

// TestOwnAddressAndStoppingAreNotWatched: a replica does not watch a peer that advertises its
// own address (its own server's stop would look like the peer's), and stops watching every
// peer once it stops advertising.
func TestOwnAddressAndStoppingAreNotWatched(t *testing.T) {
	t.Parallel()
	tr := newTracker(t)
	prefix := "/test/" + t.Name()
	st := newStopper()
	a := startWith(t, tr, prefix, "a", 6, func(c *partition.Config) { c.Address, c.PeerStopped = "x:1", st.watch })
	startWith(t, tr, prefix, "b", 6, func(c *partition.Config) { c.Address = "x:1" })
	eventually(t, 10*time.Second, "a sees b", func() string {
		if addr := a.m.Status().Addresses["b"]; addr != "x:1" {
			return fmt.Sprintf("b at %q", addr)
		}
		return ""
	})
	// c joins after b: when a watches c, it has planned its watches knowing b's address.
	startWith(t, tr, prefix, "c", 6, func(c *partition.Config) { c.Address = "c:1" })
	eventually(t, 10*time.Second, "a watches c", func() string {
		if n := st.watches("c:1"); n != 1 {
			return fmt.Sprintf("%d watches of c:1", n)
		}
		return ""
	})
	if n := st.watches("x:1"); n != 0 {
		t.Errorf("%d watches of x:1, a's own address (b advertises it too); want none", n)
	}
	if err := a.m.StopAdvertising(t.Context()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "a watches nobody", func() string {
		if n := st.watches("c:1"); n != 0 {
			return fmt.Sprintf("%d watches of c:1", n)
		}
		return ""
	})
}
