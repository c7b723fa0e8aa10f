package scheduler

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/jobmesh/jobmesh/internal/db"
)

// txn is a transaction that decides workflow instances. A batch of decisions (a completion
// batch's, a pre-read's instances) costs a few statements, not a few per decision: the jobs it
// reads are kept for the rest of it (needJobs), and the node fires it decides and the instances
// it changes are gathered and written at flush, one statement each for the whole batch.
type txn struct {
	Tx *sql.Tx
	db *db.Tx // Tx's, for the writes flush sends
	// jobs are the jobs read so far by id (nil: the job does not exist).
	jobs  map[int64]*jobRow
	fires []dueFire
	saves []*instanceRow
	saved map[string]bool
	// failed are the instances this transaction ended FAILED: their alarms are stored with it
	// (workflow_alarms) and sent after the commit.
	failed []*instanceRow
}

// dueFire is a pending fire to store, due at due (Unix ms).
type dueFire struct {
	f   *fire
	due int64
}

// newTxn wraps tx.
func newTxn(tx *db.Tx) *txn {
	return &txn{Tx: tx.Tx, db: tx, jobs: map[int64]*jobRow{}, saved: map[string]bool{}}
}

// needJobs reads, in one query, the jobs among ids this transaction has not read yet.
func (t *txn) needJobs(ctx context.Context, s *Service, ids []int64) error {
	var missing []int64
	for _, id := range ids {
		if _, ok := t.jobs[id]; !ok && !slices.Contains(missing, id) {
			missing = append(missing, id)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	got, err := s.jobs.getMany(ctx, t.Tx, missing)
	if err != nil {
		return err
	}
	for _, id := range missing {
		t.jobs[id] = got[id] // nil for a job that is gone
	}
	return nil
}

// addFire stores f as a pending fire due at due when the transaction flushes.
func (t *txn) addFire(f *fire, due int64) { t.fires = append(t.fires, dueFire{f: f, due: due}) }

// save writes in's status, nodes and end when the transaction flushes (once, whatever changed
// it after).
func (t *txn) save(in *instanceRow) {
	if !t.saved[in.ID] {
		t.saved[in.ID] = true
		t.saves = append(t.saves, in)
	}
}

// failedNow records that in has ended FAILED: its alarm is stored at flush.
func (t *txn) failedNow(in *instanceRow) { t.failed = append(t.failed, in) }

// keepFailed drops the failures of the instances keep refuses (instances not stored after all).
func (t *txn) keepFailed(keep func(id string) bool) {
	t.failed = slices.DeleteFunc(t.failed, func(in *instanceRow) bool { return !keep(in.ID) })
}

// keepFires drops the gathered fires whose keys keep refuses.
func (t *txn) keepFires(keep func(pendingKey) bool) {
	t.fires = slices.DeleteFunc(t.fires, func(d dueFire) bool { return !keep(d.f.key()) })
}

// flush writes what the transaction gathered, and sends it with the statements b holds (nil:
// none), in one round trip to the store (call it before the commit); it returns what arms the
// fires it stored once the transaction has committed.
func (t *txn) flush(ctx context.Context, s *Service, b *db.Batch) ([]func(), error) {
	st := s.wfStore()
	if b == nil {
		b = &db.Batch{}
	}
	if err := st.addPendings(b, t.fires); err != nil {
		return nil, err
	}
	if err := st.saveInstances(b, t.saves); err != nil {
		return nil, err
	}
	s.notifyPending(b, t.fires)
	st.addWorkflowAlarms(b, t.failed)
	if err := t.db.Send(ctx, b); err != nil {
		return nil, err
	}
	after := make([]func(), 0, len(t.fires)+1)
	for _, d := range t.fires {
		after = append(after, func() { s.armOnLeader(d.f, d.due) })
	}
	if len(t.failed) > 0 {
		after = append(after, s.wfAlarms.wake)
	}
	t.fires, t.saves, t.failed = nil, nil, nil
	clear(t.saved)
	return after, nil
}

// addPendings queues to b the store of pending fires, in one statement on Postgres; a fire
// stored already (the same decision taken again after a failover) is left as it is. (Workflow
// node fires, and a pre-read's misfire decisions.)
func (s store) addPendings(b *db.Batch, fs []dueFire) error {
	if len(fs) == 0 {
		return nil
	}
	if s.db.Dialect() != db.Postgres {
		for _, d := range fs {
			q, args, err := s.pendingInsert(d.f, d.due)
			if err != nil {
				return err
			}
			b.Queue(func(err error) error { return pendingErr(d.f, err) }, q, args...)
		}
		return nil
	}
	n := len(fs)
	var (
		jobs, fireMs, dues, parents, wfIDs = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		shards, totals, attempts, tts      = make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
		nodes                              = make([]int32, n)
		params, wfs, skips                 = make([]string, n), make([]string, n), make([]string, n)
		hasParams, hasWf                   = make([]bool, n), make([]bool, n)
	)
	for i, d := range fs {
		f, k := d.f, d.f.key()
		jobs[i], fireMs[i], shards[i], totals[i], attempts[i] = k.job, k.fireMs, k.shard, f.shardTotal, k.attempt
		tts[i], dues[i], parents[i], wfIDs[i], nodes[i] = int32(f.trigType), d.due, k.parent, k.wf, k.node
		if f.params != nil {
			params[i], hasParams[i] = *f.params, true
		}
		if f.kind == kindSkipped {
			skips[i] = f.skipReason()
		}
		if f.wf != nil {
			b, err := json.Marshal(f.wf)
			if err != nil {
				return fmt.Errorf("save pending fire %s: %w", k.triggerID(), err)
			}
			wfs[i], hasWf[i] = string(b), true
		}
	}
	b.Queue(func(err error) error {
		return storeErr(err, "save %d pending fires (first %s)", n, fs[0].f.key().triggerID())
	},
		`INSERT INTO pending_fires (job_id, fire_ms, shard, shard_total, attempt,
		trigger_type, fire_params, due_ms, parent_job_id, wf_id, wf_node, wf, skip_reason)
		SELECT u.job, u.fire, u.shard, u.total, u.attempt, u.tt, CASE WHEN u.hp THEN u.params END, u.due, u.parent,
			u.wfid, u.node, CASE WHEN u.hw THEN u.wf END, NULLIF(u.skip, '')
		FROM unnest($1::bigint[], $2::bigint[], $3::int[], $4::int[], $5::int[], $6::int[], $7::text[], $8::bool[],
			$9::bigint[], $10::bigint[], $11::bigint[], $12::int[], $13::text[], $14::bool[], $15::text[])
			AS u(job, fire, shard, total, attempt, tt, params, hp, due, parent, wfid, node, wf, hw, skip)
		ON CONFLICT DO NOTHING`,
		jobs, fireMs, shards, totals, attempts, tts, params, hasParams, dues, parents, wfIDs, nodes, wfs, hasWf, skips)
	return nil
}

// saveInstances queues to b the store of instances' status, nodes and end, in one statement on
// Postgres.
func (s store) saveInstances(b *db.Batch, ins []*instanceRow) error {
	if len(ins) == 0 {
		return nil
	}
	if s.db.Dialect() != db.Postgres {
		for _, in := range ins {
			_, nodes, err := encodeInstance(in)
			if err != nil {
				return err
			}
			b.Queue(func(err error) error { return storeErr(err, "save workflow instance %s", in.ID) },
				s.db.Q(`UPDATE workflow_instances SET status = $2, nodes = $3, end_ms = $4 WHERE id = $1`), in.ID, in.Status, nodes, in.EndMs)
		}
		return nil
	}
	n := len(ins)
	ids, nodes := make([]string, n), make([]string, n)
	status, ends := make([]int32, n), make([]int64, n)
	for i, in := range ins {
		_, ns, err := encodeInstance(in)
		if err != nil {
			return err
		}
		ids[i], status[i], nodes[i], ends[i] = in.ID, int32(in.Status), ns, in.EndMs
	}
	b.Queue(func(err error) error { return storeErr(err, "save %d workflow instances (first %s)", n, ids[0]) },
		`UPDATE workflow_instances SET status = u.status, nodes = u.nodes, end_ms = u.end_ms
		FROM unnest($1::text[], $2::int[], $3::text[], $4::bigint[]) AS u(id, status, nodes, end_ms)
		WHERE workflow_instances.id = u.id`, ids, status, nodes, ends)
	return nil
}

// lockInstances reads instances inside tx and locks their rows until tx ends, in id order (two
// transactions that lock some of the same never wait on each other in a cycle); the ids with no
// instance are missing from the map.
func (s store) lockInstances(ctx context.Context, tx *sql.Tx, ids []string) (map[string]*instanceRow, error) {
	out := make(map[string]*instanceRow, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	in, arg := s.oneOf("id", "text", sorted)
	q := `SELECT ` + instanceColumns + ` FROM workflow_instances WHERE ` + in
	if s.db.Dialect() == db.Postgres {
		q += ` ORDER BY id FOR UPDATE` // SQLite's one writer needs no lock
	}
	rows, err := tx.QueryContext(ctx, s.db.Q(q), arg)
	if err != nil {
		return nil, storeErr(err, "read %d workflow instances", len(sorted))
	}
	defer rows.Close()
	for rows.Next() {
		in, err := scanInstance(rows)
		if err != nil {
			return nil, storeErr(err, "read %d workflow instances", len(sorted))
		}
		out[in.ID] = in
	}
	if err := rows.Err(); err != nil {
		return nil, storeErr(err, "read %d workflow instances", len(sorted))
	}
	return out, nil
}

// workflowGroups reads the executor groups of workflows inside q; a deleted workflow is missing
// from the map.
func (s store) workflowGroups(ctx context.Context, q queryer, ids []int64) (map[int64]int64, error) {
	out := make(map[int64]int64, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	in, arg := s.oneOf("id", "bigint", ids)
	rows, err := q.QueryContext(ctx, s.db.Q(`SELECT id, group_id FROM workflows WHERE `+in), arg)
	if err != nil {
		return nil, storeErr(err, "read the groups of %d workflows", len(ids))
	}
	defer rows.Close()
	for rows.Next() {
		var id, g int64
		if err := rows.Scan(&id, &g); err != nil {
			return nil, storeErr(err, "read the groups of %d workflows", len(ids))
		}
		out[id] = g
	}
	if err := rows.Err(); err != nil {
		return nil, storeErr(err, "read the groups of %d workflows", len(ids))
	}
	return out, nil
}

// countRunningOf counts the running instances of workflows inside tx, in one query.
func (s store) countRunningOf(ctx context.Context, tx *sql.Tx, ids []int64) (map[int64]int, error) {
	out := make(map[int64]int, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	in, arg := s.oneOf("workflow_id", "bigint", ids)
	rows, err := tx.QueryContext(ctx, s.db.Q(`SELECT workflow_id, COUNT(*) FROM workflow_instances
		WHERE status = `+sqlConst(instRunning)+` AND `+in+` GROUP BY workflow_id`), arg)
	if err != nil {
		return nil, storeErr(err, "count the running instances of %d workflows", len(ids))
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, storeErr(err, "count the running instances of %d workflows", len(ids))
		}
		out[id] = n
	}
	if err := rows.Err(); err != nil {
		return nil, storeErr(err, "count the running instances of %d workflows", len(ids))
	}
	return out, nil
}

// insertInstances stores new instances inside tx, in one statement on Postgres, and returns
// the ids it stored: an instance whose id is taken (the same fire decided again after a
// failover, or a manual trigger's time) is left out.
func (s store) insertInstances(ctx context.Context, tx *sql.Tx, ins []*instanceRow) (map[string]bool, error) {
	fresh := make(map[string]bool, len(ins))
	if len(ins) == 0 {
		return fresh, nil
	}
	if s.db.Dialect() != db.Postgres {
		for _, in := range ins {
			ok, err := s.insertInstance(ctx, tx, in)
			if err != nil {
				return nil, err
			}
			fresh[in.ID] = ok
		}
		return fresh, nil
	}
	n := len(ins)
	var (
		ids, params, nodes       = make([]string, n), make([]string, n), make([]string, n)
		wfs, versions, scheduled = make([]int64, n), make([]int64, n), make([]int64, n)
		creates, ends            = make([]int64, n), make([]int64, n)
		status, tts              = make([]int32, n), make([]int32, n)
	)
	for i, in := range ins {
		p, ns, err := encodeInstance(in)
		if err != nil {
			return nil, err
		}
		ids[i], wfs[i], versions[i], status[i], tts[i] = in.ID, in.WorkflowID, in.Version, int32(in.Status), int32(in.TrigType)
		scheduled[i], params[i], nodes[i], creates[i], ends[i] = in.ScheduledMs, p, ns, in.CreateMs, in.EndMs
	}
	rows, err := tx.QueryContext(ctx, `INSERT INTO workflow_instances (id, workflow_id, version, status, trigger_type,
		scheduled_ms, params, nodes, create_ms, end_ms)
		SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::int[], $5::int[], $6::bigint[], $7::text[],
			$8::text[], $9::bigint[], $10::bigint[])
		ON CONFLICT DO NOTHING RETURNING id`, ids, wfs, versions, status, tts, scheduled, params, nodes, creates, ends)
	if err != nil {
		return nil, storeErr(err, "create %d workflow instances (first %s)", n, ids[0])
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, storeErr(err, "create %d workflow instances (first %s)", n, ids[0])
		}
		fresh[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, storeErr(err, "create %d workflow instances (first %s)", n, ids[0])
	}
	return fresh, nil
}

// advanceWorkflows moves, inside the fenced tx, workflows' next fires from readMs to nextMs (0:
// none), in one statement on Postgres, and returns the ids it moved: one the API moved or edited
// (a new version) after the scan read it is left out (its fires are then not this scan's; the
// next scan fires the new version).
func (s store) advanceWorkflows(ctx context.Context, tx *sql.Tx, as []advance) (map[int64]bool, error) {
	done := make(map[int64]bool, len(as))
	if len(as) == 0 {
		return done, nil
	}
	if s.db.Dialect() != db.Postgres {
		for _, a := range as {
			ok, err := s.advanceWorkflow(ctx, tx, a.id, a.readMs, a.nextMs, a.version)
			if err != nil {
				return nil, err
			}
			done[a.id] = ok
		}
		return done, nil
	}
	n := len(as)
	ids, reads, nexts, versions := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	for i, a := range as {
		ids[i], reads[i], nexts[i], versions[i] = a.id, a.readMs, a.nextMs, a.version
	}
	rows, err := tx.QueryContext(ctx, `UPDATE workflows SET next_fire_ms = NULLIF(u.next, 0)
		FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[]) AS u(id, read, next, version)
		WHERE workflows.id = u.id AND workflows.next_fire_ms = u.read AND workflows.version = u.version
		RETURNING workflows.id`, ids, reads, nexts, versions)
	if err != nil {
		return nil, storeErr(err, "advance %d workflows", len(as))
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, storeErr(err, "advance %d workflows", len(as))
		}
		done[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, storeErr(err, "advance %d workflows", len(as))
	}
	return done, nil
}

// existingInstances returns which of ids are stored instances, in one query.
func (s store) existingInstances(ctx context.Context, tx *sql.Tx, ids []string) (map[string]bool, error) {
	out := make(map[string]bool, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	in, arg := s.oneOf("id", "text", ids)
	rows, err := tx.QueryContext(ctx, s.db.Q(`SELECT id FROM workflow_instances WHERE `+in), arg)
	if err != nil {
		return nil, storeErr(err, "look up %d workflow instances", len(ids))
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, storeErr(err, "look up %d workflow instances", len(ids))
		}
		out[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, storeErr(err, "look up %d workflow instances", len(ids))
	}
	return out, nil
}
