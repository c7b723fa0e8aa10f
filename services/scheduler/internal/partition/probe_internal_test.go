package partition

import (
	"context"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobmesh/jobmesh/internal/etcdembed/etcdtest"
)

// TestRevokeStoppedOnlyWhatWasWatched: a replica seen stopped has its session revoked only while
// its member key is as it was watched, and never by a replica that is stopping itself.
func TestRevokeStoppedOnlyWhatWasWatched(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Client(t)
	m, err := New(Config{Etcd: cli, ReplicaID: "a", Address: "a:1", Prefix: "/test/" + t.Name(),
		Lead: func(context.Context, int, int64) {}})
	if err != nil {
		t.Fatal(err)
	}
	// grant puts b's member key with value under a new lease, and returns the lease.
	grant := func(value string) int64 {
		t.Helper()
		l, err := cli.Grant(t.Context(), 60)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(t.Context(), m.members+"b", value, clientv3.WithLease(l.ID)); err != nil {
			t.Fatal(err)
		}
		return int64(l.ID)
	}
	alive := func(lease int64) bool {
		t.Helper()
		ttl, err := cli.TimeToLive(t.Context(), clientv3.LeaseID(lease))
		if err != nil {
			t.Fatal(err)
		}
		return ttl.TTL > 0
	}
	advertised := memberValue("b", "b:1")

	for _, tc := range []struct {
		what  string
		value string // b's member key now ("" for none)
		again bool   // b joined again: its key is under a new lease
	}{
		{"b withdrew its address (a graceful stop)", memberValue("b", ""), false},
		{"b moved to another address", memberValue("b", "b:2"), false},
		{"b joined again", advertised, true},
		{"b left", "", false},
	} {
		watched := grant(advertised)
		switch {
		case tc.again:
			grant(tc.value)
		case tc.value == "":
			if _, err := cli.Delete(t.Context(), m.members+"b"); err != nil {
				t.Fatal(err)
			}
		default:
			if _, err := cli.Put(t.Context(), m.members+"b", tc.value, clientv3.WithLease(clientv3.LeaseID(watched))); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.revokeStopped(t.Context(), "b", &probe{addr: "b:1", lease: watched}); err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		if !alive(watched) {
			t.Errorf("%s: the watched session was revoked", tc.what)
		}
	}

	watched := grant(advertised)
	m.stopping.Store(true)
	if err := m.revokeStopped(t.Context(), "b", &probe{addr: "b:1", lease: watched}); err != nil || !alive(watched) {
		t.Errorf("a stopping replica: revokeStopped = %v, session alive %v; want nil and alive", err, alive(watched))
	}
	m.stopping.Store(false)
	if err := m.revokeStopped(t.Context(), "b", &probe{addr: "b:1", lease: watched}); err != nil {
		t.Fatal(err)
	}
	if alive(watched) {
		t.Error("b's unchanged member key: its session is alive; want it revoked")
	}
	if got := m.Status().Revoked; got != 1 {
		t.Errorf("Revoked = %d, want 1", got)
	}
}
