package scheduler

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/triggerid"
)

// Pending fires are the fires a leader decides on from a completion: retries (after their
// backoff) and child jobs. They live in the pending_fires table from the fenced transaction that
// saves the completion cursor until they are dispatched, so a leader that dies with a retry
// waiting in its ring leaves it to the next one. A leader arms a row at most once (its claimed
// set); a new leader first asks logsvc which rows the old one already dispatched.

// pendingKey names one pending fire; shard is -1 for "every shard"; parent is the parent job of
// a child fire (and of its retries), else 0.
type pendingKey struct {
	job, fireMs    int64
	shard, attempt int32
	parent         int64
	// wf and node name a workflow node's fire (wf 0 for other fires).
	wf   int64
	node int32
}

// triggerID is the trigger id the fire gets (or its first shard's, for a broadcast).
func (k pendingKey) triggerID() string {
	return triggerid.ID{Job: k.job, ScheduledMs: k.fireMs, Shard: max(k.shard, 0), Attempt: k.attempt, Parent: k.parent,
		Workflow: k.wf, Node: k.node}.String()
}

// key returns the pending key of a pending fire.
func (f *fire) key() pendingKey {
	k := pendingKey{job: f.job.ID, fireMs: f.fireMs, shard: -1, attempt: f.attempt, parent: f.parent}
	if f.wf != nil {
		k.wf, k.node = f.wf.ID, f.wf.Node
	}
	if f.shardTotal > 0 {
		k.shard = f.shard
	}
	return k
}

// claims is the set of pending fires a leadership has armed and not settled.
type claims struct {
	mu  sync.Mutex
	set map[pendingKey]struct{}
	// gone are the keys whose rows were deleted (done), with when: a read of pending_fires that
	// began before a delete may still return the row, and must not arm it again. They are kept
	// claimGone; a read older than claimGone/2 is not acted on.
	gone     map[pendingKey]time.Time
	prunedAt time.Time
}

// claimGone is how long a deleted pending fire's key stays unclaimable.
const claimGone = time.Minute

// claim reports whether k was not claimed yet (nor deleted lately), and claims it.
func (c *claims) claim(k pendingKey) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.set == nil {
		c.set = map[pendingKey]struct{}{}
	}
	if _, ok := c.set[k]; ok {
		return false
	}
	if _, ok := c.gone[k]; ok {
		return false
	}
	c.set[k] = struct{}{}
	return true
}

// release forgets a claim, so the row may be armed again.
func (c *claims) release(k pendingKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.set, k)
}

// done ends the claim of a fire whose row is deleted: it is not claimed again (claimGone).
func (c *claims) done(k pendingKey) {
	now := time.Now() // a measurement of age, not scheduling: the wall clock
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.set, k)
	if c.gone == nil {
		c.gone = map[pendingKey]time.Time{}
	}
	c.gone[k] = now
	if now.Sub(c.prunedAt) >= time.Second {
		c.prunedAt = now
		for g, at := range c.gone {
			if now.Sub(at) >= claimGone {
				delete(c.gone, g)
			}
		}
	}
}

// taken reports whether k is claimed, or was deleted lately.
func (c *claims) taken(k pendingKey) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, held := c.set[k]
	_, gone := c.gone[k]
	return held || gone
}

// held reports whether k is claimed.
func (c *claims) held(k pendingKey) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.set[k]
	return ok
}

// addPending stores a pending fire inside the fenced completion transaction; a repeat of the same
// completion (after a failover) changes nothing.
func (s store) addPending(ctx context.Context, tx *sql.Tx, f *fire, dueMs int64) error {
	q, args, err := s.pendingInsert(f, dueMs)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return pendingErr(f, err)
	}
	return nil
}

// pendingInsert is the statement that stores the pending fire f due at dueMs (addPending).
func (s store) pendingInsert(f *fire, dueMs int64) (string, []any, error) {
	k := f.key()
	var wf any
	if f.wf != nil {
		b, err := json.Marshal(f.wf)
		if err != nil {
			return "", nil, fmt.Errorf("save pending fire %s: %w", k.triggerID(), err)
		}
		wf = string(b)
	}
	var skip any
	if f.kind == kindSkipped {
		skip = f.skipReason()
	}
	return s.db.Q(`INSERT INTO pending_fires (job_id, fire_ms, shard, shard_total, attempt,
		trigger_type, fire_params, due_ms, parent_job_id, wf_id, wf_node, wf, skip_reason)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) ON CONFLICT DO NOTHING`),
		[]any{k.job, k.fireMs, k.shard, f.shardTotal, k.attempt, f.trigType, f.params, dueMs, k.parent, k.wf, k.node, wf, skip}, nil
}

// pendingErr is the failure to store the pending fire f.
func pendingErr(f *fire, err error) error {
	return storeErr(err, "save pending %s fire %s", f.trigType, f.key().triggerID())
}

// pendingColumns are what scanPending reads of a pending fire and its job.
const pendingColumns = `p.fire_ms, p.shard, p.shard_total, p.attempt, p.trigger_type,
		p.fire_params, p.due_ms, p.parent_job_id, p.wf, p.skip_reason, ` + jobColumns + ` FROM pending_fires p JOIN jobs ON jobs.id = p.job_id
		LEFT JOIN job_state ON job_state.job_id = jobs.id`

// duePending reads partition part's pending fires due at or before horizonMs with their jobs,
// oldest first, inside q (a transaction or the store).
func (s store) duePending(ctx context.Context, q queryer, part int, horizonMs int64, limit int) ([]*fire, []int64, error) {
	rows, err := q.QueryContext(ctx, s.db.Q(duePendingQuery), horizonMs, limit, part)
	if err != nil {
		return nil, nil, storeErr(err, "read pending fires")
	}
	return scanPending(rows)
}

// queueDuePendingKeys queues to b the read of the keys of what duePending reads, appended to
// keys once b is sent: a few numbers a row, where duePending reads each row's job whole.
func (s store) queueDuePendingKeys(b *db.Batch, part int, horizonMs int64, limit int, keys *[]pendingKey) {
	b.QueueRows(func(err error) error { return storeErr(err, "read pending fires") }, func(r db.Row) error {
		var k pendingKey
		if err := r.Scan(&k.job, &k.fireMs, &k.shard, &k.attempt, &k.parent, &k.wf, &k.node); err != nil {
			return storeErr(err, "read pending fires")
		}
		*keys = append(*keys, k)
		return nil
	}, s.db.Q(`SELECT p.job_id, p.fire_ms, p.shard, p.attempt, p.parent_job_id, p.wf_id, p.wf_node
		FROM pending_fires p JOIN job_state ON job_state.job_id = p.job_id
		WHERE p.due_ms <= $1 AND job_state.part = $3 ORDER BY p.due_ms LIMIT $2`), horizonMs, limit, part)
}

// duePendingQuery reads partition $3's pending fires due at or before $1 with their jobs, at
// most $2, oldest first.
const duePendingQuery = `SELECT ` + pendingColumns + `
	WHERE p.due_ms <= $1 AND job_state.part = $3 ORDER BY p.due_ms LIMIT $2`

// duePendingOf reads, inside q (a transaction or the store), the pending fires named by refs
// (job and scheduled time) due at or before horizonMs with their jobs, oldest first (a
// hand-off, handoffLoop; the fires a pre-read has not armed).
func (s store) duePendingOf(ctx context.Context, q queryer, refs []fireRef, horizonMs int64) ([]*fire, []int64, error) {
	var (
		rows *sql.Rows
		err  error
	)
	if s.db.Dialect() == db.Postgres {
		jobs, ms := make([]int64, len(refs)), make([]int64, len(refs))
		for i, r := range refs {
			jobs[i], ms[i] = r.job, r.fireMs
		}
		rows, err = q.QueryContext(ctx, `SELECT `+pendingColumns+`
			JOIN unnest($1::bigint[], $2::bigint[]) AS r(job, ms) ON p.job_id = r.job AND p.fire_ms = r.ms
			WHERE p.due_ms <= $3 ORDER BY p.due_ms`, jobs, ms, horizonMs)
	} else {
		list := make([][2]int64, len(refs))
		for i, r := range refs {
			list[i] = [2]int64{r.job, r.fireMs}
		}
		b, _ := json.Marshal(list)
		rows, err = q.QueryContext(ctx, s.db.Q(`SELECT `+pendingColumns+`
			JOIN (SELECT json_extract(value, '$[0]') AS job, json_extract(value, '$[1]') AS ms FROM json_each($1)) AS r
				ON p.job_id = r.job AND p.fire_ms = r.ms
			WHERE p.due_ms <= $2 ORDER BY p.due_ms`), string(b), horizonMs)
	}
	if err != nil {
		return nil, nil, storeErr(err, "read %d pending fires handed over", len(refs))
	}
	return scanPending(rows)
}

// scanPending reads pendingColumns' rows and closes them.
func scanPending(rows *sql.Rows) ([]*fire, []int64, error) {
	defer rows.Close()
	var (
		fires []*fire
		dues  []int64
	)
	for rows.Next() {
		f, due, err := scanPendingRow(rows)
		if err != nil {
			return nil, nil, err
		}
		fires, dues = append(fires, f), append(dues, due)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, storeErr(err, "read pending fires")
	}
	return fires, dues, nil
}

// scanPendingRow reads one of pendingColumns' rows: the fire and when it is due.
func scanPendingRow(r db.Row) (*fire, int64, error) {
	var (
		f      fire
		tt     triggerType
		params sql.NullString
		wf     sql.NullString
		skip   sql.NullString
		due    int64
		j      jobRow
	)
	if err := r.Scan(append([]any{&f.fireMs, &f.shard, &f.shardTotal, &f.attempt, &tt, &params, &due, &f.parent, &wf, &skip},
		jobFields(&j)...)...); err != nil {
		return nil, 0, storeErr(err, "read pending fires")
	}
	f.trigType, f.skip = tt, skip.String
	f.kind = storedKind(tt, wf.Valid, skip.Valid)
	if f.shard < 0 {
		f.shard, f.shardTotal = 0, 0
	}
	if params.Valid {
		f.params = &params.String
	}
	if wf.Valid {
		f.wf = &wfFire{}
		if err := json.Unmarshal([]byte(wf.String), f.wf); err != nil {
			return nil, 0, fmt.Errorf("read pending fires: workflow node of job %d: %w", j.ID, err)
		}
	}
	f.job = &j
	return &f, due, nil
}

// deletePending removes a dispatched (or obsolete) pending fire.
func (s store) deletePending(ctx context.Context, k pendingKey) error {
	_, err := s.db.ExecContext(ctx, s.db.Q(`DELETE FROM pending_fires`+pendingWhere), pendingArgs(k)...)
	if err != nil {
		return storeErr(err, "delete pending fire %s", k.triggerID())
	}
	return nil
}

// pendingWhere names one pending fire by $1-$7 (pendingArgs).
const pendingWhere = ` WHERE job_id = $1 AND fire_ms = $2 AND shard = $3 AND attempt = $4 AND parent_job_id = $5
	AND wf_id = $6 AND wf_node = $7`

// pendingMatch names one pending fire by $n+1-$n+7 (pendingArgs), in parentheses.
func pendingMatch(n int) string {
	return fmt.Sprintf(`(job_id = $%d AND fire_ms = $%d AND shard = $%d AND attempt = $%d AND parent_job_id = $%d AND wf_id = $%d AND wf_node = $%d)`,
		n+1, n+2, n+3, n+4, n+5, n+6, n+7)
}

// pendingArgs are pendingWhere's arguments for k.
func pendingArgs(k pendingKey) []any {
	return []any{k.job, k.fireMs, k.shard, k.attempt, k.parent, k.wf, k.node}
}

// setPendingDue moves, inside tx, pending fire k's due time to dueMs, only while it is fromMs
// when fromMs is not 0; it reports whether the row was there (and moved).
func (s store) setPendingDue(ctx context.Context, tx *sql.Tx, k pendingKey, dueMs, fromMs int64) (bool, error) {
	q, args := `UPDATE pending_fires SET due_ms = $8`+pendingWhere, append(pendingArgs(k), dueMs)
	if fromMs != 0 {
		q, args = q+` AND due_ms = $9`, append(args, fromMs)
	}
	res, err := tx.ExecContext(ctx, s.db.Q(q), args...)
	if err != nil {
		return false, storeErr(err, "move pending fire %s", k.triggerID())
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, storeErr(err, "move pending fire %s", k.triggerID())
	}
	return n > 0, nil
}

// dropPending deletes, inside tx, pending fire k; it reports whether the row was there.
func (s store) dropPending(ctx context.Context, tx *sql.Tx, k pendingKey) (bool, error) {
	res, err := tx.ExecContext(ctx, s.db.Q(`DELETE FROM pending_fires`+pendingWhere), pendingArgs(k)...)
	if err != nil {
		return false, storeErr(err, "drop pending fire %s", k.triggerID())
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, storeErr(err, "drop pending fire %s", k.triggerID())
	}
	return n > 0, nil
}

// queuePruneTombstones queues to b, for the fenced transaction, the removal of tombstones older
// than an hour.
func (s store) queuePruneTombstones(b *db.Batch, nowMs int64) {
	b.Queue(func(err error) error { return storeErr(err, "prune job tombstones") },
		s.db.Q(`DELETE FROM job_tombstones WHERE deleted_ms < $1`), nowMs-time.Hour.Milliseconds())
}

// queueTombstonesSince queues to b, for the fenced transaction, the read of the jobs deleted at
// or after ms, appended to ids once b is sent.
func (s store) queueTombstonesSince(b *db.Batch, ms int64, ids *[]int64) {
	b.QueueRows(func(err error) error { return storeErr(err, "read deleted jobs") }, appendID(ids),
		s.db.Q(`SELECT job_id FROM job_tombstones WHERE deleted_ms >= $1`), ms)
}

// armPending arms a pending fire at dueMs unless this leadership already has.
func (l *engine) armPending(f *fire, dueMs int64) {
	f.lead = l
	k := f.key()
	if !l.claims.claim(k) {
		return
	}
	if !l.ring.Add(ringEntry{JobID: f.job.ID, FireAt: dueMs, Tag: l.tags.Add(1), Value: f}) {
		l.claims.release(k) // leadership ended: the row waits for the next leader
	}
}

// armOnLeader arms a pending fire in the engine of its job's partition when this replica leads
// it; otherwise the partition's leader arms it from pending_fires at its next pre-read.
func (s *Service) armOnLeader(f *fire, dueMs int64) {
	if l := s.engineOf(f.job.ID); l != nil {
		l.armPending(f, dueMs)
	}
}

// settle records that a fire of leadership l left the ring for good (dispatched, rejected or
// disarmed): a takeover's pin of it ends; an owed fire is no longer owed; a pending fire's row
// is deleted once logsvc has acknowledged its trigger records (rowAcks), and stays claimed until
// then.
func (s *Service) settle(f *fire) {
	f.lead.unpin(f.key())
	switch {
	case f.kind.owed():
		f.lead.owed.done(f.job.ID, f.fireMs)
	case f.kind.stored():
		s.rowAcks.settle(f.lead, f)
	default:
		panic(noKind(f))
	}
}

// disarmEntry takes back a fire removed from the ring without dispatching it.
func (l *engine) disarmEntry(e ringEntry) {
	switch k := e.Value.kind; {
	case k.stored():
		l.claims.release(e.Value.key())
	case k.owed():
		l.owed.done(e.JobID, e.FireAt)
	default:
		panic(noKind(e.Value))
	}
}

// takeOverPending deletes the pending fires the previous leader dispatched: those whose trigger
// ids logsvc knows or an executor of the job's group has seen (seenOnExecutors), rebuilding the
// trigger records of those logsvc has no record of (rebuildRecord; their rows go once logsvc
// has the rebuilt records, as a dispatched fire's do). The pre-read arms the rest; one that an
// executor which did not answer may hold goes to it alone (pinned), and one that several may
// hold is claimed until they say (resolveDoubts). Rows this leadership has claimed already (a
// takeover tried again) are its own.
func (l *engine) takeOverPending(ctx context.Context) error {
	s := l.s
	tx, err := s.jobs.begin(ctx)
	if err != nil {
		return err
	}
	fires, _, err := s.jobs.duePending(ctx, tx, l.part, s.clk.Now().Add(time.Second).UnixMilli(), 100000)
	tx.Rollback() // a read only
	if err != nil {
		return err
	}
	fires = slices.DeleteFunc(fires, func(f *fire) bool { return l.claims.held(f.key()) })
	gone, rebuilt := 0, 0
	// rebuild sends logsvc the record of a fire found dispatched, and settles the fire: its row
	// goes once logsvc has the record.
	rebuild := func(f *fire, addr string) {
		f.lead = l
		l.claims.claim(f.key())
		s.rebuildRecord(ctx, f, addr)
		s.rowAcks.settle(l, f)
		rebuilt++
		gone++
	}
	unknown := map[int64][]string{}
	byID := make(map[string]*fire, len(fires))
	for start := 0; start < len(fires); start += 10000 {
		chunk := fires[start:min(start+10000, len(fires))]
		ids := make([]string, len(chunk))
		for i, f := range chunk {
			ids[i] = f.key().triggerID()
			byID[ids[i]] = f
		}
		resp, err := s.logs.LookupTriggers(ctx, &logsv1.LookupTriggersRequest{TriggerIds: ids})
		if err != nil {
			return fmt.Errorf("look up pending fires in logsvc: %w", err)
		}
		unrecorded := make(map[string]bool, len(resp.GetUnrecordedTriggerIds()))
		for _, id := range resp.GetUnrecordedTriggerIds() {
			if f := byID[id]; f != nil && f.kind != kindSkipped { // a skipped fire never ran: nothing to rebuild
				unrecorded[id] = true
				rebuild(f, "")
			}
		}
		known := make(map[string]bool, len(resp.GetKnownTriggerIds()))
		for _, id := range resp.GetKnownTriggerIds() {
			known[id] = true
			if unrecorded[id] {
				continue
			}
			if err := s.jobs.deletePending(ctx, byID[id].key()); err != nil {
				return err
			}
			gone++
		}
		for _, id := range ids {
			if !known[id] && byID[id].kind != kindSkipped { // a skipped fire was never sent: no executor to ask
				unknown[byID[id].job.GroupID] = append(unknown[byID[id].job.GroupID], id)
			}
		}
	}
	// logsvc lags the fires under load; ask the executors about the ones it does not know.
	onExec, silent, skipped := s.seenOnExecutors(ctx, unknown)
	for id, addr := range onExec {
		rebuild(byID[id], addr)
	}
	pinned := 0
	var doubts []*doubt
	for gid, ids := range unknown {
		ex := silent[gid]
		for _, id := range ids {
			f := byID[id]
			switch {
			case onExec[id] != "" || len(ex) == 0:
			case len(ex) == 1:
				f.lead = l
				l.pin(f.key(), ex[0].addr)
				pinned++
			case l.claims.claim(f.key()): // the pre-read does not arm it meanwhile
				f.lead = l
				doubts = append(doubts, &doubt{f: f, id: id, cands: slices.Clone(ex)})
			}
		}
	}
	if len(fires) > 0 {
		s.log.Info("took over pending retries and child fires", "pending", len(fires), "already_dispatched", gone,
			"found_on_executors", len(onExec), "executors_skipped", skipped, "pinned", pinned, "in_doubt", len(doubts),
			"records_rebuilt", rebuilt)
	}
	l.resolveLater(ctx, doubts)
	return nil
}

// pendingRetry builds the retry of a failed fire: same scheduled time, params and parent job (a
// child fire's retry keeps the child fire's id form), attempt+1, the failed shard only.
func pendingRetry(j *jobRow, c *logsv1.Completion) *fire {
	params := c.GetParams()
	id, _ := triggerid.Parse(c.GetTriggerId())
	f := &fire{job: j, fireMs: c.GetScheduledUnixMs(), parent: id.Parent, trigType: triggerRetry,
		kind: kindRetry, attempt: c.GetAttempt() + 1, params: &params}
	if c.GetShardTotal() > 1 {
		f.shard, f.shardTotal = c.GetShardIndex(), c.GetShardTotal()
	}
	return f
}
