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
// further behind one small batch at a time. A batch is acknowledged once everything in it has
// been written and committed.
//
// A record or result for a run that is not stored yet, whose counterpart (the results, or the
// record) is not in the cycle, is held back (parked) for the next cycle, and for parkFor at
// most: the two sides of a fire reach logsvc a few milliseconds apart, often on either side of
// a cycle's start, and a run written from one side is written again when the other comes. Only
// a cycle that took every batch waiting parks: behind a backlog the other side is rarely just
// one cycle away, and parked items would take the room of the batches that wait. All items of
// a trigger id in a cycle are parked or written together, in order.
//
// The writer is a goroutine that starts when a batch is queued and none runs, and ends when
// nothing is queued or parked. A cycle's work stops once every stream waiting on it has ended.

const (
	// maxCycleItems caps the items one write cycle takes (it takes at least one batch, which
	// may hold up to maxBatchItems).
	maxCycleItems = 10000
	// parkFor is how long a record or result may wait for its counterpart.
	parkFor = 50 * time.Millisecond
)

// ticket is one ingest batch on its way to the store.
type ticket struct {
	// ops are the batch's records or results, in the order they apply; lines its log lines.
	ops   []op
	lines []*logsv1.LogLine
	// ctx is the stream's: a ticket whose stream has ended is dropped unwritten.
	ctx context.Context
	// queued is when the batch was queued.
	queued time.Time

	// Owned by the writer; set before it closes done.
	left      int      // ops not yet written
	refused   []string // results refused: their runs had ended
	committed time.Time
	err       error
	finished  bool
	done      chan struct{}
}

func (t *ticket) items() int { return len(t.ops) + len(t.lines) }

// finish ends the ticket's wait, once.
func (t *ticket) finish(committed time.Time, err error) {
	if t.finished {
		return
	}
	t.finished = true
	t.committed, t.err = committed, err
	slices.Sort(t.refused)
	t.refused = slices.Compact(t.refused)
	close(t.done)
}

// recordsTicket holds a batch of trigger records: the last record of a trigger id in the batch
// counts.
func recordsTicket(recs []*logsv1.TriggerRecord) *ticket {
	t := &ticket{done: make(chan struct{})}
	last := make(map[string]int, len(recs))
	for i, r := range recs {
		last[r.GetTriggerId()] = i
	}
	for i, r := range recs {
		if last[r.GetTriggerId()] == i {
			t.ops = append(t.ops, op{t: t, id: r.GetTriggerId(), rec: r})
		}
	}
	return t
}

// resultsTicket holds a batch of results. The first RUNNING and the first final result of a
// trigger id in the batch count; a later RUNNING is dropped, a later final result is refused
// like any result for a run that ended. RUNNING results go first, so a batch holding a fire's
// RUNNING and its final result ends with the final one whatever their order.
func resultsTicket(results []*logsv1.RunResult) *ticket {
	t := &ticket{done: make(chan struct{})}
	started := map[string]bool{}
	for _, r := range results {
		if id := r.GetTriggerId(); int32(r.GetStatus()) == statusRunning && !started[id] {
			started[id] = true
			t.ops = append(t.ops, op{t: t, id: id, res: r})
		}
	}
	ended := make(map[string]bool, len(results))
	for _, r := range results {
		id := r.GetTriggerId()
		switch {
		case int32(r.GetStatus()) == statusRunning:
		case ended[id]:
			t.refused = append(t.refused, id)
		default:
			ended[id] = true
			t.ops = append(t.ops, op{t: t, id: id, res: r})
		}
	}
	return t
}

// linesTicket holds a batch of log lines.
func linesTicket(lines []*logsv1.LogLine) *ticket {
	return &ticket{lines: lines, done: make(chan struct{})}
}

// queue holds the batches waiting for the writer, and the items it parked.
type queue struct {
	mu      sync.Mutex
	waiting []*ticket
	held    int           // items queued, parked or being written
	writing bool          // a writer goroutine runs
	room    chan struct{} // closed and replaced when held drops
	arrived chan struct{} // closed and replaced when a batch is queued
	parked  []op          // owned by the writer
}

func newQueue() *queue { return &queue{room: make(chan struct{}), arrived: make(chan struct{})} }

// queued reports the items queued, parked or being written.
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
			t.left = len(t.ops)
			q.waiting = append(q.waiting, t)
			q.held += n
			close(q.arrived)
			q.arrived = make(chan struct{})
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

// drain writes what is queued and parked, a cycle at a time, until nothing is left.
func (s *Service) drain() {
	q := s.queue
	for {
		q.mu.Lock()
		// Parked items of streams that have ended are dropped.
		parked := q.parked[:0]
		for _, o := range q.parked {
			if o.t.ctx.Err() != nil {
				q.held--
				o.t.finish(time.Now(), o.t.ctx.Err())
				continue
			}
			parked = append(parked, o)
		}
		q.parked = parked
		var taken []*ticket
		n := len(parked)
		for len(q.waiting) > 0 {
			t := q.waiting[0]
			if t.ctx.Err() != nil { // its stream ended: nobody waits for it
				q.waiting = q.waiting[1:]
				q.held -= t.items()
				t.finish(time.Now(), t.ctx.Err())
				continue
			}
			if (len(taken) > 0 || len(parked) > 0) && n+t.items() > maxCycleItems {
				break
			}
			q.waiting = q.waiting[1:]
			taken = append(taken, t)
			n += t.items()
		}
		if len(taken) == 0 && len(parked) == 0 {
			q.writing = false
			q.waiting = nil
			q.mu.Unlock()
			return
		}
		if len(taken) == 0 && len(q.waiting) == 0 {
			// Only parked items: wait for their counterparts, or until one may wait no more.
			due := parked[0].parked
			for _, o := range parked {
				if o.parked.Before(due) {
					due = o.parked
				}
			}
			if wait := time.Until(due.Add(parkFor)); wait > 0 {
				arrived := q.arrived
				q.mu.Unlock()
				timer := time.NewTimer(wait)
				select {
				case <-arrived:
				case <-timer.C:
				}
				timer.Stop()
				continue
			}
		}
		q.parked = nil
		park := len(q.waiting) == 0 // no backlog
		q.mu.Unlock()
		var ops []op
		ops = append(ops, parked...)
		for _, t := range taken {
			ops = append(ops, t.ops...)
		}
		still, released := s.writeCycle(ops, taken, park)
		q.mu.Lock()
		q.parked = still
		q.held -= released
		close(q.room)
		q.room = make(chan struct{})
		q.mu.Unlock()
	}
}

// writeCycle writes ops (parked ones first, then those of the batches taken, in order) and the
// lines of the batches taken in one transaction, parking what may wait when park is set, and
// finishes every batch that has nothing left to write. It returns the ops parked and how many
// items it is done with (written, or failed with their batch). When the store refuses a cycle
// of several batches, each is written again alone, so a batch the store cannot take fails only
// its own stream.
func (s *Service) writeCycle(ops []op, taken []*ticket, park bool) (parked []op, released int) {
	// The batches involved, oldest first: those of the ops, then those that bring only lines.
	var tickets []*ticket
	involved := map[*ticket]bool{}
	for _, o := range ops {
		if !involved[o.t] {
			involved[o.t] = true
			tickets = append(tickets, o.t)
		}
	}
	var lines []*logsv1.LogLine
	for _, t := range taken {
		lines = append(lines, t.lines...)
		if !involved[t] {
			involved[t] = true
			tickets = append(tickets, t)
		}
	}
	ctx, cancel := cycleContext(tickets)
	defer cancel()
	var plan cyclePlan
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		plan, err = s.writeOps(ctx, tx, ops, lines, park)
		if err == nil && len(plan.applied) == 0 && len(lines) == 0 {
			return errAllParked // nothing to commit
		}
		return err
	})
	if errors.Is(err, errAllParked) {
		err = nil
	}
	now := time.Now()
	if err != nil {
		if len(tickets) > 1 && ctx.Err() == nil {
			s.log.WarnContext(ctx, "ingest write cycle failed; writing its batches one at a time", "batches", len(tickets), "error", err)
			for _, t := range tickets {
				var own []op
				for _, o := range ops {
					if o.t == t {
						own = append(own, o)
					}
				}
				var alone []*ticket
				if slices.Contains(taken, t) {
					alone = []*ticket{t}
				}
				_, n := s.writeCycle(own, alone, false)
				released += n
			}
			return nil, released
		}
		for _, t := range tickets {
			t.finish(now, err)
		}
		return nil, len(ops) + len(lines)
	}
	s.hub.runsChanged(plan.ids)
	if plan.completed {
		s.hub.completionsChanged()
	}
	for _, o := range plan.applied {
		o.t.left--
	}
	for t, ids := range plan.refused {
		t.refused = append(t.refused, ids...)
	}
	for _, t := range tickets {
		if t.left == 0 {
			t.finish(now, nil)
		}
	}
	return plan.parked, len(plan.applied) + len(lines)
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

// cyclePlan is what a committed cycle did.
type cyclePlan struct {
	ids       []string             // the runs it wrote or wrote lines of, sorted
	completed bool                 // it published completions
	applied   []op                 // the ops it applied
	parked    []op                 // the ops it held back
	refused   map[*ticket][]string // final results refused, by batch
}

// writeOps reads and locks the runs ops name, applies ops to them in order, except those it
// parks, and writes each changed run once, then lines, then the completions of the runs that
// ended.
func (s *Service) writeOps(ctx context.Context, tx *sql.Tx, ops []op, lines []*logsv1.LogLine, park bool) (cyclePlan, error) {
	plan := cyclePlan{refused: map[*ticket][]string{}}
	seen := map[string]bool{}
	var ids []string
	for _, o := range ops {
		if !seen[o.id] {
			seen[o.id] = true
			ids = append(ids, o.id)
		}
	}
	slices.Sort(ids)
	stored, err := s.readRuns(ctx, tx, ids)
	if err != nil {
		return plan, err
	}
	waits := map[string]bool{}
	if park {
		waits = mayWait(ops, stored)
	}
	rs := newRunSet(stored, s.now().UnixMilli())
	named := map[string]bool{}
	now := time.Now()
	for _, o := range ops {
		if waits[o.id] {
			if o.parked.IsZero() {
				o.parked = now
			}
			plan.parked = append(plan.parked, o)
			continue
		}
		if !rs.apply(o) {
			plan.refused[o.t] = append(plan.refused[o.t], o.id)
		}
		plan.applied = append(plan.applied, o)
		named[o.id] = true
	}
	for _, l := range lines {
		named[l.GetTriggerId()] = true
	}
	for id := range named {
		plan.ids = append(plan.ids, id)
	}
	slices.Sort(plan.ids)
	inserts, updates := rs.changes()
	if err := s.insertRuns(ctx, tx, inserts); err != nil {
		return plan, err
	}
	if err := s.updateRuns(ctx, tx, updates); err != nil {
		return plan, err
	}
	if err := s.insertLines(ctx, tx, lines); err != nil {
		return plan, err
	}
	slices.Sort(rs.done)
	done := slices.Compact(rs.done)
	plan.completed = len(done) > 0
	return plan, s.complete(ctx, tx, done, rs.now)
}

// mayWait returns the trigger ids whose ops may be parked: the run is not stored, the ops are
// all records or all results (the other side has not come), none is a FAILED record (no result
// follows one), and none was parked parkFor ago or longer.
func mayWait(ops []op, stored map[string]run) map[string]bool {
	type sides struct {
		rec, res, failed bool
		first            time.Time // parked first; zero if never
	}
	byID := map[string]*sides{}
	for _, o := range ops {
		if _, ok := stored[o.id]; ok {
			continue
		}
		sd := byID[o.id]
		if sd == nil {
			sd = &sides{first: o.parked}
			byID[o.id] = sd
		}
		if o.rec != nil {
			sd.rec = true
			sd.failed = sd.failed || int32(o.rec.GetTriggerOutcome()) == outcomeFailed
		} else {
			sd.res = true
		}
	}
	out := map[string]bool{}
	for id, sd := range byID {
		if sd.rec != sd.res && !sd.failed && (sd.first.IsZero() || time.Since(sd.first) < parkFor) {
			out[id] = true
		}
	}
	return out
}

// errAllParked: a cycle parked everything it took; its transaction is rolled back.
var errAllParked = errors.New("every item parked")

// errRunRace: a run the cycle did not find when it read the runs was stored before it could
// insert it (another replica's write); the cycle is run again.
var errRunRace = errors.New("a run was stored concurrently")

// readRuns reads the stored runs ids (sorted), locking them on Postgres (in that order) until
// the cycle commits.
func (s *Service) readRuns(ctx context.Context, tx *sql.Tx, ids []string) (map[string]run, error) {
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
