package route_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/services/scheduler/internal/route"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/route/routetest"
)

var allStrategies = []route.Strategy{
	route.First, route.Last, route.Round, route.Random, route.ConsistentHash,
	route.LeastFrequentlyUsed, route.LeastRecentlyUsed, route.Failover, route.Busyover,
	route.ShardingBroadcast,
}

// clock is a fake clock for the 24 h reset.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newClock() *clock { return &clock{now: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)} }

// newRouter returns a router with a seeded random source and a fake prober on which everything
// is alive and idle.
func newRouter(t testing.TB) *route.Router {
	t.Helper()
	return route.New(route.Options{Prober: &routetest.Prober{}, Rand: rand.New(rand.NewPCG(1, 2))})
}

// addrList returns n sorted addresses a00, a01, ...
func addrList(n int) []string {
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("10.0.%d.%d:9999", i/256, i%256)
	}
	slices.Sort(addrs)
	return addrs
}

// pick routes one fire that must go to exactly one executor, and returns its address.
func pick(t testing.TB, r *route.Router, jobID int64, s route.Strategy, addrs []string) string {
	t.Helper()
	got, err := tryPick(r, jobID, s, addrs)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// tryPick is pick for goroutines other than the test's, which must not call t.Fatal.
func tryPick(r *route.Router, jobID int64, s route.Strategy, addrs []string) (string, error) {
	d, err := r.Route(context.Background(), jobID, s, addrs)
	if err != nil {
		return "", fmt.Errorf("Route(%d, %v, %v) error = %w, want nil", jobID, s, addrs, err)
	}
	if len(d.Targets) != 1 || d.Targets[0].ShardIndex != 0 || d.Targets[0].ShardTotal != 1 {
		return "", fmt.Errorf("Route(%d, %v, %v) targets = %+v, want one target with shard 0 of 1", jobID, s, addrs, d.Targets)
	}
	if got := d.Targets[0].Address; !slices.Contains(addrs, got) {
		return "", fmt.Errorf("Route(%d, %v, %v) = %q, want one of the addresses", jobID, s, addrs, got)
	}
	return d.Targets[0].Address, nil
}

// picks routes k fires of jobID and counts how often each address was chosen.
func picks(t testing.TB, r *route.Router, jobID int64, s route.Strategy, addrs []string, k int) map[string]int {
	t.Helper()
	got := make(map[string]int)
	for range k {
		got[pick(t, r, jobID, s, addrs)]++
	}
	return got
}

func TestStrategyString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s    route.Strategy
		want string
	}{
		{route.First, "FIRST"},
		{route.Last, "LAST"},
		{route.Round, "ROUND"},
		{route.Random, "RANDOM"},
		{route.ConsistentHash, "CONSISTENT_HASH"},
		{route.LeastFrequentlyUsed, "LEAST_FREQUENTLY_USED"},
		{route.LeastRecentlyUsed, "LEAST_RECENTLY_USED"},
		{route.Failover, "FAILOVER"},
		{route.Busyover, "BUSYOVER"},
		{route.ShardingBroadcast, "SHARDING_BROADCAST"},
		{route.Strategy(0), "Strategy(0)"},
		{route.Strategy(11), "Strategy(11)"},
	}
	for _, tt := range tests {
		if got := tt.s.String(); got != tt.want {
			t.Errorf("Strategy(%d).String() = %q, want %q", int(tt.s), got, tt.want)
		}
	}
	// The numbers are the API's RouteStrategy values.
	if got := int(route.ShardingBroadcast); got != 10 {
		t.Errorf("ShardingBroadcast = %d, want 10", got)
	}
}

func TestEmptyAddressListIsNoExecutors(t *testing.T) {
	t.Parallel()
	r := newRouter(t)
	for _, s := range allStrategies {
		for _, addrs := range [][]string{nil, {}} {
			d, err := r.Route(context.Background(), 1, s, addrs)
			if !errors.Is(err, route.ErrNoExecutors) || len(d.Targets) != 0 {
				t.Errorf("Route(%v, %#v) = %+v, %v, want no targets and ErrNoExecutors", s, addrs, d.Targets, err)
			}
		}
	}
}

func TestUnknownStrategy(t *testing.T) {
	t.Parallel()
	r := newRouter(t)
	for _, s := range []route.Strategy{-1, 0, 11} {
		if _, err := r.Route(context.Background(), 1, s, []string{"a"}); !errors.Is(err, route.ErrUnknownStrategy) {
			t.Errorf("Route(%v) error = %v, want ErrUnknownStrategy", s, err)
		}
	}
}

func TestOneExecutor(t *testing.T) {
	t.Parallel()
	r := newRouter(t)
	addrs := []string{"only:9999"}
	for _, s := range allStrategies {
		for job := range int64(3) {
			d, err := r.Route(context.Background(), job, s, addrs)
			want := []route.Target{{Address: "only:9999", ShardIndex: 0, ShardTotal: 1}}
			if err != nil || !slices.Equal(d.Targets, want) {
				t.Errorf("Route(%d, %v, %v) = %+v, %v, want %+v", job, s, addrs, d.Targets, err, want)
			}
		}
	}
}

func TestRouteLeavesAddressesAlone(t *testing.T) {
	t.Parallel()
	r := newRouter(t)
	addrs := addrList(7)
	orig := slices.Clone(addrs)
	for _, s := range allStrategies {
		for job := range int64(20) {
			if _, err := r.Route(context.Background(), job, s, addrs); err != nil {
				t.Fatalf("Route(%d, %v) error = %v", job, s, err)
			}
		}
	}
	if !slices.Equal(addrs, orig) {
		t.Errorf("addrs after Route = %v, want %v unchanged", addrs, orig)
	}
}

func TestFirstAndLast(t *testing.T) {
	t.Parallel()
	r := newRouter(t)
	tests := []struct {
		s     route.Strategy
		addrs []string
		want  string
	}{
		{route.First, []string{"a", "b", "c"}, "a"},
		{route.Last, []string{"a", "b", "c"}, "c"},
		{route.First, []string{"b", "c"}, "b"},
		{route.Last, []string{"a", "b"}, "b"},
	}
	for _, tt := range tests {
		for range 3 {
			if got := pick(t, r, 1, tt.s, tt.addrs); got != tt.want {
				t.Errorf("Route(%v, %v) = %q, want %q", tt.s, tt.addrs, got, tt.want)
			}
		}
	}
}

func TestRoundVisitsAllEvenly(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2, 3, 10, 101} {
		r := newRouter(t)
		addrs := addrList(n)
		// Each consecutive fire takes the next address.
		prev := slices.Index(addrs, pick(t, r, 7, route.Round, addrs))
		for range 3 * n {
			got := slices.Index(addrs, pick(t, r, 7, route.Round, addrs))
			if want := (prev + 1) % n; got != want {
				t.Fatalf("n=%d: ROUND after index %d chose index %d, want %d", n, prev, got, want)
			}
			prev = got
		}
		counts := picks(t, r, 7, route.Round, addrs, 50*n)
		for _, a := range addrs {
			if got := counts[a]; got != 50 {
				t.Errorf("n=%d: ROUND chose %s %d times in %d fires, want 50", n, a, got, 50*n)
			}
		}
	}
}

func TestRoundStartsAtRandomPerJob(t *testing.T) {
	t.Parallel()
	r := newRouter(t)
	addrs := addrList(10)
	first := make(map[string]int)
	for job := range int64(200) {
		first[pick(t, r, job, route.Round, addrs)]++
	}
	// A counter starting at 0 for every job would send all first fires to addrs[0].
	if got := len(first); got < 8 {
		t.Errorf("first ROUND fires of 200 jobs went to %d executors (%v), want most of 10", got, first)
	}
}

func TestRoundExecutorLeavesMidRound(t *testing.T) {
	t.Parallel()
	r := newRouter(t)
	full := []string{"a", "b", "c", "d"}
	picks(t, r, 1, route.Round, full, 2)
	left := []string{"a", "c", "d"}
	counts := picks(t, r, 1, route.Round, left, 300)
	want := map[string]int{"a": 100, "c": 100, "d": 100}
	if !mapsEqual(counts, want) {
		t.Errorf("ROUND over %v after b left = %v, want %v", left, counts, want)
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestRandomSpreads(t *testing.T) {
	t.Parallel()
	r := newRouter(t)
	addrs := addrList(5)
	counts := picks(t, r, 1, route.Random, addrs, 10_000)
	for _, a := range addrs {
		if got := counts[a]; got < 1600 || got > 2400 {
			t.Errorf("RANDOM chose %s %d times in 10000 fires over 5, want about 2000", a, got)
		}
	}
}

// TestConsistentHashMatchesXXLJob checks placement against an independent Python port of
// XXL-JOB's ExecutorRouteConsistentHash.hashJob, so migrated jobs stay on the same executor.
func TestConsistentHashMatchesXXLJob(t *testing.T) {
	t.Parallel()
	r := newRouter(t)
	addrs := []string{"http://10.0.0.1:9999/", "http://10.0.0.2:9999/", "http://10.0.0.3:9999/"}
	tests := []struct {
		job  int64
		key  uint32
		want string
	}{
		{1, 943901380, "http://10.0.0.3:9999/"},
		{2, 2373066440, "http://10.0.0.3:9999/"},
		{3, 2127088620, "http://10.0.0.1:9999/"},
		{4, 2046197672, "http://10.0.0.3:9999/"},
		{5, 2134629092, "http://10.0.0.1:9999/"},
		{6, 470382870, "http://10.0.0.3:9999/"},
		{7, 1608782991, "http://10.0.0.2:9999/"},
		{8, 2516119753, "http://10.0.0.2:9999/"},
		{42, 3905343649, "http://10.0.0.2:9999/"},
		{1000, 1891284905, "http://10.0.0.3:9999/"},
		{123456789, 2498230565, "http://10.0.0.3:9999/"},
	}
	for _, tt := range tests {
		d, err := r.Route(context.Background(), tt.job, route.ConsistentHash, addrs)
		if err != nil {
			t.Fatalf("Route(%d) error = %v", tt.job, err)
		}
		if got := d.Targets[0].Address; got != tt.want {
			t.Errorf("CONSISTENT_HASH job %d = %q, want %q", tt.job, got, tt.want)
		}
		wantMsg := fmt.Sprintf("route CONSISTENT_HASH over 3 executors [%s]: chose %s (key %d on a ring of 300 nodes)",
			strings.Join(addrs, " "), tt.want, tt.key)
		if d.Message != wantMsg {
			t.Errorf("CONSISTENT_HASH job %d message = %q, want %q", tt.job, d.Message, wantMsg)
		}
	}
}

func TestConsistentHashIsStable(t *testing.T) {
	t.Parallel()
	addrs := addrList(20)
	r1, r2 := newRouter(t), route.New(route.Options{})
	for job := range int64(500) {
		want := pick(t, r1, job, route.ConsistentHash, addrs)
		for _, r := range []*route.Router{r1, r2, r1} {
			if got := pick(t, r, job, route.ConsistentHash, addrs); got != want {
				t.Fatalf("CONSISTENT_HASH job %d = %q, then %q, want the same executor every time", job, want, got)
			}
		}
	}
}

func TestConsistentHashSpreadsJobs(t *testing.T) {
	t.Parallel()
	r := newRouter(t)
	addrs := addrList(10)
	counts := make(map[string]int)
	for job := range int64(10_000) {
		counts[pick(t, r, job, route.ConsistentHash, addrs)]++
	}
	for _, a := range addrs {
		if got := counts[a]; got < 500 || got > 1500 {
			t.Errorf("CONSISTENT_HASH put %d of 10000 jobs on %s, want about 1000", got, a)
		}
	}
}

func TestConsistentHashMembershipChangeMovesFewJobs(t *testing.T) {
	t.Parallel()
	const jobs = 10_000
	for _, n := range []int{3, 10, 50} {
		r := newRouter(t)
		all := addrList(n + 1)
		newcomer := all[n/2]
		before := slices.Delete(slices.Clone(all), n/2, n/2+1)

		placed := make([]string, jobs)
		for job := range placed {
			placed[job] = pick(t, r, int64(job), route.ConsistentHash, before)
		}
		moved := 0
		for job, was := range placed {
			got := pick(t, r, int64(job), route.ConsistentHash, all)
			if got == was {
				continue
			}
			moved++
			if got != newcomer {
				t.Fatalf("n=%d: job %d moved from %s to %s when %s joined, want moves only to the newcomer", n, job, was, got, newcomer)
			}
		}
		t.Logf("n=%d: %d of %d jobs moved when one executor joined (ideal %d)", n, moved, jobs, jobs/(n+1))
		if limit := 2 * jobs / (n + 1); moved >= limit {
			t.Errorf("n=%d: %d of %d jobs moved when one executor joined, want fewer than %d (ideal %d)", n, moved, jobs, limit, jobs/(n+1))
		}
		// The newcomer leaving again sends exactly its jobs back.
		for job, was := range placed {
			if got := pick(t, r, int64(job), route.ConsistentHash, before); got != was {
				t.Fatalf("n=%d: job %d on %s after %s left, want %s again", n, job, got, newcomer, was)
			}
		}
	}
}

func TestLeastFrequentlyUsedIsFair(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2, 5, 17} {
		r := newRouter(t)
		addrs := addrList(n)
		k := 100 * n
		counts := picks(t, r, 3, route.LeastFrequentlyUsed, addrs, k)
		// Counts are seeded in [0, n), so uses differ from k/n by less than n.
		for _, a := range addrs {
			if got := counts[a]; got < 100-n || got > 100+n {
				t.Errorf("n=%d: LFU chose %s %d times in %d fires, want within %d of 100", n, a, got, k, n)
			}
		}
	}
}

func TestLeastFrequentlyUsedMembershipChange(t *testing.T) {
	t.Parallel()
	r := newRouter(t)
	abc := []string{"a", "b", "c"}
	picks(t, r, 1, route.LeastFrequentlyUsed, abc, 300)

	ac := []string{"a", "c"}
	counts := picks(t, r, 1, route.LeastFrequentlyUsed, ac, 100)
	if counts["a"] < 45 || counts["c"] < 45 || len(counts) != 2 {
		t.Errorf("LFU over %v after b left = %v, want about 50 each", ac, counts)
	}
	// b's count was dropped when it left: back, it is seeded below 3 while a and c are past
	// 100, so it takes the next fires, as in XXL-JOB.
	for i := range 5 {
		if got := pick(t, r, 1, route.LeastFrequentlyUsed, abc); got != "b" {
			t.Errorf("LFU fire %d after b rejoined = %q, want b", i, got)
		}
	}
}

func TestLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		steps []lruStep
	}{
		{"fresh job goes in address order", []lruStep{
			{[]string{"a", "b", "c"}, "a b c a b c a"},
		}},
		{"a newcomer joins as most recently used", []lruStep{
			{[]string{"a", "b", "c"}, "a b"},
			{[]string{"a", "b", "c", "d"}, "c a b d c a"},
		}},
		{"an executor leaves mid-round", []lruStep{
			{[]string{"a", "b", "c"}, "a"},
			{[]string{"b", "c"}, "b c b c"},
			{[]string{"a", "b", "c"}, "b c a b"},
		}},
		{"one executor", []lruStep{
			{[]string{"a"}, "a a a"},
		}},
	}
	for _, tt := range tests {
		r := newRouter(t)
		for _, step := range tt.steps {
			var got []string
			for range strings.Fields(step.want) {
				got = append(got, pick(t, r, 9, route.LeastRecentlyUsed, step.addrs))
			}
			if got := strings.Join(got, " "); got != step.want {
				t.Errorf("%s: LRU over %v = %q, want %q", tt.name, step.addrs, got, step.want)
			}
		}
	}
}

type lruStep struct {
	addrs []string
	want  string // space-separated choices
}

func TestLeastRecentlyUsedIsFair(t *testing.T) {
	t.Parallel()
	r := newRouter(t)
	addrs := addrList(13)
	counts := picks(t, r, 4, route.LeastRecentlyUsed, addrs, 13*40)
	for _, a := range addrs {
		if got := counts[a]; got != 40 {
			t.Errorf("LRU chose %s %d times in %d fires, want 40", a, got, 13*40)
		}
	}
}

func TestFailover(t *testing.T) {
	t.Parallel()
	refused := errors.New("connection refused")
	tests := []struct {
		name    string
		dead    []string
		want    string // chosen address; empty means all dead
		probed  []string
		message string
	}{
		{
			name:    "first alive wins without probing the rest",
			want:    "a",
			probed:  []string{"a"},
			message: "route FAILOVER over 3 executors [a b c]: beat a: ok; chose a",
		},
		{
			name:    "dead ones are skipped",
			dead:    []string{"a", "b"},
			want:    "c",
			probed:  []string{"a", "b", "c"},
			message: "route FAILOVER over 3 executors [a b c]: beat a: failed: connection refused; beat b: failed: connection refused; beat c: ok; chose c",
		},
		{
			name:    "all dead",
			dead:    []string{"a", "b", "c"},
			probed:  []string{"a", "b", "c"},
			message: "route FAILOVER over 3 executors [a b c]: beat a: failed: connection refused; beat b: failed: connection refused; beat c: failed: connection refused; none alive",
		},
	}
	for _, tt := range tests {
		p := &routetest.Prober{}
		for _, a := range tt.dead {
			p.SetDead(a, refused)
		}
		r := route.New(route.Options{Prober: p})
		d, err := r.Route(context.Background(), 5, route.Failover, []string{"a", "b", "c"})
		if tt.want == "" {
			if !errors.Is(err, route.ErrNoLiveExecutor) || len(d.Targets) != 0 {
				t.Errorf("%s: Route = %+v, %v, want no targets and ErrNoLiveExecutor", tt.name, d.Targets, err)
			}
		} else {
			want := []route.Target{{Address: tt.want, ShardIndex: 0, ShardTotal: 1}}
			if err != nil || !slices.Equal(d.Targets, want) {
				t.Errorf("%s: Route = %+v, %v, want %+v", tt.name, d.Targets, err, want)
			}
		}
		if d.Message != tt.message {
			t.Errorf("%s: message = %q, want %q", tt.name, d.Message, tt.message)
		}
		var probed []string
		for _, c := range p.Calls() {
			if c.Method != "Beat" {
				t.Errorf("%s: probe %+v, want only Beat", tt.name, c)
			}
			probed = append(probed, c.Addr)
		}
		if !slices.Equal(probed, tt.probed) {
			t.Errorf("%s: probed %v, want %v", tt.name, probed, tt.probed)
		}
	}
}

func TestBusyover(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		busy    map[string]string
		dead    []string
		want    string
		message string
	}{
		{
			name:    "first idle wins",
			want:    "a",
			message: "route BUSYOVER over 3 executors [a b c]: idle beat a: idle; chose a",
		},
		{
			name:    "busy and unreachable ones are skipped",
			busy:    map[string]string{"a": "job 5 is running"},
			dead:    []string{"b"},
			want:    "c",
			message: "route BUSYOVER over 3 executors [a b c]: idle beat a: busy: job 5 is running; idle beat b: failed: timeout; idle beat c: idle; chose c",
		},
		{
			name:    "all busy",
			busy:    map[string]string{"a": "running", "b": "queued", "c": "running"},
			message: "route BUSYOVER over 3 executors [a b c]: idle beat a: busy: running; idle beat b: busy: queued; idle beat c: busy: running; none idle",
		},
	}
	for _, tt := range tests {
		p := &routetest.Prober{}
		for a, reason := range tt.busy {
			p.SetBusy(a, reason)
		}
		for _, a := range tt.dead {
			p.SetDead(a, errors.New("timeout"))
		}
		r := route.New(route.Options{Prober: p})
		d, err := r.Route(context.Background(), 5, route.Busyover, []string{"a", "b", "c"})
		if tt.want == "" {
			if !errors.Is(err, route.ErrNoIdleExecutor) || len(d.Targets) != 0 {
				t.Errorf("%s: Route = %+v, %v, want no targets and ErrNoIdleExecutor", tt.name, d.Targets, err)
			}
		} else {
			want := []route.Target{{Address: tt.want, ShardIndex: 0, ShardTotal: 1}}
			if err != nil || !slices.Equal(d.Targets, want) {
				t.Errorf("%s: Route = %+v, %v, want %+v", tt.name, d.Targets, err, want)
			}
		}
		if d.Message != tt.message {
			t.Errorf("%s: message = %q, want %q", tt.name, d.Message, tt.message)
		}
		for _, c := range p.Calls() {
			if c.Method != "IdleBeat" || c.JobID != 5 {
				t.Errorf("%s: probe %+v, want IdleBeat for job 5", tt.name, c)
			}
		}
	}
}

func TestProbingStopsWhenContextEnds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, s := range []route.Strategy{route.Failover, route.Busyover} {
		p := &routetest.Prober{}
		r := route.New(route.Options{Prober: p})
		d, err := r.Route(ctx, 1, s, []string{"a", "b"})
		if !errors.Is(err, context.Canceled) || len(d.Targets) != 0 {
			t.Errorf("%v with a cancelled context = %+v, %v, want context.Canceled", s, d.Targets, err)
		}
		if got := p.Calls(); len(got) != 0 {
			t.Errorf("%v with a cancelled context probed %+v, want no probes", s, got)
		}
	}
}

func TestProbingWithoutProber(t *testing.T) {
	t.Parallel()
	r := route.New(route.Options{})
	for _, s := range []route.Strategy{route.Failover, route.Busyover} {
		if _, err := r.Route(context.Background(), 1, s, []string{"a"}); !errors.Is(err, route.ErrNoProber) {
			t.Errorf("%v without a prober error = %v, want ErrNoProber", s, err)
		}
	}
}

func TestShardingBroadcast(t *testing.T) {
	t.Parallel()
	r := newRouter(t)
	for _, n := range []int{1, 2, 5, 1000} {
		addrs := addrList(n)
		d, err := r.Route(context.Background(), 1, route.ShardingBroadcast, addrs)
		if err != nil {
			t.Fatalf("n=%d: Route error = %v", n, err)
		}
		if len(d.Targets) != n {
			t.Fatalf("n=%d: %d targets, want %d", n, len(d.Targets), n)
		}
		for i, got := range d.Targets {
			if want := (route.Target{Address: addrs[i], ShardIndex: i, ShardTotal: n}); got != want {
				t.Errorf("n=%d: target %d = %+v, want %+v", n, i, got, want)
			}
		}
	}
}

func TestMessages(t *testing.T) {
	t.Parallel()
	many := addrList(1000)
	tests := []struct {
		s     route.Strategy
		addrs []string
		want  string
	}{
		{route.First, []string{"a", "b", "c"}, "route FIRST over 3 executors [a b c]: chose a"},
		{route.Last, []string{"a"}, "route LAST over 1 executor [a]: chose a"},
		{route.LeastRecentlyUsed, []string{"a", "b"}, "route LEAST_RECENTLY_USED over 2 executors [a b]: chose a (least recently used)"},
		{route.ShardingBroadcast, []string{"a", "b", "c"}, "route SHARDING_BROADCAST over 3 executors [a b c]: broadcast to all 3, shards 0..2"},
		{route.First, many, "route FIRST over 1000 executors [" + strings.Join(many[:8], " ") + " +992 more]: chose " + many[0]},
	}
	for _, tt := range tests {
		r := newRouter(t)
		d, err := r.Route(context.Background(), 1, tt.s, tt.addrs)
		if err != nil || d.Message != tt.want {
			t.Errorf("Route(%v) message = %q, %v, want %q", tt.s, d.Message, err, tt.want)
		}
	}

	// ROUND names its counter, and LFU the count it found.
	r := newRouter(t)
	for _, s := range []route.Strategy{route.Round, route.LeastFrequentlyUsed} {
		d, err := r.Route(context.Background(), 1, s, []string{"a", "b", "c"})
		if err != nil {
			t.Fatalf("Route(%v) error = %v", s, err)
		}
		var count int
		format := "route " + s.String() + " over 3 executors [a b c]: chose " + d.Targets[0].Address + " (counter %d)"
		if s == route.LeastFrequentlyUsed {
			format = "route " + s.String() + " over 3 executors [a b c]: chose " + d.Targets[0].Address + " (use count was %d)"
		}
		if _, err := fmt.Sscanf(d.Message, format, &count); err != nil {
			t.Errorf("Route(%v) message = %q, want the form %q", s, d.Message, format)
		}
	}
}

func TestStateResetsEvery24Hours(t *testing.T) {
	t.Parallel()
	tests := []struct {
		advance time.Duration
		want    string // the third LRU fire over a b c: c if state survived, a if it was reset
	}{
		{23 * time.Hour, "c"},
		{24 * time.Hour, "c"},
		{24*time.Hour + time.Nanosecond, "a"},
		{48 * time.Hour, "a"},
	}
	for _, tt := range tests {
		c := newClock()
		r := route.New(route.Options{Now: c.Now})
		addrs := []string{"a", "b", "c"}
		picks(t, r, 1, route.LeastRecentlyUsed, addrs, 2)
		c.Advance(tt.advance)
		if got := pick(t, r, 1, route.LeastRecentlyUsed, addrs); got != tt.want {
			t.Errorf("LRU fire after %v = %q, want %q", tt.advance, got, tt.want)
		}
	}

	// The window restarts at the reset: state lives another 24 h.
	c := newClock()
	r := route.New(route.Options{Now: c.Now})
	addrs := []string{"a", "b", "c"}
	c.Advance(25 * time.Hour)
	if got := strings.Join([]string{
		pick(t, r, 1, route.LeastRecentlyUsed, addrs),
		pick(t, r, 1, route.LeastRecentlyUsed, addrs),
	}, " "); got != "a b" {
		t.Errorf("LRU fires after the first reset = %q, want %q", got, "a b")
	}
	c.Advance(23 * time.Hour)
	if got := pick(t, r, 1, route.LeastRecentlyUsed, addrs); got != "c" {
		t.Errorf("LRU fire 23 h after the reset = %q, want c", got)
	}
}

func TestForget(t *testing.T) {
	t.Parallel()
	r := newRouter(t)
	addrs := []string{"a", "b", "c"}
	picks(t, r, 1, route.LeastRecentlyUsed, addrs, 2)
	picks(t, r, 2, route.LeastRecentlyUsed, addrs, 1)
	r.Forget(1)
	r.Forget(99) // unknown jobs are fine
	if got := pick(t, r, 1, route.LeastRecentlyUsed, addrs); got != "a" {
		t.Errorf("LRU after Forget = %q, want a fresh start at a", got)
	}
	if got := pick(t, r, 2, route.LeastRecentlyUsed, addrs); got != "b" {
		t.Errorf("LRU for another job after Forget(1) = %q, want b", got)
	}
}

// TestConcurrentRoute runs many dispatchers at once, as the leader does, while groups change
// and jobs are forgotten; run it with -race. Fires of one job still rotate exactly.
func TestConcurrentRoute(t *testing.T) {
	t.Parallel()
	const (
		workers = 8
		fires   = 600 // per worker; a multiple of len(addrs)
	)
	r := route.New(route.Options{Prober: &routetest.Prober{}})
	addrs := addrList(6)
	shrunk := addrs[1:]

	var mu sync.Mutex
	round, lru := make(map[string]int), make(map[string]int)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			localRound, localLRU := make(map[string]int), make(map[string]int)
			for i := range fires {
				a, err := tryPick(r, 1, route.Round, addrs)
				b, err2 := tryPick(r, 2, route.LeastRecentlyUsed, addrs)
				if err := errors.Join(err, err2); err != nil {
					t.Error(err)
					return
				}
				localRound[a]++
				localLRU[b]++
				job := int64(100 + (w*fires+i)%50)
				s := allStrategies[i%len(allStrategies)]
				set := addrs
				if i%7 == 0 {
					set = shrunk
				}
				if _, err := r.Route(context.Background(), job, s, set); err != nil {
					t.Errorf("Route(%d, %v) error = %v", job, s, err)
					return
				}
				if i%97 == 0 {
					r.Forget(job)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for a, n := range localRound {
				round[a] += n
			}
			for a, n := range localLRU {
				lru[a] += n
			}
		})
	}
	wg.Wait()
	want := workers * fires / len(addrs)
	for _, a := range addrs {
		if round[a] != want || lru[a] != want {
			t.Errorf("%s chosen %d times by ROUND and %d by LRU in %d concurrent fires, want %d each",
				a, round[a], lru[a], workers*fires, want)
		}
	}
}

// TestExecutorLeaves covers an executor leaving between fires for the strategies whose answer
// depends on membership: CONSISTENT_HASH moves only the leaver's jobs, and SHARDING_BROADCAST
// numbers the shards again over the executors still online, so no shard index is skipped.
func TestExecutorLeaves(t *testing.T) {
	t.Parallel()
	r := newRouter(t)
	all := addrList(8)
	leaver := all[3]
	rest := slices.Delete(slices.Clone(all), 3, 4)

	const jobs = 5000
	moved := 0
	for job := range int64(jobs) {
		was := pick(t, r, job, route.ConsistentHash, all)
		got := pick(t, r, job, route.ConsistentHash, rest)
		switch {
		case was == leaver:
			moved++
		case got != was:
			t.Fatalf("CONSISTENT_HASH job %d moved from %s to %s when %s left, want only the leaver's jobs to move", job, was, got, leaver)
		}
	}
	if moved == 0 || moved > 2*jobs/len(all) {
		t.Errorf("CONSISTENT_HASH: %d of %d jobs were on the leaver, want about %d", moved, jobs, jobs/len(all))
	}

	d, err := r.Route(context.Background(), 1, route.ShardingBroadcast, rest)
	if err != nil {
		t.Fatalf("Route error = %v", err)
	}
	for i, got := range d.Targets {
		if want := (route.Target{Address: rest[i], ShardIndex: i, ShardTotal: len(rest)}); got != want {
			t.Errorf("SHARDING_BROADCAST after %s left: target %d = %+v, want %+v", leaver, i, got, want)
		}
	}
	if len(d.Targets) != len(rest) {
		t.Errorf("SHARDING_BROADCAST after %s left: %d targets, want %d", leaver, len(d.Targets), len(rest))
	}
}
