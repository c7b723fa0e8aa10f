package ackstream_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jobmesh/jobmesh/services/executor-agent/ackstream"
)

type req struct {
	id    uint64
	items []int
	acked int64 // heldStream: the acknowledgements the sender had received when it sent this
}

// server is an in-memory peer: it acks what it receives, except that the first session breaks
// after receiving its first batch (before acking), so the sender must resend it.
type server struct {
	mu       sync.Mutex
	sessions int
	got      map[int]int // item → times received
	acked    int
}

type stream struct {
	srv    *server
	broken bool
	acks   chan uint64
	ctx    context.Context
}

func (s *stream) Send(r *req) error {
	s.srv.mu.Lock()
	defer s.srv.mu.Unlock()
	if s.broken {
		return errors.New("broken")
	}
	for _, it := range r.items {
		s.srv.got[it]++
	}
	if s.srv.sessions == 1 { // first session: drop without acking
		s.broken = true
		close(s.acks)
		return nil
	}
	s.srv.acked += len(r.items)
	s.acks <- r.id
	return nil
}

func (s *stream) Recv() (*uint64, error) {
	select {
	case id, ok := <-s.acks:
		if !ok {
			return nil, errors.New("connection reset")
		}
		return &id, nil
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
}

func (s *stream) CloseSend() error { return nil }

func TestResendsUnacknowledgedBatches(t *testing.T) {
	t.Parallel()
	srv := &server{got: map[int]int{}}
	snd := ackstream.New(ackstream.Config[int, req, uint64]{
		Name: "test",
		Open: func(ctx context.Context) (ackstream.Stream[req, uint64], error) {
			srv.mu.Lock()
			srv.sessions++
			srv.mu.Unlock()
			return &stream{srv: srv, acks: make(chan uint64, 1000), ctx: ctx}, nil
		},
		Batch:    func(id uint64, items []int) *req { return &req{id: id, items: items} },
		Acked:    func(id *uint64) uint64 { return *id },
		MaxBatch: 7,
	})
	snd.Start(context.Background())
	defer snd.Stop()
	const n = 100
	for i := range n {
		if err := snd.Send(i); err != nil {
			t.Fatalf("Send(%d): %v", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := snd.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v (pending %d)", err, snd.Pending())
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.sessions < 2 {
		t.Errorf("sessions = %d, want a reconnect after the broken first one", srv.sessions)
	}
	for i := range n {
		if srv.got[i] < 1 {
			t.Errorf("item %d never delivered", i)
		}
	}
	if srv.acked < n {
		t.Errorf("acked %d items, want at least %d", srv.acked, n)
	}
}

func TestFullQueueRefuses(t *testing.T) {
	t.Parallel()
	snd := ackstream.New(ackstream.Config[int, req, uint64]{
		Open: func(ctx context.Context) (ackstream.Stream[req, uint64], error) {
			return nil, errors.New("logsvc down")
		},
		Batch:      func(id uint64, items []int) *req { return &req{id: id, items: items} },
		Acked:      func(id *uint64) uint64 { return *id },
		MaxPending: 3,
	})
	if err := snd.Send(1, 2, 3); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if err := snd.Send(4); !errors.Is(err, ackstream.ErrFull) {
		t.Errorf("Send over MaxPending = %v, want ErrFull", err)
	}
	snd.Stop()
	if err := snd.Send(5); !errors.Is(err, ackstream.ErrStopped) {
		t.Errorf("Send after Stop = %v, want ErrStopped", err)
	}
}

func TestOnAckSeesEveryItemOnceBeforeFlushReturns(t *testing.T) {
	t.Parallel()
	srv := &server{got: map[int]int{}}
	var mu sync.Mutex
	seen := map[int]int{}
	snd := ackstream.New(ackstream.Config[int, req, uint64]{
		Open: func(ctx context.Context) (ackstream.Stream[req, uint64], error) {
			srv.mu.Lock()
			srv.sessions++
			srv.mu.Unlock()
			return &stream{srv: srv, acks: make(chan uint64, 1000), ctx: ctx}, nil
		},
		Batch:    func(id uint64, items []int) *req { return &req{id: id, items: items} },
		Acked:    func(id *uint64) uint64 { return *id },
		MaxBatch: 5,
		OnAck: func(items []int) {
			mu.Lock()
			defer mu.Unlock()
			for _, it := range items {
				seen[it]++
			}
		},
	})
	snd.Start(context.Background())
	defer snd.Stop()
	const n = 40
	for i := range n {
		if err := snd.Send(i); err != nil {
			t.Fatalf("Send(%d): %v", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := snd.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v (pending %d)", err, snd.Pending())
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		if seen[i] != 1 {
			t.Errorf("item %d: OnAck saw it %d times, want 1", i, seen[i])
		}
	}
}

// rejecting refuses the first batch it sees as invalid, then acks everything.
type rejecting struct {
	mu      sync.Mutex
	refused bool
	got     []int
}

type rejStream struct {
	r    *rejecting
	acks chan *uint64
	errs chan error
}

func (s *rejStream) Send(q *req) error {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	if !s.r.refused {
		s.r.refused = true
		s.errs <- status.Error(codes.InvalidArgument, "records[0].trigger_id: required")
		return nil
	}
	s.r.got = append(s.r.got, q.items...)
	id := q.id
	s.acks <- &id
	return nil
}

func (s *rejStream) Recv() (*uint64, error) {
	select {
	case id := <-s.acks:
		return id, nil
	case err := <-s.errs:
		return nil, err
	}
}

func (s *rejStream) CloseSend() error { return nil }

func TestInvalidBatchIsDroppedNotResentForever(t *testing.T) {
	t.Parallel()
	r := &rejecting{}
	snd := ackstream.New(ackstream.Config[int, req, uint64]{
		Open: func(ctx context.Context) (ackstream.Stream[req, uint64], error) {
			return &rejStream{r: r, acks: make(chan *uint64, 100), errs: make(chan error, 1)}, nil
		},
		Batch:    func(id uint64, items []int) *req { return &req{id: id, items: items} },
		Acked:    func(id *uint64) uint64 { return *id },
		MaxBatch: 1,
	})
	snd.Start(context.Background())
	defer snd.Stop()
	if err := snd.Send(1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := snd.Flush(ctx); err != nil {
		t.Fatalf("Flush with a refused batch: %v (pending %d)", err, snd.Pending())
	}
	if err := snd.Send(2); err != nil {
		t.Fatal(err)
	}
	if err := snd.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.got) != 1 || r.got[0] != 2 {
		t.Errorf("delivered %v, want [2] (1 was refused and dropped)", r.got)
	}
}

// ackAll is a peer that acknowledges every batch at once, in order.
type ackAll struct {
	acks chan uint64
	ctx  context.Context
}

func (s *ackAll) Send(r *req) error { s.acks <- r.id; return nil }
func (s *ackAll) CloseSend() error  { return nil }
func (s *ackAll) Recv() (*uint64, error) {
	select {
	case id := <-s.acks:
		return &id, nil
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
}

// BenchmarkBacklog delivers a backlog of 200,000 items queued while the peer was away (a logsvc
// restart): the cost per item should not grow with the backlog.
func BenchmarkBacklog(b *testing.B) {
	const backlog = 200_000
	for b.Loop() {
		s := ackstream.New(ackstream.Config[int, req, uint64]{
			Name: "bench",
			Open: func(ctx context.Context) (ackstream.Stream[req, uint64], error) {
				return &ackAll{acks: make(chan uint64, 1024), ctx: ctx}, nil
			},
			Batch:      func(id uint64, items []int) *req { return &req{id: id, items: items} },
			Acked:      func(id *uint64) uint64 { return *id },
			MaxPending: backlog,
		})
		for i := range backlog {
			if err := s.Send(i); err != nil {
				b.Fatal(err)
			}
		}
		s.Start(context.Background())
		if err := s.Flush(context.Background()); err != nil {
			b.Fatal(err)
		}
		s.Stop()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*backlog), "ns/item")
}

// heldStream hands every request it is sent to the test, and acknowledges only what the test
// releases.
type heldStream struct {
	sent  chan *req
	acks  chan uint64
	acked atomic.Int64
	ctx   context.Context
}

func (s *heldStream) Send(r *req) error { r.acked = s.acked.Load(); s.sent <- r; return nil }
func (s *heldStream) CloseSend() error  { return nil }
func (s *heldStream) Recv() (*uint64, error) {
	select {
	case id := <-s.acks:
		s.acked.Add(1)
		return &id, nil
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
}

// TestWindowSendsAtOnceThenWaitsForAnAck: while fewer than Window batches are unacknowledged
// an item goes at once; behind a full window items gather, and an acknowledgement (not the
// linger, an hour here) sends them as one batch.
func TestWindowSendsAtOnceThenWaitsForAnAck(t *testing.T) {
	t.Parallel()
	hs := &heldStream{sent: make(chan *req, 10), acks: make(chan uint64)}
	snd := ackstream.New(ackstream.Config[int, req, uint64]{
		Open: func(ctx context.Context) (ackstream.Stream[req, uint64], error) {
			hs.ctx = ctx
			return hs, nil
		},
		Batch:  func(id uint64, items []int) *req { return &req{id: id, items: items} },
		Acked:  func(id *uint64) uint64 { return *id },
		Linger: time.Hour,
		Window: 2,
	})
	snd.Start(context.Background())
	defer snd.Stop()
	next := func(what string) *req {
		t.Helper()
		select {
		case r := <-hs.sent:
			return r
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: nothing sent", what)
			return nil
		}
	}
	for i := 1; i <= 2; i++ {
		if err := snd.Send(i); err != nil {
			t.Fatal(err)
		}
		if r := next(fmt.Sprintf("item %d, window not full", i)); len(r.items) != 1 || r.items[0] != i {
			t.Fatalf("batch %d = %v, want [%d] sent at once", r.id, r.items, i)
		}
	}
	if err := snd.Send(3); err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(4); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-hs.sent:
		t.Fatalf("batch %d %v sent with the window full", r.id, r.items)
	default:
	}
	hs.acks <- 1
	if r := next("after the first ack"); !slices.Equal(r.items, []int{3, 4}) || r.acked != 1 {
		t.Fatalf("batch %v sent after %d acknowledgements, want [3 4] gathered and sent after the first", r.items, r.acked)
	}
}
