package scheduler

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/partition"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/schedule"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/workflow"
)

// workflowRow is a workflow as stored: its scheduling columns and its current version's graph.
type workflowRow struct {
	ID, GroupID int64
	Name, Owner string
	// AlarmEmails are comma-separated, as a job's.
	AlarmEmails   string
	ScheduleType  schedule.Type
	ScheduleExpr  string
	TimeZone      string
	Misfire       misfireStrategy
	Status        jobStatus
	MaxConcurrent int32
	Version       int64
	NextFireMs    int64
	CreateMs      int64
	UpdateMs      int64
	Graph         *workflow.Graph
}

// instStatus is a workflow instance's status as workflow_instances.status stores it (the API's
// numbers).
type instStatus int32

const (
	instRunning instStatus = 1
	instSuccess instStatus = 2
	instFailed  instStatus = 3
	instKilled  instStatus = 4
	instSkipped instStatus = 5
)

// nodeState is one node of an instance, as the instance's nodes column stores it.
type nodeState struct {
	Status workflow.Status `json:"s"`
	// Attempt is the node's current attempt; Base the attempt its current round began at (an
	// instance retry starts a new round, with its own retry_count of retries).
	Attempt int32             `json:"a,omitempty"`
	Base    int32             `json:"b,omitempty"`
	Fired   bool              `json:"f,omitempty"`
	Outputs map[string]string `json:"o,omitempty"`
	StartMs int64             `json:"st,omitempty"`
	EndMs   int64             `json:"en,omitempty"`
	Msg     string            `json:"m,omitempty"`
}

// instanceRow is a workflow instance as stored.
type instanceRow struct {
	ID          string
	WorkflowID  int64
	Version     int64
	Status      instStatus
	TrigType    triggerType
	ScheduledMs int64
	Params      map[string]string
	Nodes       []nodeState
	CreateMs    int64
	EndMs       int64
}

// wfFire is what a workflow node's fire carries besides its job (pending_fires.wf).
type wfFire struct {
	ID             int64             `json:"wf"`
	Node           int32             `json:"node"`
	NodeID         string            `json:"node_id"`
	Context        map[string]string `json:"ctx,omitempty"`
	TimeoutSeconds int32             `json:"timeout,omitempty"`
}

// instanceID is the deterministic id of workflow wf's instance scheduled at ms.
func instanceID(wf, ms int64) string {
	return "w" + strconv.FormatInt(wf, 10) + "-" + strconv.FormatInt(ms, 10)
}

// parseInstanceID reads an instance id; false for any other string.
func parseInstanceID(id string) (wf, ms int64, ok bool) {
	w, m, found := strings.Cut(strings.TrimPrefix(id, "w"), "-")
	if !found || !strings.HasPrefix(id, "w") {
		return 0, 0, false
	}
	wf, err1 := strconv.ParseInt(w, 10, 64)
	ms, err2 := strconv.ParseInt(m, 10, 64)
	return wf, ms, err1 == nil && err2 == nil && wf > 0
}

const workflowColumns = `id, group_id, name, owner, schedule_type, schedule_expr, time_zone, misfire_strategy, status,
	max_concurrent, version, COALESCE(next_fire_ms, 0), create_ms, update_ms, alarm_emails`

func workflowFields(w *workflowRow) []any {
	return []any{&w.ID, &w.GroupID, &w.Name, &w.Owner, &w.ScheduleType, &w.ScheduleExpr, &w.TimeZone, &w.Misfire,
		&w.Status, &w.MaxConcurrent, &w.Version, &w.NextFireMs, &w.CreateMs, &w.UpdateMs, &w.AlarmEmails}
}

// queryer is a store or a transaction.
type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// insertWorkflow stores a new workflow and its version 1; its partition is its id's among count.
func (s store) insertWorkflow(ctx context.Context, w *workflowRow, count int) (int64, error) {
	tx, err := s.begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	var id int64
	err = tx.QueryRowContext(ctx, s.db.Q(`INSERT INTO workflows (group_id, name, owner, schedule_type, schedule_expr,
		time_zone, misfire_strategy, status, max_concurrent, version, part, next_fire_ms, create_ms, update_ms, alarm_emails)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,1,-1,$10,$11,$11,$12) RETURNING id`),
		w.GroupID, w.Name, w.Owner, w.ScheduleType, w.ScheduleExpr, w.TimeZone, w.Misfire, w.Status, w.MaxConcurrent,
		nullMs(w.NextFireMs), w.CreateMs, w.AlarmEmails).Scan(&id)
	if err != nil {
		return 0, storeErr(err, "create workflow")
	}
	if _, err := tx.ExecContext(ctx, s.db.Q(`UPDATE workflows SET part = $2 WHERE id = $1`), id, partition.PartitionOf(id, count)); err != nil {
		return 0, storeErr(err, "create workflow")
	}
	if err := s.saveVersion(ctx, tx.Tx, id, 1, w); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, storeErr(err, "create workflow")
	}
	return id, nil
}

// saveVersion stores version v of workflow id's graph.
func (s store) saveVersion(ctx context.Context, tx *sql.Tx, id, v int64, w *workflowRow) error {
	g, err := json.Marshal(w.Graph)
	if err != nil {
		return fmt.Errorf("save workflow %d version %d: %w", id, v, err)
	}
	if _, err := tx.ExecContext(ctx, s.db.Q(`INSERT INTO workflow_versions (workflow_id, version, name, graph, create_ms)
		VALUES ($1, $2, $3, $4, $5)`), id, v, w.Name, string(g), w.UpdateMs); err != nil {
		return storeErr(err, "save workflow %d version %d", id, v)
	}
	return nil
}

// updateWorkflow writes w as a new version if the stored version is still w.Version; setNext
// also writes its next fire (a new schedule or status).
func (s store) updateWorkflow(ctx context.Context, w *workflowRow, setNext bool) error {
	tx, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	q := `UPDATE workflows SET group_id=$3, name=$4, owner=$5, schedule_type=$6, schedule_expr=$7, time_zone=$8,
		misfire_strategy=$9, status=$10, max_concurrent=$11, update_ms=$12, alarm_emails=$13, version = version + 1`
	args := []any{w.ID, w.Version, w.GroupID, w.Name, w.Owner, w.ScheduleType, w.ScheduleExpr, w.TimeZone, w.Misfire,
		w.Status, w.MaxConcurrent, w.UpdateMs, w.AlarmEmails}
	if setNext {
		q += `, next_fire_ms = $14`
		args = append(args, nullMs(w.NextFireMs))
	}
	res, err := tx.ExecContext(ctx, s.db.Q(q+` WHERE id = $1 AND version = $2`), args...)
	if err != nil {
		return storeErr(err, "update workflow %d", w.ID)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		if _, err := s.getWorkflowIn(ctx, tx, w.ID); err != nil {
			return err
		}
		return fmt.Errorf("workflow %d changed since version %d was read: %w", w.ID, w.Version, apierr.ErrVersionConflict)
	}
	if err := s.saveVersion(ctx, tx.Tx, w.ID, w.Version+1, w); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return storeErr(err, "update workflow %d", w.ID)
	}
	return nil
}

// deleteWorkflow removes a workflow and its versions; its instances stay, and those running
// end as their version says (their versions are kept until then: an instance reads its own).
func (s store) deleteWorkflow(ctx context.Context, id int64) error {
	res, err := s.db.ExecContext(ctx, s.db.Q(`DELETE FROM workflows WHERE id = $1`), id)
	if err != nil {
		return storeErr(err, "delete workflow %d", id)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("workflow %d: %w", id, apierr.ErrNotFound)
	}
	return nil
}

// getWorkflow reads a workflow with its current graph; apierr.ErrNotFound when there is none.
func (s store) getWorkflow(ctx context.Context, id int64) (*workflowRow, error) {
	return s.getWorkflowIn(ctx, s.db, id)
}

func (s store) getWorkflowIn(ctx context.Context, q queryer, id int64) (*workflowRow, error) {
	var w workflowRow
	err := q.QueryRowContext(ctx, s.db.Q(`SELECT `+workflowColumns+` FROM workflows WHERE id = $1`), id).Scan(workflowFields(&w)...)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("workflow %d: %w", id, apierr.ErrNotFound)
	}
	if err != nil {
		return nil, storeErr(err, "read workflow %d", id)
	}
	if w.Graph, err = s.graphIn(ctx, q, id, w.Version); err != nil {
		return nil, err
	}
	return &w, nil
}

// graphIn reads version v of workflow id's graph, indexed.
func (s store) graphIn(ctx context.Context, q queryer, id, v int64) (*workflow.Graph, error) {
	var text string
	err := q.QueryRowContext(ctx, s.db.Q(`SELECT graph FROM workflow_versions WHERE workflow_id = $1 AND version = $2`), id, v).Scan(&text)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("workflow %d version %d: %w", id, v, apierr.ErrNotFound)
	}
	if err != nil {
		return nil, storeErr(err, "read workflow %d version %d", id, v)
	}
	var g workflow.Graph
	if err := json.Unmarshal([]byte(text), &g); err != nil {
		return nil, fmt.Errorf("read workflow %d version %d: %w", id, v, err)
	}
	g.Index()
	return &g, nil
}

// listWorkflows lists workflows newest first, of one group when groupID is not 0, with ids
// below beforeID when it is not 0.
func (s store) listWorkflows(ctx context.Context, groupID, beforeID int64, limit int) ([]*workflowRow, error) {
	q, args := `SELECT `+workflowColumns+` FROM workflows WHERE 1=1`, []any{}
	if groupID != 0 {
		args = append(args, groupID)
		q += fmt.Sprintf(` AND group_id = $%d`, len(args))
	}
	if beforeID != 0 {
		args = append(args, beforeID)
		q += fmt.Sprintf(` AND id < $%d`, len(args))
	}
	args = append(args, limit)
	rows, err := s.db.QueryContext(ctx, s.db.Q(q+fmt.Sprintf(` ORDER BY id DESC LIMIT $%d`, len(args))), args...)
	if err != nil {
		return nil, storeErr(err, "list workflows")
	}
	var out []*workflowRow
	for rows.Next() {
		var w workflowRow
		if err := rows.Scan(workflowFields(&w)...); err != nil {
			rows.Close()
			return nil, storeErr(err, "list workflows")
		}
		out = append(out, &w)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, storeErr(err, "list workflows")
	}
	for _, w := range out {
		if w.Graph, err = s.graphIn(ctx, s.db, w.ID, w.Version); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// dueWorkflows reads, inside the fenced tx, partition part's running workflows whose next fire
// is at or before horizonMs, without their graphs (Service.graphOf keeps those).
func (s store) dueWorkflows(ctx context.Context, tx *sql.Tx, part int, horizonMs int64, limit int) ([]*workflowRow, error) {
	rows, err := tx.QueryContext(ctx, s.db.Q(`SELECT `+workflowColumns+` FROM workflows
		WHERE part = $1 AND next_fire_ms <= $2 AND status = `+sqlConst(jobRunning)+` ORDER BY next_fire_ms LIMIT $3`),
		part, horizonMs, limit)
	if err != nil {
		return nil, storeErr(err, "read due workflows")
	}
	var out []*workflowRow
	for rows.Next() {
		var w workflowRow
		if err := rows.Scan(workflowFields(&w)...); err != nil {
			rows.Close()
			return nil, storeErr(err, "read due workflows")
		}
		out = append(out, &w)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, storeErr(err, "read due workflows")
	}
	return out, nil
}

// advanceWorkflow moves, inside the fenced tx, a workflow's next fire from readMs to nextMs (0:
// none) if it is still at version; false when the API moved or edited it meanwhile (its fires
// are then not this scan's).
func (s store) advanceWorkflow(ctx context.Context, tx *sql.Tx, id, readMs, nextMs, version int64) (bool, error) {
	res, err := tx.ExecContext(ctx, s.db.Q(`UPDATE workflows SET next_fire_ms = $3 WHERE id = $1 AND next_fire_ms = $2 AND version = $4`),
		id, readMs, nullMs(nextMs), version)
	if err != nil {
		return false, storeErr(err, "advance workflow %d", id)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, storeErr(err, "advance workflow %d", id)
	}
	return n > 0, nil
}

// insertInstance stores a new instance; false when one with its id exists (the same fire
// decided again after a failover, or a manual trigger's time taken).
func (s store) insertInstance(ctx context.Context, tx *sql.Tx, in *instanceRow) (bool, error) {
	params, nodes, err := encodeInstance(in)
	if err != nil {
		return false, err
	}
	res, err := tx.ExecContext(ctx, s.db.Q(`INSERT INTO workflow_instances (id, workflow_id, version, status, trigger_type,
		scheduled_ms, params, nodes, create_ms, end_ms) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10) ON CONFLICT DO NOTHING`),
		in.ID, in.WorkflowID, in.Version, in.Status, in.TrigType, in.ScheduledMs, params, nodes, in.CreateMs, in.EndMs)
	if err != nil {
		return false, storeErr(err, "create workflow instance %s", in.ID)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, storeErr(err, "create workflow instance %s", in.ID)
	}
	return n > 0, nil
}

func encodeInstance(in *instanceRow) (params, nodes string, err error) {
	p, err := json.Marshal(in.Params)
	if err != nil {
		return "", "", fmt.Errorf("workflow instance %s: %w", in.ID, err)
	}
	n, err := json.Marshal(in.Nodes)
	if err != nil {
		return "", "", fmt.Errorf("workflow instance %s: %w", in.ID, err)
	}
	return string(p), string(n), nil
}

const instanceColumns = `id, workflow_id, version, status, trigger_type, scheduled_ms, params, nodes, create_ms, end_ms`

func scanInstance(r scanner) (*instanceRow, error) {
	var (
		in            instanceRow
		tt            triggerType
		params, nodes string
	)
	if err := r.Scan(&in.ID, &in.WorkflowID, &in.Version, &in.Status, &tt, &in.ScheduledMs, &params, &nodes, &in.CreateMs, &in.EndMs); err != nil {
		return nil, err
	}
	in.TrigType = tt
	if err := json.Unmarshal([]byte(params), &in.Params); err != nil {
		return nil, fmt.Errorf("workflow instance %s params: %w", in.ID, err)
	}
	if err := json.Unmarshal([]byte(nodes), &in.Nodes); err != nil {
		return nil, fmt.Errorf("workflow instance %s nodes: %w", in.ID, err)
	}
	return &in, nil
}

// lockWorkflow locks a workflow's row until tx ends (SQLite's one writer needs no lock) and
// returns its max_concurrent_instances as locked (1 for a stored 0); apierr.ErrNotFound when
// there is none. Locking a row tx holds already only reads it.
func (s store) lockWorkflow(ctx context.Context, tx *sql.Tx, id int64) (int32, error) {
	q := `SELECT max_concurrent FROM workflows WHERE id = $1`
	if s.db.Dialect() == db.Postgres {
		q += ` FOR UPDATE`
	}
	var n int32
	err := tx.QueryRowContext(ctx, s.db.Q(q), id).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("workflow %d: %w", id, apierr.ErrNotFound)
	}
	if err != nil {
		return 0, storeErr(err, "lock workflow %d", id)
	}
	return max(n, 1), nil
}

// lockInstance reads an instance inside tx and locks its row until tx ends (SQLite's one
// writer needs no lock); apierr.ErrNotFound when there is none.
func (s store) lockInstance(ctx context.Context, tx *sql.Tx, id string) (*instanceRow, error) {
	q := `SELECT ` + instanceColumns + ` FROM workflow_instances WHERE id = $1`
	if s.db.Dialect() == db.Postgres {
		q += ` FOR UPDATE`
	}
	return s.instanceIn(ctx, tx, q, id)
}

// getInstance reads an instance; apierr.ErrNotFound when there is none.
func (s store) getInstance(ctx context.Context, id string) (*instanceRow, error) {
	return s.instanceIn(ctx, s.db, `SELECT `+instanceColumns+` FROM workflow_instances WHERE id = $1`, id)
}

func (s store) instanceIn(ctx context.Context, q queryer, query, id string) (*instanceRow, error) {
	in, err := scanInstance(q.QueryRowContext(ctx, s.db.Q(query), id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("workflow instance %s: %w", id, apierr.ErrNotFound)
	}
	if err != nil {
		return nil, storeErr(err, "read workflow instance %s", id)
	}
	return in, nil
}

// listInstances lists a workflow's instances newest first, scheduled before beforeMs when it
// is not 0.
func (s store) listInstances(ctx context.Context, wf, beforeMs int64, limit int) ([]*instanceRow, error) {
	q, args := `SELECT `+instanceColumns+` FROM workflow_instances WHERE workflow_id = $1`, []any{wf}
	if beforeMs != 0 {
		q, args = q+` AND scheduled_ms < $3`, append(args, limit, beforeMs)
	} else {
		args = append(args, limit)
	}
	rows, err := s.db.QueryContext(ctx, s.db.Q(q+` ORDER BY scheduled_ms DESC LIMIT $2`), args...)
	if err != nil {
		return nil, storeErr(err, "list workflow instances")
	}
	defer rows.Close()
	var out []*instanceRow
	for rows.Next() {
		in, err := scanInstance(rows)
		if err != nil {
			return nil, storeErr(err, "list workflow instances")
		}
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, storeErr(err, "list workflow instances")
	}
	return out, nil
}

// wfStore is the store of workflows: the SQL store behind s.jobs (workflows have no other).
func (s *Service) wfStore() store { return s.jobs.(store) }
