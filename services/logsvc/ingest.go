package logsvc

import (
	"cmp"
	"context"
	"database/sql"
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
	statusRunning = int32(logsv1.RunStatus_RUN_STATUS_RUNNING)
	statusFail    = int32(logsv1.RunStatus_RUN_STATUS_FAIL)
	outcomeNone   = int32(logsv1.TriggerOutcome_TRIGGER_OUTCOME_UNSPECIFIED)
	outcomeOK     = int32(logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK)
	outcomeFailed = int32(logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED)
)

// final reports whether a run in status st has ended.
func final(st int32) bool { return st > statusRunning }

// IngestTriggerRecords implements IngestService: each batch is upserted in one transaction and
// acknowledged after commit.
func (s *Service) IngestTriggerRecords(stream grpc.BidiStreamingServer[logsv1.IngestTriggerRecordsRequest, logsv1.IngestTriggerRecordsResponse]) error {
	return serveBatches(s, "trigger records", streamRecords, recordsStats, stream, recordItems, func(ctx context.Context, req *logsv1.IngestTriggerRecordsRequest) (*logsv1.IngestTriggerRecordsResponse, error) {
		if err := s.writeRecords(ctx, req.GetRecords()); err != nil {
			return nil, err
		}
		return &logsv1.IngestTriggerRecordsResponse{BatchId: req.GetBatchId()}, nil
	})
}

// IngestResults implements IngestService: a RUNNING result records that an executor accepted
// the fire; final results for runs that already ended are refused and listed in the ack.
func (s *Service) IngestResults(stream grpc.BidiStreamingServer[logsv1.IngestResultsRequest, logsv1.IngestResultsResponse]) error {
	return serveBatches(s, "results", streamResults, resultsStats, stream, resultItems, func(ctx context.Context, req *logsv1.IngestResultsRequest) (*logsv1.IngestResultsResponse, error) {
		refused, err := s.writeResults(ctx, req.GetResults())
		if err != nil {
			return nil, err
		}
		return &logsv1.IngestResultsResponse{BatchId: req.GetBatchId(), RefusedTriggerIds: refused}, nil
	})
}

// IngestLogLines implements IngestService: a line already stored is kept as it is.
func (s *Service) IngestLogLines(stream grpc.BidiStreamingServer[logsv1.IngestLogLinesRequest, logsv1.IngestLogLinesResponse]) error {
	return serveBatches(s, "log lines", streamLines, linesStats, stream, nil, func(ctx context.Context, req *logsv1.IngestLogLinesRequest) (*logsv1.IngestLogLinesResponse, error) {
		if err := s.writeLines(ctx, req.GetLines()); err != nil {
			return nil, err
		}
		return &logsv1.IngestLogLinesResponse{BatchId: req.GetBatchId()}, nil
	})
}

// serveBatches answers each batch of a stream after write commits it; the first error ends the
// stream with that error's status. Each batch is measured (label is the stream's
// jobmesh.ingest.stream value; stats counts its items and finds the oldest one's time) and
// traced (traced lists its traced items; nil for a stream that is not traced).
func serveBatches[Req, Resp any](s *Service, name, label string, stats func(*Req) (int, int64), stream grpc.BidiStreamingServer[Req, Resp],
	traced func(*Req, *Resp) ingestBatch, write func(context.Context, *Req) (*Resp, error)) error {
	ctx := stream.Context()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		start := time.Now()
		// Wait for a write slot before reading on: a slow store stops this stream's reads.
		select {
		case s.writing <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		began := time.Now()
		resp, err := write(ctx, req)
		<-s.writing
		n, oldestMs := stats(req)
		s.metrics.batch(label, n, oldestMs, time.Since(began), s.now(), err)
		if err != nil {
			bctx := ctx
			if traced != nil {
				bctx = traceBatch(ctx, traced(req, resp), start, err)
			}
			if isFieldError(err) || ctx.Err() != nil {
				return err
			}
			s.log.ErrorContext(bctx, "ingest batch failed", "stream", name, "error", err)
			// Nothing of the batch was committed and it is safe to resend: say so.
			return fmt.Errorf("%w: logs store: batch %s not stored, resend it: %v", apierr.ErrUnavailable, name, err)
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
		if traced != nil { // after the ack: spans cost the sender nothing
			traceBatch(ctx, traced(req, resp), start, nil)
		}
	}
}

// clean makes text storable: Postgres text refuses NUL.
func clean(t string) string {
	if strings.IndexByte(t, 0) >= 0 {
		t = strings.ReplaceAll(t, "\x00", "\uFFFD")
	}
	return t
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

// writeRecords stores trigger records. A record fills the trigger fields of its run whether or
// not the result came first, never touching the result's status; a FAILED outcome ends a run
// still RUNNING. A run is published as a completion once it has ended and its record is stored,
// because the scheduler needs the record's attempt, shard and params to retry it.
func (s *Service) writeRecords(ctx context.Context, recs []*logsv1.TriggerRecord) error {
	if len(recs) > maxBatchItems {
		return apierr.Field("records", "at most %d per batch, got %d", maxBatchItems, len(recs))
	}
	for i, r := range recs {
		if err := checkTriggerID(fmt.Sprintf("records[%d].trigger_id", i), r.GetTriggerId()); err != nil {
			return err
		}
		if o := r.GetTriggerOutcome(); o != logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK && o != logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED {
			return apierr.Field(fmt.Sprintf("records[%d].trigger_outcome", i), "want OK or FAILED, got %s", o)
		}
	}
	// The last record of a trigger id in the batch wins; sorting keeps lock order stable.
	byID := make(map[string]*logsv1.TriggerRecord, len(recs))
	for _, r := range recs {
		byID[r.GetTriggerId()] = r
	}
	ids := make([]string, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	now := s.now().UnixMilli()
	var completed bool
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var ok, failed, failing, done []string
		for _, chunk := range chunks(ids, rowsPerStatement) {
			args := make([]any, 0, len(chunk)*17)
			for _, id := range chunk {
				r := byID[id]
				total := r.GetShardTotal()
				if total < 1 {
					total = 1
				}
				args = append(args, id, r.GetJobId(), r.GetGroupId(), int32(r.GetTriggerType()), r.GetScheduledUnixMs(), r.GetTriggerUnixMs(),
					clean(r.GetExecutorAddress()), clean(r.GetHandler()), clean(r.GetParams()), r.GetShardIndex(), total, r.GetAttempt(),
					r.GetRetriesLeft(), int32(r.GetRouteStrategy()), clip(r.GetTriggerMessage()), traceIDOf(r.GetTraceId(), r.GetTraceparent()), int32(r.GetTriggerOutcome()))
			}
			// A new row takes the record's outcome as RUNNING; an existing row keeps its status
			// and outcome here, so RETURNING shows them as they were before this record.
			q := `INSERT INTO runs (trigger_id, job_id, group_id, trigger_type, scheduled_ms, trigger_ms, executor_address,
					handler, params, shard_index, shard_total, attempt, retries_left, route_strategy, trigger_message, trace_id,
					trigger_outcome, status)
				VALUES ` + s.values(len(chunk), 17, ", 1") + `
				ON CONFLICT (trigger_id) DO UPDATE SET
					job_id = excluded.job_id, group_id = excluded.group_id, trigger_type = excluded.trigger_type,
					scheduled_ms = excluded.scheduled_ms, trigger_ms = excluded.trigger_ms,
					executor_address = CASE WHEN excluded.executor_address <> '' THEN excluded.executor_address ELSE runs.executor_address END,
					handler = excluded.handler, params = excluded.params, shard_index = excluded.shard_index,
					shard_total = excluded.shard_total, attempt = excluded.attempt, retries_left = excluded.retries_left,
					route_strategy = excluded.route_strategy, trigger_message = excluded.trigger_message,
					trace_id = CASE WHEN excluded.trace_id <> '' THEN excluded.trace_id ELSE runs.trace_id END
				RETURNING trigger_id, status, trigger_outcome, start_ms`
			rows, err := tx.QueryContext(ctx, q, args...)
			if err != nil {
				return fmt.Errorf("upsert trigger records: %w", err)
			}
			for rows.Next() {
				var id string
				var st, outcome int32
				var startMs int64
				if err := rows.Scan(&id, &st, &outcome, &startMs); err != nil {
					rows.Close()
					return fmt.Errorf("upsert trigger records: %w", err)
				}
				want := int32(byID[id].GetTriggerOutcome())
				switch {
				case want == outcomeFailed && st == statusRunning && startMs > 0:
					// The executor reported the fire RUNNING: it got there although the scheduler
					// saw an error (a timed-out Run). Its own result decides the run.
					if outcome != outcomeOK {
						ok = append(ok, id)
					}
				case want == outcomeFailed && st == statusRunning:
					failing = append(failing, id)
				case outcome == want: // inserted, or a record seen before
				case want == outcomeFailed:
					failed = append(failed, id)
				default:
					ok = append(ok, id)
				}
				if final(st) && outcome == outcomeNone {
					done = append(done, id) // the result came first
				}
			}
			if err := rows.Close(); err != nil {
				return fmt.Errorf("upsert trigger records: %w", err)
			}
		}
		if err := s.setOutcome(ctx, tx, ok, outcomeOK); err != nil {
			return err
		}
		if err := s.setOutcome(ctx, tx, failed, outcomeFailed); err != nil {
			return err
		}
		for _, chunk := range chunks(failing, rowsPerStatement) {
			q := `UPDATE runs SET trigger_outcome = ` + s.ph(1) + `, status = ` + s.ph(2) + `, handle_message = ` + s.ph(3) + `,
					end_ms = CASE WHEN trigger_ms > 0 THEN trigger_ms ELSE ` + s.ph(4) + ` END
				WHERE trigger_id IN ` + s.in(len(chunk), 5)
			args := append([]any{outcomeFailed, statusFail, "trigger failed: the fire reached no executor (see the trigger message)", now}, anys(chunk)...)
			if _, err := tx.ExecContext(ctx, q, args...); err != nil {
				return fmt.Errorf("fail runs whose trigger failed: %w", err)
			}
		}
		done = append(done, failing...)
		completed = len(done) > 0
		return s.complete(ctx, tx, done, now)
	})
	if err != nil {
		return err
	}
	s.hub.runsChanged(ids)
	if completed {
		s.hub.completionsChanged()
	}
	return nil
}

func (s *Service) setOutcome(ctx context.Context, tx *sql.Tx, ids []string, outcome int32) error {
	for _, chunk := range chunks(ids, rowsPerStatement) {
		q := `UPDATE runs SET trigger_outcome = ` + s.ph(1) + ` WHERE trigger_id IN ` + s.in(len(chunk), 2)
		if _, err := tx.ExecContext(ctx, q, append([]any{outcome}, anys(chunk)...)...); err != nil {
			return fmt.Errorf("set trigger outcome: %w", err)
		}
	}
	return nil
}

// complete publishes the runs ids as completions, once each, from their stored rows, and counts
// the ones it publishes in the reports.
func (s *Service) complete(ctx context.Context, tx *sql.Tx, ids []string, now int64) error {
	if len(ids) == 0 {
		return nil
	}
	slices.Sort(ids)
	if s.store.Dialect() == db.Postgres {
		// Held to commit: completion cursors are then committed in increasing order.
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, completionsLock); err != nil {
			return fmt.Errorf("lock completions: %w", err)
		}
	}
	counts := newReportCounts(now)
	for _, chunk := range chunks(ids, rowsPerStatement) {
		q := `INSERT INTO completions (trigger_id, job_id, group_id, status, trigger_outcome, attempt, shard_index, shard_total,
				scheduled_ms, end_ms, trigger_type, params, created_ms)
			SELECT trigger_id, job_id, group_id, status, trigger_outcome, attempt, shard_index, shard_total,
				scheduled_ms, end_ms, trigger_type, params, CAST(` + s.ph(1) + ` AS BIGINT)
			FROM runs WHERE trigger_id IN ` + s.in(len(chunk), 2) + `
			ORDER BY trigger_id
			ON CONFLICT (trigger_id) DO NOTHING
			RETURNING scheduled_ms, group_id, job_id, status`
		rows, err := tx.QueryContext(ctx, q, append([]any{now}, anys(chunk)...)...)
		if err != nil {
			return fmt.Errorf("insert completions: %w", err)
		}
		for rows.Next() {
			var sched, group, job int64
			var st int32
			if err := rows.Scan(&sched, &group, &job, &st); err != nil {
				rows.Close()
				return fmt.Errorf("insert completions: %w", err)
			}
			counts.add(sched, group, job, st)
		}
		if err := rows.Close(); err != nil {
			return fmt.Errorf("insert completions: %w", err)
		}
	}
	return s.bumpReports(ctx, tx, counts)
}

// writeResults stores results and returns the trigger ids of final results refused because their
// run had already ended (XXL-JOB's handle_code > 0 guard); a refused result changes nothing. A
// result that comes before the trigger record creates the run; its completion waits for the
// record. RUNNING results (see writeStarts) are applied first, so a batch holding a fire's
// RUNNING and its final result ends with the final one whatever their order.
func (s *Service) writeResults(ctx context.Context, results []*logsv1.RunResult) ([]string, error) {
	if len(results) > maxBatchItems {
		return nil, apierr.Field("results", "at most %d per batch, got %d", maxBatchItems, len(results))
	}
	for i, r := range results {
		if err := checkTriggerID(fmt.Sprintf("results[%d].trigger_id", i), r.GetTriggerId()); err != nil {
			return nil, err
		}
		if st := int32(r.GetStatus()); st < statusRunning || logsv1.RunStatus_name[st] == "" {
			return nil, apierr.Field(fmt.Sprintf("results[%d].status", i), "want RUNNING, SUCCESS, FAIL, TIMEOUT or KILLED, got %s", r.GetStatus())
		}
	}
	// The first RUNNING and the first final result of a trigger id in the batch count; a later
	// RUNNING is dropped, a later final result is refused like any result for a run that ended.
	byID := make(map[string]*logsv1.RunResult, len(results))
	var starts map[string]*logsv1.RunResult
	refused := map[string]bool{}
	for _, r := range results {
		id := r.GetTriggerId()
		if int32(r.GetStatus()) == statusRunning {
			if starts == nil {
				starts = map[string]*logsv1.RunResult{}
			}
			if _, dup := starts[id]; !dup {
				starts[id] = r
			}
			continue
		}
		if _, dup := byID[id]; dup {
			refused[id] = true
			continue
		}
		byID[id] = r
	}
	ids := make([]string, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	startIDs := make([]string, 0, len(starts))
	for id := range starts {
		startIDs = append(startIDs, id)
	}
	slices.Sort(startIDs)
	now := s.now().UnixMilli()
	var applied map[string]bool
	var completed bool
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.writeStarts(ctx, tx, startIDs, starts, now); err != nil {
			return err
		}
		applied = make(map[string]bool, len(ids))
		var done []string
		for _, chunk := range chunks(ids, rowsPerStatement) {
			args := make([]any, 0, len(chunk)*9)
			for _, id := range chunk {
				r := byID[id]
				end := r.GetEndUnixMs()
				if end == 0 {
					end = now
				}
				sched := r.GetStartUnixMs() // provisional until the record says when it was scheduled
				if sched == 0 {
					sched = end
				}
				args = append(args, id, r.GetJobId(), int32(r.GetStatus()), clip(r.GetMessage()), r.GetStartUnixMs(), end,
					clean(r.GetExecutorAddress()), traceIDOf(r.GetTraceId(), r.GetTraceparent()), sched)
			}
			// Only a RUNNING run takes a result: RETURNING lists exactly the results applied.
			q := `INSERT INTO runs (trigger_id, job_id, status, handle_message, start_ms, end_ms, executor_address, trace_id, scheduled_ms)
				VALUES ` + s.values(len(chunk), 9, "") + `
				ON CONFLICT (trigger_id) DO UPDATE SET
					status = excluded.status, handle_message = excluded.handle_message,
					start_ms = excluded.start_ms, end_ms = excluded.end_ms,
					job_id = CASE WHEN runs.job_id = 0 THEN excluded.job_id ELSE runs.job_id END,
					executor_address = CASE WHEN runs.executor_address = '' THEN excluded.executor_address ELSE runs.executor_address END,
					trace_id = CASE WHEN runs.trace_id = '' THEN excluded.trace_id ELSE runs.trace_id END
				WHERE runs.status = ` + s.ph(len(args)+1) + `
				RETURNING trigger_id, trigger_outcome`
			rows, err := tx.QueryContext(ctx, q, append(args, statusRunning)...)
			if err != nil {
				return fmt.Errorf("upsert results: %w", err)
			}
			for rows.Next() {
				var id string
				var outcome int32
				if err := rows.Scan(&id, &outcome); err != nil {
					rows.Close()
					return fmt.Errorf("upsert results: %w", err)
				}
				applied[id] = true
				if outcome != outcomeNone {
					done = append(done, id)
				}
			}
			if err := rows.Close(); err != nil {
				return fmt.Errorf("upsert results: %w", err)
			}
		}
		completed = len(done) > 0
		return s.complete(ctx, tx, done, now)
	})
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if !applied[id] {
			refused[id] = true
		}
	}
	out := make([]string, 0, len(refused))
	for id := range refused {
		out = append(out, id)
	}
	slices.Sort(out)
	s.hub.runsChanged(ids)
	s.hub.runsChanged(startIDs)
	if completed {
		s.hub.completionsChanged()
	}
	return out, nil
}

// writeStarts stores RUNNING results: the executor accepted the fire. A missing run is created
// RUNNING (scheduled at the start time until the record says otherwise); a run still RUNNING
// gets the executor address, start time, job and trace id it lacks; an ended run is left as it
// is. A start is never refused and never completes a run.
func (s *Service) writeStarts(ctx context.Context, tx *sql.Tx, ids []string, byID map[string]*logsv1.RunResult, now int64) error {
	for _, chunk := range chunks(ids, rowsPerStatement) {
		args := make([]any, 0, len(chunk)*6+1)
		for _, id := range chunk {
			r := byID[id]
			sched := r.GetStartUnixMs()
			if sched == 0 {
				sched = now
			}
			args = append(args, id, r.GetJobId(), r.GetStartUnixMs(), clean(r.GetExecutorAddress()), traceIDOf(r.GetTraceId(), r.GetTraceparent()), sched)
		}
		q := `INSERT INTO runs (trigger_id, job_id, start_ms, executor_address, trace_id, scheduled_ms, status)
			VALUES ` + s.values(len(chunk), 6, fmt.Sprintf(", %d", statusRunning)) + `
			ON CONFLICT (trigger_id) DO UPDATE SET
				job_id = CASE WHEN runs.job_id = 0 THEN excluded.job_id ELSE runs.job_id END,
				start_ms = CASE WHEN runs.start_ms = 0 THEN excluded.start_ms ELSE runs.start_ms END,
				executor_address = CASE WHEN runs.executor_address = '' THEN excluded.executor_address ELSE runs.executor_address END,
				trace_id = CASE WHEN runs.trace_id = '' THEN excluded.trace_id ELSE runs.trace_id END
			WHERE runs.status = ` + s.ph(len(args)+1)
		if _, err := tx.ExecContext(ctx, q, append(args, statusRunning)...); err != nil {
			return fmt.Errorf("upsert starts: %w", err)
		}
	}
	return nil
}

// writeLines stores output lines; a line number already stored keeps its first text.
func (s *Service) writeLines(ctx context.Context, lines []*logsv1.LogLine) error {
	if len(lines) > maxBatchItems {
		return apierr.Field("lines", "at most %d per batch, got %d", maxBatchItems, len(lines))
	}
	for i, l := range lines {
		if err := checkTriggerID(fmt.Sprintf("lines[%d].trigger_id", i), l.GetTriggerId()); err != nil {
			return err
		}
		if l.GetLineNo() < 1 {
			return apierr.Field(fmt.Sprintf("lines[%d].line_no", i), "want 1 or more, got %d", l.GetLineNo())
		}
	}
	type key struct {
		id string
		no int64
	}
	seen := make(map[key]bool, len(lines))
	uniq := make([]*logsv1.LogLine, 0, len(lines))
	for _, l := range lines {
		k := key{l.GetTriggerId(), l.GetLineNo()}
		if !seen[k] {
			seen[k] = true
			uniq = append(uniq, l)
		}
	}
	slices.SortFunc(uniq, func(a, b *logsv1.LogLine) int {
		return cmp.Or(strings.Compare(a.GetTriggerId(), b.GetTriggerId()), cmp.Compare(a.GetLineNo(), b.GetLineNo()))
	})
	if len(uniq) == 0 {
		return nil
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		for _, chunk := range chunks(uniq, rowsPerStatement) {
			args := make([]any, 0, len(chunk)*4)
			for _, l := range chunk {
				args = append(args, l.GetTriggerId(), l.GetLineNo(), l.GetUnixMs(), clip(l.GetText()))
			}
			q := `INSERT INTO run_lines (trigger_id, line_no, unix_ms, text) VALUES ` + s.values(len(chunk), 4, "") + `
				ON CONFLICT (trigger_id, line_no) DO NOTHING`
			if _, err := tx.ExecContext(ctx, q, args...); err != nil {
				return fmt.Errorf("insert log lines: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	var ids []string
	for i, l := range uniq {
		if i == 0 || l.GetTriggerId() != uniq[i-1].GetTriggerId() {
			ids = append(ids, l.GetTriggerId())
		}
	}
	s.hub.runsChanged(ids)
	return nil
}
