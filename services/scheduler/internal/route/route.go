// Package route is the scheduler leader's routing decision: which executor(s) of a job's group
// receive one fire. It implements XXL-JOB's ten ExecutorRouteStrategyEnum strategies with the
// same semantics, so jobs migrated from XXL-JOB land where their owners expect.
//
// All state (ROUND counters, LFU counts, LRU order, hash rings) lives in the leader's memory and
// is not shared: a new leader starts fresh, as a new XXL-JOB admin node does. Per-job state is
// dropped every 24 hours, as in XXL-JOB, and by Forget. Only FAILOVER and BUSYOVER make calls to
// executors, because probing is what they are for; every other strategy decides locally.
package route

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Strategy mirrors the API's RouteStrategy values, with the same numbers, so adapters convert
// with a plain cast and no table.
type Strategy int

// The ten strategies, numbered as in the API (FIRST=1 … SHARDING_BROADCAST=10).
const (
	First Strategy = 1 + iota
	Last
	Round
	Random
	ConsistentHash
	LeastFrequentlyUsed
	LeastRecentlyUsed
	Failover
	Busyover
	ShardingBroadcast
)

var strategyNames = [...]string{
	First:               "FIRST",
	Last:                "LAST",
	Round:               "ROUND",
	Random:              "RANDOM",
	ConsistentHash:      "CONSISTENT_HASH",
	LeastFrequentlyUsed: "LEAST_FREQUENTLY_USED",
	LeastRecentlyUsed:   "LEAST_RECENTLY_USED",
	Failover:            "FAILOVER",
	Busyover:            "BUSYOVER",
	ShardingBroadcast:   "SHARDING_BROADCAST",
}

// String returns XXL-JOB's name for the strategy, which users know from the admin UI and which
// trigger messages quote.
func (s Strategy) String() string {
	if s.valid() {
		return strategyNames[s]
	}
	return "Strategy(" + strconv.Itoa(int(s)) + ")"
}

func (s Strategy) valid() bool { return s >= First && s <= ShardingBroadcast }

// Prober asks executors whether they are alive (FAILOVER) or idle for a job (BUSYOVER). The
// router declares it so that it needs no RPC code; the implementation bounds each call's time.
type Prober interface {
	// Beat reports whether the executor answers at all; nil means alive.
	Beat(ctx context.Context, addr string) error
	// IdleBeat reports whether the executor is free to run jobID now; reason says why not.
	IdleBeat(ctx context.Context, addr string, jobID int64) (idle bool, reason string, err error)
}

// Target is one executor chosen for a fire, with its shard. Strategies other than
// SHARDING_BROADCAST give shard 0 of 1, as XXL-JOB does, so executors always see a valid shard.
type Target struct {
	Address    string
	ShardIndex int
	ShardTotal int
}

// Decision is the routing result plus a human-readable account of it for the trigger message,
// so an operator can see why a fire went where it did.
type Decision struct {
	Targets []Target
	Message string
}

// Errors Route returns; callers record them as trigger failures.
var (
	// ErrNoExecutors: the address list is empty, so there is nothing to route to.
	ErrNoExecutors = errors.New("no executors online")
	// ErrNoLiveExecutor: FAILOVER found no executor that answers a beat.
	ErrNoLiveExecutor = errors.New("no executor answered the beat")
	// ErrNoIdleExecutor: BUSYOVER found no executor idle for the job.
	ErrNoIdleExecutor = errors.New("no executor is idle")
	// ErrNoProber: FAILOVER or BUSYOVER was asked for but the Router has no Prober.
	ErrNoProber = errors.New("no prober configured")
	// ErrUnknownStrategy: the strategy number is not one of the ten.
	ErrUnknownStrategy = errors.New("unknown route strategy")
)

// Options configures a Router; the zero value is ready for production use.
type Options struct {
	// Prober probes executors for FAILOVER and BUSYOVER; without it those strategies fail.
	Prober Prober
	// Rand, if set, makes random choices reproducible in tests. Draws from it are serialised
	// by a mutex; when nil the router uses the runtime's lock-free per-thread source.
	Rand *rand.Rand
	// Now is the clock that drives the 24 h state reset; nil means time.Now.
	Now func() time.Time
	// VirtualNodes is the number of CONSISTENT_HASH ring nodes per address; 0 means 100, as
	// in XXL-JOB (other values move jobs relative to XXL-JOB's placement).
	VirtualNodes int
}

// stateTTL is how long per-job state lives before it is dropped, as XXL-JOB's CACHE_VALID_TIME.
const stateTTL = 24 * time.Hour

// defaultVirtualNodes is XXL-JOB's VIRTUAL_NODE_NUM.
const defaultVirtualNodes = 100

// Router makes routing decisions. It is safe for concurrent use by many dispatch goroutines:
// per-job state sits in a sharded map with a lock per job, so jobs never contend with each other.
type Router struct {
	prober Prober
	now    func() time.Time
	vnodes int

	rndMu sync.Mutex
	rnd   *rand.Rand

	resetAt atomic.Int64 // UnixNano after which all per-job state is dropped
	jobs    [numShards]shard
	sets    setCache
}

// New returns a Router with empty state.
func New(opts Options) *Router {
	r := &Router{
		prober: opts.Prober,
		now:    opts.Now,
		vnodes: opts.VirtualNodes,
		rnd:    opts.Rand,
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.vnodes <= 0 {
		r.vnodes = defaultVirtualNodes
	}
	for i := range r.jobs {
		r.jobs[i].m = make(map[int64]*jobState)
	}
	r.sets.init(maphash.MakeSeed())
	r.resetAt.Store(r.now().Add(stateTTL).UnixNano())
	return r
}

// Route picks the targets for one fire of jobID among addrs, which the caller passes sorted and
// deduplicated; Route does not modify it. On error the Decision's Message, when set, still
// explains what was tried (FAILOVER and BUSYOVER list every probe).
func (r *Router) Route(ctx context.Context, jobID int64, s Strategy, addrs []string) (Decision, error) {
	if !s.valid() {
		return Decision{}, fmt.Errorf("route: strategy %d: %w", int(s), ErrUnknownStrategy)
	}
	if len(addrs) == 0 {
		return Decision{Message: "route " + s.String() + " over 0 executors: no executors online"}, ErrNoExecutors
	}
	switch s {
	case First:
		return decide(s, addrs, 0, 0, 0), nil
	case Last:
		return decide(s, addrs, len(addrs)-1, 0, 0), nil
	case Round:
		r.maybeReset()
		i, count := r.round(r.job(jobID), len(addrs))
		return decide(s, addrs, i, count, 0), nil
	case Random:
		return decide(s, addrs, r.intN(len(addrs)), 0, 0), nil
	case ConsistentHash:
		st := r.job(jobID)
		rg := r.setFor(st, addrs).ring(r.vnodes)
		return decide(s, addrs, rg.lookup(st.key), uint64(st.key), uint64(len(rg.hashes))), nil
	case LeastFrequentlyUsed:
		r.maybeReset()
		st := r.job(jobID)
		i, was := r.leastFrequent(st, r.setFor(st, addrs))
		return decide(s, addrs, i, was, 0), nil
	case LeastRecentlyUsed:
		r.maybeReset()
		st := r.job(jobID)
		return decide(s, addrs, r.leastRecent(st, r.setFor(st, addrs)), 0, 0), nil
	case Failover:
		return r.failover(ctx, addrs)
	case Busyover:
		return r.busyover(ctx, jobID, addrs)
	default: // ShardingBroadcast
		return broadcast(addrs), nil
	}
}

// Forget drops a job's routing state, for a deleted job or a changed strategy, so the next fire
// starts fresh instead of inheriting counts from another strategy or a dead job.
func (r *Router) Forget(jobID int64) {
	s := r.shard(jobID)
	s.mu.Lock()
	delete(s.m, jobID)
	s.mu.Unlock()
}

// intN draws a uniform int in [0, n).
func (r *Router) intN(n int) int {
	if r.rnd == nil {
		return rand.IntN(n)
	}
	r.rndMu.Lock()
	v := r.rnd.IntN(n)
	r.rndMu.Unlock()
	return v
}

// maybeReset drops all per-job state once the 24 h window has passed, as XXL-JOB clears its
// ROUND, LFU and LRU caches. One caller wins the swap and clears; the others carry on.
func (r *Router) maybeReset() {
	now := r.now().UnixNano()
	deadline := r.resetAt.Load()
	if now <= deadline {
		return
	}
	if !r.resetAt.CompareAndSwap(deadline, now+int64(stateTTL)) {
		return
	}
	for i := range r.jobs {
		s := &r.jobs[i]
		s.mu.Lock()
		s.m = make(map[int64]*jobState)
		s.mu.Unlock()
	}
}

// maxListed caps how many addresses a message lists, so a 1,000-executor group does not put
// 20 KB into every trigger message.
const maxListed = 8

// writeHeader starts a message: "route ROUND over 3 executors [a b c]: ".
func writeHeader(b *strings.Builder, s Strategy, addrs []string, extra int) {
	listed := addrs[:min(len(addrs), maxListed)]
	size := 64 + extra
	for _, a := range listed {
		size += len(a) + 1
	}
	b.Grow(size)
	b.WriteString("route ")
	b.WriteString(s.String())
	b.WriteString(" over ")
	writeUint(b, uint64(len(addrs)))
	if len(addrs) == 1 {
		b.WriteString(" executor [")
	} else {
		b.WriteString(" executors [")
	}
	for i, a := range listed {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(a)
	}
	if more := len(addrs) - len(listed); more > 0 {
		b.WriteString(" +")
		writeUint(b, uint64(more))
		b.WriteString(" more")
	}
	b.WriteString("]: ")
}

func writeUint(b *strings.Builder, v uint64) {
	var buf [20]byte
	b.Write(strconv.AppendUint(buf[:0], v, 10))
}

// decide builds the Decision for a single-target strategy that chose addrs[i]; x and y are the
// strategy's own figures for the message (counter, hash key and ring size, previous use count).
func decide(s Strategy, addrs []string, i int, x, y uint64) Decision {
	var b strings.Builder
	writeHeader(&b, s, addrs, len(addrs[i])+48)
	b.WriteString("chose ")
	b.WriteString(addrs[i])
	switch s {
	case Round:
		b.WriteString(" (counter ")
		writeUint(&b, x)
		b.WriteByte(')')
	case ConsistentHash:
		b.WriteString(" (key ")
		writeUint(&b, x)
		b.WriteString(" on a ring of ")
		writeUint(&b, y)
		b.WriteString(" nodes)")
	case LeastFrequentlyUsed:
		b.WriteString(" (use count was ")
		writeUint(&b, x)
		b.WriteByte(')')
	case LeastRecentlyUsed:
		b.WriteString(" (least recently used)")
	}
	return single(addrs[i], b.String())
}

// broadcast sends one fire to every address, shard i of n, as XXL-JOB's SHARDING_BROADCAST.
func broadcast(addrs []string) Decision {
	targets := make([]Target, len(addrs))
	for i, a := range addrs {
		targets[i] = Target{Address: a, ShardIndex: i, ShardTotal: len(addrs)}
	}
	var b strings.Builder
	writeHeader(&b, ShardingBroadcast, addrs, 48)
	b.WriteString("broadcast to all ")
	writeUint(&b, uint64(len(addrs)))
	b.WriteString(", shards 0..")
	writeUint(&b, uint64(len(addrs)-1))
	return Decision{Targets: targets, Message: b.String()}
}
