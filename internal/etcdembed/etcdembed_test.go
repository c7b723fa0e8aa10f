package etcdembed_test

import (
	"net"
	"strings"
	"testing"

	"github.com/jobmesh/jobmesh/internal/etcdembed"
	"github.com/jobmesh/jobmesh/internal/hostport"
)

// freeAddr is a loopback address with a port nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := hostport.ListenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestPeerAddr: the peer port is the one configured, also when a data directory made with
// another peer port starts again.
func TestPeerAddr(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for range 2 {
		peer := freeAddr(t)
		s, err := etcdembed.Start(t.Context(), etcdembed.Config{Dir: dir, PeerAddr: peer, Unsafe: true})
		if err != nil {
			t.Fatalf("Start with peer %s: %v", peer, err)
		}
		c, err := net.Dial("tcp", peer)
		if err != nil {
			t.Errorf("nothing listens on the peer address %s: %v", peer, err)
		} else {
			c.Close()
		}
		s.Close()
	}
}

func TestBadPeerAddr(t *testing.T) {
	t.Parallel()
	_, err := etcdembed.Start(t.Context(), etcdembed.Config{Dir: t.TempDir(), PeerAddr: "localhost", Unsafe: true})
	if err == nil || !strings.Contains(err.Error(), "peer addr") {
		t.Errorf("Start with peer addr \"localhost\" = %v, want an error naming the peer addr", err)
	}
}
