package partition

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// owned returns n partitions: the first a of them led by "a", the next b by "b", the rest free.
func owned(n int, leaders ...string) []string {
	o := make([]string, n)
	copy(o, leaders)
	return o
}

func rep(id string, n int) []string { return slices.Repeat([]string{id}, n) }

func TestPlan(t *testing.T) {
	t.Parallel()
	cat := func(parts ...[]string) []string { return slices.Concat(parts...) }
	for _, tc := range []struct {
		name              string
		me                string
		members           []string
		owners            []string
		acquire, release  int // how many
		wantAcq, wantRele []int
	}{
		{name: "alone takes all", me: "a", members: []string{"a"}, owners: owned(4), acquire: 4, wantAcq: []int{0, 1, 2, 3}},
		{name: "counts itself when missing", me: "a", members: nil, owners: owned(4), acquire: 4},
		{name: "no partitions", me: "a", members: []string{"a"}, owners: nil},
		{name: "takes up to floor while all start", me: "a", members: []string{"a", "b", "c"}, owners: owned(16), acquire: 5},
		{name: "takes up to ceil once none starves", me: "a", members: []string{"a", "b", "c"},
			owners: owned(16, cat(rep("b", 5), rep("c", 5))...), acquire: 6},
		{name: "at ceil takes nothing", me: "a", members: []string{"a", "b", "c"},
			owners: owned(16, cat(rep("a", 6), rep("b", 5), rep("c", 5))...), acquire: 0},
		{name: "at ceil gives one up for a starting member", me: "a", members: []string{"a", "b", "c"},
			owners: owned(16, rep("a", 6)...), release: 1},
		{name: "only up to floor while another starves", me: "a", members: []string{"a", "b", "c"},
			owners: owned(16, cat(rep("b", 6), rep("c", 2))...), acquire: 5},
		{name: "at floor leaves the free ones to the starving", me: "a", members: []string{"a", "b", "c"},
			owners: owned(16, cat(rep("a", 5), rep("b", 6), rep("c", 2))...), acquire: 0},
		{name: "starving takes up to ceil once no one else starves", me: "c", members: []string{"a", "b", "c"},
			owners: owned(16, cat(rep("a", 5), rep("b", 5), rep("c", 2))...), acquire: 4},
		{name: "gives up down to ceil", me: "a", members: []string{"a", "b"},
			owners: owned(16, cat(rep("a", 12), rep("b", 4))...), release: 4},
		{name: "gives up down to floor for a newcomer", me: "a", members: []string{"a", "b", "c"},
			owners: owned(16, cat(rep("a", 8), rep("b", 8))...), release: 3},
		{name: "at floor keeps its share for a newcomer", me: "a", members: []string{"a", "b", "c"},
			owners: owned(16, cat(rep("a", 5), rep("b", 11))...), release: 0},
		{name: "a dead owner's partitions are not free", me: "a", members: []string{"a", "b"},
			owners: owned(16, cat(rep("a", 5), rep("b", 5), rep("x", 6))...), acquire: 0},
		{name: "dead owners lead nothing in the count", me: "a", members: []string{"a"},
			owners: owned(4, "x", "x"), acquire: 2, wantAcq: []int{2, 3}},
		{name: "busy partitions are neither free nor counted", me: "a", members: []string{"a", "b"},
			owners: owned(4, busy, "a", "b"), acquire: 1, wantAcq: []int{3}},
		{name: "fewer partitions than members", me: "a", members: []string{"a", "b", "c"}, owners: owned(2), acquire: 1},
		{name: "fewer partitions than members, one each at most", me: "a", members: []string{"a", "b", "c"},
			owners: owned(2, "a", "a"), release: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			acq, rel := plan(tc.me, tc.members, tc.owners, nil)
			if len(acq) != tc.acquire || len(rel) != tc.release {
				t.Fatalf("plan = acquire %v, release %v; want %d acquired, %d released", acq, rel, tc.acquire, tc.release)
			}
			if tc.wantAcq != nil && !slices.Equal(acq, tc.wantAcq) {
				t.Errorf("acquire = %v, want %v", acq, tc.wantAcq)
			}
			for _, p := range acq {
				if tc.owners[p] != "" {
					t.Errorf("acquires partition %d held by %q", p, tc.owners[p])
				}
			}
			for _, p := range rel {
				if tc.owners[p] != tc.me {
					t.Errorf("releases partition %d held by %q", p, tc.owners[p])
				}
			}
			if !slices.IsSorted(acq) || !slices.IsSorted(rel) {
				t.Errorf("plan = %v, %v; want sorted", acq, rel)
			}
		})
	}
}

// TestPlanDeterministic: the same view gives the same plan, and release picks the partitions me
// ranks worst (the ones another member wins first).
func TestPlanDeterministic(t *testing.T) {
	t.Parallel()
	members := []string{"a", "b", "c"}
	owners := owned(16, rep("a", 16)...)
	acq1, rel1 := plan("a", members, owners, nil)
	acq2, rel2 := plan("a", []string{"c", "b", "a"}, owners, nil)
	if !slices.Equal(acq1, acq2) || !slices.Equal(rel1, rel2) {
		t.Errorf("plan differs by member order: %v %v vs %v %v", acq1, rel1, acq2, rel2)
	}
	// a gives up 11 of 16 (down to floor 5): the 5 it keeps are those it ranks best.
	kept := 0
	for p := range owners {
		if !slices.Contains(rel1, p) {
			kept++
			for _, q := range rel1 {
				if rankOf(p, "a", members) > rankOf(q, "a", members) {
					t.Errorf("keeps %d (rank %d) and releases %d (rank %d)", p, rankOf(p, "a", members), q, rankOf(q, "a", members))
				}
			}
		}
	}
	if kept != 5 {
		t.Errorf("keeps %d partitions, want 5", kept)
	}
}

func rankOf(p int, me string, ids []string) int {
	n := 0
	for _, id := range ids {
		if id != me && score(p, id) > score(p, me) {
			n++
		}
	}
	return n
}

// sim is a cluster of members planning on the partitions' owners.
type sim struct {
	owners  []string
	members []string
}

// round lets every member plan on the same snapshot (as racing replicas do) and then applies
// the plans in a random order, an acquire only if the partition is still free (the etcd txn).
// It reports whether anything changed.
func (s *sim) round(rng *rand.Rand) bool {
	type step struct {
		me       string
		acq, rel []int
	}
	var steps []step
	for _, me := range s.members {
		acq, rel := plan(me, s.members, s.owners, nil)
		steps = append(steps, step{me, acq, rel})
	}
	rng.Shuffle(len(steps), func(i, j int) { steps[i], steps[j] = steps[j], steps[i] })
	changed := false
	for _, st := range steps {
		for _, p := range st.rel {
			s.owners[p] = ""
			changed = true
		}
		for _, p := range st.acq {
			if s.owners[p] == "" {
				s.owners[p] = st.me
				changed = true
			}
		}
	}
	return changed
}

func (s *sim) counts() map[string]int {
	c := map[string]int{}
	for _, o := range s.owners {
		c[o]++
	}
	return c
}

// converge runs rounds until nothing changes, failing after 20.
func (s *sim) converge(t *testing.T, rng *rand.Rand) {
	t.Helper()
	for range 20 {
		if !s.round(rng) {
			return
		}
	}
	t.Fatalf("no convergence after 20 rounds: %v", s.counts())
}

// balanced checks that every member leads floor or ceil and no partition is free.
func (s *sim) balanced(t *testing.T) {
	t.Helper()
	c := s.counts()
	if c[""] != 0 {
		t.Errorf("%d partitions free: %v", c[""], s.owners)
	}
	p, n := len(s.owners), len(s.members)
	for _, m := range s.members {
		if c[m] < p/n || c[m] > (p+n-1)/n {
			t.Errorf("%s leads %d of %d partitions among %d members; want %d to %d (%v)", m, c[m], p, n, p/n, (p+n-1)/n, c)
		}
	}
}

func TestPlanConverges(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ partitions, members int }{
		{16, 1}, {16, 2}, {16, 3}, {16, 5}, {16, 16}, {16, 20}, {64, 3}, {64, 7}, {1, 3},
	} {
		t.Run(fmt.Sprintf("P%d_N%d", tc.partitions, tc.members), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(tc.partitions), uint64(tc.members)))
			s := &sim{owners: make([]string, tc.partitions)}
			for i := range tc.members {
				s.members = append(s.members, fmt.Sprintf("replica-%d", i))
			}
			s.converge(t, rng)
			s.balanced(t)
		})
	}
}

// TestPlanMembershipChanges: joins rebalance, a leaver's partitions (keys gone) are taken by the
// rest, and a dead member's partitions wait until their keys vanish.
func TestPlanMembershipChanges(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	s := &sim{owners: make([]string, 16), members: []string{"a"}}
	s.converge(t, rng)
	if got := s.counts()["a"]; got != 16 {
		t.Fatalf("a alone leads %d, want 16", got)
	}
	s.members = []string{"a", "b", "c"}
	s.converge(t, rng)
	s.balanced(t)

	// c leaves: its member key goes, then its partition keys.
	s.members = []string{"a", "b"}
	held := s.counts()["c"]
	if s.round(rng) {
		t.Errorf("a and b changed something while c's %d keys still exist: %v", held, s.counts())
	}
	for p, o := range s.owners {
		if o == "c" {
			s.owners[p] = ""
		}
	}
	s.converge(t, rng)
	s.balanced(t)
	if c := s.counts(); c["a"] != 8 || c["b"] != 8 {
		t.Errorf("after c left: %v, want 8 each", c)
	}
}

// TestPlanKeepsYoungLeads: a replica over its share gives up the partitions it ranks worst, less
// the young ones, which it keeps for now without giving others in their place.
func TestPlanKeepsYoungLeads(t *testing.T) {
	t.Parallel()
	owners := rep("a", 4) // a leads all 4; b joins: a's share is 2
	_, worst := plan("a", []string{"a", "b"}, owners, nil)
	if len(worst) != 2 {
		t.Fatalf("with nothing young a gives up %v, want 2", worst)
	}
	youngOf := func(ps ...int) func(int) bool { return func(p int) bool { return slices.Contains(ps, p) } }
	_, rel := plan("a", []string{"a", "b"}, owners, youngOf(worst[0]))
	if want := worst[1:]; !slices.Equal(rel, want) {
		t.Errorf("with %d young a gives up %v, want %v", worst[0], rel, want)
	}
	_, rel = plan("a", []string{"a", "b"}, owners, youngOf(worst...))
	if len(rel) != 0 {
		t.Errorf("with %v young a gives up %v, want none", worst, rel)
	}
	var settled []int
	for p := range 4 {
		if !slices.Contains(worst, p) {
			settled = append(settled, p)
		}
	}
	_, rel = plan("a", []string{"a", "b"}, owners, youngOf(settled...))
	if !slices.Equal(rel, worst) {
		t.Errorf("with %v young a gives up %v, want %v", settled, rel, worst)
	}
}
