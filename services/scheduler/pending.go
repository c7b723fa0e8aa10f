package scheduler

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"time"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
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
}

// triggerID is the trigger id the fire gets (or its first shard's, for a broadcast).
func (k pendingKey) triggerID() string {
	return triggerid.ID{Job: k.job, ScheduledMs: k.fireMs, Shard: max(k.shard, 0), Attempt: k.attempt, Parent: k.parent}.String()
}

// key returns the pending key of a pending fire.
func (f *fire) key() pendingKey {
	k := pendingKey{job: f.job.ID, fireMs: f.fireMs, shard: -1, attempt: f.attempt, parent: f.parent}
	if f.shardTotal > 0 {
		k.shard = f.shard
	}
	return k
}

// claims is the set of pending fires a leadership has armed and not settled.
type claims struct {
	mu  sync.Mutex
	set map[pendingKey]struct{}
}

// claim reports whether k was not claimed yet, and claims it.
func (c *claims) claim(k pendingKey) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.set == nil {
		c.set = map[pendingKey]struct{}{}
	}
	if _, ok := c.set[k]; ok {
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

// addPending stores a pending fire inside the fenced completion transaction; a repeat of the same
// completion (after a failover) changes nothing.
func (s store) addPending(ctx context.Context, tx *sql.Tx, f *fire, dueMs int64) error {
	k := f.key()
	_, err := tx.ExecContext(ctx, s.db.Q(`INSERT INTO pending_fires (job_id, fire_ms, shard, shard_total, attempt,
		trigger_type, fire_params, due_ms, parent_job_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING`),
		k.job, k.fireMs, k.shard, f.shardTotal, k.attempt, triggerTypeOf(f.trigType), f.params, dueMs, k.parent)
	if err != nil {
		return storeErr(err, "save pending %s fire %s", f.trigType, k.triggerID())
	}
	return nil
}

// duePending reads partition part's pending fires due at or before horizonMs with their jobs,
// oldest first.
func (s store) duePending(ctx context.Context, tx *sql.Tx, part int, horizonMs int64, limit int) ([]*fire, []int64, error) {
	rows, err := tx.QueryContext(ctx, s.db.Q(`SELECT p.fire_ms, p.shard, p.shard_total, p.attempt, p.trigger_type,
		p.fire_params, p.due_ms, p.parent_job_id, `+jobColumns+` FROM pending_fires p JOIN jobs ON jobs.id = p.job_id
		LEFT JOIN job_state ON job_state.job_id = jobs.id
		WHERE p.due_ms <= $1 AND job_state.part = $3 ORDER BY p.due_ms LIMIT $2`), horizonMs, limit, part)
	if err != nil {
		return nil, nil, storeErr(err, "read pending fires")
	}
	defer rows.Close()
	var (
		fires []*fire
		dues  []int64
	)
	for rows.Next() {
		var (
			f      fire
			tt     triggerType
			params sql.NullString
			due    int64
			j      jobRow
		)
		if err := rows.Scan(append([]any{&f.fireMs, &f.shard, &f.shardTotal, &f.attempt, &tt, &params, &due, &f.parent},
			jobFields(&j)...)...); err != nil {
			return nil, nil, storeErr(err, "read pending fires")
		}
		f.trigType = tt.proto()
		if f.shard < 0 {
			f.shard, f.shardTotal = 0, 0
		}
		if params.Valid {
			f.params = &params.String
		}
		f.job, f.pending = &j, true
		fires, dues = append(fires, &f), append(dues, due)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, storeErr(err, "read pending fires")
	}
	return fires, dues, nil
}

// deletePending removes a dispatched (or obsolete) pending fire.
func (s store) deletePending(ctx context.Context, k pendingKey) error {
	_, err := s.db.ExecContext(ctx, s.db.Q(`DELETE FROM pending_fires`+pendingWhere), pendingArgs(k)...)
	if err != nil {
		return storeErr(err, "delete pending fire %s", k.triggerID())
	}
	return nil
}

// pendingWhere names one pending fire by $1-$5 (pendingArgs).
const pendingWhere = ` WHERE job_id = $1 AND fire_ms = $2 AND shard = $3 AND attempt = $4 AND parent_job_id = $5`

// pendingArgs are pendingWhere's arguments for k.
func pendingArgs(k pendingKey) []any { return []any{k.job, k.fireMs, k.shard, k.attempt, k.parent} }

// setPendingDue moves, inside tx, pending fire k's due time to dueMs, only while it is fromMs
// when fromMs is not 0; it reports whether the row was there (and moved).
func (s store) setPendingDue(ctx context.Context, tx *sql.Tx, k pendingKey, dueMs, fromMs int64) (bool, error) {
	q, args := `UPDATE pending_fires SET due_ms = $6`+pendingWhere, append(pendingArgs(k), dueMs)
	if fromMs != 0 {
		q, args = q+` AND due_ms = $7`, append(args, fromMs)
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

// pruneTombstones forgets, inside the fenced tx, tombstones older than an hour.
func (s store) pruneTombstones(ctx context.Context, tx *sql.Tx, nowMs int64) error {
	if _, err := tx.ExecContext(ctx, s.db.Q(`DELETE FROM job_tombstones WHERE deleted_ms < $1`), nowMs-time.Hour.Milliseconds()); err != nil {
		return storeErr(err, "prune job tombstones")
	}
	return nil
}

// tombstonesSince reads, inside the fenced tx, the jobs deleted at or after ms.
func (s store) tombstonesSince(ctx context.Context, tx *sql.Tx, ms int64) ([]int64, error) {
	rows, err := tx.QueryContext(ctx, s.db.Q(`SELECT job_id FROM job_tombstones WHERE deleted_ms >= $1`), ms)
	if err != nil {
		return nil, storeErr(err, "read deleted jobs")
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, storeErr(err, "read deleted jobs")
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, storeErr(err, "read deleted jobs")
	}
	return ids, nil
}

// armPending arms a pending fire at dueMs unless this leadership already has.
func (s *Service) armPending(l *engine, f *fire, dueMs int64) {
	f.lead, f.pending = l, true
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
		s.armPending(l, f, dueMs)
	}
}

// settle records that a fire of leadership l left the ring for good (dispatched, rejected or
// disarmed): an owed fire is no longer owed; a pending fire's row is deleted.
func (s *Service) settle(f *fire) {
	if !f.pending {
		f.lead.owed.done(f.job.ID, f.fireMs)
		return
	}
	k := f.key()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.jobs.deletePending(ctx, k); err != nil {
		// Still claimed, so this leader does not send it again; a new leader asks logsvc first.
		s.log.Warn("dispatched fire left pending", "trigger_id", k.triggerID(), "error", err)
		return
	}
	f.lead.claims.release(k)
}

// disarmEntry takes back a fire removed from the ring without dispatching it.
func (l *engine) disarmEntry(e ringEntry) {
	if e.Value.pending {
		l.claims.release(e.Value.key())
		return
	}
	l.owed.done(e.JobID, e.FireAt)
}

// takeOverPending deletes the pending fires the previous leader dispatched: those whose trigger
// ids logsvc knows or an executor of the job's group has seen (seenOnExecutors), rebuilding the
// trigger records of those logsvc has no record of (rebuildRecord). The pre-read
// arms the rest; one that an executor which did not answer may hold goes to it alone (pinned),
// and one that several may hold is claimed until they say (resolveDoubts).
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
	gone, rebuilt := 0, 0
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
		for _, id := range resp.GetUnrecordedTriggerIds() {
			s.rebuildRecord(ctx, byID[id], "")
			rebuilt++
		}
		known := make(map[string]bool, len(resp.GetKnownTriggerIds()))
		for _, id := range resp.GetKnownTriggerIds() {
			if err := s.jobs.deletePending(ctx, byID[id].key()); err != nil {
				return err
			}
			known[id] = true
			gone++
		}
		for _, id := range ids {
			if !known[id] {
				unknown[byID[id].job.GroupID] = append(unknown[byID[id].job.GroupID], id)
			}
		}
	}
	// logsvc lags the fires under load; ask the executors about the ones it does not know.
	onExec, silent, skipped := s.seenOnExecutors(ctx, unknown)
	for id, addr := range onExec {
		s.rebuildRecord(ctx, byID[id], addr)
		rebuilt++
		if err := s.jobs.deletePending(ctx, byID[id].key()); err != nil {
			return err
		}
		gone++
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
				f.lead, f.pending = l, true
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
	f := &fire{job: j, fireMs: c.GetScheduledUnixMs(), parent: id.Parent, trigType: schedulerv1.TriggerType_TRIGGER_TYPE_RETRY,
		attempt: c.GetAttempt() + 1, params: &params, pending: true}
	if c.GetShardTotal() > 1 {
		f.shard, f.shardTotal = c.GetShardIndex(), c.GetShardTotal()
	}
	return f
}
