package logsvc

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/internal/db"
)

// Ingest batches of every stream (trigger records, results, log lines) go through one queue. A
// writer takes everything queued (up to maxCycleItems) and writes it in one transaction, a
// write cycle: a fire's record and results that came on different streams meet there and are
// written as one row, and a busy store takes fewer, larger transactions instead of falling
// further behind one small batch at a time. A batch is acknowledged after its cycle commits.
//
// The writer is a goroutine that starts when a batch is queued and none runs, and ends when
// the queue is empty. A cycle's work stops once every stream waiting on it has ended.

// maxCycleItems caps the items one write cycle takes (it takes at least one batch, which may
// hold up to maxBatchItems).
const maxCycleItems = 10000

// ticket is one ingest batch (one of records, results or lines) on its way to the store.
type ticket struct {
	records []*logsv1.TriggerRecord
	results []*logsv1.RunResult
	lines   []*logsv1.LogLine
	// ctx is the stream's: a ticket whose stream has ended is dropped unwritten.
	ctx context.Context
	// queued is when the batch was queued.
	queued time.Time

	// Set by the writer before it closes done.
	refused   []string // results refused: their runs had ended
	committed time.Time
	err       error
	done      chan struct{}
}

func (t *ticket) items() int { return len(t.records) + len(t.results) + len(t.lines) }

func (t *ticket) finish(committed time.Time, err error) {
	t.committed, t.err = committed, err
	close(t.done)
}

// queue holds the batches waiting for the writer.
type queue struct {
	mu      sync.Mutex
	waiting []*ticket
	held    int           // items queued or being written
	writing bool          // a writer goroutine runs
	room    chan struct{} // closed and replaced when held drops
}

func newQueue() *queue { return &queue{room: make(chan struct{})} }

// queued reports the items queued or being written.
func (q *queue) queued() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.held
}

// submit queues t for writing, waiting while the queue holds MaxQueuedItems already (one batch
// is always let in, however large). It fails only when t's stream ends first.
func (s *Service) submit(t *ticket) error {
	q := s.queue
	n := t.items()
	for {
		q.mu.Lock()
		if q.held == 0 || q.held+n <= s.cfg.MaxQueuedItems {
			t.queued = time.Now()
			q.waiting = append(q.waiting, t)
			q.held += n
			if !q.writing {
				q.writing = true
				go s.drain()
			}
			q.mu.Unlock()
			return nil
		}
		room := q.room
		q.mu.Unlock()
		select {
		case <-room:
		case <-t.ctx.Done():
			return t.ctx.Err()
		}
	}
}

// drain writes what is queued, a cycle at a time, until the queue is empty.
func (s *Service) drain() {
	q := s.queue
	for {
		q.mu.Lock()
		var cycle []*ticket
		n := 0
		for len(q.waiting) > 0 {
			t := q.waiting[0]
			if t.ctx.Err() != nil { // its stream ended: nobody waits for it
				q.waiting = q.waiting[1:]
				q.held -= t.items()
				t.finish(time.Now(), t.ctx.Err())
				continue
			}
			if len(cycle) > 0 && n+t.items() > maxCycleItems {
				break
			}
			q.waiting = q.waiting[1:]
			cycle = append(cycle, t)
			n += t.items()
		}
		if len(cycle) == 0 {
			q.writing = false
			q.waiting = nil
			close(q.room)
			q.room = make(chan struct{})
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		s.writeCycle(cycle)
		q.mu.Lock()
		q.held -= n
		close(q.room)
		q.room = make(chan struct{})
		q.mu.Unlock()
	}
}

// writeCycle writes tickets in one transaction and finishes them. When the store refuses a
// cycle of several batches, each is written again alone, so a batch the store cannot take
// fails only its own stream.
func (s *Service) writeCycle(tickets []*ticket) {
	ctx, cancel := cycleContext(tickets)
	defer cancel()
	var out cycleOutcome
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = s.writeTickets(ctx, tx, tickets)
		return err
	})
	if err != nil && len(tickets) > 1 && ctx.Err() == nil {
		s.log.WarnContext(ctx, "ingest write cycle failed; writing its batches one at a time", "batches", len(tickets), "error", err)
		for _, t := range tickets {
			s.writeCycle([]*ticket{t})
		}
		return
	}
	now := time.Now()
	if err == nil {
		s.hub.runsChanged(out.ids)
		if out.completed {
			s.hub.completionsChanged()
		}
	}
	for _, t := range tickets {
		t.finish(now, err)
	}
}

// cycleContext is canceled once the streams of all tickets have ended.
func cycleContext(tickets []*ticket) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	left := atomic.Int64{}
	left.Store(int64(len(tickets)))
	stops := make([]func() bool, len(tickets))
	for i, t := range tickets {
		stops[i] = context.AfterFunc(t.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// cycleOutcome is what a committed cycle changed: the runs its batches named, and whether it
// published completions.
type cycleOutcome struct {
	ids       []string
	completed bool
}

// writeTickets applies the tickets, in order, to the runs they name (read and locked first) and
// writes each changed run once, then the log lines, then the completions of the runs that
// ended. It sets each results ticket's refused ids.
func (s *Service) writeTickets(ctx context.Context, tx *sql.Tx, tickets []*ticket) (cycleOutcome, error) {
	var out cycleOutcome
	named := map[string]bool{}
	var lines []*logsv1.LogLine
	for _, t := range tickets {
		for _, r := range t.records {
			named[r.GetTriggerId()] = true
		}
		for _, r := range t.results {
			named[r.GetTriggerId()] = true
		}
		for _, l := range t.lines {
			named[l.GetTriggerId()] = true
		}
		lines = append(lines, t.lines...)
	}
	out.ids = make([]string, 0, len(named))
	for id := range named {
		out.ids = append(out.ids, id)
	}
	slices.Sort(out.ids)
	now := s.now().UnixMilli()
	stored, err := s.readRuns(ctx, tx, tickets)
	if err != nil {
		return out, err
	}
	rs := newRunSet(stored, now)
	for _, t := range tickets {
		switch {
		case t.records != nil:
			rs.records(t.records)
		case t.results != nil:
			t.refused = rs.results(t.results)
		}
	}
	inserts, updates := rs.changes()
	if err := s.insertRuns(ctx, tx, inserts); err != nil {
		return out, err
	}
	if err := s.updateRuns(ctx, tx, updates); err != nil {
		return out, err
	}
	if err := s.insertLines(ctx, tx, lines); err != nil {
		return out, err
	}
	slices.Sort(rs.done)
	done := slices.Compact(rs.done)
	out.completed = len(done) > 0
	return out, s.complete(ctx, tx, done, now)
}

// errRunRace: a run the cycle did not find when it read the runs was stored before it could
// insert it (another replica's write); the cycle is run again.
var errRunRace = errors.New("a run was stored concurrently")

// readRuns reads the stored runs that the tickets' records and results name, locking them on
// Postgres (in trigger id order) until the cycle commits.
func (s *Service) readRuns(ctx context.Context, tx *sql.Tx, tickets []*ticket) (map[string]run, error) {
	seen := map[string]bool{}
	var ids []string
	for _, t := range tickets {
		for _, r := range t.records {
			if id := r.GetTriggerId(); !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
		for _, r := range t.results {
			if id := r.GetTriggerId(); !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	slices.Sort(ids)
	out := make(map[string]run, len(ids))
	scan := func(rows *sql.Rows) error {
		defer rows.Close()
		for rows.Next() {
			var r run
			if err := rows.Scan(&r.id, &r.job, &r.group, &r.triggerType, &r.schedMs, &r.trigMs, &r.address, &r.handler, &r.params,
				&r.shardIndex, &r.shardTotal, &r.attempt, &r.retriesLeft, &r.route, &r.outcome, &r.triggerMsg, &r.status,
				&r.handleMsg, &r.startMs, &r.endMs, &r.traceID, &r.alarm); err != nil {
				return err
			}
			out[r.id] = r
		}
		return rows.Err()
	}
	if len(ids) == 0 {
		return out, nil
	}
	if s.store.Dialect() == db.Postgres {
		rows, err := tx.QueryContext(ctx, `SELECT `+ingestColumns+` FROM runs WHERE trigger_id = ANY($1) ORDER BY trigger_id FOR UPDATE`, ids)
		if err == nil {
			err = scan(rows)
		}
		if err != nil {
			return nil, fmt.Errorf("read runs: %w", err)
		}
		return out, nil
	}
	for _, chunk := range chunks(ids, rowsPerStatement) {
		rows, err := tx.QueryContext(ctx, `SELECT `+ingestColumns+` FROM runs WHERE trigger_id IN `+s.in(len(chunk), 1), anys(chunk)...)
		if err == nil {
			err = scan(rows)
		}
		if err != nil {
			return nil, fmt.Errorf("read runs: %w", err)
		}
	}
	return out, nil
}

// ingestColumns are the runs columns ingestion reads and writes, in run's field order as
// readRuns scans them and runColumnar lists them.
const ingestColumns = `trigger_id, job_id, group_id, trigger_type, scheduled_ms, trigger_ms, executor_address, handler, params,
	shard_index, shard_total, attempt, retries_left, route_strategy, trigger_outcome, trigger_message, status,
	handle_message, start_ms, end_ms, trace_id, alarm_status`

// ingestTypes are ingestColumns' Postgres array types, for unnest.
var ingestTypes = []string{"text", "bigint", "bigint", "int", "bigint", "bigint", "text", "text", "text",
	"int", "int", "int", "int", "int", "int", "text", "int", "text", "bigint", "bigint", "text", "int"}

// runValues lists a run's ingestColumns values.
func runValues(r *run) []any {
	return []any{r.id, r.job, r.group, r.triggerType, r.schedMs, r.trigMs, r.address, r.handler, r.params,
		r.shardIndex, r.shardTotal, r.attempt, r.retriesLeft, r.route, r.outcome, r.triggerMsg, r.status,
		r.handleMsg, r.startMs, r.endMs, r.traceID, r.alarm}
}

// runColumnar lists runs' ingestColumns values as one array per column (for unnest).
func runColumnar(runs []*run) []any {
	n := len(runs)
	ids, addrs, handlers, params, tmsgs, hmsgs, traces := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	jobs, groups, scheds, trigs, starts, ends := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	ttypes, sidx, stot, atts, rets, routes, outs, sts, alarms := make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
	for i, r := range runs {
		ids[i], jobs[i], groups[i], ttypes[i], scheds[i], trigs[i], addrs[i], handlers[i], params[i] = r.id, r.job, r.group, r.triggerType, r.schedMs, r.trigMs, r.address, r.handler, r.params
		sidx[i], stot[i], atts[i], rets[i], routes[i], outs[i], tmsgs[i], sts[i] = r.shardIndex, r.shardTotal, r.attempt, r.retriesLeft, r.route, r.outcome, r.triggerMsg, r.status
		hmsgs[i], starts[i], ends[i], traces[i], alarms[i] = r.handleMsg, r.startMs, r.endMs, r.traceID, r.alarm
	}
	return []any{ids, jobs, groups, ttypes, scheds, trigs, addrs, handlers, params, sidx, stot, atts, rets, routes, outs, tmsgs, sts, hmsgs, starts, ends, traces, alarms}
}

// unnest is a FROM item over n array parameters of the given types, numbered from 1.
func unnest(types []string) string {
	b := []byte("unnest(")
	for i, t := range types {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = fmt.Appendf(b, "$%d::%s[]", i+1, t)
	}
	return string(append(b, ')'))
}

var (
	insertRunsPG = `INSERT INTO runs (` + ingestColumns + `) SELECT * FROM ` + unnest(ingestTypes)
	updateRunsPG = `UPDATE runs SET job_id = u.job_id, group_id = u.group_id, trigger_type = u.trigger_type,
			scheduled_ms = u.scheduled_ms, trigger_ms = u.trigger_ms, executor_address = u.executor_address, handler = u.handler,
			params = u.params, shard_index = u.shard_index, shard_total = u.shard_total, attempt = u.attempt,
			retries_left = u.retries_left, route_strategy = u.route_strategy, trigger_outcome = u.trigger_outcome,
			trigger_message = u.trigger_message, status = u.status, handle_message = u.handle_message, start_ms = u.start_ms,
			end_ms = u.end_ms, trace_id = u.trace_id, alarm_status = u.alarm_status
		FROM ` + unnest(ingestTypes) + ` AS u (` + ingestColumns + `)
		WHERE runs.trigger_id = u.trigger_id`
	// upsertRunsSQLite's ON CONFLICT clause follows its VALUES.
	upsertRunsSQLite = ` ON CONFLICT (trigger_id) DO UPDATE SET job_id = excluded.job_id, group_id = excluded.group_id,
			trigger_type = excluded.trigger_type, scheduled_ms = excluded.scheduled_ms, trigger_ms = excluded.trigger_ms,
			executor_address = excluded.executor_address, handler = excluded.handler, params = excluded.params,
			shard_index = excluded.shard_index, shard_total = excluded.shard_total, attempt = excluded.attempt,
			retries_left = excluded.retries_left, route_strategy = excluded.route_strategy, trigger_outcome = excluded.trigger_outcome,
			trigger_message = excluded.trigger_message, status = excluded.status, handle_message = excluded.handle_message,
			start_ms = excluded.start_ms, end_ms = excluded.end_ms, trace_id = excluded.trace_id, alarm_status = excluded.alarm_status`
)

// insertRuns stores runs not stored before, in trigger id order (seq follows it).
func (s *Service) insertRuns(ctx context.Context, tx *sql.Tx, runs []*run) error {
	if len(runs) == 0 {
		return nil
	}
	if s.store.Dialect() == db.Postgres {
		if _, err := tx.ExecContext(ctx, insertRunsPG, runColumnar(runs)...); err != nil {
			if db.IsUniqueViolation(err) {
				return fmt.Errorf("insert runs: %w: %w", errRunRace, err)
			}
			return fmt.Errorf("insert runs: %w", err)
		}
		return nil
	}
	return s.valuesRuns(ctx, tx, runs, "")
}

// updateRuns writes runs the cycle changed (read and locked by readRuns).
func (s *Service) updateRuns(ctx context.Context, tx *sql.Tx, runs []*run) error {
	if len(runs) == 0 {
		return nil
	}
	if s.store.Dialect() == db.Postgres {
		if _, err := tx.ExecContext(ctx, updateRunsPG, runColumnar(runs)...); err != nil {
			return fmt.Errorf("update runs: %w", err)
		}
		return nil
	}
	return s.valuesRuns(ctx, tx, runs, upsertRunsSQLite)
}

// valuesRuns writes runs with multi-row INSERTs followed by conflict (SQLite, one connection:
// nobody stores a run between readRuns and here).
func (s *Service) valuesRuns(ctx context.Context, tx *sql.Tx, runs []*run, conflict string) error {
	for _, chunk := range chunks(runs, rowsPerStatement) {
		args := make([]any, 0, len(chunk)*len(ingestTypes))
		for _, r := range chunk {
			args = append(args, runValues(r)...)
		}
		q := `INSERT INTO runs (` + ingestColumns + `) VALUES ` + s.values(len(chunk), len(ingestTypes), "") + conflict
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("write runs: %w", err)
		}
	}
	return nil
}

// insertLines stores output lines; a line number already stored keeps its first text, and so
// does the first of a line number sent twice.
func (s *Service) insertLines(ctx context.Context, tx *sql.Tx, lines []*logsv1.LogLine) error {
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
	if s.store.Dialect() == db.Postgres {
		n := len(uniq)
		ids, nos, times, texts := make([]string, n), make([]int64, n), make([]int64, n), make([]string, n)
		for i, l := range uniq {
			ids[i], nos[i], times[i], texts[i] = l.GetTriggerId(), l.GetLineNo(), l.GetUnixMs(), clip(l.GetText())
		}
		q := `INSERT INTO run_lines (trigger_id, line_no, unix_ms, text) SELECT * FROM ` + unnest([]string{"text", "bigint", "bigint", "text"}) + `
			ON CONFLICT (trigger_id, line_no) DO NOTHING`
		if _, err := tx.ExecContext(ctx, q, ids, nos, times, texts); err != nil {
			return fmt.Errorf("insert log lines: %w", err)
		}
		return nil
	}
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
}
