package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
)

// Bounds of one coalesced RunRequest: well under the executor's 10,000 fires per call and gRPC's
// default 4 MiB message limit (a fire carries its glue source, up to 64 KiB).
const (
	maxBatchFires = 1000
	maxBatchBytes = 1 << 20
)

// laneKey names a lane: the executor and the access token presented to it. Fires for one
// executor under different tokens (a manual trigger's address that is not in the fire's group
// gets none) never share a call, since the token is per call.
type laneKey struct{ addr, auth string }

// runLane coalesces the Run calls to one executor. A fire that finds the lane idle starts a
// sender at once, which takes what is queued by then (at low rates, that fire alone): nothing
// waits for a timer. Fires that come while a call is in flight queue up and leave together in the
// next RunRequest, so under load an executor receives one call per round trip instead of one per
// fire — group commit.
// Nobody waits on the lane: each fire's answer goes to its callback, so the fires in flight are
// not bounded by the trigger pools' workers but by the dispatch deadline.
type runLane struct {
	pool *executorPool
	key  laneKey

	mu      sync.Mutex
	queue   []*runCall
	sending bool // a sender runs; it drains the queue before it ends
}

// runCall is one fire waiting for its executor's answer.
type runCall struct {
	ctx  context.Context
	trig *executorv1.Trigger
	due  int64 // when the fire is due to start, Unix ms; the executor holds it until then
	// skip, if set, says not to send the fire after all: it gets errNotSent instead.
	skip func() bool
	// done receives the executor's answer to the fire, or why there is none; it is called
	// once, on a goroutine of the lane's, never under the lane's lock.
	done func(*executorv1.RunAck, error)
}

// lane returns the lane of an executor and access token, creating it on first use.
func (p *executorPool) lane(addr, auth string) *runLane {
	k := laneKey{addr, auth}
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.lanes[k]
	if l == nil {
		l = &runLane{pool: p, key: k}
		p.lanes[k] = l
	}
	return l
}

// errNotSent answers a fire whose skip said, as its call was formed, not to send it.
var errNotSent = errors.New("not sent")

// runAsync queues one fire for an executor and returns at once; done gets the executor's answer
// to it, from a RunRequest of its own or one shared with the other fires queued for that
// executor meanwhile. ctx carries the fire's deadline, trace and access token; a call that
// carries several fires presents the first one's token and trace (the fires of one lane share
// their token) under the earliest deadline among them, and is not cancelled with any one fire's
// context. A fire whose context ends while it is queued is not sent (it gets the context's error
// once the call ahead of it is answered, as errNeverSent), nor one whose skip (if not nil) says
// so then (errNotSent). A fire sent before dueMs (Unix ms) carries the delay until then, taken as the
// call leaves (Trigger.start_delay_us).
func (p *executorPool) runAsync(ctx context.Context, addr string, t *executorv1.Trigger, dueMs int64, skip func() bool, done func(*executorv1.RunAck, error)) {
	l := p.lane(addr, tokenOf(ctx))
	c := &runCall{ctx: ctx, trig: t, due: dueMs, skip: skip, done: done}
	p.inflight.Add(1)
	l.mu.Lock()
	l.queue = append(l.queue, c)
	idle := !l.sending
	l.sending = true
	l.mu.Unlock()
	if idle {
		go l.drain()
	}
}

// tokenOf is the authorization a call made with ctx presents (the lane key's part).
func tokenOf(ctx context.Context) string {
	if v := metadata.ValueFromOutgoingContext(ctx, "authorization"); len(v) > 0 { // no copy of the whole MD
		return v[len(v)-1]
	}
	return ""
}

// drain sends the queued fires, one call at a time, until the queue is empty. The answers of a
// call are handed out on a goroutine of their own, so the next call leaves at once.
func (l *runLane) drain() {
	for {
		l.mu.Lock()
		batch, dropped := l.takeLocked()
		if len(batch) == 0 {
			l.sending = false
		}
		l.mu.Unlock()
		l.pool.inflight.Add(-int64(len(dropped)))
		for _, c := range dropped {
			if err := c.ctx.Err(); err != nil {
				c.done(nil, expiredInLane(err))
			} else {
				c.done(nil, errNotSent)
			}
		}
		if len(batch) == 0 {
			return
		}
		l.send(batch)
	}
}

// takeLocked removes the next call's fires from the queue, up to maxBatchFires and
// maxBatchBytes (always at least one), and the fires before them whose context ended or whose
// skip says so (dropped: not sent, for the caller to answer). A fire that goes alone is not sized.
func (l *runLane) takeLocked() (batch, dropped []*runCall) {
	size, n := 0, 0
	for ; n < len(l.queue) && len(batch) < maxBatchFires; n++ {
		c := l.queue[n]
		if c.ctx.Err() != nil || (c.skip != nil && c.skip()) { // past its deadline, its caller gave up, or not to be sent
			dropped = append(dropped, c)
			continue
		}
		if len(batch) == 0 {
			batch = append(batch, c)
			continue
		}
		if len(batch) == 1 {
			size = proto.Size(batch[0].trig)
		}
		sz := proto.Size(c.trig)
		if size+sz > maxBatchBytes {
			break
		}
		batch, size = append(batch, c), size+sz
	}
	clear(l.queue[:n])
	l.queue = l.queue[n:]
	if len(l.queue) == 0 {
		l.queue = l.queue[:0:0] // let the backing array go after a burst
	}
	return batch, dropped
}

// send makes one Run call with the batch's fires and hands each fire its answer, on a goroutine
// of its own.
func (l *runLane) send(batch []*runCall) {
	cli, err := l.pool.client(l.key.addr)
	if err != nil {
		go l.answer(batch, nil, fmt.Errorf("%w: %w", errNeverSent, err))
		return
	}
	ctx, cancel := callContext(batch)
	trigs := make([]*executorv1.Trigger, len(batch))
	now := l.pool.clk.Now()
	for i, c := range batch {
		trigs[i] = c.trig
		if d := time.UnixMilli(c.due).Sub(now); c.due > 0 && d > 0 {
			c.trig.StartDelayUs = d.Microseconds()
		}
	}
	if l.pool.batched != nil {
		l.pool.batched(len(batch))
	}
	resp, err := cli.Run(ctx, &executorv1.RunRequest{Triggers: trigs})
	cancel()
	go l.answer(batch, resp, err)
}

// callContext is the context of a call that carries batch: the first fire's values (its token,
// its trace), the earliest deadline among the fires, and no fire's cancellation: a manual
// trigger's client that goes away does not fail the scheduled fires that share its call.
func callContext(batch []*runCall) (context.Context, context.CancelFunc) {
	var deadline time.Time
	for _, c := range batch {
		if d, ok := c.ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
			deadline = d
		}
	}
	ctx := context.WithoutCancel(batch[0].ctx)
	if deadline.IsZero() {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, deadline)
}

// answer hands each fire of a call its ack from resp, or err.
func (l *runLane) answer(batch []*runCall, resp *executorv1.RunResponse, err error) {
	l.pool.inflight.Add(-int64(len(batch)))
	switch {
	case err == nil:
		l.pool.health.answered(l.key.addr, resp.GetLoad())
	case connectionFailed(err):
		l.pool.health.unreachable(l.key.addr, err)
	}
	acks := resp.GetAcks()
	if err == nil && len(acks) != len(batch) {
		err = fmt.Errorf("executor answered %d acks for %d fires", len(acks), len(batch))
	}
	for i, c := range batch {
		switch {
		case err != nil:
			c.done(nil, err)
		case acks[i].GetTriggerId() != "" && acks[i].GetTriggerId() != c.trig.GetTriggerId():
			c.done(nil, fmt.Errorf("executor answered for fire %s in place of %s (acks out of order)", acks[i].GetTriggerId(), c.trig.GetTriggerId()))
		default:
			c.done(acks[i], nil)
		}
	}
}
