package logsvc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/internal/db"
)

const (
	// maxBatchItems is the most items one ingest batch may carry (the proto's limit).
	maxBatchItems = 10000
	// maxTextBytes caps a message or a line; longer ones are cut rather than refused, so one
	// oversized line cannot block a sender's whole queue.
	maxTextBytes = 64 << 10
	// maxTriggerIDLen bounds trigger ids (the scheduler's are about 40 bytes).
	maxTriggerIDLen = 256
	// completionsLock is the Postgres advisory lock that orders completion inserts, so cursors
	// become visible in increasing order and a watcher never skips one.
	completionsLock int64 = 0x6a6d_6c6f_6773 // "jmlogs"
)

const (
	statusRunning  = int32(logsv1.RunStatus_RUN_STATUS_RUNNING)
	statusSuccess  = int32(logsv1.RunStatus_RUN_STATUS_SUCCESS)
	statusFail     = int32(logsv1.RunStatus_RUN_STATUS_FAIL)
	statusKilled   = int32(logsv1.RunStatus_RUN_STATUS_KILLED)
	statusSkipped  = int32(logsv1.RunStatus_RUN_STATUS_SKIPPED)
	outcomeNone    = int32(logsv1.TriggerOutcome_TRIGGER_OUTCOME_UNSPECIFIED)
	outcomeOK      = int32(logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK)
	outcomeFailed  = int32(logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED)
	outcomeUnknown = int32(logsv1.TriggerOutcome_TRIGGER_OUTCOME_UNKNOWN)
	outcomeSkipped = int32(logsv1.TriggerOutcome_TRIGGER_OUTCOME_SKIPPED)
)

// final reports whether a run in status st has ended.
func final(st int32) bool { return st > statusRunning }

// IngestTriggerRecords implements IngestService: each batch is acknowledged once the write
// cycle holding it has committed.
func (s *Service) IngestTriggerRecords(stream grpc.BidiStreamingServer[logsv1.IngestTriggerRecordsRequest, logsv1.IngestTriggerRecordsResponse]) error {
	return serveBatches(s, "trigger records", streamRecords, recordsStats, stream, recordItems, checkRecords,
		func(req *logsv1.IngestTriggerRecordsRequest, _ *ticket) *logsv1.IngestTriggerRecordsResponse {
			return &logsv1.IngestTriggerRecordsResponse{BatchId: req.GetBatchId()}
		})
}

// IngestResults implements IngestService: a RUNNING result records that an executor accepted
// the fire; final results for runs that already ended are refused and listed in the ack.
func (s *Service) IngestResults(stream grpc.BidiStreamingServer[logsv1.IngestResultsRequest, logsv1.IngestResultsResponse]) error {
	d := s.deliveryOf(stream.Context())
	check := checkResults
	if d != nil {
		check = func(req *logsv1.IngestResultsRequest) (*ticket, error) {
			refused := d.filterResults(req)
			t, err := checkResults(req)
			if t != nil {
				t.refused = append(t.refused, refused...)
			}
			return t, err
		}
	}
	return serveBatches(s, "results", streamResults, resultsStats, stream, resultItems, check,
		func(req *logsv1.IngestResultsRequest, t *ticket) *logsv1.IngestResultsResponse {
			return &logsv1.IngestResultsResponse{BatchId: req.GetBatchId(), RefusedTriggerIds: t.refused}
		})
}

// IngestLogLines implements IngestService: a line already stored is kept as it is.
func (s *Service) IngestLogLines(stream grpc.BidiStreamingServer[logsv1.IngestLogLinesRequest, logsv1.IngestLogLinesResponse]) error {
	d := s.deliveryOf(stream.Context())
	check := checkLines
	if d != nil {
		check = func(req *logsv1.IngestLogLinesRequest) (*ticket, error) {
			d.filterLines(req)
			return checkLines(req)
		}
	}
	return serveBatches(s, "log lines", streamLines, linesStats, stream, nil, check,
		func(req *logsv1.IngestLogLinesRequest, _ *ticket) *logsv1.IngestLogLinesResponse {
			return &logsv1.IngestLogLinesResponse{BatchId: req.GetBatchId()}
		})
}

// maxStreamBatches caps the batches of one stream received and not yet acknowledged: a stream
// reads ahead so that its batches can join a write cycle while an earlier one commits.
const maxStreamBatches = 64

// serveBatches reads a stream's batches, checks each (check turns it into a ticket or names
// the field at fault), queues it for the writer, and acknowledges batches in order as their
// write cycles commit (ack builds the response). The first error ends the stream with that
// error's status, after the batches before it are acknowledged. Each batch is measured (label
// is the stream's jobmesh.ingest.stream value; stats counts its items and finds the oldest
// one's time) and traced (traced lists its traced items; nil for a stream that is not traced).
func serveBatches[Req, Resp any](s *Service, name, label string, stats func(*Req) (int, int64), stream grpc.BidiStreamingServer[Req, Resp],
	traced func(*Req, *Resp) ingestBatch, check func(*Req) (*ticket, error), ack func(*Req, *ticket) *Resp) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	queued := s.queue.open()
	defer s.queue.close(queued)
	type received struct {
		req   *Req
		t     *ticket
		start time.Time
		err   error // the stream's, or the batch's fault
	}
	batches := make(chan received, maxStreamBatches)
	// The reader ends at the stream's first error or bad batch, or when the RPC ends (Recv
	// then fails).
	go func() {
		defer close(batches)
		for {
			req, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return
			}
			b := received{req: req, start: time.Now(), err: err}
			if err == nil {
				b.t, b.err = check(req)
			}
			if b.err == nil {
				b.t.ctx, b.t.lane = ctx, queued
				if b.t.eventMs == 0 { // a records batch orders by its fires' time (recordsTicket)
					_, b.t.eventMs = stats(req)
				}
				b.err = s.submit(b.t)
			}
			select {
			case batches <- b:
			case <-ctx.Done():
				return
			}
			if b.err != nil {
				return
			}
		}
	}()
	for b := range batches {
		if b.err != nil {
			if b.req != nil && isFieldError(b.err) {
				n, oldestMs := stats(b.req)
				s.metrics.batch(label, n, oldestMs, 0, s.now(), b.err)
				if traced != nil {
					traceBatch(ctx, traced(b.req, nil), b.start, b.err)
				}
			}
			return b.err
		}
		select {
		case <-b.t.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		err := b.t.err
		n, oldestMs := stats(b.req)
		s.metrics.batch(label, n, oldestMs, b.t.committed.Sub(b.t.queued), s.now(), err)
		if err != nil {
			bctx := ctx
			if traced != nil {
				bctx = traceBatch(ctx, traced(b.req, nil), b.start, err)
			}
			if ctx.Err() != nil {
				return err
			}
			s.log.ErrorContext(bctx, "ingest batch failed", "stream", name, "error", err)
			// Nothing of the batch was committed and it is safe to resend: say so.
			return fmt.Errorf("%w: logs store: batch %s not stored, resend it: %v", apierr.ErrUnavailable, name, err)
		}
		resp := ack(b.req, b.t)
		if err := stream.Send(resp); err != nil {
			return err
		}
		if traced != nil { // after the ack: spans cost the sender nothing
			traceBatch(ctx, traced(b.req, resp), b.start, nil)
		}
	}
	return nil
}

// clean makes text storable: Postgres text refuses NUL.
func clean(t string) string {
	if strings.IndexByte(t, 0) >= 0 {
		t = strings.ReplaceAll(t, "\x00", "\uFFFD")
	}
	return t
}

// lineCutMarker ends a log line that was longer than maxTextBytes and was cut.
const lineCutMarker = " … [line truncated]"

// clipLine cleans a log line and cuts one longer than maxTextBytes to that size, ending with
// lineCutMarker so a reader sees that text is missing.
func clipLine(t string) string {
	t = clean(t)
	if len(t) <= maxTextBytes {
		return t
	}
	n := maxTextBytes - len(lineCutMarker)
	for n > 0 && !utf8.RuneStart(t[n]) {
		n--
	}
	return t[:n] + lineCutMarker
}

// clip cleans a message or a line and cuts it to maxTextBytes at a rune boundary.
func clip(t string) string {
	t = clean(t)
	if len(t) > maxTextBytes {
		n := maxTextBytes
		for n > 0 && !utf8.RuneStart(t[n]) {
			n--
		}
		t = t[:n]
	}
	return t
}

func checkTriggerID(field, id string) error {
	switch {
	case id == "":
		return apierr.Field(field, "required")
	case len(id) > maxTriggerIDLen:
		return apierr.Field(field, "at most %d bytes, got %d", maxTriggerIDLen, len(id))
	case strings.IndexByte(id, 0) >= 0:
		return apierr.Field(field, "must not contain NUL")
	}
	return nil
}

// checkRecords checks a batch of trigger records.
func checkRecords(req *logsv1.IngestTriggerRecordsRequest) (*ticket, error) {
	recs := req.GetRecords()
	if len(recs) > maxBatchItems {
		return nil, apierr.Field("records", "at most %d per batch, got %d", maxBatchItems, len(recs))
	}
	for i, r := range recs {
		if err := checkTriggerID(fmt.Sprintf("records[%d].trigger_id", i), r.GetTriggerId()); err != nil {
			return nil, err
		}
		if o := int32(r.GetTriggerOutcome()); o != outcomeOK && o != outcomeFailed && o != outcomeUnknown && o != outcomeSkipped {
			return nil, apierr.Field(fmt.Sprintf("records[%d].trigger_outcome", i), "want OK, FAILED, UNKNOWN or SKIPPED, got %s", r.GetTriggerOutcome())
		}
	}
	return recordsTicket(recs), nil
}

// checkResults checks a batch of results.
func checkResults(req *logsv1.IngestResultsRequest) (*ticket, error) {
	results := req.GetResults()
	if len(results) > maxBatchItems {
		return nil, apierr.Field("results", "at most %d per batch, got %d", maxBatchItems, len(results))
	}
	for i, r := range results {
		if err := checkTriggerID(fmt.Sprintf("results[%d].trigger_id", i), r.GetTriggerId()); err != nil {
			return nil, err
		}
		// SKIPPED is the scheduler's word (a SKIPPED trigger record), never an executor's.
		if st := int32(r.GetStatus()); st < statusRunning || st > statusKilled {
			return nil, apierr.Field(fmt.Sprintf("results[%d].status", i), "want RUNNING, SUCCESS, FAIL, TIMEOUT or KILLED, got %s", r.GetStatus())
		}
		if err := checkOutputs(fmt.Sprintf("results[%d].outputs", i), r.GetOutputs()); err != nil {
			return nil, err
		}
	}
	return resultsTicket(results), nil
}

// checkLines checks a batch of log lines.
func checkLines(req *logsv1.IngestLogLinesRequest) (*ticket, error) {
	lines := req.GetLines()
	if len(lines) > maxBatchItems {
		return nil, apierr.Field("lines", "at most %d per batch, got %d", maxBatchItems, len(lines))
	}
	for i, l := range lines {
		if err := checkTriggerID(fmt.Sprintf("lines[%d].trigger_id", i), l.GetTriggerId()); err != nil {
			return nil, err
		}
		if l.GetLineNo() < 1 {
			return nil, apierr.Field(fmt.Sprintf("lines[%d].line_no", i), "want 1 or more, got %d", l.GetLineNo())
		}
	}
	return linesTicket(lines), nil
}

// complete publishes completions (runs as the transaction wrote them) and counts them in the
// reports: a completion counts its status and takes back the one it corrects. The values come
// from the caller, which has just written or read the rows: looking the runs up again by trigger
// id cost a cycle as much as reading them.
//
// A run is published once per change of its published state without a key on completions:
// every caller passes only runs whose stored row it holds locked and has just seen change what
// it published (publish; a record that comes after the sweep of runs without one finds the
// outcome set and publishes nothing; see migration 00005), so every completion passed is
// inserted and counted.
//
// The statements b holds (nil: none), the lock of completions and the counts go to the store
// in one round trip, then the completions.
func (s *Service) complete(ctx context.Context, tx *db.Tx, b *db.Batch, cs []completion, now int64) error {
	if b == nil {
		b = &db.Batch{}
	}
	if len(cs) == 0 {
		return tx.Send(ctx, b)
	}
	cs = slices.Clone(cs)
	slices.SortFunc(cs, func(a, b completion) int { return strings.Compare(a.r.id, b.r.id) })
	counts := newReportCounts(now)
	for _, c := range cs {
		counts.add(c.r.schedMs, c.r.group, c.r.status, c.replaces)
	}
	if s.store.Dialect() == db.Postgres {
		// Held to commit: completion cursors are then committed in increasing order.
		b.Queue(func(err error) error { return fmt.Errorf("lock completions: %w", err) }, `SELECT pg_advisory_xact_lock($1)`, completionsLock)
	}
	s.bumpReports(b, counts)
	if err := tx.Send(ctx, b); err != nil {
		return err
	}
	if s.store.Dialect() == db.Postgres {
		var rows db.CopyRows
		size := 0
		for _, c := range cs {
			size += completionCopySize + len(c.r.id) + len(c.r.params) + len(c.r.outputs)
		}
		rows.Grow(size)
		for _, c := range cs {
			r := c.r
			rows.Row(completionFields + 1)
			rows.Text(r.id)
			rows.Int64(r.job)
			rows.Int64(r.group)
			rows.Int32(r.status)
			rows.Int32(r.outcome)
			rows.Int32(r.attempt)
			rows.Int32(r.shardIndex)
			rows.Int32(r.shardTotal)
			rows.Int64(r.schedMs)
			rows.Int64(r.endMs)
			rows.Int32(r.triggerType)
			rows.Text(r.params)
			rows.Int32(c.replaces)
			rows.Text(r.outputs)
			rows.Int64(now)
		}
		if _, err := tx.CopyIn(ctx, "completions", completionColumns+", created_ms", &rows); err != nil {
			return fmt.Errorf("insert completions: %w", err)
		}
	} else {
		for _, chunk := range chunks(cs, rowsPerStatement) {
			args := make([]any, 0, len(chunk)*(completionFields+1))
			for _, c := range chunk {
				r := c.r
				args = append(args, r.id, r.job, r.group, r.status, r.outcome, r.attempt, r.shardIndex, r.shardTotal,
					r.schedMs, r.endMs, r.triggerType, r.params, c.replaces, r.outputs, now)
			}
			q := `INSERT INTO completions (` + completionColumns + `, created_ms) VALUES ` + s.values(len(chunk), completionFields+1, "")
			if _, err := tx.ExecContext(ctx, q, args...); err != nil {
				return fmt.Errorf("insert completions: %w", err)
			}
		}
	}
	return nil
}

// completionColumns are the completions columns taken from a run, completionFields of them, in
// the order complete writes them.
const completionColumns = `trigger_id, job_id, group_id, status, trigger_outcome, attempt, shard_index, shard_total,
	scheduled_ms, end_ms, trigger_type, params, replaces_status, outputs`

const completionFields = 14

// completionCopySize is the size of a completion's row in a binary COPY without its texts'
// bytes: the field count, a length per field (created_ms too), five bigints and seven ints.
const completionCopySize = 2 + 4*(completionFields+1) + 8*5 + 4*7
