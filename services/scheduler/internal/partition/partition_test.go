package partition_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobmesh/jobmesh/internal/clock"
	"github.com/jobmesh/jobmesh/internal/etcdembed/etcdtest"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/partition"
)

func TestMain(m *testing.M) { os.Exit(etcdtest.Main(m)) }

// tracker is the Lead of every Manager of a test: it fails the test when two Leads of one
// partition run at once or a partition's epoch does not grow from one leader to the next.
type tracker struct {
	t       *testing.T
	mu      sync.Mutex
	running map[int]string // partition → replica whose Lead runs
	epochs  map[int]int64  // partition → the latest epoch a Lead started with
	starts  int
}

func newTracker(t *testing.T) *tracker {
	return &tracker{t: t, running: map[int]string{}, epochs: map[int]int64{}}
}

func (tr *tracker) lead(id string) func(ctx context.Context, p int, epoch int64) {
	return func(ctx context.Context, p int, epoch int64) {
		tr.mu.Lock()
		if other, ok := tr.running[p]; ok {
			tr.t.Errorf("partition %d: %s starts leading (epoch %d) while %s still leads it", p, id, epoch, other)
		}
		if last := tr.epochs[p]; epoch <= last {
			tr.t.Errorf("partition %d: %s leads with epoch %d, not above the previous %d", p, id, epoch, last)
		}
		tr.running[p], tr.epochs[p] = id, epoch
		tr.starts++
		tr.mu.Unlock()
		<-ctx.Done()
		tr.mu.Lock()
		if tr.running[p] == id {
			delete(tr.running, p)
		}
		tr.mu.Unlock()
	}
}

// runningBy counts the partitions whose Lead runs, by replica.
func (tr *tracker) runningBy() map[string]int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	c := map[string]int{}
	for _, id := range tr.running {
		c[id]++
	}
	return c
}

// replica is one Manager running in the test.
type replica struct {
	id   string
	m    *partition.Manager
	cli  *clientv3.Client
	stop context.CancelFunc
	done chan error // Run's result
	once sync.Once
}

// start runs a Manager with its own etcd client under prefix.
func start(t *testing.T, tr *tracker, prefix, id string, count int) *replica {
	t.Helper()
	return startWith(t, tr, prefix, id, count, nil)
}

// startWith is start with the Config changed by with (when not nil) before the Manager is made.
func startWith(t *testing.T, tr *tracker, prefix, id string, count int, with func(*partition.Config)) *replica {
	t.Helper()
	cli := etcdtest.Client(t)
	cfg := partition.Config{
		Etcd: cli, ReplicaID: id, Count: count, SessionTTL: time.Second, Prefix: prefix, Lead: tr.lead(id),
	}
	if with != nil {
		with(&cfg)
	}
	m, err := partition.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{id: id, m: m, cli: cli, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- m.Run(ctx) }()
	t.Cleanup(func() { r.leave(t) })
	return r
}

// leave cancels the replica's Run and waits for it to return; again, it does nothing.
func (r *replica) leave(t *testing.T) {
	t.Helper()
	r.once.Do(func() {
		r.stop()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("%s: Run = %v", r.id, err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s: Run did not return within 10s of its ctx ending", r.id)
		}
	})
}

// eventually polls cond every 20 ms until it returns "" or d passes; then it fails with cond's
// last answer.
func eventually(t *testing.T, d time.Duration, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		why := cond()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %s", what, d, why)
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
	}
}

// balanced checks that the replicas lead every partition between them, each between lo and hi,
// as their Status and the running Leads say, and that every replica sees the same owners.
func balanced(tr *tracker, count, lo, hi int, rs ...*replica) func() string {
	return func() string {
		running := tr.runningBy()
		total := 0
		for _, r := range rs {
			st := r.m.Status()
			n := len(st.Led)
			if n < lo || n > hi || running[r.id] != n {
				return fmt.Sprintf("%s leads %d (Leads running: %d), want %d to %d", r.id, n, running[r.id], lo, hi)
			}
			total += n
			if len(st.Replicas) != len(rs) {
				return fmt.Sprintf("%s sees replicas %v", r.id, st.Replicas)
			}
			for p, o := range st.Owners {
				if o.Leader == "" {
					return fmt.Sprintf("%s sees partition %d free", r.id, p)
				}
			}
		}
		if total != count {
			return fmt.Sprintf("the replicas lead %d of %d partitions", total, count)
		}
		return ""
	}
}

// TestBalance: three replicas share 16 partitions 5–6 each; after one leaves, the other two lead
// all; a newcomer with another count uses the stored one and gets its share; after it is killed
// (its lease expires), the others take its partitions within the TTL and a second.
func TestBalance(t *testing.T) {
	t.Parallel()
	tr := newTracker(t)
	prefix := "/test/" + t.Name()
	a := start(t, tr, prefix, "a", 16)
	b := start(t, tr, prefix, "b", 16)
	c := start(t, tr, prefix, "c", 16)
	eventually(t, 10*time.Second, "3 replicas balanced", balanced(tr, 16, 5, 6, a, b, c))

	c.leave(t)
	if n := tr.runningBy()["c"]; n != 0 {
		t.Errorf("c's Run returned with %d Leads running", n)
	}
	eventually(t, 10*time.Second, "2 replicas after c left", balanced(tr, 16, 8, 8, a, b))

	d := start(t, tr, prefix, "d", 8)
	if n, err := d.m.Count(t.Context()); err != nil || n != 16 {
		t.Fatalf("d: Count = %d, %v; want the stored 16", n, err)
	}
	if p := d.m.Of(35); p != 3 {
		t.Errorf("d: Of(35) = %d, want 3 (35 mod 16)", p)
	}
	eventually(t, 10*time.Second, "3 replicas after d joined", balanced(tr, 16, 5, 6, a, b, d))
	handovers := a.m.Status().Handovers + b.m.Status().Handovers
	if handovers == 0 {
		t.Errorf("a and b handed nothing over to d")
	}

	// Kill d: its client goes, nothing is revoked, its keys vanish when the lease expires.
	killed := time.Now()
	d.cli.Close()
	// The brief's failover target: the lease expires within the TTL (1s), the rest is etcd's
	// expiry sweep (every 500ms) and the takeover.
	eventually(t, time.Second+time.Second, "a and b take d's partitions within TTL + 1s", balanced(tr, 16, 8, 8, a, b))
	t.Logf("a and b led all partitions %v after d was killed (TTL 1s)", time.Since(killed).Round(time.Millisecond))
}

// TestKeyLost: a partition key deleted by someone else ends its Lead; the replica takes the
// partition again under a higher epoch.
func TestKeyLost(t *testing.T) {
	t.Parallel()
	tr := newTracker(t)
	prefix := "/test/" + t.Name()
	a := start(t, tr, prefix, "a", 4)
	eventually(t, 10*time.Second, "a leads all", balanced(tr, 4, 4, 4, a))
	old := a.m.Status().Led[2]
	if _, err := a.cli.Delete(t.Context(), prefix+"/partitions/2"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "partition 2 led again", func() string {
		st := a.m.Status()
		if e := st.Led[2]; e <= old {
			return fmt.Sprintf("partition 2 led under epoch %d, want above %d", e, old)
		}
		if st.Handovers < 1 {
			return fmt.Sprintf("handovers %d, want at least 1", st.Handovers)
		}
		return ""
	})
}

// TestSessionLost: a revoked lease ends every Lead; the replica rejoins with a new session and
// leads every partition again under new epochs.
func TestSessionLost(t *testing.T) {
	t.Parallel()
	tr := newTracker(t)
	prefix := "/test/" + t.Name()
	a := start(t, tr, prefix, "a", 4)
	eventually(t, 10*time.Second, "a leads all", balanced(tr, 4, 4, 4, a))
	before := a.m.Status()
	resp, err := a.cli.Get(t.Context(), prefix+"/members/a")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("member key: %v, %v", resp, err)
	}
	if _, err := a.cli.Revoke(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "a leads all again", func() string {
		st := a.m.Status()
		if len(st.Led) != 4 {
			return fmt.Sprintf("leads %v", st.Led)
		}
		for p, e := range st.Led {
			if e <= before.Led[p] {
				return fmt.Sprintf("partition %d under epoch %d, want above %d", p, e, before.Led[p])
			}
		}
		if st.Handovers < 4 {
			return fmt.Sprintf("handovers %d, want at least 4", st.Handovers)
		}
		return ""
	})
}

// TestLeaveDeletesKeys: after Run returns, the replica's keys are gone.
func TestLeaveDeletesKeys(t *testing.T) {
	t.Parallel()
	tr := newTracker(t)
	prefix := "/test/" + t.Name()
	a := start(t, tr, prefix, "a", 4)
	eventually(t, 10*time.Second, "a leads all", balanced(tr, 4, 4, 4, a))
	a.leave(t)
	resp, err := a.cli.Get(t.Context(), prefix+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	if len(keys) != 1 || keys[0] != prefix+"/count" {
		t.Errorf("keys after leaving = %v, want only %s/count", keys, prefix)
	}
	if got := tr.runningBy()["a"]; got != 0 {
		t.Errorf("%d Leads still run after Run returned", got)
	}
	if st := a.m.Status(); st.Handovers != 4 || st.Acquired != 4 {
		t.Errorf("Status = %d acquired, %d handovers; want 4 and 4", st.Acquired, st.Handovers)
	}
}

// TestCountBeforeRun: Count waits for Run; Of answers -1 until then.
func TestCountBeforeRun(t *testing.T) {
	t.Parallel()
	m, err := partition.New(partition.Config{Etcd: etcdtest.Client(t), ReplicaID: "a", Lead: func(context.Context, int, int64) {}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := m.Count(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Count before Run = %v, want context.Canceled", err)
	}
	if p := m.Of(7); p != -1 {
		t.Errorf("Of before the count is known = %d, want -1", p)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Client(t)
	lead := func(context.Context, int, int64) {}
	for _, tc := range []struct {
		name string
		cfg  partition.Config
	}{
		{"etcd", partition.Config{ReplicaID: "a", Lead: lead}},
		{"replica id", partition.Config{Etcd: cli, Lead: lead}},
		{"count", partition.Config{Etcd: cli, ReplicaID: "a", Count: -1, Lead: lead}},
		{"session ttl", partition.Config{Etcd: cli, ReplicaID: "a", SessionTTL: 1500 * time.Millisecond, Lead: lead}},
		{"session ttl", partition.Config{Etcd: cli, ReplicaID: "a", SessionTTL: 500 * time.Millisecond, Lead: lead}},
		{"lead", partition.Config{Etcd: cli, ReplicaID: "a"}},
	} {
		_, err := partition.New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("New(%s wrong) = %v, want an error naming %q", tc.name, err, tc.name)
		}
	}
}

func TestPartitionOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		id    int64
		count int
		want  int
	}{
		{0, 16, 0}, {15, 16, 15}, {16, 16, 0}, {35, 16, 3}, {-1, 16, 15}, {7, 1, 0},
	} {
		if got := partition.PartitionOf(tc.id, tc.count); got != tc.want {
			t.Errorf("PartitionOf(%d, %d) = %d, want %d", tc.id, tc.count, got, tc.want)
		}
	}
}

// TestLeadReturnsEarly: a Lead that returns on its own gives its partition up; the replica
// leaves it free for a cooldown (on its clock) and then takes it again under a higher epoch.
func TestLeadReturnsEarly(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	starts := make(chan int64, 16) // partition 0's epochs
	var once sync.Once
	m, err := partition.New(partition.Config{
		Etcd: etcdtest.Client(t), ReplicaID: "a", Count: 2, SessionTTL: time.Second, Prefix: "/test/" + t.Name(), Clock: clk,
		Lead: func(ctx context.Context, p int, epoch int64) {
			quit := false
			if p == 0 {
				starts <- epoch
				once.Do(func() { quit = true })
			}
			if !quit {
				<-ctx.Done()
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	next := func() int64 {
		t.Helper()
		select {
		case e := <-starts:
			return e
		case <-time.After(10 * time.Second):
			t.Fatal("partition 0 not led within 10s")
			return 0
		}
	}
	first := next()
	eventually(t, 10*time.Second, "partition 0 given up and left free", func() string {
		if st := m.Status(); st.Handovers != 1 || st.Owners[0].Leader != "" {
			return fmt.Sprintf("handovers %d, partition 0 led by %q", st.Handovers, st.Owners[0].Leader)
		}
		return ""
	})
	clk.Advance(time.Second) // the cooldown ends; the re-plan tick fires
	if e := next(); e <= first {
		t.Errorf("partition 0 led again under epoch %d, want above %d", e, first)
	}
}

// TestYoungLeadsAreKept: a replica that has just acquired its partitions does not hand any over
// to a replica that joins, until it has led them for two session TTLs (on its clock); then the
// two share them.
func TestYoungLeadsAreKept(t *testing.T) {
	t.Parallel()
	prefix := "/test/" + t.Name()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	lead := func(ctx context.Context, _ int, _ int64) { <-ctx.Done() }
	run := func(cfg partition.Config) *partition.Manager {
		t.Helper()
		cfg.Etcd, cfg.Count, cfg.SessionTTL, cfg.Prefix, cfg.Lead = etcdtest.Client(t), 2, time.Second, prefix, lead
		m, err := partition.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		return m
	}
	a := run(partition.Config{ReplicaID: "a", Clock: clk})
	eventually(t, 10*time.Second, "a leads both partitions", func() string {
		if n := len(a.Status().Led); n != 2 {
			return fmt.Sprintf("a leads %d", n)
		}
		return ""
	})
	b := run(partition.Config{ReplicaID: "b"})
	eventually(t, 10*time.Second, "a sees b", func() string {
		if r := a.Status().Replicas; !slices.Contains(r, "b") {
			return fmt.Sprintf("a sees %v", r)
		}
		return ""
	})
	// Two re-plan ticks of a's: the first one's plan has ended once the second has re-armed.
	for range 2 {
		clk.Advance(500 * time.Millisecond)
		clk.BlockUntilTimers(1)
	}
	if st := a.Status(); len(st.Led) != 2 || st.Handovers != 0 {
		t.Fatalf("a, 1s after it acquired them, leads %v and handed %d over; want both kept", st.Led, st.Handovers)
	}
	clk.Advance(time.Second) // two TTLs after a acquired them
	eventually(t, 10*time.Second, "a and b lead one each", func() string {
		if na, nb := len(a.Status().Led), len(b.Status().Led); na != 1 || nb != 1 {
			return fmt.Sprintf("a leads %d, b %d", na, nb)
		}
		return ""
	})
}

// TestMemberAddresses: a replica advertises its address in its member key (JSON); Status and
// Owner give the live replicas' addresses, read at the first listing and from the watch alike,
// and a bare-id value (what replicas wrote before addresses) reads as a replica without one.
func TestMemberAddresses(t *testing.T) {
	t.Parallel()
	prefix := "/test/" + t.Name()
	cli := etcdtest.Client(t)
	// A replica of the older kind, there before a joins (a reads it in its first listing).
	if _, err := cli.Put(t.Context(), prefix+"/members/old", "old"); err != nil {
		t.Fatal(err)
	}
	tr := newTracker(t)
	m, err := partition.New(partition.Config{
		Etcd: cli, ReplicaID: "a", Address: "10.0.0.1:9010", Count: 2, SessionTTL: time.Second, Prefix: prefix, Lead: tr.lead("a"),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()

	eventually(t, 10*time.Second, "a leads its share", func() string {
		if st := m.Status(); len(st.Led) != 1 {
			return fmt.Sprintf("a leads %v with replicas %v", st.Led, st.Replicas)
		}
		return ""
	})
	resp, err := cli.Get(t.Context(), prefix+"/members/a")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("a's member key: %v, %v", resp, err)
	}
	if got, want := string(resp.Kvs[0].Value), `{"id":"a","addr":"10.0.0.1:9010"}`; got != want {
		t.Errorf("a's member value = %s, want %s", got, want)
	}
	// Two more after a joined (a reads them from the watch): one that advertises an address, and
	// one whose value is not a member's.
	if _, err := cli.Put(t.Context(), prefix+"/members/b", `{"id":"b","addr":"10.0.0.2:9010"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(t.Context(), prefix+"/members/c", `{"id":"someone-else","addr":"10.0.0.3:9010"}`); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "a sees b and c", func() string {
		if st := m.Status(); len(st.Replicas) != 4 {
			return fmt.Sprintf("replicas %v", st.Replicas)
		}
		return ""
	})
	st := m.Status()
	want := map[string]string{"a": "10.0.0.1:9010", "b": "10.0.0.2:9010"}
	if fmt.Sprint(st.Addresses) != fmt.Sprint(want) {
		t.Errorf("Addresses = %v, want %v", st.Addresses, want)
	}
	for p := range st.Led {
		if o := m.Owner(p); o.Leader != "a" || o.Addr != "10.0.0.1:9010" || o.Epoch != st.Led[p] {
			t.Errorf("Owner(%d) = %+v, want a at 10.0.0.1:9010 under epoch %d", p, o, st.Led[p])
		}
		if o := st.Owners[p]; o.Addr != "10.0.0.1:9010" {
			t.Errorf("Status().Owners[%d] = %+v, want a's address", p, o)
		}
	}
	if o := m.Owner(2); o != (partition.Owner{}) {
		t.Errorf("Owner(2) of 2 partitions = %+v, want none", o)
	}
	// A leader whose member key is of the older kind has no address.
	free := 1 - func() int {
		for p := range st.Led {
			return p
		}
		return -1
	}()
	if _, err := cli.Put(t.Context(), fmt.Sprintf("%s/partitions/%d", prefix, free), "old"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "a sees old lead the other partition", func() string {
		if o := m.Owner(free); o.Leader != "old" || o.Addr != "" {
			return fmt.Sprintf("Owner(%d) = %+v, want old without an address", free, o)
		}
		return ""
	})
}
