package route

import (
	"slices"
	"sync"
	"sync/atomic"
)

// numShards spreads jobs over independent locks so dispatch goroutines rarely meet.
const numShards = 64

// shard is one slice of the job map. The padding keeps neighbouring shards' locks off one
// cache line; its exact size is not critical.
type shard struct {
	mu sync.RWMutex
	m  map[int64]*jobState
	_  [32]byte
}

// jobState is everything the router remembers about one job. A job uses one strategy at a
// time, but each strategy keeps its own fields so a strategy change cannot corrupt another's.
type jobState struct {
	round atomic.Uint64           // next ROUND counter value
	set   atomic.Pointer[addrSet] // address set of the last call, to skip re-interning
	key   uint32                  // CONSISTENT_HASH key of the job id

	mu  sync.Mutex // guards lfu and lru
	lfu usage
	lru usage
}

// usage is a per-job table over one address set: use counts for LFU, last-use ticks for LRU.
// vals[i] belongs to set.addrs[i].
type usage struct {
	set  *addrSet
	vals []uint64
	tick uint64 // LRU clock; the latest use holds the largest tick
}

func (r *Router) shard(jobID int64) *shard {
	return &r.jobs[uint64(jobID)%numShards]
}

// job returns jobID's state, creating it on first use.
func (r *Router) job(jobID int64) *jobState {
	s := r.shard(jobID)
	s.mu.RLock()
	st := s.m[jobID]
	s.mu.RUnlock()
	if st != nil {
		return st
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if st = s.m[jobID]; st == nil {
		st = &jobState{key: jobKey(jobID)}
		// XXL-JOB starts a job's ROUND counter at a random 0..99 so that jobs created
		// together do not all hit the first executor first.
		st.round.Store(uint64(r.intN(roundSeedRange)))
		s.m[jobID] = st
	}
	return st
}

// setFor returns the interned address set equal to addrs. A job's group rarely changes, so the
// set of its last call usually matches and costs one comparison.
func (r *Router) setFor(st *jobState, addrs []string) *addrSet {
	if s := st.set.Load(); s != nil && slices.Equal(s.addrs, addrs) {
		return s
	}
	s := r.sets.intern(addrs)
	st.set.Store(s)
	return s
}

// ROUND constants from XXL-JOB's ExecutorRouteRound.
const (
	roundSeedRange   = 100       // the counter starts at a random 0..99
	roundReseedAbove = 1_000_000 // past this the counter restarts at random
)

// round returns the index ROUND picks among n addresses and the counter it used. The counter is
// atomic, so concurrent fires of one job still visit addresses in turn. Because the index is
// count % n over the current list, an executor leaving mid-round only shifts the rotation.
func (r *Router) round(st *jobState, n int) (int, uint64) {
	c := st.round.Add(1) - 1
	if c > roundReseedAbove {
		fresh := uint64(r.intN(roundSeedRange))
		st.round.CompareAndSwap(c+1, fresh+1) // a concurrent reseed may win; either is fine
		c = fresh
	}
	return int(c % uint64(n)), c
}

// lfuReseedAbove is XXL-JOB's cap on an LFU count; a larger count is reseeded at random.
const lfuReseedAbove = 1_000_000

// leastFrequent picks the address with the smallest use count, the first in address order on a
// tie, and counts the use. It returns the index and the count before this use.
func (r *Router) leastFrequent(st *jobState, set *addrSet) (int, uint64) {
	n := len(set.addrs)
	st.mu.Lock()
	defer st.mu.Unlock()
	u := &st.lfu
	if u.set != set {
		// As XXL-JOB: a new address starts at a random count in [0, n) to soften its first
		// burst; an address that left loses its count.
		u.resync(set, func() uint64 { return uint64(r.intN(n)) })
	}
	best := 0
	for i, v := range u.vals {
		if v > lfuReseedAbove {
			v = uint64(r.intN(n))
			u.vals[i] = v
		}
		if v < u.vals[best] {
			best = i
		}
	}
	was := u.vals[best]
	u.vals[best]++
	return best, was
}

// leastRecent picks the address used longest ago and marks it as used now, as XXL-JOB's
// access-ordered LinkedHashMap does. New addresses join as the most recently used, in address
// order, so on a fresh job the first address goes first.
func (r *Router) leastRecent(st *jobState, set *addrSet) int {
	st.mu.Lock()
	defer st.mu.Unlock()
	u := &st.lru
	if u.set != set {
		u.resync(set, func() uint64 { u.tick++; return u.tick })
	}
	best := 0
	for i, v := range u.vals {
		if v < u.vals[best] {
			best = i
		}
	}
	u.tick++
	u.vals[best] = u.tick
	return best
}

// resync moves the table to a new address set: addresses in both keep their values, new ones
// take fresh(), departed ones are dropped. It runs only when the group's membership changes.
func (u *usage) resync(set *addrSet, fresh func() uint64) {
	old := make(map[string]uint64)
	if u.set != nil {
		for i, a := range u.set.addrs {
			old[a] = u.vals[i]
		}
	}
	vals := make([]uint64, len(set.addrs))
	for i, a := range set.addrs {
		if v, ok := old[a]; ok {
			vals[i] = v
		} else {
			vals[i] = fresh()
		}
	}
	u.set, u.vals = set, vals
}
