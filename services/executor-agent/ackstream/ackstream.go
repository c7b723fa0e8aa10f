// Package ackstream delivers items to logsvc over a bidirectional gRPC stream of numbered
// batches. A batch stays in memory until the server acknowledges it (which it does only after
// committing), and every unacknowledged batch is resent, in order, after a reconnect. The
// scheduler uses it for trigger records and the agent for results and log lines: delivery is
// at-least-once and logsvc makes it exactly-once by trigger id.
package ackstream

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrFull: the sender holds MaxPending items already; the caller decides what to do.
var ErrFull = errors.New("ackstream: queue full")

// ErrStopped: Send after Stop.
var ErrStopped = errors.New("ackstream: stopped")

// Stream is the client side of a batch stream (a grpc.BidiStreamingClient).
type Stream[Req, Resp any] interface {
	Send(*Req) error
	Recv() (*Resp, error)
	CloseSend() error
}

// Config describes one kind of stream.
type Config[T, Req, Resp any] struct {
	// Name appears in logs ("trigger records", "results").
	Name string
	// Open starts a stream; ctx ends it.
	Open func(ctx context.Context) (Stream[Req, Resp], error)
	// Batch wraps items into a request numbered id.
	Batch func(id uint64, items []T) *Req
	// Acked returns the batch id a response acknowledges.
	Acked func(*Resp) uint64
	// MaxBatch caps items per batch; default 500.
	MaxBatch int
	// Size, when set, gives an item's size, and MaxBatchBytes caps a batch's total (a batch
	// holds at least one item), so that a batch of large items stays under the receiver's
	// message limit.
	Size          func(T) int
	MaxBatchBytes int
	// Linger is how long a partial batch waits for more items while Window batches are
	// unacknowledged (a stream with fewer in flight sends at once); default 10 ms. The wait
	// ends early when an acknowledgement brings them under Window.
	Linger time.Duration
	// Window is how many batches may be unacknowledged before a partial batch lingers (more
	// are in flight only after a linger, a full batch or a reconnect's resend); default 1.
	Window int
	// MaxPending caps items held (queued or unacknowledged); default 100000.
	MaxPending int
	// Logger gets connection trouble; nil discards.
	Logger *slog.Logger
	// OnAck, when set, is called with the items of every acknowledged batch, before Flush can
	// see them as delivered, so a caller can release what waited on them (the agent holds a run's
	// result until its log lines are committed). It runs on the delivery goroutine: keep it short.
	OnAck func(items []T)
}

type batch[T any] struct {
	id    uint64
	items []T
}

// Sender batches items and delivers them until acknowledged.
type Sender[T, Req, Resp any] struct {
	cfg Config[T, Req, Resp]
	log *slog.Logger

	mu       sync.Mutex
	queue    []T        // not yet batched
	inflight []batch[T] // sent or to send, unacknowledged, in id order
	held     int        // len(queue) + items in inflight
	nextID   uint64
	acks     uint64 // batches acknowledged so far
	stopped  bool
	wake     chan struct{} // cap 1: new items
	acked    chan struct{} // cap 1: a batch was acknowledged
	idle     chan struct{} // closed and replaced when everything is acknowledged

	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a sender; Start begins delivery.
func New[T, Req, Resp any](cfg Config[T, Req, Resp]) *Sender[T, Req, Resp] {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 500
	}
	if cfg.Linger <= 0 {
		cfg.Linger = 10 * time.Millisecond
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 100_000
	}
	if cfg.Window <= 0 {
		cfg.Window = 1
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Sender[T, Req, Resp]{cfg: cfg, log: log, nextID: 1, wake: make(chan struct{}, 1), acked: make(chan struct{}, 1), idle: make(chan struct{})}
}

// Send queues items for delivery; it fails with ErrFull when MaxPending would be exceeded, and
// then queues none of them.
func (s *Sender[T, Req, Resp]) Send(items ...T) error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return ErrStopped
	}
	if s.held+len(items) > s.cfg.MaxPending {
		s.mu.Unlock()
		return ErrFull
	}
	s.queue = append(s.queue, items...)
	s.held += len(items)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// Pending counts items not yet acknowledged.
func (s *Sender[T, Req, Resp]) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

// Start runs delivery until Stop.
func (s *Sender[T, Req, Resp]) Start(ctx context.Context) {
	ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		s.run(ctx)
	}()
}

// Flush waits until everything sent so far is acknowledged or ctx ends.
func (s *Sender[T, Req, Resp]) Flush(ctx context.Context) error {
	for {
		s.mu.Lock()
		held, idle := s.held, s.idle
		s.mu.Unlock()
		if held == 0 {
			return nil
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Stop refuses new items and ends delivery; call Flush first to wait for acknowledgements.
// It is idempotent.
func (s *Sender[T, Req, Resp]) Stop() {
	s.mu.Lock()
	s.stopped = true
	cancel := s.cancel
	s.cancel = nil
	s.mu.Unlock()
	if cancel != nil {
		cancel()
		<-s.done
	}
}

func (s *Sender[T, Req, Resp]) run(ctx context.Context) {
	const minBackoff = 50 * time.Millisecond
	backoff := minBackoff
	for ctx.Err() == nil {
		acksBefore := s.ackCount()
		err := s.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if s.ackCount() != acksBefore {
			backoff = minBackoff // the session worked for a while: reconnect quickly
		}
		if status.Code(err) == codes.InvalidArgument {
			// The receiver refused a batch as invalid; it answers in order, so it is the oldest
			// unacknowledged one. Resending it would fail forever: drop it (as if delivered), loudly.
			if n := s.dropOldest(); n > 0 {
				s.log.Error("receiver refused a batch as invalid; dropped it", "stream", s.cfg.Name, "items", n, "error", err)
			}
		}
		s.log.Warn("delivery stream broken; reconnecting", "stream", s.cfg.Name, "error", err, "pending", s.Pending(), "backoff", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// session runs one stream: resend every unacknowledged batch, then send new ones as they form,
// while a reader applies acknowledgements.
func (s *Sender[T, Req, Resp]) session(ctx context.Context) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := s.cfg.Open(sctx)
	if err != nil {
		return err
	}
	recvErr := make(chan error, 1)
	go func() {
		for {
			resp, err := st.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			s.ack(s.cfg.Acked(resp))
		}
	}()
	s.mu.Lock()
	resend := append([]batch[T](nil), s.inflight...)
	s.mu.Unlock()
	for _, b := range resend {
		if err := st.Send(s.cfg.Batch(b.id, b.items)); err != nil {
			return err
		}
	}
	for {
		// Linger briefly so a burst becomes one batch, but only behind a full window of batches
		// still unacknowledged: an item that finds room goes at once (its delay is one round
		// trip, not the linger), and those that come while the window is full gather into the
		// next batch, until an acknowledgement makes room.
		if err := s.linger(sctx, recvErr); err != nil {
			return err
		}
		b, ok := s.nextBatch()
		if !ok {
			select {
			case <-sctx.Done():
				return sctx.Err()
			case err := <-recvErr:
				return err
			case <-s.wake:
			}
			continue
		}
		if err := st.Send(s.cfg.Batch(b.id, b.items)); err != nil {
			return err
		}
		select {
		case err := <-recvErr:
			return err
		default:
		}
	}
}

// linger waits, while items are queued but less than a batch and the window is full, for
// Linger to pass or an acknowledgement to make room.
func (s *Sender[T, Req, Resp]) linger(ctx context.Context, recvErr <-chan error) error {
	var t *time.Timer
	for {
		queued, inflight := s.counts()
		if queued == 0 || queued >= s.cfg.MaxBatch || inflight < s.cfg.Window {
			break
		}
		if t == nil {
			t = time.NewTimer(s.cfg.Linger)
			defer t.Stop()
		}
		select {
		case <-t.C:
			return nil
		case <-s.acked:
		case err := <-recvErr:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// dropOldest forgets the oldest in-flight batch and returns how many items it held.
func (s *Sender[T, Req, Resp]) dropOldest() int {
	s.mu.Lock()
	if len(s.inflight) == 0 {
		s.mu.Unlock()
		return 0
	}
	b := s.inflight[0]
	s.mu.Unlock()
	s.ack(b.id)
	return len(b.items)
}

// counts returns how many items are queued and how many batches are unacknowledged.
func (s *Sender[T, Req, Resp]) counts() (queued, inflight int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue), len(s.inflight)
}

// nextBatch moves up to MaxBatch queued items into a new in-flight batch.
func (s *Sender[T, Req, Resp]) nextBatch() (batch[T], bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return batch[T]{}, false
	}
	n := min(len(s.queue), s.cfg.MaxBatch)
	if s.cfg.Size != nil && s.cfg.MaxBatchBytes > 0 {
		size := 0
		for i, it := range s.queue[:n] {
			if size += s.cfg.Size(it); size > s.cfg.MaxBatchBytes && i > 0 {
				n = i
				break
			}
		}
	}
	b := batch[T]{id: s.nextID, items: append([]T(nil), s.queue[:n]...)}
	s.nextID++
	// Take from the front without moving the rest: behind a backlog of MaxPending items, moving
	// them for every batch cost time quadratic in the backlog. The taken slots are cleared, and
	// the array is let go once empty (Send's appends move what is left to a new one as it fills).
	clear(s.queue[:n])
	if s.queue = s.queue[n:]; len(s.queue) == 0 {
		s.queue = nil
	}
	s.inflight = append(s.inflight, b)
	return b, true
}

func (s *Sender[T, Req, Resp]) ackCount() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acks
}

func (s *Sender[T, Req, Resp]) ack(id uint64) {
	s.mu.Lock()
	var items []T
	found := false
	for i, b := range s.inflight {
		if b.id == id {
			items, found = b.items, true
			s.inflight = append(s.inflight[:i], s.inflight[i+1:]...)
			s.acks++
			break
		}
	}
	s.mu.Unlock()
	if !found {
		return // a repeated acknowledgement
	}
	select {
	case s.acked <- struct{}{}:
	default:
	}
	// held drops only after OnAck, so Flush never returns before OnAck has run.
	if s.cfg.OnAck != nil {
		s.cfg.OnAck(items)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held -= len(items)
	if s.held == 0 {
		close(s.idle)
		s.idle = make(chan struct{})
	}
}
