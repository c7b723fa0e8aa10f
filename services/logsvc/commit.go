package logsvc

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/internal/db"
)

// writeCycle writes ops (parked ones first, then those of the batches taken, in order) and the
// lines of the batches taken in one transaction, parking what may wait when park is set, and
// finishes every batch that has nothing left to write. It returns the ops parked and, per
// batch, how many items it is done with (written, or failed with their batch). When the store
// refuses a cycle of several batches, each is written again alone, so a batch the store cannot
// take fails only its own stream.
func (s *Service) writeCycle(ops []op, taken []*ticket, park bool) (parked []op, released map[*ticket]int) {
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
	guess := s.store.Dialect() == db.Postgres // see freshIDs
	err := s.inTx(ctx, func(tx *db.Tx) error {
		var err error
		plan, err = s.writeOps(ctx, tx, ops, lines, park, guess)
		if errors.Is(err, errRunRace) && guess {
			guess = false // a run taken for new was stored: read every run when run again
			err = fmt.Errorf("%w: %w", errNotFresh, err)
		}
		if err == nil && len(plan.applied) == 0 && len(lines) == 0 {
			return errAllParked // nothing to commit
		}
		return err
	})
	if errors.Is(err, errAllParked) {
		err = nil
	}
	now := time.Now()
	released = map[*ticket]int{}
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
				released[t] += n[t]
			}
			return nil, released
		}
		for _, o := range ops {
			released[o.t]++
		}
		for _, t := range taken {
			released[t] += len(t.lines)
		}
		for _, t := range tickets {
			t.finish(now, err)
		}
		return nil, released
	}
	s.hub.runsChanged(plan.ids)
	if plan.completed {
		s.hub.completionsChanged()
	}
	for _, o := range plan.applied {
		o.t.left--
		released[o.t]++
	}
	for _, t := range taken {
		released[t] += len(t.lines)
	}
	for t, ids := range plan.refused {
		t.refused = append(t.refused, ids...)
	}
	for _, t := range tickets {
		if t.left == 0 {
			t.finish(now, nil)
		}
	}
	return plan.parked, released
}

// orphanTimeout bounds a cycle that writes only parked ops of streams that have ended.
const orphanTimeout = 10 * time.Second

// cycleContext is canceled once the streams of all tickets have ended; a ticket whose stream had
// ended already is one of orphaned parked ops (see op.orphan), written under orphanTimeout.
func cycleContext(tickets []*ticket) (context.Context, context.CancelFunc) {
	var live []*ticket
	for _, t := range tickets {
		if t.ctx.Err() == nil {
			live = append(live, t)
		}
	}
	if len(live) == 0 { // only orphans (parked ops of ended streams): bounded by time instead
		return context.WithTimeout(context.Background(), orphanTimeout)
	}
	ctx, cancel := context.WithCancel(context.Background())
	left := atomic.Int64{}
	left.Store(int64(len(live)))
	stops := make([]func() bool, len(live))
	for i, t := range live {
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

// writeOps reads and locks the runs ops name (with guess, all but those freshIDs takes for new),
// applies ops to them in order, except those it parks, and writes each changed run once, then
// lines, then the completions of the runs that ended.
func (s *Service) writeOps(ctx context.Context, tx *db.Tx, ops []op, lines []*logsv1.LogLine, park, guess bool) (cyclePlan, error) {
	plan := cyclePlan{refused: map[*ticket][]string{}}
	now := time.Now()
	var fresh map[string]bool
	if guess {
		fresh = freshIDs(ops)
	}
	seen := map[string]bool{}
	var ids []string
	for _, o := range ops {
		if !seen[o.id] {
			seen[o.id] = true
			if !fresh[o.id] {
				ids = append(ids, o.id)
			}
		}
	}
	slices.Sort(ids)
	stored, err := s.readRuns(ctx, tx, ids)
	if err != nil {
		return plan, err
	}
	var waits map[string]time.Time
	if park {
		waits = mayWait(ops, stored, now)
	}
	rs := newRunSet(stored, s.now().UnixMilli())
	named := map[string]bool{}
	for _, o := range ops {
		if until, ok := waits[o.id]; ok {
			if o.parked.IsZero() {
				o.parked = now
			}
			o.until = until
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
	inserts, updates, done := rs.changes()
	if err := s.insertRuns(ctx, tx, inserts); err != nil {
		return plan, err
	}
	// The cycle's other writes go to the store in one round trip with the completions' lock and
	// counts (complete).
	var b db.Batch
	s.updateRuns(&b, updates)
	s.insertLines(&b, lines)
	plan.completed = len(done) > 0
	return plan, s.complete(ctx, tx, &b, done, rs.now)
}

// mayWait returns the trigger ids whose ops may be parked, with until when (from their first
// parking, or now): the run is not stored, none is a FAILED record (no result follows one) or an orphan
// (its stream has ended), and either
// the ops are all results (the record has not come: parkFor), or all records or the record and
// RUNNING results (the final result has not come: parkForFinal); and that time is not up.
func mayWait(ops []op, stored map[string]run, now time.Time) map[string]time.Time {
	type sides struct {
		rec, res, final, failed, orphan bool
		first                           time.Time // parked first; zero if never
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
		if !o.parked.IsZero() && (sd.first.IsZero() || o.parked.Before(sd.first)) {
			sd.first = o.parked
		}
		sd.orphan = sd.orphan || o.orphan
		if o.rec != nil {
			sd.rec = true
			sd.failed = sd.failed || int32(o.rec.GetTriggerOutcome()) == outcomeFailed
		} else {
			sd.res = true
			sd.final = sd.final || int32(o.res.GetStatus()) != statusRunning
		}
	}
	out := map[string]time.Time{}
	for id, sd := range byID {
		var limit time.Duration
		switch {
		case sd.failed, sd.orphan:
			continue
		case !sd.rec: // results waiting for their record
			limit = parkFor
		case !sd.final:
			// The record, and a RUNNING result if the fire ran long enough to send one,
			// waiting for the final result: agents send a quick fire's final result alone, up
			// to the dispatch lead plus the run's time after the record.
			limit = parkForFinal
		default:
			continue
		}
		if sd.first.IsZero() {
			sd.first = now
		}
		if until := sd.first.Add(limit); now.Before(until) {
			out[id] = until
		}
	}
	return out
}

// freshIDs returns the trigger ids whose ops hold a trigger record and a final result: a fire
// whose both sides meet in one cycle, as nearly every fire's do (parking waits for that). Its
// run is taken as not stored and inserted without being read first: reading thousands of runs
// that are not there cost a third of what inserting them did. A run that was stored after all
// (a record sent again after its first copy was written alone) makes the insert fail on the
// trigger id's unique key; the cycle is then run again reading every run (errNotFresh).
func freshIDs(ops []op) map[string]bool {
	type sides struct{ rec, final bool }
	byID := make(map[string]sides, len(ops)/2)
	for _, o := range ops {
		sd := byID[o.id]
		if o.rec != nil {
			sd.rec = true
		} else if int32(o.res.GetStatus()) != statusRunning {
			sd.final = true
		}
		byID[o.id] = sd
	}
	out := make(map[string]bool, len(byID))
	for id, sd := range byID {
		if sd.rec && sd.final {
			out[id] = true
		}
	}
	return out
}

// errNotFresh: a write cycle took a run for new (freshIDs) that was stored; it is run again
// reading every run.
var errNotFresh = errors.New("a run taken for new was stored already")

// errAllParked: a cycle parked everything it took; its transaction is rolled back.
var errAllParked = errors.New("every item parked")

// errRunRace: a run the cycle did not find when it read the runs was stored before it could
// insert it (another replica's write); the cycle is run again.
var errRunRace = errors.New("a run was stored concurrently")

// readRuns reads the stored runs ids (sorted), locking them on Postgres (in that order) until
// the cycle commits.
func (s *Service) readRuns(ctx context.Context, tx *db.Tx, ids []string) (map[string]run, error) {
	out := make(map[string]run, len(ids))
	scan := func(rows *sql.Rows) error {
		defer rows.Close()
		for rows.Next() {
			r, err := scanIngest(rows)
			if err != nil {
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
		// A write cycle names thousands of runs by trigger id: without it Postgres would scan
		// the whole runs table (readRuns: a seq scan with the array as a hashed filter;
		// updateRuns, later in the transaction: a hash join).
		if _, err := tx.ExecContext(ctx, db.IndexPlans); err != nil {
			return nil, fmt.Errorf("read runs: %w", err)
		}
		rows, err := tx.QueryContext(ctx, readRunsPG, ids)
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

// scanIngest scans a row of ingestColumns.
func scanIngest(row interface{ Scan(...any) error }) (run, error) {
	var r run
	err := row.Scan(&r.id, &r.job, &r.group, &r.triggerType, &r.schedMs, &r.trigMs, &r.address, &r.handler, &r.params,
		&r.shardIndex, &r.shardTotal, &r.attempt, &r.retriesLeft, &r.route, &r.outcome, &r.triggerMsg, &r.status,
		&r.handleMsg, &r.startMs, &r.endMs, &r.traceID, &r.alarm, &r.judged, &r.outputs)
	return r, err
}

// ingestColumns are the runs columns ingestion reads and writes, in run's field order as
// readRuns scans them and runColumnar lists them.
const ingestColumns = `trigger_id, job_id, group_id, trigger_type, scheduled_ms, trigger_ms, executor_address, handler, params,
	shard_index, shard_total, attempt, retries_left, route_strategy, trigger_outcome, trigger_message, status,
	handle_message, start_ms, end_ms, trace_id, alarm_status, judged, outputs`

// ingestTypes are ingestColumns' Postgres array types, for unnest.
var ingestTypes = []string{"text", "bigint", "bigint", "int", "bigint", "bigint", "text", "text", "text",
	"int", "int", "int", "int", "int", "int", "text", "int", "text", "bigint", "bigint", "text", "int", "int", "text"}

// runValues lists a run's ingestColumns values.
func runValues(r *run) []any {
	return []any{r.id, r.job, r.group, r.triggerType, r.schedMs, r.trigMs, r.address, r.handler, r.params,
		r.shardIndex, r.shardTotal, r.attempt, r.retriesLeft, r.route, r.outcome, r.triggerMsg, r.status,
		r.handleMsg, r.startMs, r.endMs, r.traceID, r.alarm, r.judged, r.outputs}
}

// runCopySize is the size of a run's row in a binary COPY without its texts' bytes: the field
// count, a length per field, six bigints and ten ints (copyRun).
const runCopySize = 2 + 4*24 + 8*6 + 4*10

// copyRun adds r's ingestColumns values to a COPY into runs.
func copyRun(b *db.CopyRows, r *run) {
	b.Row(len(ingestTypes))
	b.Text(r.id)
	b.Int64(r.job)
	b.Int64(r.group)
	b.Int32(r.triggerType)
	b.Int64(r.schedMs)
	b.Int64(r.trigMs)
	b.Text(r.address)
	b.Text(r.handler)
	b.Text(r.params)
	b.Int32(r.shardIndex)
	b.Int32(r.shardTotal)
	b.Int32(r.attempt)
	b.Int32(r.retriesLeft)
	b.Int32(r.route)
	b.Int32(r.outcome)
	b.Text(r.triggerMsg)
	b.Int32(r.status)
	b.Text(r.handleMsg)
	b.Int64(r.startMs)
	b.Int64(r.endMs)
	b.Text(r.traceID)
	b.Int32(r.alarm)
	b.Int32(r.judged)
	b.Text(r.outputs)
}

// runColumnar lists runs' ingestColumns values as one array per column (for unnest).
func runColumnar(runs []*run) []any {
	n := len(runs)
	ids, addrs, handlers, params, tmsgs, hmsgs, traces, outputs := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	jobs, groups, scheds, trigs, starts, ends := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	ttypes, sidx, stot, atts, rets, routes, outs, sts, alarms, judged := make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
	for i, r := range runs {
		ids[i], jobs[i], groups[i], ttypes[i], scheds[i], trigs[i], addrs[i], handlers[i], params[i] = r.id, r.job, r.group, r.triggerType, r.schedMs, r.trigMs, r.address, r.handler, r.params
		sidx[i], stot[i], atts[i], rets[i], routes[i], outs[i], tmsgs[i], sts[i] = r.shardIndex, r.shardTotal, r.attempt, r.retriesLeft, r.route, r.outcome, r.triggerMsg, r.status
		hmsgs[i], starts[i], ends[i], traces[i], alarms[i], judged[i], outputs[i] = r.handleMsg, r.startMs, r.endMs, r.traceID, r.alarm, r.judged, r.outputs
	}
	return []any{ids, jobs, groups, ttypes, scheds, trigs, addrs, handlers, params, sidx, stot, atts, rets, routes, outs, tmsgs, sts, hmsgs, starts, ends, traces, alarms, judged, outputs}
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
	readRunsPG   = `SELECT ` + ingestColumns + ` FROM runs WHERE trigger_id = ANY($1) ORDER BY trigger_id FOR UPDATE`
	updateRunsPG = `UPDATE runs SET job_id = u.job_id, group_id = u.group_id, trigger_type = u.trigger_type,
			scheduled_ms = u.scheduled_ms, trigger_ms = u.trigger_ms, executor_address = u.executor_address, handler = u.handler,
			params = u.params, shard_index = u.shard_index, shard_total = u.shard_total, attempt = u.attempt,
			retries_left = u.retries_left, route_strategy = u.route_strategy, trigger_outcome = u.trigger_outcome,
			trigger_message = u.trigger_message, status = u.status, handle_message = u.handle_message, start_ms = u.start_ms,
			end_ms = u.end_ms, trace_id = u.trace_id, alarm_status = u.alarm_status, judged = u.judged, outputs = u.outputs
		FROM ` + unnest(ingestTypes) + ` AS u (` + ingestColumns + `)
		WHERE runs.trigger_id = u.trigger_id`
	// upsertRunsSQLite's ON CONFLICT clause follows its VALUES.
	upsertRunsSQLite = ` ON CONFLICT (trigger_id) DO UPDATE SET job_id = excluded.job_id, group_id = excluded.group_id,
			trigger_type = excluded.trigger_type, scheduled_ms = excluded.scheduled_ms, trigger_ms = excluded.trigger_ms,
			executor_address = excluded.executor_address, handler = excluded.handler, params = excluded.params,
			shard_index = excluded.shard_index, shard_total = excluded.shard_total, attempt = excluded.attempt,
			retries_left = excluded.retries_left, route_strategy = excluded.route_strategy, trigger_outcome = excluded.trigger_outcome,
			trigger_message = excluded.trigger_message, status = excluded.status, handle_message = excluded.handle_message,
			start_ms = excluded.start_ms, end_ms = excluded.end_ms, trace_id = excluded.trace_id, alarm_status = excluded.alarm_status,
			judged = excluded.judged, outputs = excluded.outputs`
)

// insertRuns stores runs not stored before, in trigger id order (seq follows it).
func (s *Service) insertRuns(ctx context.Context, tx *db.Tx, runs []*run) error {
	if len(runs) == 0 {
		return nil
	}
	if s.beforeInsertRuns != nil {
		s.beforeInsertRuns(ctx)
	}
	if s.store.Dialect() == db.Postgres {
		var rows db.CopyRows
		size := 0
		for _, r := range runs {
			size += runCopySize + len(r.id) + len(r.address) + len(r.handler) + len(r.params) + len(r.triggerMsg) + len(r.handleMsg) + len(r.traceID) + len(r.outputs)
		}
		rows.Grow(size)
		for _, r := range runs {
			copyRun(&rows, r)
		}
		if _, err := tx.CopyIn(ctx, "runs", ingestColumns, &rows); err != nil {
			if db.IsUniqueViolation(err) {
				return fmt.Errorf("insert runs: %w: %w", errRunRace, err)
			}
			return fmt.Errorf("insert runs: %w", err)
		}
		return nil
	}
	var b db.Batch
	s.valuesRuns(&b, runs, "")
	return tx.Send(ctx, &b)
}

// updateRuns queues to b the writes of runs the cycle changed (read and locked by readRuns,
// which set the transaction's plans to probe the trigger id index).
func (s *Service) updateRuns(b *db.Batch, runs []*run) {
	if len(runs) == 0 {
		return
	}
	if s.store.Dialect() == db.Postgres {
		b.Queue(func(err error) error { return fmt.Errorf("update runs: %w", err) }, updateRunsPG, runColumnar(runs)...)
		return
	}
	s.valuesRuns(b, runs, upsertRunsSQLite)
}

// valuesRuns queues to b multi-row INSERTs of runs followed by conflict (SQLite, one
// connection: nobody stores a run between readRuns and here).
func (s *Service) valuesRuns(b *db.Batch, runs []*run, conflict string) {
	for _, chunk := range chunks(runs, rowsPerStatement) {
		args := make([]any, 0, len(chunk)*len(ingestTypes))
		for _, r := range chunk {
			args = append(args, runValues(r)...)
		}
		q := `INSERT INTO runs (` + ingestColumns + `) VALUES ` + s.values(len(chunk), len(ingestTypes), "") + conflict
		b.Queue(func(err error) error { return fmt.Errorf("write runs: %w", err) }, q, args...)
	}
}

// insertLines queues to b the store of output lines; a line number already stored keeps its
// first text, and so does the first of a line number sent twice.
func (s *Service) insertLines(b *db.Batch, lines []*logsv1.LogLine) {
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
		return
	}
	linesErr := func(err error) error { return fmt.Errorf("insert log lines: %w", err) }
	if s.store.Dialect() == db.Postgres {
		n := len(uniq)
		ids, nos, times, texts := make([]string, n), make([]int64, n), make([]int64, n), make([]string, n)
		for i, l := range uniq {
			ids[i], nos[i], times[i], texts[i] = l.GetTriggerId(), l.GetLineNo(), l.GetUnixMs(), clipLine(l.GetText())
		}
		q := `INSERT INTO run_lines (trigger_id, line_no, unix_ms, text) SELECT * FROM ` + unnest([]string{"text", "bigint", "bigint", "text"}) + `
			ON CONFLICT (trigger_id, line_no) DO NOTHING`
		b.Queue(linesErr, q, ids, nos, times, texts)
		return
	}
	for _, chunk := range chunks(uniq, rowsPerStatement) {
		args := make([]any, 0, len(chunk)*4)
		for _, l := range chunk {
			args = append(args, l.GetTriggerId(), l.GetLineNo(), l.GetUnixMs(), clipLine(l.GetText()))
		}
		q := `INSERT INTO run_lines (trigger_id, line_no, unix_ms, text) VALUES ` + s.values(len(chunk), 4, "") + `
			ON CONFLICT (trigger_id, line_no) DO NOTHING`
		b.Queue(linesErr, q, args...)
	}
}
