package scheduler

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	"github.com/jobmesh/jobmesh/internal/clock"
)

// executorHealth is what the scheduler learnt of each executor from its Run answers, so that
// routing needs no RPC to use it: an executor whose connection failed is passed over for downFor
// or until it answers again (its registration outlives it by up to its lease), and one that said
// it has no room (RunResponse.load, RunAck.busy) is passed over for loadFresh while another
// executor of the group has room.
type executorHealth struct {
	clk clock.Clock
	// room, when set, is told that an executor answered with free run slots (its backlog may
	// send on at once).
	room func(addr string)

	mu sync.Mutex
	m  map[string]*executorState
}

// executorState is one executor as its last answers left it.
type executorState struct {
	downUntil time.Time // passed over by routing until then
	downWhy   string
	free      int32     // run slots free at loadAt, less the fires sent since (take)
	loadAt    time.Time // when free was learnt; zero for never (an executor older than load)
	// backoff is how long fires waiting for it wait before the next try: it doubles while the
	// executor is full or unreachable, and is 0 once it has room. fullAt is when a refusal for
	// want of room last doubled it.
	backoff time.Duration
	fullAt  time.Time
	seen    time.Time // last answer or failure, for prune
}

const (
	// downFor is how long routing passes over an executor whose connection failed: about an
	// executor's registration TTL, by when a dead one has left the view.
	downFor = 10 * time.Second
	// loadFresh is how long an executor's reported load counts.
	loadFresh = time.Second
	// minRetry and maxRetry bound the pause before fires waiting for a full or unreachable
	// executor try it again.
	minRetry, maxRetry = 50 * time.Millisecond, time.Second
)

func newExecutorHealth(clk clock.Clock) *executorHealth {
	return &executorHealth{clk: clk, m: map[string]*executorState{}}
}

// stateLocked returns addr's state, creating it.
func (h *executorHealth) stateLocked(addr string, now time.Time) *executorState {
	st := h.m[addr]
	if st == nil {
		st = &executorState{}
		h.m[addr] = st
	}
	st.seen = now
	return st
}

// answered records that addr answered a Run call, with its load (nil from an older executor).
func (h *executorHealth) answered(addr string, load *executorv1.ExecutorLoad) {
	now := h.clk.Now()
	h.mu.Lock()
	st := h.stateLocked(addr, now)
	st.downUntil, st.downWhy = time.Time{}, ""
	room := false
	if load != nil {
		st.free, st.loadAt = load.GetFree(), now
		room = st.free > 0
	}
	if load == nil || room {
		st.backoff = 0
	}
	h.mu.Unlock()
	if room && h.room != nil {
		h.room(addr)
	}
}

// full records that addr refused a fire for want of room. The pause doubles once per pause: the
// refusals of one Run answer (a burst it had no room for) are one, not one each, which would
// have made the first pause the longest.
func (h *executorHealth) full(addr string) {
	now := h.clk.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.stateLocked(addr, now)
	st.free, st.loadAt = 0, now
	if st.backoff == 0 || now.Sub(st.fullAt) >= st.backoff {
		st.backOffLocked()
		st.fullAt = now
	}
}

// backOffLocked doubles the pause before the next try, within [minRetry, maxRetry].
func (st *executorState) backOffLocked() {
	st.backoff = min(max(2*st.backoff, minRetry), maxRetry)
}

// unreachable records that a call to addr never reached it (err).
func (h *executorHealth) unreachable(addr string, err error) {
	now := h.clk.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.stateLocked(addr, now)
	st.downUntil, st.downWhy = now.Add(downFor), status.Convert(err).Message()
	st.backOffLocked()
}

// take returns how many of want waiting fires to send addr now: as many as it had free slots
// when it last said (those are then spoken for), 1 to ask again when it had none, and all when
// it did not say lately.
func (h *executorHealth) take(addr string, want int) int {
	now := h.clk.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.m[addr]
	switch {
	case st == nil || st.loadAt.IsZero() || now.Sub(st.loadAt) > loadFresh:
		return want
	case st.free <= 0:
		return min(want, 1)
	}
	n := min(want, int(st.free))
	st.free -= int32(n)
	return n
}

// hasRoom reports whether addr had a free slot when it last said (true when it never said, or
// not lately).
func (h *executorHealth) hasRoom(addr string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.roomLocked(h.m[addr], h.clk.Now())
}

func (h *executorHealth) roomLocked(st *executorState, now time.Time) bool {
	return st == nil || st.loadAt.IsZero() || now.Sub(st.loadAt) > loadFresh || st.free > 0
}

// retryIn is how long fires waiting for addr wait before they try it again: 0 while it has room
// and is reachable.
func (h *executorHealth) retryIn(addr string) time.Duration {
	now := h.clk.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.m[addr]
	if st == nil || h.roomLocked(st, now) && !now.Before(st.downUntil) {
		return 0
	}
	return max(st.backoff, minRetry)
}

// down reports whether routing passes over addr as unreachable now.
func (h *executorHealth) down(addr string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.m[addr]
	return st != nil && h.clk.Now().Before(st.downUntil)
}

// usable returns the addresses of addrs that routing should choose among: without executors
// whose connection failed lately, and, when byLoad, without those that said they are full while
// another has room. When none is left it keeps the full ones (they take fires again when they
// have room), or, when every one is unreachable, all of addrs (the answer tells). note says whom
// it passed over.
func (h *executorHealth) usable(addrs []string, byLoad bool) (use []string, note string) {
	now := h.clk.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	out := false // nearly always: nothing to pass over, and nothing to allocate
	for _, a := range addrs {
		if st := h.m[a]; st != nil && (now.Before(st.downUntil) || byLoad && !h.roomLocked(st, now)) {
			out = true
			break
		}
	}
	if !out {
		return addrs, ""
	}
	var down, full []string
	for _, a := range addrs {
		st := h.m[a]
		switch {
		case st == nil:
			use = append(use, a)
		case now.Before(st.downUntil):
			down = append(down, a+" ("+st.downWhy+")")
		case byLoad && !h.roomLocked(st, now):
			full = append(full, a)
		default:
			use = append(use, a)
		}
	}
	switch {
	case len(use) == 0 && len(full) == 0:
		return addrs, ""
	case len(use) == 0:
		use, full = full, nil
	}
	var b strings.Builder
	if len(down) > 0 {
		fmt.Fprintf(&b, "; passed over, unreachable: %s", strings.Join(down, ", "))
	}
	if len(full) > 0 {
		fmt.Fprintf(&b, "; passed over, full: %s", strings.Join(full, ", "))
	}
	return use, b.String()
}

// prune forgets executors last heard of before cutoff.
func (h *executorHealth) prune(cutoff time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for a, st := range h.m {
		if st.seen.Before(cutoff) {
			delete(h.m, a)
		}
	}
}

// neverSent reports whether a Run call's error proves the executor never received it: its
// connection was refused or never became ready, or the fire expired in its lane before its call
// left. The fire may then go to another executor. Any other error leaves the fire possibly
// taken.
func neverSent(err error) bool {
	if errors.Is(err, errNeverSent) {
		return true
	}
	return connectionFailed(err)
}

// connectionFailed reports whether a call failed because no connection to the executor was
// ready (refused, not dialled, handshake not done in time): gRPC fails such a call before it
// sends anything.
func connectionFailed(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	msg := st.Message()
	switch st.Code() {
	case codes.Unavailable:
		return strings.HasPrefix(msg, "connection error:")
	case codes.DeadlineExceeded, codes.Canceled:
		return strings.HasSuffix(msg, "while waiting for connections to become ready")
	}
	return false
}

// connectionRefused reports whether a call failed because nothing listens at the executor's
// address: it is not running there (a Seen that fails so leaves nothing in doubt).
func connectionRefused(err error) bool {
	return connectionFailed(err) && strings.Contains(status.Convert(err).Message(), "connection refused")
}

// definiteRefusal reports whether a Run call's error is the executor's own answer that it took
// none of the call's fires (a bad token, a call it does not serve, a message too large): the
// fire is recorded as failed, as a rejection is.
func definiteRefusal(err error) bool {
	switch status.Code(err) {
	case codes.Unauthenticated, codes.PermissionDenied, codes.InvalidArgument, codes.Unimplemented,
		codes.ResourceExhausted, codes.FailedPrecondition, codes.NotFound, codes.AlreadyExists, codes.OutOfRange:
		return true
	}
	return false
}

// errNeverSent marks the error of a fire whose call never left: its dispatch deadline passed
// while it waited in its executor's lane (expiredInLane), or the executor's address could not be
// dialled.
var errNeverSent = errors.New("not sent")

// expiredInLane is the error of a fire whose context ended (ctxErr) while it waited in its
// executor's lane for the call ahead of it.
func expiredInLane(ctxErr error) error {
	return fmt.Errorf("%w: its dispatch deadline passed while it waited for the call ahead of it: %w", errNeverSent, status.FromContextError(ctxErr).Err())
}
