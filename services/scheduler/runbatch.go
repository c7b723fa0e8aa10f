package scheduler

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
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

// runLane coalesces the Run calls to one executor. A fire that finds the lane idle is sent at
// once, by the caller, alone: at low rates nothing waits. Fires that come while a call is in
// flight queue up and leave together in the next RunRequest, so under load an executor receives
// one call per round trip instead of one per fire — group commit, without a timer.
type runLane struct {
	pool *executorPool
	key  laneKey

	mu      sync.Mutex
	queue   []*runCall
	sending bool // a call is in flight or about to be; its sender drains the queue after it
}

// runCall is one fire waiting for its executor's answer.
type runCall struct {
	ctx  context.Context
	trig *executorv1.Trigger
	due  int64         // when the fire is due to start, Unix ms; the executor holds it until then
	done chan struct{} // closed when ack or err is set
	ack  *executorv1.RunAck
	err  error
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

// run sends one fire to an executor, in a RunRequest of its own or together with the other
// fires queued for that executor meanwhile, and returns the executor's answer to it. ctx carries
// the fire's deadline, trace and access token; a call that carries several fires runs under the
// first one's context (the fires of one lane share their token, and their deadlines differ by
// the time they waited). A fire sent before dueMs (Unix ms) carries the delay until then, taken
// as the call leaves (Trigger.start_delay_us).
func (p *executorPool) run(ctx context.Context, addr string, t *executorv1.Trigger, dueMs int64) (*executorv1.RunAck, error) {
	var auth string
	if v := metadata.ValueFromOutgoingContext(ctx, "authorization"); len(v) > 0 { // no copy of the whole MD
		auth = v[len(v)-1]
	}
	l := p.lane(addr, auth)
	c := &runCall{ctx: ctx, trig: t, due: dueMs, done: make(chan struct{})}
	l.mu.Lock()
	l.queue = append(l.queue, c)
	idle := !l.sending
	l.sending = true
	l.mu.Unlock()
	if idle {
		l.drain(true)
	}
	select {
	case <-c.done:
		return c.ack, c.err
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// drain sends the queued fires, one call at a time, until the queue is empty. The caller that
// found the lane idle sends the first call itself (inline) and hands any later ones to a
// goroutine of their own, so its fire's dispatch is not held up by fires that came after it.
func (l *runLane) drain(inline bool) {
	for {
		l.mu.Lock()
		batch := l.takeLocked()
		if len(batch) == 0 {
			l.sending = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		l.send(batch)
		if inline {
			l.mu.Lock()
			if len(l.queue) == 0 {
				l.sending = false
				l.mu.Unlock()
				return
			}
			l.mu.Unlock()
			go l.drain(false)
			return
		}
	}
}

// takeLocked removes the next call's fires from the queue: those whose caller still waits, up
// to maxBatchFires and maxBatchBytes (always at least one). A fire that goes alone is not sized.
func (l *runLane) takeLocked() []*runCall {
	var batch []*runCall
	size, n := 0, 0
	for ; n < len(l.queue) && len(batch) < maxBatchFires; n++ {
		c := l.queue[n]
		if err := c.ctx.Err(); err != nil { // its caller gave up: do not send it
			c.err = status.FromContextError(err).Err()
			close(c.done)
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
	return batch
}

// send makes one Run call with the batch's fires and hands each caller its answer.
func (l *runLane) send(batch []*runCall) {
	finish := func(err error) {
		for _, c := range batch {
			c.err = err
			close(c.done)
		}
	}
	cli, err := l.pool.client(l.key.addr)
	if err != nil {
		finish(err)
		return
	}
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
	resp, err := cli.Run(batch[0].ctx, &executorv1.RunRequest{Triggers: trigs})
	if err != nil {
		finish(err)
		return
	}
	if len(resp.GetAcks()) != len(batch) {
		finish(fmt.Errorf("executor answered %d acks for %d fires", len(resp.GetAcks()), len(batch)))
		return
	}
	for i, c := range batch {
		if a := resp.Acks[i]; a.GetTriggerId() != "" && a.GetTriggerId() != c.trig.GetTriggerId() {
			c.err = fmt.Errorf("executor answered for fire %s in place of %s (acks out of order)", a.GetTriggerId(), c.trig.GetTriggerId())
		} else {
			c.ack = a
		}
		close(c.done)
	}
}
