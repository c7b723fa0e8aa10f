package sdk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/ackstream"
)

// outbox holds results and log lines until logsvc acknowledges them. streamOutbox keeps them
// in memory; a durable on-disk spool can implement the same interface and replace it.
// A final result is delivered only after every line of its fire queued before it was
// acknowledged; a RUNNING result (addStart) goes out at once, and results leave in the order
// they were added, so a fire's RUNNING result always precedes its final one.
type outbox interface {
	start(ctx context.Context)
	addLines(lines []*logsv1.LogLine)
	// addStart queues the RUNNING result of a fire just accepted, without waiting for anything.
	addStart(r *logsv1.RunResult)
	addResult(r *logsv1.RunResult)
	// flush waits until everything added so far is acknowledged or ctx ends.
	flush(ctx context.Context) error
	// pending counts items not yet acknowledged.
	pending() int
	stop()
}

// nopOutbox is used without logsvc: results and lines stay in the local log files.
type nopOutbox struct{}

func (nopOutbox) start(context.Context)       {}
func (nopOutbox) addLines([]*logsv1.LogLine)  {}
func (nopOutbox) addStart(*logsv1.RunResult)  {}
func (nopOutbox) addResult(*logsv1.RunResult) {}
func (nopOutbox) flush(context.Context) error { return nil }
func (nopOutbox) pending() int                { return 0 }
func (nopOutbox) stop()                       {}

type (
	lineSender   = ackstream.Sender[*logsv1.LogLine, logsv1.IngestLogLinesRequest, logsv1.IngestLogLinesResponse]
	resultSender = ackstream.Sender[*logsv1.RunResult, logsv1.IngestResultsRequest, logsv1.IngestResultsResponse]
)

// streamOutbox delivers over IngestLogLines and IngestResults streams of one connection, with
// numbered batches kept in memory until acknowledged and resent after a reconnect.
type streamOutbox struct {
	log     *slog.Logger
	conn    *grpc.ClientConn
	lines   *lineSender
	results *resultSender

	mu      sync.Mutex
	unacked map[string]int               // trigger id → its lines queued, not yet acknowledged
	parked  map[string]*logsv1.RunResult // results waiting for their fire's lines
	full    bool                         // the queue is full (logged once per episode)
	dropped int                          // items dropped in this episode
}

// defaultLogsvcDialOptions: plaintext, reconnect backoff capped at 2 s.
func defaultLogsvcDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	}
}

func newStreamOutbox(cfg Config, log *slog.Logger) (*streamOutbox, error) {
	opts := cfg.LogsvcDialOptions
	if len(opts) == 0 {
		opts = defaultLogsvcDialOptions()
	}
	conn, err := grpc.NewClient(cfg.LogsvcAddr, opts...)
	if err != nil {
		return nil, fmt.Errorf("LogsvcAddr: dial %s: %w", cfg.LogsvcAddr, err)
	}
	cli := logsv1.NewIngestServiceClient(conn)
	o := &streamOutbox{log: log, conn: conn, unacked: map[string]int{}, parked: map[string]*logsv1.RunResult{}}
	o.lines = ackstream.New(ackstream.Config[*logsv1.LogLine, logsv1.IngestLogLinesRequest, logsv1.IngestLogLinesResponse]{
		Name: "log lines",
		Open: func(ctx context.Context) (ackstream.Stream[logsv1.IngestLogLinesRequest, logsv1.IngestLogLinesResponse], error) {
			s, err := cli.IngestLogLines(ctx)
			if err != nil {
				return nil, err
			}
			return s, nil
		},
		Batch: func(id uint64, items []*logsv1.LogLine) *logsv1.IngestLogLinesRequest {
			return &logsv1.IngestLogLinesRequest{BatchId: id, Lines: items}
		},
		Acked:      func(r *logsv1.IngestLogLinesResponse) uint64 { return r.GetBatchId() },
		Linger:     20 * time.Millisecond,
		MaxPending: cfg.MaxPending,
		Logger:     log,
		OnAck:      o.linesAcked,
	})
	o.results = ackstream.New(ackstream.Config[*logsv1.RunResult, logsv1.IngestResultsRequest, logsv1.IngestResultsResponse]{
		Name: "results",
		Open: func(ctx context.Context) (ackstream.Stream[logsv1.IngestResultsRequest, logsv1.IngestResultsResponse], error) {
			s, err := cli.IngestResults(ctx)
			if err != nil {
				return nil, err
			}
			return s, nil
		},
		Batch: func(id uint64, items []*logsv1.RunResult) *logsv1.IngestResultsRequest {
			return &logsv1.IngestResultsRequest{BatchId: id, Results: items}
		},
		Acked: func(r *logsv1.IngestResultsResponse) uint64 {
			if ids := r.GetRefusedTriggerIds(); len(ids) > 0 {
				log.Info("logsvc refused results of fires that had already finished", "trigger_ids", ids)
			}
			return r.GetBatchId()
		},
		Linger:     20 * time.Millisecond,
		MaxPending: cfg.MaxPending,
		Logger:     log,
	})
	return o, nil
}

func (o *streamOutbox) start(ctx context.Context) {
	o.lines.Start(ctx)
	o.results.Start(ctx)
}

func (o *streamOutbox) addLines(ls []*logsv1.LogLine) {
	o.mu.Lock()
	defer o.mu.Unlock()
	// Counted under o.mu, so an acknowledgement (linesAcked) cannot overtake the count.
	if err := o.lines.Send(ls...); err != nil {
		o.drop("log lines", len(ls), err)
		return
	}
	o.room()
	for _, l := range ls {
		o.unacked[l.GetTriggerId()]++
	}
}

func (o *streamOutbox) addStart(r *logsv1.RunResult) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sendResultLocked(r)
}

func (o *streamOutbox) addResult(r *logsv1.RunResult) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.unacked[r.GetTriggerId()] > 0 {
		o.parked[r.GetTriggerId()] = r
		return
	}
	o.sendResultLocked(r)
}

// linesAcked releases the results whose fire has no unacknowledged line left.
func (o *streamOutbox) linesAcked(ls []*logsv1.LogLine) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, l := range ls {
		id := l.GetTriggerId()
		if n := o.unacked[id] - 1; n > 0 {
			o.unacked[id] = n
			continue
		}
		delete(o.unacked, id)
		if r, ok := o.parked[id]; ok {
			delete(o.parked, id)
			o.sendResultLocked(r)
		}
	}
}

func (o *streamOutbox) sendResultLocked(r *logsv1.RunResult) {
	if err := o.results.Send(r); err != nil {
		o.drop("result of "+r.GetTriggerId(), 1, err)
		return
	}
	o.room()
}

// drop logs items that could not be queued: loudly once when the queue fills, then counted.
func (o *streamOutbox) drop(what string, n int, err error) {
	o.dropped += n
	if errors.Is(err, ackstream.ErrStopped) {
		o.log.Error("delivery to logsvc has stopped; dropping "+what, "count", n)
		return
	}
	if !o.full {
		o.full = true
		o.log.Error("delivery queue to logsvc is full (logsvc unreachable or slow); dropping new results and log lines until it drains — output stays in the local run log files",
			"dropping", what, "pending", o.lines.Pending()+o.results.Pending())
	}
}

// room notes that the queue takes items again after an episode of drops.
func (o *streamOutbox) room() {
	if o.full {
		o.log.Warn("delivery queue to logsvc has room again", "dropped", o.dropped)
		o.full, o.dropped = false, 0
	}
}

func (o *streamOutbox) flush(ctx context.Context) error {
	if err := o.lines.Flush(ctx); err != nil {
		return err
	}
	// Lines are acknowledged, so every parked result has moved to the results stream.
	return o.results.Flush(ctx)
}

func (o *streamOutbox) pending() int {
	o.mu.Lock()
	parked := len(o.parked)
	o.mu.Unlock()
	return o.lines.Pending() + o.results.Pending() + parked
}

func (o *streamOutbox) stop() {
	o.lines.Stop()
	o.results.Stop()
	if err := o.conn.Close(); err != nil {
		o.log.Warn("closing logsvc connection", "error", err)
	}
}
