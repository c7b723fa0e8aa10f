package scheduler

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/partition"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/route"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/schedule"
)

// maxGlueVersions is how many GLUE versions a job keeps, as XXL-JOB does.
const maxGlueVersions = 30

// jobRow is a job as stored. Times are Unix ms; nullable fire times use 0 for "none".
type jobRow struct {
	ID              int64
	GroupID         int64
	Name            string
	Author          string
	AlarmEmails     string
	ScheduleType    schedule.Type
	ScheduleExpr    string
	TimeZone        string
	Misfire         misfireStrategy
	Route           route.Strategy
	Handler         string
	Params          string
	Block           blockStrategy
	TimeoutSeconds  int32
	RetryCount      int32
	RetryBackoff    retryBackoff
	RetryIntervalMs int64
	GlueType        glueType
	GlueSource      string
	GlueRemark      string
	GlueUpdatedMs   int64
	ChildJobIDs     string
	Status          jobStatus
	LastFireMs      int64
	NextFireMs      int64
	Version         int64
	CreateMs        int64
	UpdateMs        int64
}

const jobColumns = `id, group_id, name, author, alarm_emails, schedule_type, schedule_expr, time_zone,
	misfire_strategy, route_strategy, handler, params, block_strategy, timeout_seconds, retry_count,
	retry_backoff, retry_interval_ms, glue_type, glue_source, glue_remark, glue_updated_ms, child_job_ids,
	status, COALESCE(last_fire_ms, 0), COALESCE(next_fire_ms, 0), version, create_ms, update_ms`

// jobsFrom is where jobColumns are read from: a job's definition with its scheduling state
// (migration 00004 keeps that in the narrow job_state table).
const jobsFrom = `jobs LEFT JOIN job_state ON job_state.job_id = jobs.id`

type scanner interface{ Scan(dest ...any) error }

// jobFields are the scan destinations of jobColumns.
func jobFields(j *jobRow) []any {
	return []any{&j.ID, &j.GroupID, &j.Name, &j.Author, &j.AlarmEmails, &j.ScheduleType, &j.ScheduleExpr, &j.TimeZone,
		&j.Misfire, &j.Route, &j.Handler, &j.Params, &j.Block, &j.TimeoutSeconds, &j.RetryCount,
		&j.RetryBackoff, &j.RetryIntervalMs, &j.GlueType, &j.GlueSource, &j.GlueRemark, &j.GlueUpdatedMs, &j.ChildJobIDs,
		&j.Status, &j.LastFireMs, &j.NextFireMs, &j.Version, &j.CreateMs, &j.UpdateMs}
}

func scanJob(r scanner) (*jobRow, error) {
	var j jobRow
	if err := r.Scan(jobFields(&j)...); err != nil {
		return nil, err
	}
	return &j, nil
}

// nullMs stores 0 as NULL, so "no next fire" stays out of the due index.
func nullMs(ms int64) any {
	if ms == 0 {
		return nil
	}
	return ms
}

// jobStore is the scheduler's storage: what the jobs API (apiStore) and the partition engines
// (engineStore) ask of it. Its errors are translated (storeErr): callers test them with
// errors.Is against apierr's and the package's errors (errDeposed, errDuplicate,
// errRetryable), never against a driver's. Its SQL names the package's enums (enums.go).
type jobStore interface {
	apiStore
	engineStore
}

// apiStore is what the jobs API reads and writes: whole jobs, by id or by search.
type apiStore interface {
	get(ctx context.Context, id int64) (*jobRow, error)
	insert(ctx context.Context, j *jobRow, partitions int) (int64, error)
	update(ctx context.Context, j *jobRow, setNext, saveGlue bool) error
	delete(ctx context.Context, id, nowMs int64) error
	list(ctx context.Context, f jobFilter) ([]*jobRow, int64, error)
	glueVersions(ctx context.Context, jobID int64) ([]glueVersion, error)
	reserveManualFire(ctx context.Context, jobID, nowMs int64) (int64, error)
	reserveForwardedFire(ctx context.Context, jobID, nowMs int64) (int64, error)
	claimManualFire(ctx context.Context, jobID, fireMs int64, replica string) (bool, error)
	claimHolder(ctx context.Context, jobID, fireMs int64) (string, error)
}

// engineStore is what a partition engine reads and writes. Scheduling writes run in a
// transaction from begin that opens with fence (or fenceFree, for several partitions at once):
// errDeposed when a newer leader holds the partition.
type engineStore interface {
	warm(ctx context.Context) error
	begin(ctx context.Context) (*db.Tx, error)
	commit(tx *db.Tx) error
	fence(ctx context.Context, tx *sql.Tx, part int, epoch int64, holder string) error
	queueFence(b *db.Batch, part int, epoch int64, holder string)
	fenceFree(ctx context.Context, tx *sql.Tx, terms []term, wait map[int]bool, holder string) (held map[int]bool, deposed []int, err error)
	raiseFence(ctx context.Context, part int, epoch int64, holder string) error
	indexPlans(ctx context.Context, tx *sql.Tx) error
	queueIndexPlans(b *db.Batch)
	assignPartitions(ctx context.Context, count int) (int64, error)

	// The pre-read and the takeover.
	queueDueIDs(b *db.Batch, part int, horizonMs int64, limit int, ids *[]int64)
	dueJobs(ctx context.Context, tx *sql.Tx, ids []int64) ([]*jobRow, error)
	queueChangedSince(b *db.Batch, ms int64, keep func(id int64) bool, ids *[]int64)
	jobsOf(ctx context.Context, tx *sql.Tx, ids []int64) ([]*jobRow, error)
	advanceAll(ctx context.Context, tx *sql.Tx, as []advance) (map[int64]bool, error)
	markArmed(ctx context.Context, tx *sql.Tx, marks map[int64]int64) error
	armed(ctx context.Context, part int) ([]armedJob, error)
	stopJob(ctx context.Context, tx *sql.Tx, id int64) error
	queuePruneTombstones(b *db.Batch, nowMs int64)
	queueTombstonesSince(b *db.Batch, ms int64, ids *[]int64)

	// Completions.
	getMany(ctx context.Context, tx *sql.Tx, ids []int64) (map[int64]*jobRow, error)
	getActing(ctx context.Context, tx *sql.Tx, ids []int64) (map[int64]*jobRow, error)
	planNextFire(ctx context.Context, tx *sql.Tx, id, ms int64) error
	cursor(ctx context.Context, part int) (cursor int64, started bool, err error)
	saveCursors(b *db.Batch, terms []term, cursor int64)

	// Pending fires: retries, child fires, FIRE_ONCE_NOW runs, skipped fires, workflow nodes.
	addPending(ctx context.Context, tx *sql.Tx, f *fire, dueMs int64) error
	addPendings(b *db.Batch, fs []dueFire) error
	duePending(ctx context.Context, q queryer, part int, horizonMs int64, limit int) ([]*fire, []int64, error)
	queueDuePendingKeys(b *db.Batch, part int, horizonMs int64, limit int, keys *[]pendingKey)
	duePendingOf(ctx context.Context, q queryer, refs []fireRef, horizonMs int64) ([]*fire, []int64, error)
	setPendingDue(ctx context.Context, tx *sql.Tx, k pendingKey, dueMs, fromMs int64) (bool, error)
	dropPending(ctx context.Context, tx *sql.Tx, k pendingKey) (bool, error)
	deletePending(ctx context.Context, k pendingKey) error
	deletePendings(ctx context.Context, keys []pendingKey) error
}

var _ jobStore = store{}

// store is the scheduler's SQL, the jobStore of a *db.DB (Postgres or SQLite).
type store struct{ db *db.DB }

// warm opens the pool's connections ahead of need (db.DB.Warm).
func (s store) warm(ctx context.Context) error { return s.db.Warm(ctx) }

// begin starts a transaction, for the store's methods that take one (a fenced scheduling
// transaction opens with fence or fenceFree).
func (s store) begin(ctx context.Context) (*db.Tx, error) {
	tx, err := s.db.Begin(ctx, nil)
	if err != nil {
		return nil, storeErr(err, "begin")
	}
	return tx, nil
}

// get reads a job; apierr.ErrJobNotFound when there is none.
func (s store) get(ctx context.Context, id int64) (*jobRow, error) {
	return s.getIn(ctx, s.db, id)
}

// getIn is get inside q (the store or a transaction).
func (s store) getIn(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, id int64) (*jobRow, error) {
	j, err := scanJob(q.QueryRowContext(ctx, s.db.Q(`SELECT `+jobColumns+` FROM `+jobsFrom+` WHERE id = $1`), id))
	if err != nil {
		return nil, storeErr(err, "job %d", id)
	}
	return j, nil
}

// getMany reads the jobs with the given ids in one query, inside tx; ids that name no job are
// absent from the result.
func (s store) getMany(ctx context.Context, tx *sql.Tx, ids []int64) (map[int64]*jobRow, error) {
	return s.getManyWhere(ctx, tx, ids, "")
}

// oneOf is the condition "col is one of list", with list bound as $1, and that argument: a
// Postgres array of pgType (col = ANY, one plan whatever the list's length), or for SQLite a
// JSON list read with json_each.
func (s store) oneOf(col, pgType string, list any) (cond string, arg any) {
	if s.db.Dialect() == db.Postgres {
		return col + ` = ANY($1::` + pgType + `[])`, list
	}
	b, _ := json.Marshal(list)
	return col + ` IN (SELECT value FROM json_each($1))`, string(b)
}

// actsOnCompletion is the condition on a job whose runs' completions ask something of the
// scheduler: child jobs to fire, retries to arm, or (FIX_DELAY) the next fire to schedule.
var actsOnCompletion = `(child_job_ids <> '' OR retry_count > 0 OR schedule_type = ` + sqlConst(schedule.FixDelay) + `)`

// getActing is getMany of the jobs among ids that act on their runs' completions
// (actsOnCompletion): for most jobs a completion asks nothing, and reading their whole row for
// each was most of what following completions cost.
func (s store) getActing(ctx context.Context, tx *sql.Tx, ids []int64) (map[int64]*jobRow, error) {
	return s.getManyWhere(ctx, tx, ids, " AND "+actsOnCompletion)
}

// getManyWhere is getMany of the jobs that also meet cond (SQL after the id condition).
func (s store) getManyWhere(ctx context.Context, tx *sql.Tx, ids []int64, cond string) (map[int64]*jobRow, error) {
	out := make(map[int64]*jobRow, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	in, arg := s.oneOf("id", "bigint", ids)
	rows, err := tx.QueryContext(ctx, s.db.Q(`SELECT `+jobColumns+` FROM `+jobsFrom+` WHERE `+in+cond), arg)
	if err != nil {
		return nil, storeErr(err, "read %d jobs", len(ids))
	}
	defer rows.Close()
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, storeErr(err, "read %d jobs", len(ids))
		}
		out[j.ID] = j
	}
	if err := rows.Err(); err != nil {
		return nil, storeErr(err, "read %d jobs", len(ids))
	}
	return out, nil
}

// insert stores a new job; its scheduling state goes to the partition its id hashes to among
// count.
func (s store) insert(ctx context.Context, j *jobRow, count int) (int64, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, storeErr(err, "create job")
	}
	defer tx.Rollback()
	var id int64
	err = tx.QueryRowContext(ctx, s.db.Q(`INSERT INTO jobs (group_id, name, author, alarm_emails, schedule_type, schedule_expr,
		time_zone, misfire_strategy, route_strategy, handler, params, block_strategy, timeout_seconds, retry_count,
		retry_backoff, retry_interval_ms, glue_type, glue_source, glue_remark, glue_updated_ms, child_job_ids, status,
		version, create_ms, update_ms)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21,$22,1,$23,$23)
		RETURNING id`),
		j.GroupID, j.Name, j.Author, j.AlarmEmails, j.ScheduleType, j.ScheduleExpr, j.TimeZone, j.Misfire, j.Route,
		j.Handler, j.Params, j.Block, j.TimeoutSeconds, j.RetryCount, j.RetryBackoff, j.RetryIntervalMs, j.GlueType,
		j.GlueSource, j.GlueRemark, j.GlueUpdatedMs, j.ChildJobIDs, j.Status, j.CreateMs).Scan(&id)
	if err != nil {
		return 0, storeErr(err, "create job")
	}
	if _, err := tx.ExecContext(ctx, s.db.Q(`INSERT INTO job_state (job_id, next_fire_ms, part) VALUES ($1, $2, $3)`),
		id, nullMs(j.NextFireMs), partition.PartitionOf(id, count)); err != nil {
		return 0, storeErr(err, "create job")
	}
	if j.GlueType.isScript() {
		if err := s.saveGlue(ctx, tx, id, j); err != nil {
			return 0, err
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, storeErr(err, "create job")
	}
	return id, nil
}

// update writes every mutable column if the stored version is still j.Version; the version is
// bumped. next_fire_ms is written only with setNext (a start, stop or new schedule): otherwise
// the leader's pre-read owns it, and writing back a value read earlier could re-arm a fire that
// already went out. saveGlue also records a GLUE version.
func (s store) update(ctx context.Context, j *jobRow, setNext, saveGlue bool) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return storeErr(err, "update job %d", j.ID)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, s.db.Q(`UPDATE jobs SET group_id=$3, name=$4, author=$5, alarm_emails=$6, schedule_type=$7,
		schedule_expr=$8, time_zone=$9, misfire_strategy=$10, route_strategy=$11, handler=$12, params=$13, block_strategy=$14,
		timeout_seconds=$15, retry_count=$16, retry_backoff=$17, retry_interval_ms=$18, glue_type=$19, glue_source=$20,
		glue_remark=$21, glue_updated_ms=$22, child_job_ids=$23, status=$24, update_ms=$25,
		version = version + 1
		WHERE id = $1 AND version = $2`),
		j.ID, j.Version, j.GroupID, j.Name, j.Author, j.AlarmEmails, j.ScheduleType, j.ScheduleExpr, j.TimeZone, j.Misfire,
		j.Route, j.Handler, j.Params, j.Block, j.TimeoutSeconds, j.RetryCount, j.RetryBackoff, j.RetryIntervalMs,
		j.GlueType, j.GlueSource, j.GlueRemark, j.GlueUpdatedMs, j.ChildJobIDs, j.Status, j.UpdateMs)
	if err != nil {
		return storeErr(err, "update job %d", j.ID)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		if _, err := s.getIn(ctx, tx, j.ID); err != nil {
			return err
		}
		return fmt.Errorf("job %d changed since version %d was read: %w", j.ID, j.Version, apierr.ErrVersionConflict)
	}
	if setNext {
		if err := s.setNextFire(ctx, tx, j.ID, j.NextFireMs); err != nil {
			return err
		}
	}
	if saveGlue {
		if err := s.saveGlue(ctx, tx, j.ID, j); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return storeErr(err, "update job %d", j.ID)
	}
	return nil
}

// setNextFire sets a job's next fire (0: none) inside tx.
func (s store) setNextFire(ctx context.Context, tx *sql.Tx, id, ms int64) error {
	if _, err := tx.ExecContext(ctx, s.db.Q(`UPDATE job_state SET next_fire_ms = $2 WHERE job_id = $1`), id, nullMs(ms)); err != nil {
		return storeErr(err, "set next fire of job %d", id)
	}
	return nil
}

// commit commits tx, its failure translated (a lost race is errRetryable).
func (s store) commit(tx *db.Tx) error {
	if err := tx.Commit(); err != nil {
		return storeErr(err, "commit")
	}
	return nil
}

// stopJob stops a job inside tx, with no next fire, leaving its version: the pre-read stops a
// job whose stored schedule no longer parses.
func (s store) stopJob(ctx context.Context, tx *sql.Tx, id int64) error {
	if _, err := tx.ExecContext(ctx, s.db.Q(`UPDATE jobs SET status = `+sqlConst(jobStopped)+` WHERE id = $1`), id); err != nil {
		return storeErr(err, "stop job %d", id)
	}
	return s.setNextFire(ctx, tx, id, 0)
}

// planNextFire sets, inside tx, the next fire of a running job that has none (FIX_DELAY's next
// fire after a run ended); it leaves one already planned, and a stopped job, alone.
func (s store) planNextFire(ctx context.Context, tx *sql.Tx, id, ms int64) error {
	if _, err := tx.ExecContext(ctx, s.db.Q(`UPDATE job_state SET next_fire_ms = $2 WHERE job_id = $1 AND next_fire_ms IS NULL
		AND EXISTS (SELECT 1 FROM jobs WHERE jobs.id = $1 AND jobs.status = `+sqlConst(jobRunning)+`)`), id, ms); err != nil {
		return storeErr(err, "plan the next fire of job %d", id)
	}
	return nil
}

// saveGlue appends a GLUE version and keeps the newest maxGlueVersions.
func (s store) saveGlue(ctx context.Context, tx *sql.Tx, id int64, j *jobRow) error {
	_, err := tx.ExecContext(ctx, s.db.Q(`INSERT INTO glue_versions (job_id, version, glue_type, glue_source, glue_remark, create_ms)
		SELECT $1, COALESCE(MAX(version), 0) + 1, $2, $3, $4, $5 FROM glue_versions WHERE job_id = $1`),
		id, j.GlueType, j.GlueSource, j.GlueRemark, j.UpdateMs)
	if err != nil {
		return storeErr(err, "save glue version of job %d", id)
	}
	_, err = tx.ExecContext(ctx, s.db.Q(`DELETE FROM glue_versions WHERE job_id = $1 AND version <=
		(SELECT MAX(version) FROM glue_versions WHERE job_id = $1) - $2`), id, maxGlueVersions)
	if err != nil {
		return storeErr(err, "prune glue versions of job %d", id)
	}
	return nil
}

// delete removes a job with its scheduling state (ON DELETE CASCADE), GLUE versions and pending
// fires, and leaves a tombstone so the leader, on whichever replica, disarms the fires it armed
// for it.
func (s store) delete(ctx context.Context, id, nowMs int64) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return storeErr(err, "delete job %d", id)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, s.db.Q(`DELETE FROM jobs WHERE id = $1`), id)
	if err != nil {
		return storeErr(err, "delete job %d", id)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("job %d: %w", id, apierr.ErrJobNotFound)
	}
	if _, err := tx.ExecContext(ctx, s.db.Q(`DELETE FROM glue_versions WHERE job_id = $1`), id); err != nil {
		return storeErr(err, "delete glue versions of job %d", id)
	}
	if _, err := tx.ExecContext(ctx, s.db.Q(`DELETE FROM pending_fires WHERE job_id = $1`), id); err != nil {
		return storeErr(err, "delete pending fires of job %d", id)
	}
	if _, err := tx.ExecContext(ctx, s.db.Q(`INSERT INTO job_tombstones (job_id, deleted_ms) VALUES ($1, $2)
		ON CONFLICT (job_id) DO UPDATE SET deleted_ms = excluded.deleted_ms`), id, nowMs); err != nil {
		return storeErr(err, "delete job %d", id)
	}
	if err := tx.Commit(); err != nil {
		return storeErr(err, "delete job %d", id)
	}
	return nil
}

// jobFilter is ListJobs' search.
type jobFilter struct {
	GroupID               int64
	Status                jobStatus
	Name, Handler, Author string
	Limit                 int
	Skip                  int   // rows passed over before the page (jump to a page by number)
	BeforeID              int64 // keyset cursor: ids below it; 0 means from the newest
}

func (s store) list(ctx context.Context, f jobFilter) ([]*jobRow, int64, error) {
	where := `($1 = 0 OR group_id = $1) AND ($2 = 0 OR status = $2)
		AND ($3 = '' OR lower(name) LIKE lower($3) ESCAPE '\')
		AND ($4 = '' OR handler LIKE $4 ESCAPE '\')
		AND ($5 = '' OR author LIKE $5 ESCAPE '\')`
	args := []any{f.GroupID, f.Status, db.Contains(f.Name), db.Contains(f.Handler), db.Contains(f.Author)}
	var total int64
	if err := s.db.QueryRowContext(ctx, s.db.Q(`SELECT COUNT(*) FROM jobs WHERE `+where), args...).Scan(&total); err != nil {
		return nil, 0, storeErr(err, "count jobs")
	}
	rows, err := s.db.QueryContext(ctx, s.db.Q(`SELECT `+jobColumns+` FROM `+jobsFrom+` WHERE `+where+`
		AND ($6 = 0 OR id < $6) ORDER BY id DESC LIMIT $7 OFFSET $8`), append(args, f.BeforeID, f.Limit, f.Skip)...)
	if err != nil {
		return nil, 0, storeErr(err, "list jobs")
	}
	defer rows.Close()
	var out []*jobRow
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, 0, storeErr(err, "list jobs")
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, storeErr(err, "list jobs")
	}
	return out, total, nil
}

// glueVersion is one saved version of a job's GLUE source (glue_versions).
type glueVersion struct {
	Version  int64
	GlueType glueType
	Source   string
	Remark   string
	CreateMs int64
}

// proto converts the version for the API.
func (v glueVersion) proto() *schedulerv1.GlueVersion {
	return &schedulerv1.GlueVersion{Version: v.Version, GlueType: v.GlueType.proto(), GlueSource: v.Source,
		GlueRemark: v.Remark, CreateTime: tsMs(v.CreateMs)}
}

func (s store) glueVersions(ctx context.Context, jobID int64) ([]glueVersion, error) {
	rows, err := s.db.QueryContext(ctx, s.db.Q(`SELECT version, glue_type, glue_source, glue_remark, create_ms
		FROM glue_versions WHERE job_id = $1 ORDER BY version DESC`), jobID)
	if err != nil {
		return nil, storeErr(err, "list glue versions of job %d", jobID)
	}
	defer rows.Close()
	var out []glueVersion
	for rows.Next() {
		var v glueVersion
		if err := rows.Scan(&v.Version, &v.GlueType, &v.Source, &v.Remark, &v.CreateMs); err != nil {
			return nil, storeErr(err, "list glue versions of job %d", jobID)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, storeErr(err, "list glue versions of job %d", jobID)
	}
	return out, nil
}

// fence raises partition part's fence to epoch inside tx, or fails with errDeposed when a newer
// leader holds it. The row stays locked until tx ends: a newer leader's raise waits for the
// transaction, and one leader's transactions of a partition run one at a time (the pre-read and
// completion batches lock job_state rows in no common order, so letting them overlap deadlocks).
func (s store) fence(ctx context.Context, tx *sql.Tx, part int, epoch int64, holder string) error {
	res, err := tx.ExecContext(ctx, s.db.Q(fenceQuery), part, epoch, holder)
	if err != nil {
		return storeErr(err, "fence partition %d", part)
	}
	n, _ := res.RowsAffected()
	return fenced(part)(n)
}

// queueFence queues to b what fence does: errDeposed, as Send's error, when a newer epoch holds
// the partition.
func (s store) queueFence(b *db.Batch, part int, epoch int64, holder string) {
	b.QueueAffected(func(err error) error { return storeErr(err, "fence partition %d", part) }, fenced(part),
		s.db.Q(fenceQuery), part, epoch, holder)
}

// fenced judges a raise of partition part's fence by the rows it changed: none, a newer epoch
// holds it.
func fenced(part int) func(n int64) error {
	return func(n int64) error {
		if n == 0 {
			return fmt.Errorf("partition %d: %w", part, errDeposed)
		}
		return nil
	}
}

// fenceQuery raises one partition's fence ($1 partition, $2 epoch, $3 holder); it changes no row
// when a newer epoch holds it.
const fenceQuery = `INSERT INTO partition_fence (part, epoch, holder) VALUES ($1, $2, $3)
	ON CONFLICT (part) DO UPDATE SET epoch = excluded.epoch, holder = excluded.holder
	WHERE partition_fence.epoch <= excluded.epoch`

// fenceFree fences, inside tx, those of several partitions whose fences no other transaction
// holds now (a pre-read, a takeover's raise), and those in wait, waiting for them: held are the
// partitions fenced at their terms' epochs, deposed those a newer leader holds (with
// errDeposed: then tx must be rolled back), and a partition in neither is busy. A completion
// batch fences this way so that one partition's running pre-read holds back only that
// partition's completions, not the whole batch behind it. Free fences are taken in partition
// order, then those waited for. SQLite, which runs one write transaction at a time, has no busy
// fence: every partition not deposed is held.
func (s store) fenceFree(ctx context.Context, tx *sql.Tx, terms []term, wait map[int]bool, holder string) (held map[int]bool, deposed []int, err error) {
	terms = slices.SortedFunc(slices.Values(terms), func(a, b term) int { return cmp.Compare(a.part, b.part) })
	held = make(map[int]bool, len(terms))
	if s.db.Dialect() != db.Postgres {
		for _, t := range terms {
			if err := s.fence(ctx, tx, t.part, t.epoch, holder); errors.Is(err, errDeposed) {
				deposed = append(deposed, t.part)
			} else if err != nil {
				return nil, nil, err
			}
			held[t.part] = true
		}
		if len(deposed) > 0 {
			return nil, deposed, errDeposed
		}
		return held, nil, nil
	}
	// A fence row locked is a fence held: a newer leader's raise (an update of the row) waits
	// for tx. The takeover raised the row to the term's epoch before the engine acts on
	// completions, so it is found there, or higher when a newer leader has taken over.
	found := make(map[int]int64, len(terms))
	if err := s.lockFences(ctx, tx, partsOf(terms), "SKIP LOCKED", found); err != nil {
		return nil, nil, err
	}
	var waitFor []int32
	for _, t := range terms {
		if _, ok := found[t.part]; !ok && wait[t.part] {
			waitFor = append(waitFor, int32(t.part))
		}
	}
	if len(waitFor) > 0 {
		if err := s.lockFences(ctx, tx, waitFor, "", found); err != nil {
			return nil, nil, err
		}
	}
	for _, t := range terms {
		e, ok := found[t.part]
		switch {
		case !ok && !wait[t.part]: // busy, or no row
		case ok && e > t.epoch:
			deposed = append(deposed, t.part)
		case !ok || e < t.epoch:
			// No row, or one not raised to this term yet (neither seen: the takeover raises
			// the fence first): written here. A row found is locked, so this waits for no one.
			if err := s.fence(ctx, tx, t.part, t.epoch, holder); errors.Is(err, errDeposed) {
				deposed = append(deposed, t.part)
			} else if err != nil {
				return nil, nil, err
			} else {
				held[t.part] = true
			}
		default:
			held[t.part] = true
		}
	}
	if len(deposed) > 0 {
		return nil, deposed, errDeposed
	}
	return held, nil, nil
}

// lockFences locks the fence rows of parts, in partition order (option "SKIP LOCKED": only
// those no other transaction holds), and adds their epochs to found.
func (s store) lockFences(ctx context.Context, tx *sql.Tx, parts []int32, option string, found map[int]int64) error {
	rows, err := tx.QueryContext(ctx, `SELECT part, epoch FROM partition_fence WHERE part = ANY($1)
		ORDER BY part FOR UPDATE `+option, parts)
	if err != nil {
		return storeErr(err, "fence %d partitions", len(parts))
	}
	defer rows.Close()
	for rows.Next() {
		var p int
		var e int64
		if err := rows.Scan(&p, &e); err != nil {
			return storeErr(err, "fence %d partitions", len(parts))
		}
		found[p] = e
	}
	if err := rows.Err(); err != nil {
		return storeErr(err, "fence %d partitions", len(parts))
	}
	return nil
}

// term is one partition's leadership: the partition and the epoch that fences its writes.
type term struct {
	part  int
	epoch int64
}

// partsOf lists the partitions of terms, for a Postgres int array.
func partsOf(terms []term) []int32 {
	out := make([]int32, len(terms))
	for i, t := range terms {
		out[i] = int32(t.part)
	}
	return out
}

// indexPlans makes the rest of a transaction probe indexes (db.IndexPlans). The pre-read sets
// it at its start: the batch writes of job_state (advanceAll, markArmed) name hundreds or
// thousands of jobs through arrays, and Postgres planned them as a scan of all of job_state
// into a hash (a table scan that grows with every job, and by the second with dead row
// versions when autovacuum lags); and with statistics that lag a bulk import, the due read
// scanned all of jobs once per partition. The due read is no join (due), so that probing
// indexes does not make it walk all of jobs by its primary key.
func (s store) indexPlans(ctx context.Context, tx *sql.Tx) error {
	if s.db.Dialect() != db.Postgres {
		return nil
	}
	if _, err := tx.ExecContext(ctx, db.IndexPlans); err != nil {
		return indexPlansErr(err)
	}
	return nil
}

// queueIndexPlans queues to b what indexPlans does.
func (s store) queueIndexPlans(b *db.Batch) {
	if s.db.Dialect() == db.Postgres {
		b.Queue(indexPlansErr, db.IndexPlans)
	}
}

func indexPlansErr(err error) error { return storeErr(err, "index plans") }

// raiseFence raises partition part's fence to epoch in a transaction of its own, waiting for the previous
// leader's fenced transactions to end; errDeposed when a newer leader holds it.
func (s store) raiseFence(ctx context.Context, part int, epoch int64, holder string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return storeErr(err, "fence")
	}
	defer tx.Rollback()
	if s.db.Dialect() == db.Postgres {
		// The raise waits for the previous leader's transactions in flight, which are short; a
		// lock held longer fails it, and the takeover says so and tries again.
		if _, err := tx.ExecContext(ctx, `SET LOCAL lock_timeout = '2s'`); err != nil {
			return storeErr(err, "fence")
		}
	}
	if err := s.fence(ctx, tx, part, epoch, holder); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return storeErr(err, "fence")
	}
	return nil
}

// dueIDsQuery reads the ids of partition $1's jobs whose next fire is at or before $2, at most
// $3, soonest first: from the partial index job_state_part_due alone (a job that is not running
// has no next fire, so it is not in the index).
const dueIDsQuery = `SELECT job_id FROM job_state WHERE part = $1 AND next_fire_ms <= $2
	ORDER BY next_fire_ms LIMIT $3`

// queueDueIDs and dueJobs read, inside the fenced tx, partition part's running jobs whose next
// fire is at or before horizonMs, soonest first: their ids from the partial index
// job_state_part_due, then their rows by primary key. Two reads rather than one join: every partition engine scans once a second,
// and a join's plan follows the table statistics, which lag a bulk import (with autovacuum
// late or off, Postgres took the running jobs for a handful and scanned all of jobs for each
// partition's scan). It takes no row locks: advanceAll moves a job's fire times only if its
// next fire is still the one read here, so an API change committed in between (start, stop, a
// new schedule, a delete) wins and the pre-read leaves that job alone.
//
// queueDueIDs queues to b the first read: the ids, appended to ids once b is sent.
func (s store) queueDueIDs(b *db.Batch, part int, horizonMs int64, limit int, ids *[]int64) {
	b.QueueRows(func(err error) error { return storeErr(err, "pre-read") }, appendID(ids), s.db.Q(dueIDsQuery), part, horizonMs, limit)
}

// dueJobs is the second read: the running jobs among ids, in their order.
func (s store) dueJobs(ctx context.Context, tx *sql.Tx, ids []int64) ([]*jobRow, error) {
	jobs, err := s.getMany(ctx, tx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]*jobRow, 0, len(ids))
	for _, id := range ids {
		if j := jobs[id]; j != nil && j.Status == jobRunning {
			out = append(out, j)
		}
	}
	return out, nil
}

// appendID is a row callback that appends a row's one id to ids.
func appendID(ids *[]int64) func(db.Row) error {
	return func(r db.Row) error {
		var id int64
		if err := r.Scan(&id); err != nil {
			return storeErr(err, "read ids")
		}
		*ids = append(*ids, id)
		return nil
	}
}

// queueChangedSince queues to b, for the fenced transaction, the read of the ids of the jobs
// changed through the API at or after ms that keep is true for, appended to ids once b is sent;
// jobsOf then reads the rows of those kept only: a million jobs imported at once are a million
// ids (8 MB), not a million rows in memory at once (600 MB in the leader, the whole heap of a
// scan after `bench scale` inserted its jobs).
func (s store) queueChangedSince(b *db.Batch, ms int64, keep func(id int64) bool, ids *[]int64) {
	b.QueueRows(func(err error) error { return storeErr(err, "read changed jobs") }, func(r db.Row) error {
		var id int64
		if err := r.Scan(&id); err != nil {
			return storeErr(err, "read changed jobs")
		}
		if keep(id) {
			*ids = append(*ids, id)
		}
		return nil
	}, s.db.Q(`SELECT id FROM jobs WHERE update_ms >= $1`), ms)
}

// jobsOf reads, inside tx, the jobs with the given ids that exist, in their order, a few
// thousand per query.
func (s store) jobsOf(ctx context.Context, tx *sql.Tx, ids []int64) ([]*jobRow, error) {
	out := make([]*jobRow, 0, len(ids))
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), 5000)]
		ids = ids[len(chunk):]
		m, err := s.getMany(ctx, tx, chunk)
		if err != nil {
			return nil, err
		}
		for _, id := range chunk {
			if j := m[id]; j != nil {
				out = append(out, j)
			}
		}
	}
	return out, nil
}

// The batch writes of job_state on Postgres: arrays of job ids and values (their transaction
// has indexPlans set, so each job is found through an index).
const (
	advanceAllPG = `UPDATE job_state SET last_fire_ms = COALESCE(NULLIF(u.last, 0), job_state.last_fire_ms),
			next_fire_ms = NULLIF(u.next, 0), armed_from_ms = NULLIF(u.armed, 0)
			FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[]) AS u(id, read, last, next, armed)
			WHERE job_state.job_id = u.id AND job_state.next_fire_ms = u.read
			RETURNING job_state.job_id`
	markArmedPG = `UPDATE job_state SET armed_from_ms = NULLIF(u.ms, 0)
			FROM unnest($1::bigint[], $2::bigint[]) AS u(id, ms) WHERE job_state.job_id = u.id`
)

// advance is one job's new fire times after a pre-read; 0 means none (NULL). readMs is the next
// fire the pre-read read (the compare-and-set condition); lastMs 0 keeps the stored last fire;
// armedFromMs is the earliest fire owed.
type advance struct {
	id, readMs, lastMs, nextMs, armedFromMs int64
	// version is a workflow's version as read (workflows only): an edit committed since wins.
	version int64
}

// advanceAll writes every due job's new fire times in one statement, inside the fenced tx, for
// the jobs whose next fire is still the one the pre-read read; it returns the ids it advanced.
func (s store) advanceAll(ctx context.Context, tx *sql.Tx, as []advance) (map[int64]bool, error) {
	done := make(map[int64]bool, len(as))
	if len(as) == 0 {
		return done, nil
	}
	if s.db.Dialect() == db.Postgres {
		n := len(as)
		ids, reads, lasts, nexts, armed := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		for i, a := range as {
			ids[i], reads[i], lasts[i], nexts[i], armed[i] = a.id, a.readMs, a.lastMs, a.nextMs, a.armedFromMs
		}
		rows, err := tx.QueryContext(ctx, advanceAllPG, ids, reads, lasts, nexts, armed)
		if err != nil {
			return nil, storeErr(err, "advance %d jobs", len(as))
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return nil, storeErr(err, "advance %d jobs", len(as))
			}
			done[id] = true
		}
		if err := rows.Err(); err != nil {
			return nil, storeErr(err, "advance %d jobs", len(as))
		}
		return done, nil
	}
	stmt, err := tx.PrepareContext(ctx, s.db.Q(`UPDATE job_state SET last_fire_ms = COALESCE($3, last_fire_ms), next_fire_ms = $4,
		armed_from_ms = $5 WHERE job_id = $1 AND next_fire_ms = $2`))
	if err != nil {
		return nil, storeErr(err, "advance jobs")
	}
	defer stmt.Close()
	for _, a := range as {
		res, err := stmt.ExecContext(ctx, a.id, a.readMs, nullMs(a.lastMs), nullMs(a.nextMs), nullMs(a.armedFromMs))
		if err != nil {
			return nil, storeErr(err, "advance job %d", a.id)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			done[a.id] = true
		}
	}
	return done, nil
}

// markArmed sets armed_from_ms per job (0 clears it), inside the fenced tx.
func (s store) markArmed(ctx context.Context, tx *sql.Tx, marks map[int64]int64) error {
	if len(marks) == 0 {
		return nil
	}
	if s.db.Dialect() == db.Postgres {
		ids, ms := make([]int64, 0, len(marks)), make([]int64, 0, len(marks))
		for id, m := range marks {
			ids, ms = append(ids, id), append(ms, m)
		}
		_, err := tx.ExecContext(ctx, markArmedPG, ids, ms)
		if err != nil {
			return storeErr(err, "mark armed fires of %d jobs", len(marks))
		}
		return nil
	}
	stmt, err := tx.PrepareContext(ctx, s.db.Q(`UPDATE job_state SET armed_from_ms = $2 WHERE job_id = $1`))
	if err != nil {
		return storeErr(err, "mark armed fires")
	}
	defer stmt.Close()
	for id, ms := range marks {
		if _, err := stmt.ExecContext(ctx, id, nullMs(ms)); err != nil {
			return storeErr(err, "mark armed fires of job %d", id)
		}
	}
	return nil
}

// armedJob is a job with an armed_from_ms mark.
type armedJob struct {
	*jobRow
	armedFrom int64
}

// armed reads every job of partition part a leader marked as owing fires. Only a new leader's
// takeover asks, once, and the marks have no index (migration 00005): the scan of job_state
// serves it.
func (s store) armed(ctx context.Context, part int) ([]armedJob, error) {
	rows, err := s.db.QueryContext(ctx, s.db.Q(`SELECT `+jobColumns+`, armed_from_ms FROM job_state JOIN jobs ON jobs.id = job_state.job_id
		WHERE armed_from_ms IS NOT NULL AND job_state.part = $1`), part)
	if err != nil {
		return nil, storeErr(err, "read armed jobs")
	}
	defer rows.Close()
	var out []armedJob
	for rows.Next() {
		var j jobRow
		var a int64
		if err := rows.Scan(append(jobFields(&j), &a)...); err != nil {
			return nil, storeErr(err, "read armed jobs")
		}
		out = append(out, armedJob{&j, a})
	}
	if err := rows.Err(); err != nil {
		return nil, storeErr(err, "read armed jobs")
	}
	return out, nil
}

func encodeCursor(id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(id, 10)))
}

func decodeCursor(tok string) (int64, error) {
	if tok == "" {
		return 0, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err == nil {
		if id, err := strconv.ParseInt(string(b), 10, 64); err == nil && id > 0 {
			return id, nil
		}
	}
	return 0, apierr.Field("page_token", "not a token this server issued")
}

func joinIDs(ids []int64) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(parts, ",")
}

func splitIDs(s string) []int64 {
	if s == "" {
		return nil
	}
	var out []int64
	for _, p := range strings.Split(s, ",") {
		if id, err := strconv.ParseInt(p, 10, 64); err == nil {
			out = append(out, id)
		}
	}
	return out
}

// reserveManualFire reserves the scheduled time of a manual (or API) trigger of a job: nowMs,
// or the millisecond after the job's last reserved one if that is not earlier. The row lock
// makes the reservation atomic across replicas, so every accepted trigger gets its own trigger
// id. Whole seconds are skipped: cron fires fall on them, and a manual trigger must not take a
// scheduled fire's id.
func (s store) reserveManualFire(ctx context.Context, jobID, nowMs int64) (int64, error) {
	for {
		var ms int64
		err := s.db.QueryRowContext(ctx, s.db.Q(`INSERT INTO manual_fires (job_id, last_ms) VALUES ($1, $2)
			ON CONFLICT (job_id) DO UPDATE SET last_ms = CASE WHEN manual_fires.last_ms >= excluded.last_ms
			THEN manual_fires.last_ms + 1 ELSE excluded.last_ms END
			RETURNING last_ms`), jobID, nowMs).Scan(&ms)
		if err != nil {
			return 0, storeErr(err, "reserve manual trigger of job %d", jobID)
		}
		if ms%1000 != 0 {
			return ms, nil
		}
		nowMs = ms + 1
	}
}

// manualClaimKeep is how long a job's claim rows are kept after a newer forwarded trigger of
// it: far longer than a forwarded call and its forwarder's claim after it can take.
const manualClaimKeep = time.Hour

// errNotForwarded: a claim names a time no replica reserved for a forwarded trigger.
var errNotForwarded = errors.New("not a time reserved for a forwarded trigger")

// reserveForwardedFire reserves the time of a manual trigger of job jobID that this replica
// forwards to its partition's leader (reserveManualFire), and a claim row for it, unclaimed
// (claimManualFire). The job's claim rows manualClaimKeep older go.
func (s store) reserveForwardedFire(ctx context.Context, jobID, nowMs int64) (int64, error) {
	fireMs, err := s.reserveManualFire(ctx, jobID, nowMs)
	if err != nil {
		return 0, err
	}
	if _, err := s.db.ExecContext(ctx, s.db.Q(`DELETE FROM manual_claims WHERE job_id = $1 AND fire_ms < $2`),
		jobID, fireMs-manualClaimKeep.Milliseconds()); err != nil {
		return 0, storeErr(err, "delete old claims of manual triggers of job %d", jobID)
	}
	if _, err := s.db.ExecContext(ctx, s.db.Q(`INSERT INTO manual_claims (job_id, fire_ms) VALUES ($1, $2)`), jobID, fireMs); err != nil {
		return 0, storeErr(err, "reserve manual trigger %d of job %d for forwarding", fireMs, jobID)
	}
	return fireMs, nil
}

// claimManualFire claims for replica the forwarded manual trigger of job jobID at fireMs
// (reserveForwardedFire), to dispatch it, and reports whether this call claimed it: false when
// a replica did first. errNotForwarded when no forwarded trigger was reserved at fireMs.
func (s store) claimManualFire(ctx context.Context, jobID, fireMs int64, replica string) (bool, error) {
	res, err := s.db.ExecContext(ctx, s.db.Q(`UPDATE manual_claims SET claimed_by = $3
		WHERE job_id = $1 AND fire_ms = $2 AND claimed_by IS NULL`), jobID, fireMs, replica)
	if err != nil {
		return false, storeErr(err, "claim manual trigger %d of job %d", fireMs, jobID)
	}
	if n, err := res.RowsAffected(); err != nil {
		return false, storeErr(err, "claim manual trigger %d of job %d", fireMs, jobID)
	} else if n == 1 {
		return true, nil
	}
	if _, err := s.claimHolder(ctx, jobID, fireMs); err != nil {
		return false, err
	}
	return false, nil
}

// claimHolder returns the replica that claimed the forwarded manual trigger of job jobID at
// fireMs, "" while none has. errNotForwarded when no forwarded trigger was reserved at fireMs.
func (s store) claimHolder(ctx context.Context, jobID, fireMs int64) (string, error) {
	var by sql.NullString
	err := s.db.QueryRowContext(ctx, s.db.Q(`SELECT claimed_by FROM manual_claims WHERE job_id = $1 AND fire_ms = $2`), jobID, fireMs).Scan(&by)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("manual trigger %d of job %d: %w", fireMs, jobID, errNotForwarded)
	}
	if err != nil {
		return "", storeErr(err, "read the claim of manual trigger %d of job %d", fireMs, jobID)
	}
	return by.String, nil
}

// assignPartitions gives every job_state row the partition its job id hashes to among count:
// rows written before the cluster had partitions (part -1), and none other once done. Every
// replica runs it at its first lead; it is idempotent.
func (s store) assignPartitions(ctx context.Context, count int) (int64, error) {
	res, err := s.db.ExecContext(ctx, s.db.Q(`UPDATE job_state SET part = job_id % $1 WHERE part <> job_id % $1`), count)
	if err != nil {
		return 0, storeErr(err, "assign jobs to %d partitions", count)
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// cursor reads partition part's completion cursor: the last completion its leaders acted on,
// or, before its first, the cursor of the single leader that preceded partitions, or where its
// first leader's completion stream started. started is false when there is none of them (0):
// the partition has never followed completions. A started cursor 0 means every completion: the
// stream started when logsvc had none.
func (s store) cursor(ctx context.Context, part int) (cursor int64, started bool, err error) {
	var c sql.NullInt64
	// The single leader's row is always there, 0 until it acted on a completion.
	err = s.db.QueryRowContext(ctx, s.db.Q(`SELECT COALESCE((SELECT cursor FROM partition_cursor WHERE part = $1),
		(SELECT NULLIF(cursor, 0) FROM completion_cursor WHERE id = 1))`), part).Scan(&c)
	if err != nil {
		return 0, false, storeErr(err, "read completion cursor of partition %d", part)
	}
	return c.Int64, c.Valid, nil
}

// saveCursors queues to b, for the fenced transaction that sends it, the store of the
// completion cursor of each partition of terms.
func (s store) saveCursors(b *db.Batch, terms []term, cursor int64) {
	if s.db.Dialect() == db.Postgres {
		b.Queue(func(err error) error { return storeErr(err, "save completion cursors") },
			`INSERT INTO partition_cursor (part, cursor) SELECT u.part, $2 FROM unnest($1::int[]) AS u(part)
			ON CONFLICT (part) DO UPDATE SET cursor = excluded.cursor WHERE partition_cursor.cursor < excluded.cursor`, partsOf(terms), cursor)
		return
	}
	for _, t := range terms {
		b.Queue(func(err error) error { return storeErr(err, "save completion cursor of partition %d", t.part) },
			s.db.Q(`INSERT INTO partition_cursor (part, cursor) VALUES ($1, $2)
			ON CONFLICT (part) DO UPDATE SET cursor = excluded.cursor WHERE partition_cursor.cursor < excluded.cursor`), t.part, cursor)
	}
}
