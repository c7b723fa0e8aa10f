package sdk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/ackstream"
	"github.com/jobmesh/jobmesh/services/executor-agent/spool"
)

// outbox holds results and log lines until logsvc acknowledges them (streamOutbox, with an
// on-disk spool), or drops them when there is no logsvc (nopOutbox).
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
	lineSender   = ackstream.Sender[spooled[*logsv1.LogLine], logsv1.IngestLogLinesRequest, logsv1.IngestLogLinesResponse]
	resultSender = ackstream.Sender[spooled[*logsv1.RunResult], logsv1.IngestResultsRequest, logsv1.IngestResultsResponse]
)

// spooled is an item with its spool record number (0 when it could not be written to disk).
type spooled[T any] struct {
	seq uint64
	v   T
}

// Spool record kinds: the first byte of a record, then the protobuf.
const (
	kindLine   = 'L'
	kindStart  = 'S'
	kindResult = 'R'
)

// streamOutbox delivers over IngestLogLines and IngestResults streams of one connection. Every
// item is first written to the on-disk spool, then batched in memory and resent after a
// reconnect until acknowledged; an acknowledgement releases its spool records. Items the spool
// still holds at start-up (from before a stop or crash) are delivered first, in order.
type streamOutbox struct {
	log        *slog.Logger
	conn       *grpc.ClientConn
	sp         *spool.Spool
	maxPending int
	lines      *lineSender
	results    *resultSender

	mu      sync.Mutex
	unacked map[string]int                        // trigger id → its lines queued, not yet acknowledged
	parked  map[string]spooled[*logsv1.RunResult] // results waiting for their fire's lines
	full    bool                                  // the queue is full (logged once per episode)
	dropped int                                   // items dropped in this episode
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
	if cfg.LogsvcToken != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(cfg.LogsvcToken)))
	}
	opts = append(opts[:len(opts):len(opts)], grpc.WithStatsHandler(otelgrpc.NewClientHandler()))
	sp, replay, err := spool.Open(spool.Config{Dir: cfg.SpoolDir, MaxBytes: cfg.SpoolMaxBytes, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("SpoolDir: %w", err)
	}
	conn, err := grpc.NewClient(cfg.LogsvcAddr, opts...)
	if err != nil {
		sp.Close()
		return nil, fmt.Errorf("LogsvcAddr: dial %s: %w", cfg.LogsvcAddr, err)
	}
	cli := logsv1.NewIngestServiceClient(conn)
	o := &streamOutbox{
		log: log, conn: conn, sp: sp, maxPending: cfg.MaxPending,
		unacked: map[string]int{}, parked: map[string]spooled[*logsv1.RunResult]{},
	}
	// The outbox bounds what it holds (MaxPending, SpoolMaxBytes); the senders hold the same.
	const unbounded = 1 << 40
	o.lines = ackstream.New(ackstream.Config[spooled[*logsv1.LogLine], logsv1.IngestLogLinesRequest, logsv1.IngestLogLinesResponse]{
		Name: "log lines",
		Open: func(ctx context.Context) (ackstream.Stream[logsv1.IngestLogLinesRequest, logsv1.IngestLogLinesResponse], error) {
			s, err := cli.IngestLogLines(ctx)
			if err != nil {
				return nil, err
			}
			return s, nil
		},
		Batch: func(id uint64, items []spooled[*logsv1.LogLine]) *logsv1.IngestLogLinesRequest {
			ls := make([]*logsv1.LogLine, len(items))
			for i, it := range items {
				ls[i] = it.v
			}
			return &logsv1.IngestLogLinesRequest{BatchId: id, Lines: ls}
		},
		Acked:      func(r *logsv1.IngestLogLinesResponse) uint64 { return r.GetBatchId() },
		Linger:     20 * time.Millisecond,
		MaxPending: unbounded,
		Logger:     log,
		OnAck:      o.linesAcked,
	})
	o.results = ackstream.New(ackstream.Config[spooled[*logsv1.RunResult], logsv1.IngestResultsRequest, logsv1.IngestResultsResponse]{
		Name: "results",
		Open: func(ctx context.Context) (ackstream.Stream[logsv1.IngestResultsRequest, logsv1.IngestResultsResponse], error) {
			s, err := cli.IngestResults(ctx)
			if err != nil {
				return nil, err
			}
			return s, nil
		},
		Batch: func(id uint64, items []spooled[*logsv1.RunResult]) *logsv1.IngestResultsRequest {
			rs := make([]*logsv1.RunResult, len(items))
			for i, it := range items {
				rs[i] = it.v
			}
			return &logsv1.IngestResultsRequest{BatchId: id, Results: rs}
		},
		Acked: func(r *logsv1.IngestResultsResponse) uint64 {
			if ids := r.GetRefusedTriggerIds(); len(ids) > 0 {
				log.Info("logsvc refused results of fires that had already finished", "trigger_ids", ids)
			}
			return r.GetBatchId()
		},
		Linger:     20 * time.Millisecond,
		MaxPending: unbounded,
		Logger:     log,
		OnAck:      o.resultsAcked,
	})
	if err := o.replay(replay); err != nil {
		o.stop()
		return nil, fmt.Errorf("SpoolDir: %w", err)
	}
	return o, nil
}

// replay queues what the spool held at start-up, in its order, as it was queued the first time.
func (o *streamOutbox) replay(recs []spool.Record) error {
	if len(recs) == 0 {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var lines, results int
	for _, rec := range recs {
		if len(rec.Data) == 0 {
			continue
		}
		switch rec.Data[0] {
		case kindLine:
			l := &logsv1.LogLine{}
			if err := proto.Unmarshal(rec.Data[1:], l); err != nil {
				return fmt.Errorf("spool record %d: %w", rec.Seq, err)
			}
			o.queueLineLocked(spooled[*logsv1.LogLine]{rec.Seq, l})
			lines++
		case kindStart, kindResult:
			r := &logsv1.RunResult{}
			if err := proto.Unmarshal(rec.Data[1:], r); err != nil {
				return fmt.Errorf("spool record %d: %w", rec.Seq, err)
			}
			it := spooled[*logsv1.RunResult]{rec.Seq, r}
			if rec.Data[0] == kindResult && o.unacked[r.GetTriggerId()] > 0 {
				o.parked[r.GetTriggerId()] = it
			} else {
				o.sendResultLocked(it)
			}
			results++
		default:
			return fmt.Errorf("spool record %d: unknown kind %q", rec.Seq, rec.Data[0])
		}
	}
	o.log.Info("delivering results and log lines kept in the spool from before the last stop", "results", results, "lines", lines, "spool_bytes", o.sp.Bytes())
	return nil
}

// spoolLocked writes an item to the spool and returns its record number; ok is false when the
// item must be dropped (the spool is full). An item the disk refuses for another reason is
// still delivered from memory (record number 0).
func (o *streamOutbox) spoolLocked(kind byte, m proto.Message, urgent bool, what string) (uint64, bool) {
	limit := o.maxPending
	if urgent {
		limit += o.maxPending/10 + 1 // room for results when lines have filled the queue
	}
	if o.lines.Pending()+o.results.Pending() >= limit {
		o.drop(what, 1, fmt.Errorf("%d items held, MaxPending %d: %w", o.lines.Pending()+o.results.Pending(), o.maxPending, ackstream.ErrFull))
		return 0, false
	}
	data, err := proto.MarshalOptions{}.MarshalAppend([]byte{kind}, m)
	if err != nil {
		o.drop(what, 1, err)
		return 0, false
	}
	var seq uint64
	if urgent {
		seq, err = o.sp.AppendUrgent(data)
	} else {
		seq, err = o.sp.Append(data)
	}
	switch {
	case errors.Is(err, spool.ErrFull):
		o.drop(what, 1, fmt.Errorf("spool holds %d bytes, SpoolMaxBytes %d: %w", o.sp.Bytes(), o.sp.MaxBytes(), err))
		return 0, false
	case errors.Is(err, spool.ErrClosed):
		o.drop(what, 1, ackstream.ErrStopped)
		return 0, false
	case err != nil:
		o.log.Error("writing to the spool failed; delivering from memory only (lost if the agent dies first)", "item", what, "error", err)
		return 0, true
	}
	return seq, true
}

func (o *streamOutbox) start(ctx context.Context) {
	o.lines.Start(ctx)
	o.results.Start(ctx)
}

func (o *streamOutbox) addLines(ls []*logsv1.LogLine) {
	o.mu.Lock()
	defer o.mu.Unlock()
	// Counted under o.mu, so an acknowledgement (linesAcked) cannot overtake the count.
	for _, l := range ls {
		seq, ok := o.spoolLocked(kindLine, l, false, "log lines")
		if !ok {
			continue
		}
		o.queueLineLocked(spooled[*logsv1.LogLine]{seq, l})
	}
}

func (o *streamOutbox) queueLineLocked(it spooled[*logsv1.LogLine]) {
	if err := o.lines.Send(it); err != nil {
		o.drop("log lines", 1, err)
		return
	}
	o.room()
	o.unacked[it.v.GetTriggerId()]++
}

func (o *streamOutbox) addStart(r *logsv1.RunResult) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if seq, ok := o.spoolLocked(kindStart, r, true, "RUNNING result of "+r.GetTriggerId()); ok {
		o.sendResultLocked(spooled[*logsv1.RunResult]{seq, r})
	}
}

func (o *streamOutbox) addResult(r *logsv1.RunResult) {
	o.mu.Lock()
	defer o.mu.Unlock()
	seq, ok := o.spoolLocked(kindResult, r, true, "result of "+r.GetTriggerId())
	if !ok {
		return
	}
	it := spooled[*logsv1.RunResult]{seq, r}
	if o.unacked[r.GetTriggerId()] > 0 {
		o.parked[r.GetTriggerId()] = it
		return
	}
	o.sendResultLocked(it)
}

// linesAcked releases the lines' spool records and the results whose fire has no
// unacknowledged line left.
func (o *streamOutbox) linesAcked(ls []spooled[*logsv1.LogLine]) {
	seqs := make([]uint64, 0, len(ls))
	for _, l := range ls {
		seqs = append(seqs, l.seq)
	}
	o.sp.Ack(seqs...)
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, l := range ls {
		id := l.v.GetTriggerId()
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

// resultsAcked releases the results' spool records.
func (o *streamOutbox) resultsAcked(rs []spooled[*logsv1.RunResult]) {
	seqs := make([]uint64, 0, len(rs))
	for _, r := range rs {
		seqs = append(seqs, r.seq)
	}
	o.sp.Ack(seqs...)
}

func (o *streamOutbox) sendResultLocked(r spooled[*logsv1.RunResult]) {
	if err := o.results.Send(r); err != nil {
		o.drop("result of "+r.v.GetTriggerId(), 1, err)
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
		o.log.Error("spool for logsvc is full (logsvc unreachable or slow): dropping new log lines, then results, until it drains — output stays in the local run log files",
			"dropping", what, "reason", err, "pending", o.lines.Pending()+o.results.Pending(), "spool_bytes", o.sp.Bytes(), "spool_max_bytes", o.sp.MaxBytes())
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
	if err := o.sp.Close(); err != nil {
		o.log.Error("closing the spool", "error", err)
	}
}

// bearer presents a token as "authorization: Bearer <token>" on every call.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity is false: the dial options decide on TLS.
func (bearer) RequireTransportSecurity() bool { return false }
