package logsvc

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/internal/db"
)

const (
	defaultPageSize  = 50
	maxPageSize      = 1000
	defaultLineLimit = 1000
	maxLineLimit     = 10000
	maxKeepNewest    = 1_000_000
	maxReportDays    = 366
	maxLookupIDs     = 10000
	dayMs            = int64(24 * time.Hour / time.Millisecond)
)

const runColumns = `trigger_id, job_id, group_id, trigger_type, scheduled_ms, trigger_ms, executor_address, handler, params,
	shard_index, shard_total, attempt, retries_left, route_strategy, trigger_outcome, trigger_message, status,
	handle_message, start_ms, end_ms, alarm_status, trace_id`

type scanner interface{ Scan(dest ...any) error }

// scanRun reads runColumns, after any extra leading destinations.
func scanRun(sc scanner, extra ...any) (*logsv1.Run, error) {
	r := &logsv1.Run{}
	var tt, route, outcome, st, alarm int32
	var sched, trig, start, end int64
	dest := append(extra, &r.Id, &r.JobId, &r.GroupId, &tt, &sched, &trig, &r.ExecutorAddress, &r.Handler, &r.Params,
		&r.ShardIndex, &r.ShardTotal, &r.Attempt, &r.RetriesLeft, &route, &outcome, &r.TriggerMessage, &st,
		&r.HandleMessage, &start, &end, &alarm, &r.TraceId)
	if err := sc.Scan(dest...); err != nil {
		return nil, err
	}
	r.TriggerType, r.RouteStrategy = schedulerv1.TriggerType(tt), schedulerv1.RouteStrategy(route)
	r.TriggerOutcome, r.Status, r.AlarmStatus = logsv1.TriggerOutcome(outcome), logsv1.RunStatus(st), logsv1.AlarmStatus(alarm)
	r.ScheduledTime, r.TriggerTime, r.StartTime, r.EndTime = ts(sched), ts(trig), ts(start), ts(end)
	return r, nil
}

// ListRuns implements LogService: newest first by arrival, paged by the last seq seen or by a
// number of runs to skip, with how many runs match (counted up to runCountCap).
func (s *Service) ListRuns(ctx context.Context, req *logsv1.ListRunsRequest) (*logsv1.ListRunsResponse, error) {
	q, err := s.listRunsQuery(req)
	if err != nil {
		return nil, err
	}
	resp := &logsv1.ListRunsResponse{}
	if err := s.store.QueryRowContext(ctx, q.count, q.countArgs...).Scan(&resp.TotalSize); err != nil {
		return nil, fmt.Errorf("count runs: %w", err)
	}
	if resp.TotalSize > runCountCap {
		resp.TotalSize, resp.TotalSizeCapped = runCountCap, true
	}
	rows, err := s.store.QueryContext(ctx, q.page, q.pageArgs...)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	defer rows.Close()
	var seqs []int64
	for rows.Next() {
		var seq int64
		r, err := scanRun(rows, &seq)
		if err != nil {
			return nil, fmt.Errorf("list runs: %w", err)
		}
		resp.Runs = append(resp.Runs, r)
		seqs = append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	if len(resp.Runs) > q.size {
		resp.Runs = resp.Runs[:q.size]
		resp.NextPageToken = encodePageToken(seqs[q.size-1])
	}
	return resp, nil
}

// runCountCap is where ListRuns stops counting: the runs table is the big one, and a page
// number past ten thousand runs is not what anyone reads.
const runCountCap = 10_000

// runsQuery is ListRuns' two statements.
type runsQuery struct {
	// page reads the page: the filters, the keyset condition, a LIMIT of one more than the page
	// size (to know whether a next page exists) and the OFFSET of skip.
	page     string
	pageArgs []any
	// count counts the runs the filters match, up to runCountCap+1.
	count     string
	countArgs []any
	size      int
}

// listRunsQuery builds ListRuns' statements from the request, or the request's field errors.
func (s *Service) listRunsQuery(req *logsv1.ListRunsRequest) (runsQuery, error) {
	var bad apierr.Fields
	size := int(req.GetPageSize())
	switch {
	case size == 0:
		size = defaultPageSize
	case size < 0 || size > maxPageSize:
		bad.Add("page_size", "want 1 to %d, got %d", maxPageSize, size)
	}
	bad.Skip("skip", req.GetSkip())
	var (
		where []string
		args  []any
	)
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, strings.ReplaceAll(cond, "@", s.ph(len(args))))
	}
	if v := req.GetGroupId(); v != 0 {
		add("group_id = @", v)
	}
	if v := req.GetJobId(); v != 0 {
		add("job_id = @", v)
	}
	if v := req.GetStatus(); v != logsv1.RunStatus_RUN_STATUS_UNSPECIFIED {
		if logsv1.RunStatus_name[int32(v)] == "" {
			bad.Add("status", "unknown status %d", v)
		}
		add("status = @", int32(v))
	}
	if v := req.GetTriggerType(); v != schedulerv1.TriggerType_TRIGGER_TYPE_UNSPECIFIED {
		if schedulerv1.TriggerType_name[int32(v)] == "" {
			bad.Add("trigger_type", "unknown trigger type %d", v)
		}
		add("trigger_type = @", int32(v))
	}
	if t := req.GetStartTime(); t != nil {
		if err := t.CheckValid(); err != nil {
			bad.Add("start_time", "%v", err)
		}
		add("scheduled_ms >= @", t.AsTime().UnixMilli())
	}
	if t := req.GetEndTime(); t != nil {
		if err := t.CheckValid(); err != nil {
			bad.Add("end_time", "%v", err)
		}
		add("scheduled_ms < @", t.AsTime().UnixMilli())
	}
	if v := req.GetExecutorAddress(); v != "" {
		add("executor_address = @", v)
	}
	filters, filterArgs := slices.Clone(where), slices.Clone(args)
	if tok := req.GetPageToken(); tok != "" {
		seq, err := decodePageToken(tok)
		if err != nil {
			bad.Add("page_token", "not a token from a previous page")
		}
		add("seq < @", seq)
	}
	if err := bad.Err(); err != nil {
		return runsQuery{}, err
	}
	q := runsQuery{size: size}
	q.page = `SELECT seq, ` + runColumns + ` FROM runs`
	if len(where) > 0 {
		q.page += ` WHERE ` + strings.Join(where, " AND ")
	}
	q.page += ` ORDER BY seq DESC LIMIT ` + s.ph(len(args)+1) + ` OFFSET ` + s.ph(len(args)+2)
	q.pageArgs = append(args, size+1, req.GetSkip())
	q.count = `SELECT COUNT(*) FROM (SELECT 1 FROM runs`
	if len(filters) > 0 {
		q.count += ` WHERE ` + strings.Join(filters, " AND ")
	}
	q.count += ` LIMIT ` + s.ph(len(filterArgs)+1) + `) m`
	q.countArgs = append(filterArgs, runCountCap+1)
	return q, nil
}

// Page tokens are opaque to clients; they carry the seq of the last run returned.
func encodePageToken(seq int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("seq:" + strconv.FormatInt(seq, 10)))
}

func decodePageToken(tok string) (int64, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return 0, err
	}
	v, ok := strings.CutPrefix(string(b), "seq:")
	if !ok {
		return 0, errors.New("bad page token")
	}
	seq, err := strconv.ParseInt(v, 10, 64)
	if err != nil || seq < 1 {
		return 0, errors.New("bad page token")
	}
	return seq, nil
}

// GetRun implements LogService.
func (s *Service) GetRun(ctx context.Context, req *logsv1.GetRunRequest) (*logsv1.GetRunResponse, error) {
	if req.GetId() == "" {
		return nil, apierr.Field("id", "required")
	}
	r, err := s.getRun(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	return &logsv1.GetRunResponse{Run: r}, nil
}

func (s *Service) getRun(ctx context.Context, id string) (*logsv1.Run, error) {
	r, err := scanRun(s.store.QueryRowContext(ctx, s.store.Q(`SELECT `+runColumns+` FROM runs WHERE trigger_id = $1`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("run %q: %w", id, apierr.ErrRunNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read run %q: %w", id, err)
	}
	return r, nil
}

// runStatus reads a run's status; found is false when there is no such run.
func (s *Service) runStatus(ctx context.Context, id string) (st logsv1.RunStatus, found bool, err error) {
	var v int32
	err = s.store.QueryRowContext(ctx, s.store.Q(`SELECT status FROM runs WHERE trigger_id = $1`), id).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read status of run %q: %w", id, err)
	}
	return logsv1.RunStatus(v), true, nil
}

// maxLinesBytes is the most line text one answer carries (a ListRunLines page, a TailRun
// message): a page ends before it, whatever its line limit, so an answer stays far below gRPC's
// message limit however much a run wrote; its next line number continues.
const maxLinesBytes = 1 << 20

// readLines returns up to limit lines of run id from line from on, ending early once their text
// passes maxLinesBytes (always at least one line); more says whether lines are left after them.
func (s *Service) readLines(ctx context.Context, id string, from int64, limit int) (out []*logsv1.LogLine, more bool, err error) {
	rows, err := s.store.QueryContext(ctx, s.store.Q(`SELECT line_no, unix_ms, text FROM run_lines
		WHERE trigger_id = $1 AND line_no >= $2 ORDER BY line_no LIMIT $3`), id, from, limit+1)
	if err != nil {
		return nil, false, fmt.Errorf("read lines of run %q: %w", id, err)
	}
	defer rows.Close()
	size := 0
	for rows.Next() {
		if len(out) == limit {
			return out, true, nil
		}
		l := &logsv1.LogLine{TriggerId: id}
		if err := rows.Scan(&l.LineNo, &l.UnixMs, &l.Text); err != nil {
			return nil, false, fmt.Errorf("read lines of run %q: %w", id, err)
		}
		if size += len(l.Text); size > maxLinesBytes && len(out) > 0 {
			return out, true, nil
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("read lines of run %q: %w", id, err)
	}
	return out, false, nil
}

// ListRunLines implements LogService. Lines that arrive before the run's record or result are
// returned too; only a run with neither a row nor lines is NotFound.
func (s *Service) ListRunLines(ctx context.Context, req *logsv1.ListRunLinesRequest) (*logsv1.ListRunLinesResponse, error) {
	var bad apierr.Fields
	if req.GetId() == "" {
		bad.Add("id", "required")
	}
	from := req.GetFromLine()
	if from < 0 {
		bad.Add("from_line", "must not be negative, got %d", from)
	}
	limit := int(req.GetLimit())
	switch {
	case limit == 0:
		limit = defaultLineLimit
	case limit < 0 || limit > maxLineLimit:
		bad.Add("limit", "want 1 to %d, got %d", maxLineLimit, limit)
	}
	if err := bad.Err(); err != nil {
		return nil, err
	}
	from = max(from, 1)
	st, found, err := s.runStatus(ctx, req.GetId()) // before the lines: see TailRun
	if err != nil {
		return nil, err
	}
	lines, more, err := s.readLines(ctx, req.GetId(), from, limit)
	if err != nil {
		return nil, err
	}
	if !found && len(lines) == 0 {
		return nil, fmt.Errorf("run %q: %w", req.GetId(), apierr.ErrRunNotFound)
	}
	next := from
	if len(lines) > 0 {
		next = lines[len(lines)-1].GetLineNo() + 1
	}
	return &logsv1.ListRunLinesResponse{Lines: lines, NextLine: next, IsEnd: found && final(int32(st)) && !more}, nil
}

// LookupTriggers implements LogService: the requested ids that have a run (a trigger record, a
// start or a result arrived), in request order, duplicates kept, and of those the ones whose
// trigger record never arrived (unrecorded: made from the executor's reports alone, whether or
// not the missing-record sweep has completed them since). Ids that could never be stored
// (empty, too long, with NUL) are simply unknown. Postgres answers in one query over the
// trigger_id key; SQLite in one IN query per rowsPerStatement ids.
func (s *Service) LookupTriggers(ctx context.Context, req *logsv1.LookupTriggersRequest) (*logsv1.LookupTriggersResponse, error) {
	ids := req.GetTriggerIds()
	if len(ids) > maxLookupIDs {
		return nil, apierr.Field("trigger_ids", "at most %d, got %d", maxLookupIDs, len(ids))
	}
	resp := &logsv1.LookupTriggersResponse{}
	uniq := make([]string, 0, len(ids))
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if !seen[id] && checkTriggerID("", id) == nil {
			uniq = append(uniq, id)
		}
		seen[id] = true
	}
	if len(uniq) == 0 {
		return resp, nil
	}
	known, err := s.knownTriggers(ctx, uniq)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		unrecorded, ok := known[id]
		if !ok {
			continue
		}
		resp.KnownTriggerIds = append(resp.KnownTriggerIds, id)
		if unrecorded {
			resp.UnrecordedTriggerIds = append(resp.UnrecordedTriggerIds, id)
		}
	}
	return resp, nil
}

// knownTriggers returns which of ids (distinct) have a run, each with whether its trigger
// record never arrived: its trigger outcome is still unset, or the missing-record sweep set it.
func (s *Service) knownTriggers(ctx context.Context, ids []string) (map[string]bool, error) {
	known := make(map[string]bool)
	scan := func(rows *sql.Rows, err error) error {
		if err != nil {
			return fmt.Errorf("look up triggers: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var (
				id         string
				unrecorded bool
			)
			if err := rows.Scan(&id, &unrecorded); err != nil {
				return fmt.Errorf("look up triggers: %w", err)
			}
			known[id] = unrecorded
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("look up triggers: %w", err)
		}
		return nil
	}
	cols := fmt.Sprintf(`SELECT trigger_id, (trigger_outcome = %d OR trigger_message = %s) FROM runs WHERE trigger_id `, outcomeNone, s.ph(1))
	if s.store.Dialect() == db.Postgres {
		// One text[] parameter: a single index probe per id, however many ids.
		if err := scan(s.store.QueryContext(ctx, cols+`= ANY($2)`, unrecordedMessage, ids)); err != nil {
			return nil, err
		}
		return known, nil
	}
	for _, chunk := range chunks(ids, rowsPerStatement) {
		if err := scan(s.store.QueryContext(ctx, cols+`IN `+s.in(len(chunk), 2), append([]any{unrecordedMessage}, anys(chunk)...)...)); err != nil {
			return nil, err
		}
	}
	return known, nil
}

// KillRun implements LogService: the scheduler asks the run's executor to kill it.
func (s *Service) KillRun(ctx context.Context, req *logsv1.KillRunRequest) (*logsv1.KillRunResponse, error) {
	if req.GetId() == "" {
		return nil, apierr.Field("id", "required")
	}
	r, err := s.getRun(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	if final(int32(r.GetStatus())) {
		return nil, fmt.Errorf("run %q has already ended (%s): %w", r.GetId(), r.GetStatus(), apierr.ErrRunEnded)
	}
	killed, msg, err := s.killer.KillTrigger(ctx, r.GetId(), r.GetJobId(), r.GetExecutorAddress())
	if err != nil {
		return nil, fmt.Errorf("kill run %q on %s: %w", r.GetId(), r.GetExecutorAddress(), err)
	}
	s.log.InfoContext(ctx, "kill requested", "trigger_id", r.GetId(), "job_id", r.GetJobId(), "executor_address", r.GetExecutorAddress(), "killed", killed)
	return &logsv1.KillRunResponse{Killed: killed, Message: msg}, nil
}

// ClearRuns implements LogService: runs and their lines are deleted a batch at a time, each
// batch in its own short transaction.
func (s *Service) ClearRuns(ctx context.Context, req *logsv1.ClearRunsRequest) (*logsv1.ClearRunsResponse, error) {
	before, keep := req.GetBeforeTime(), req.GetKeepNewest()
	switch {
	case (before == nil) == (keep == 0):
		return nil, apierr.Fields{
			{Field: "before_time", Reason: "set exactly one of before_time and keep_newest"},
			{Field: "keep_newest", Reason: "set exactly one of before_time and keep_newest"},
		}
	case before != nil:
		if err := before.CheckValid(); err != nil {
			return nil, apierr.Field("before_time", "%v", err)
		}
	case keep < 1 || keep > maxKeepNewest:
		return nil, apierr.Field("keep_newest", "want 1 to %d, got %d", maxKeepNewest, keep)
	}
	var n int64
	var err error
	if before != nil {
		n, err = s.clearBefore(ctx, req.GetGroupId(), req.GetJobId(), before.AsTime().UnixMilli())
	} else {
		n, err = s.clearKeepNewest(ctx, req.GetGroupId(), req.GetJobId(), int(keep))
	}
	if n > 0 {
		s.log.InfoContext(ctx, "cleared runs", "deleted", n, "group_id", req.GetGroupId(), "job_id", req.GetJobId())
	}
	if err != nil {
		return nil, err
	}
	return &logsv1.ClearRunsResponse{Deleted: n}, nil
}

// clearBefore deletes the runs scheduled before cutoff, of a group and a job (0: any).
func (s *Service) clearBefore(ctx context.Context, groupID, jobID, cutoff int64) (int64, error) {
	return s.deleteRuns(ctx, `scheduled_ms < $1 AND (CAST($2 AS BIGINT) = 0 OR group_id = $2) AND (CAST($3 AS BIGINT) = 0 OR job_id = $3)`, cutoff, groupID, jobID)
}

// clearKeepNewest deletes all but the newest keep runs of every job that matches the filters.
func (s *Service) clearKeepNewest(ctx context.Context, groupID, jobID int64, keep int) (int64, error) {
	var jobs []int64
	rows, err := s.store.QueryContext(ctx, s.store.Q(`SELECT DISTINCT job_id FROM runs
		WHERE (CAST($1 AS BIGINT) = 0 OR group_id = $1) AND (CAST($2 AS BIGINT) = 0 OR job_id = $2) ORDER BY job_id`), groupID, jobID)
	if err != nil {
		return 0, fmt.Errorf("list jobs to clear: %w", err)
	}
	for rows.Next() {
		var j int64
		if err := rows.Scan(&j); err != nil {
			rows.Close()
			return 0, fmt.Errorf("list jobs to clear: %w", err)
		}
		jobs = append(jobs, j)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("list jobs to clear: %w", err)
	}
	var total int64
	for _, j := range jobs {
		// The keep-th newest run of the job (in the group) is the oldest one kept.
		var oldestKept int64
		err := s.store.QueryRowContext(ctx, s.store.Q(`SELECT seq FROM runs WHERE job_id = $1 AND (CAST($2 AS BIGINT) = 0 OR group_id = $2)
			ORDER BY seq DESC LIMIT 1 OFFSET $3`), j, groupID, keep-1).Scan(&oldestKept)
		if errors.Is(err, sql.ErrNoRows) {
			continue // keep or fewer runs
		}
		if err != nil {
			return total, fmt.Errorf("find runs of job %d to keep: %w", j, err)
		}
		n, err := s.deleteRuns(ctx, `job_id = $1 AND (CAST($2 AS BIGINT) = 0 OR group_id = $2) AND seq < $3`, j, groupID, oldestKept)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// deleteRuns deletes the runs matching cond (over $1..$3) and their lines, deleteBatch runs per
// transaction, and returns how many it deleted.
func (s *Service) deleteRuns(ctx context.Context, cond string, a1, a2, a3 int64) (int64, error) {
	q := s.store.Q(`DELETE FROM runs WHERE seq IN (SELECT seq FROM runs WHERE ` + cond + ` ORDER BY seq LIMIT $4) RETURNING trigger_id`)
	var total int64
	for {
		var ids []string
		err := s.inTx(ctx, func(tx *db.Tx) error {
			ids = ids[:0]
			rows, err := tx.QueryContext(ctx, q, a1, a2, a3, deleteBatch)
			if err != nil {
				return fmt.Errorf("delete runs: %w", err)
			}
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return fmt.Errorf("delete runs: %w", err)
				}
				ids = append(ids, id)
			}
			if err := rows.Close(); err != nil {
				return fmt.Errorf("delete runs: %w", err)
			}
			for _, chunk := range chunks(ids, rowsPerStatement) {
				if _, err := tx.ExecContext(ctx, `DELETE FROM run_lines WHERE trigger_id IN `+s.in(len(chunk), 1), anys(chunk)...); err != nil {
					return fmt.Errorf("delete lines: %w", err)
				}
			}
			return nil
		})
		if err != nil {
			return total, err
		}
		total += int64(len(ids))
		if len(ids) < deleteBatch {
			return total, nil
		}
	}
}
