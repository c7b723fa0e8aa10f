package scheduler

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/clock"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/seal"
	"github.com/jobmesh/jobmesh/internal/xxl"
)

// XXL-JOB executors (xxl-job-core) are driven over their HTTP protocol. The executor pool hands
// out, for an executor whose address is an http(s) URL, an xxlExecutor: an
// executorv1.ExecutorServiceClient that speaks XXL-JOB's /run, /kill, /beat, /idleBeat and /log,
// so dispatch, routing probes, kills and the takeover's Seen treat it as any executor.
//
// Exactly once: XXL-JOB's executor drops a repeated logId only while it is queued, so the
// scheduler remembers what it sent. Each fire gets a row in xxl_runs, keyed by its trigger id,
// before its /run leaves; a fire whose trigger id has a row already (a re-fire after a takeover,
// on any replica) is answered DUPLICATE and not sent again. The row is removed only when the
// executor certainly did not take the fire (the connection was refused, or it answered code 500),
// so that the fire can be sent again; after an answer that never came (a timeout), it stays:
// the fire may be queued there, and is not risked twice. A replica killed between the row and
// its /run leaves a row for a fire no executor got: the takeover's Seen asks the executor about
// such rows and removes those it certainly never got, so that the new leader sends them.

// xxlParallel bounds the /run calls of one Run batch in flight at once.
const xxlParallel = 16

// maxXxlLine bounds a line copied into logsvc (logsvc's limit).
const maxXxlLine = 64 << 10

// isXxlAddress reports whether an executor address is an XXL-JOB executor's URL.
func isXxlAddress(addr string) bool {
	return strings.HasPrefix(addr, "http://") || strings.HasPrefix(addr, "https://")
}

// xxlDriver holds what every XXL-JOB executor client shares: the store of sent fires, the HTTP
// client, the fallback token and the follower of live runs' output.
type xxlDriver struct {
	db       *db.DB
	http     xxl.Client
	fallback string // Config.XxlAccessToken: presented to executors of a group without a token
	clk      clock.Clock
	log      *slog.Logger
	ingest   logsv1.IngestServiceClient
	delivery *seal.Key
	follow   *xxlFollower
}

func newXxlDriver(d *db.DB, ingest logsv1.IngestServiceClient, cfg Config, delivery *seal.Key) *xxlDriver {
	x := &xxlDriver{db: d, fallback: cfg.XxlAccessToken, clk: cfg.Clock, log: cfg.Logger, ingest: ingest, delivery: delivery,
		http: xxl.Client{HTTP: &http.Client{Transport: &http.Transport{
			Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: 16, IdleConnTimeout: 60 * time.Second, // executors close idle connections after 90 s
		}}}}
	x.follow = newXxlFollower(x, cfg.XxlLogPoll)
	return x
}

// xxlExecutor is one XXL-JOB executor as an ExecutorServiceClient.
type xxlExecutor struct {
	d    *xxlDriver
	addr string
}

var _ executorv1.ExecutorServiceClient = (*xxlExecutor)(nil)

// token is the XXL-JOB-ACCESS-TOKEN to present: the group's token the caller put in ctx (as
// "authorization: Bearer X" for agents), else the fallback.
func (x *xxlExecutor) token(ctx context.Context) string {
	if t := strings.TrimPrefix(tokenOf(ctx), "Bearer "); t != "" {
		return t
	}
	return x.d.fallback
}

// callErr turns a failed HTTP call into the gRPC status an agent's call would fail with, so
// health tracking and dispatch treat it alike: nothing listening or no route is Unavailable
// "connection error:", a deadline is DeadlineExceeded, an answer that is not XXL-JOB's is
// Unavailable.
func callErr(err error) error {
	var ne *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.As(err, &ne) && ne.Op == "dial":
		return status.Error(codes.Unavailable, "connection error: "+err.Error())
	default:
		return status.Error(codes.Unavailable, err.Error())
	}
}

// notDelivered reports whether a failed /run certainly did not reach the executor.
func notDelivered(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && ne.Op == "dial" || errors.Is(err, xxl.ErrBadAnswer)
}

// refusedToken is the answer of an executor that refuses the token.
func refusedToken(rt xxl.ReturnT) bool {
	return rt.Code != xxl.CodeSuccess && rt.Msg == xxl.MsgTokenWrong
}

// Beat implements ExecutorServiceClient: POST beat (FAILOVER's probe).
func (x *xxlExecutor) Beat(ctx context.Context, _ *executorv1.BeatRequest, _ ...grpc.CallOption) (*executorv1.BeatResponse, error) {
	rt, err := x.d.http.Beat(ctx, x.addr, x.token(ctx))
	if err != nil {
		return nil, callErr(err)
	}
	if refusedToken(rt) {
		return nil, status.Error(codes.Unauthenticated, rt.Msg)
	}
	if rt.Code != xxl.CodeSuccess {
		return nil, status.Errorf(codes.Unavailable, "beat: code %d: %s", rt.Code, rt.Msg)
	}
	return &executorv1.BeatResponse{}, nil
}

// IdleBeat implements ExecutorServiceClient: POST idleBeat (BUSYOVER's probe).
func (x *xxlExecutor) IdleBeat(ctx context.Context, in *executorv1.IdleBeatRequest, _ ...grpc.CallOption) (*executorv1.IdleBeatResponse, error) {
	rt, err := x.d.http.IdleBeat(ctx, x.addr, x.token(ctx), in.GetJobId())
	if err != nil {
		return nil, callErr(err)
	}
	if refusedToken(rt) {
		return nil, status.Error(codes.Unauthenticated, rt.Msg)
	}
	return &executorv1.IdleBeatResponse{Idle: rt.Code == xxl.CodeSuccess, Reason: rt.Msg}, nil
}

// xxlRun is a row of xxl_runs.
type xxlRun struct {
	triggerID         string
	logID             int64
	jobID, groupID    int64
	addr              string
	logDate, sentAtMs int64
	shard             int32
	resultAt          sql.NullInt64
	pulled            int64
}

// Run implements ExecutorServiceClient: records each fire in xxl_runs (DUPLICATE for a trigger
// id recorded before), then POSTs run for each new one.
func (x *xxlExecutor) Run(ctx context.Context, in *executorv1.RunRequest, _ ...grpc.CallOption) (*executorv1.RunResponse, error) {
	trigs := in.GetTriggers()
	logIDs, err := x.d.claim(ctx, x.addr, trigs)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "record the fires sent to %s: %v", x.addr, err)
	}
	token := x.token(ctx)
	acks := make([]*executorv1.RunAck, len(trigs))
	errs := make([]error, len(trigs))
	sem := make(chan struct{}, xxlParallel)
	var wg sync.WaitGroup
	for i, t := range trigs {
		acks[i] = &executorv1.RunAck{TriggerId: t.GetTriggerId()}
		logID, ok := logIDs[t.GetTriggerId()]
		if !ok {
			acks[i].Outcome = executorv1.RunOutcome_RUN_OUTCOME_DUPLICATE
			acks[i].Message = "already sent to an XXL-JOB executor under this trigger id"
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			p := triggerParam(t, logID)
			rt, err := x.d.http.Run(ctx, x.addr, token, p)
			switch {
			case err != nil:
				errs[i] = err
			case rt.Code == xxl.CodeSuccess:
				acks[i].Outcome = executorv1.RunOutcome_RUN_OUTCOME_ACCEPTED
				x.d.follow.add(&liveRun{triggerID: t.GetTriggerId(), logID: logID, logDate: p.LogDateTime, addr: x.addr, token: token})
			case strings.HasPrefix(rt.Msg, strings.TrimSuffix(xxl.MsgRepeatTrigger, ", logId:")):
				acks[i].Outcome, acks[i].Message = executorv1.RunOutcome_RUN_OUTCOME_DUPLICATE, rt.Msg
			case refusedToken(rt):
				errs[i] = status.Error(codes.Unauthenticated, rt.Msg)
			default:
				acks[i].Outcome, acks[i].Message = executorv1.RunOutcome_RUN_OUTCOME_REJECTED, rt.Msg
			}
		}()
	}
	wg.Wait()
	// The fires the executor certainly did not take lose their rows, so that they can be sent
	// again (to this executor or another).
	var release []string
	var firstErr error
	failed := 0
	for i, t := range trigs {
		e := errs[i]
		if e != nil {
			failed++
			if firstErr == nil {
				firstErr = e
			}
		}
		if e != nil && (notDelivered(e) || status.Code(e) == codes.Unauthenticated) ||
			acks[i].Outcome == executorv1.RunOutcome_RUN_OUTCOME_REJECTED {
			release = append(release, t.GetTriggerId())
		}
	}
	if len(release) > 0 {
		if err := x.d.release(context.WithoutCancel(ctx), release); err != nil {
			x.d.log.Warn("cannot forget XXL-JOB fires the executor did not take; a re-send answers DUPLICATE",
				"address", x.addr, "fires", len(release), "error", err)
		}
	}
	if failed == len(trigs) { // the whole call failed, as an agent's would
		if _, ok := status.FromError(firstErr); ok {
			return nil, firstErr
		}
		return nil, callErr(firstErr)
	}
	for i := range trigs {
		if errs[i] != nil {
			acks[i].Outcome, acks[i].Message = executorv1.RunOutcome_RUN_OUTCOME_REJECTED, "XXL-JOB executor: "+errs[i].Error()
		}
	}
	return &executorv1.RunResponse{Acks: acks}, nil
}

// triggerParam fills TriggerParam as XXL-JOB's admin does (XxlJobTrigger.processTrigger).
func triggerParam(t *executorv1.Trigger, logID int64) xxl.TriggerParam {
	glue := xxlGlueType(t.GetGlueType())
	handler := t.GetHandler()
	if glue != "BEAN" {
		handler = ""
	}
	block := strings.TrimPrefix(t.GetBlockStrategy().String(), "BLOCK_STRATEGY_")
	if t.GetBlockStrategy() == schedulerv1.BlockStrategy_BLOCK_STRATEGY_UNSPECIFIED {
		block = "SERIAL_EXECUTION"
	}
	total := int64(t.GetShardTotal())
	if total < 1 {
		total = 1
	}
	return xxl.TriggerParam{
		JobID: t.GetJobId(), ExecutorHandler: handler, ExecutorParams: t.GetParams(), ExecutorBlockStrategy: block,
		ExecutorTimeout: int64(t.GetTimeoutSeconds()), LogID: logID, LogDateTime: t.GetScheduledUnixMs(),
		GlueType: glue, GlueSource: t.GetGlueSource(), GlueUpdatetime: t.GetGlueUpdatedUnixMs(),
		BroadcastIndex: int64(t.GetShardIndex()), BroadcastTotal: total,
	}
}

// xxlGlueType names a glue type as XXL-JOB's GlueTypeEnum does ("BEAN", "GLUE_SHELL", ...).
func xxlGlueType(g schedulerv1.GlueType) string {
	if g == schedulerv1.GlueType_GLUE_TYPE_UNSPECIFIED {
		return "BEAN"
	}
	return strings.TrimPrefix(g.String(), "GLUE_TYPE_")
}

// Kill implements ExecutorServiceClient: POST kill {jobId}. XXL-JOB kills by job: the running
// run and every queued one. A kill of a fire whose result has come kills nothing.
func (x *xxlExecutor) Kill(ctx context.Context, in *executorv1.KillRequest, _ ...grpc.CallOption) (*executorv1.KillResponse, error) {
	jobID := in.GetJobId()
	if id := in.GetTriggerId(); id != "" {
		r, err := x.d.runByTrigger(ctx, id)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "read fire %s: %v", id, err)
		}
		if r == nil {
			return &executorv1.KillResponse{Message: "fire " + id + " was not sent to an XXL-JOB executor"}, nil
		}
		if r.resultAt.Valid {
			return &executorv1.KillResponse{Message: "fire " + id + " has finished"}, nil
		}
		jobID = r.jobID
	}
	rt, err := x.d.http.Kill(ctx, x.addr, x.token(ctx), jobID)
	if err != nil {
		return nil, callErr(err)
	}
	if refusedToken(rt) {
		return nil, status.Error(codes.Unauthenticated, rt.Msg)
	}
	if rt.Code != xxl.CodeSuccess {
		return &executorv1.KillResponse{Message: rt.Msg}, nil
	}
	msg := rt.Msg
	if msg == "" {
		msg = fmt.Sprintf("XXL-JOB executor killed job %d's thread: its running and queued runs", jobID)
	}
	return &executorv1.KillResponse{Killed: rt.Msg != xxl.MsgAlreadyKilled, Message: msg}, nil
}

// Log implements ExecutorServiceClient: POST log for the fire's log id and date.
func (x *xxlExecutor) Log(ctx context.Context, in *executorv1.LogRequest, _ ...grpc.CallOption) (*executorv1.LogResponse, error) {
	r, err := x.d.runByTrigger(ctx, in.GetTriggerId())
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "read fire %s: %v", in.GetTriggerId(), err)
	}
	if r == nil {
		return nil, status.Errorf(codes.NotFound, "fire %s was not sent to an XXL-JOB executor", in.GetTriggerId())
	}
	from := max(in.GetFromLine(), 1)
	lr, rt, err := x.d.http.Log(ctx, x.addr, x.token(ctx), xxl.LogParam{LogDateTim: r.logDate, LogID: r.logID, FromLineNum: from})
	if err != nil {
		return nil, callErr(err)
	}
	if rt.Code != xxl.CodeSuccess {
		return nil, status.Errorf(codes.FailedPrecondition, "XXL-JOB executor: %s", rt.Msg)
	}
	return &executorv1.LogResponse{FromLine: lr.FromLineNum, ToLine: lr.ToLineNum, Lines: xxl.SplitLines(lr.LogContent),
		IsEnd: lr.IsEnd || r.resultAt.Valid && lr.FromLineNum > lr.ToLineNum}, nil
}

// Seen implements ExecutorServiceClient for a takeover: which of the trigger ids this executor
// holds. A fire with an xxl_runs row was sent, or was about to be: its row is written before the
// /run call, so a replica killed in between leaves a row for a fire the executor never got. A row
// with a result or copied output is seen; for the others the executor is asked, as Received
// says, and a fire it certainly never got loses its row and is not seen, so that the takeover
// sends it again (under a new log id, to any executor). When the executor cannot tell, the fire
// counts as seen: it may hold it, and a fire is not risked twice.
func (x *xxlExecutor) Seen(ctx context.Context, in *executorv1.SeenRequest, _ ...grpc.CallOption) (*executorv1.SeenResponse, error) {
	rows, err := x.d.sent(ctx, x.addr, in.GetTriggerIds())
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "read the fires sent to %s: %v", x.addr, err)
	}
	token := x.token(ctx)
	var seen, lost []string
	byJob := map[int64][]*xxlRun{}
	for _, r := range rows {
		if r.resultAt.Valid || r.pulled > 0 {
			seen = append(seen, r.triggerID)
		} else {
			byJob[r.jobID] = append(byJob[r.jobID], r)
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, xxlParallel)
	for jobID, rs := range byJob {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			got := x.d.received(ctx, x.addr, token, jobID, rs)
			mu.Lock()
			defer mu.Unlock()
			for i, r := range rs {
				if got[i] {
					seen = append(seen, r.triggerID)
				} else {
					lost = append(lost, r.triggerID)
				}
			}
		}()
	}
	wg.Wait()
	if len(lost) > 0 {
		if err := x.d.release(ctx, lost); err != nil {
			return nil, status.Errorf(codes.Unavailable, "forget the fires %s never got: %v", x.addr, err)
		}
		x.d.log.Info("XXL-JOB executor never got fires recorded as sent (their sender stopped before its /run); they are sent again",
			"address", x.addr, "fires", len(lost))
	}
	return &executorv1.SeenResponse{SeenTriggerIds: seen}, nil
}

// received reports, for each of one job's fires recorded as sent to addr with no result yet,
// whether the executor may hold it. XXL-JOB's executor writes a run's log file when the run
// starts, and keeps queued runs in the job's thread: so a job whose thread is idle (/idleBeat)
// and a fire without a log file (/log, asked after) is a fire the executor never got; only one
// sent after the /idleBeat could still arrive, and a takeover asks once every sender of these
// fires is gone. Any doubt (an error, a busy job, a log file) answers true.
func (d *xxlDriver) received(ctx context.Context, addr, token string, jobID int64, rs []*xxlRun) []bool {
	got := make([]bool, len(rs))
	for i := range got {
		got[i] = true
	}
	cctx, cancel := context.WithTimeout(ctx, xxl.DefaultTimeout)
	defer cancel()
	rt, err := d.http.IdleBeat(cctx, addr, token, jobID)
	if err != nil || rt.Code != xxl.CodeSuccess {
		return got // busy, or no answer: it may hold them
	}
	for i, r := range rs {
		lr, rt, err := d.http.Log(cctx, addr, token, xxl.LogParam{LogDateTim: r.logDate, LogID: r.logID, FromLineNum: 1})
		got[i] = err != nil || rt.Code != xxl.CodeSuccess || !lr.IsEnd || lr.ToLineNum != 0
	}
	return got
}

// claim records the fires about to be sent to addr, in one statement, and returns the log id of
// each fire that had no row yet; the others were sent before.
func (d *xxlDriver) claim(ctx context.Context, addr string, trigs []*executorv1.Trigger) (map[string]int64, error) {
	out := make(map[string]int64, len(trigs))
	if len(trigs) == 0 {
		return out, nil
	}
	now := d.clk.Now().UnixMilli()
	var b strings.Builder
	b.WriteString(`INSERT INTO xxl_runs (trigger_id, job_id, group_id, address, log_date_time, shard, sent_at) VALUES `)
	args := make([]any, 0, 7*len(trigs))
	for i, t := range trigs {
		if i > 0 {
			b.WriteString(",")
		}
		n := len(args)
		fmt.Fprintf(&b, "($%d,$%d,$%d,$%d,$%d,$%d,$%d)", n+1, n+2, n+3, n+4, n+5, n+6, n+7)
		args = append(args, t.GetTriggerId(), t.GetJobId(), t.GetGroupId(), addr, t.GetScheduledUnixMs(), t.GetShardIndex(), now)
	}
	b.WriteString(` ON CONFLICT (trigger_id) DO NOTHING RETURNING trigger_id, log_id`)
	rows, err := d.db.QueryContext(ctx, d.db.Q(b.String()), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var logID int64
		if err := rows.Scan(&id, &logID); err != nil {
			return nil, err
		}
		out[id] = logID
	}
	return out, rows.Err()
}

// release forgets fires the executor did not take.
func (d *xxlDriver) release(ctx context.Context, ids []string) error {
	q, args := inList(`DELETE FROM xxl_runs WHERE result_at IS NULL AND trigger_id IN `, ids, 0)
	_, err := d.db.ExecContext(ctx, d.db.Q(q), args...)
	return err
}

// sent returns the rows of the ids among ids sent to addr.
func (d *xxlDriver) sent(ctx context.Context, addr string, ids []string) ([]*xxlRun, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	q, args := inList(`SELECT `+xxlRunColumns+` FROM xxl_runs WHERE address = $1 AND trigger_id IN `, ids, 1)
	rows, err := d.db.QueryContext(ctx, d.db.Q(q), append([]any{addr}, args...)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*xxlRun
	for rows.Next() {
		r, err := scanXxlRun(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// inList appends "($n+1,...)" for ids to prefix; the placeholders start after the first `from`.
func inList(prefix string, ids []string, from int) (string, []any) {
	var b strings.Builder
	b.WriteString(prefix)
	b.WriteString("(")
	args := make([]any, len(ids))
	for i, id := range ids {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "$%d", from+i+1)
		args[i] = id
	}
	b.WriteString(")")
	return b.String(), args
}

const xxlRunColumns = `trigger_id, log_id, job_id, group_id, address, log_date_time, sent_at, shard, result_at, pulled_line`

func scanXxlRun(sc interface{ Scan(...any) error }) (*xxlRun, error) {
	r := &xxlRun{}
	err := sc.Scan(&r.triggerID, &r.logID, &r.jobID, &r.groupID, &r.addr, &r.logDate, &r.sentAtMs, &r.shard, &r.resultAt, &r.pulled)
	return r, err
}

// runByTrigger reads a fire's row; nil when it has none.
func (d *xxlDriver) runByTrigger(ctx context.Context, id string) (*xxlRun, error) {
	r, err := scanXxlRun(d.db.QueryRowContext(ctx, d.db.Q(`SELECT `+xxlRunColumns+` FROM xxl_runs WHERE trigger_id = $1`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return r, err
}

// runsByLogID reads the rows of log ids; ids without one are absent.
func (d *xxlDriver) runsByLogID(ctx context.Context, ids []int64) (map[int64]*xxlRun, error) {
	out := make(map[int64]*xxlRun, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := d.db.QueryContext(ctx, `SELECT `+xxlRunColumns+` FROM xxl_runs WHERE log_id IN (`+joinIDs(ids)+`)`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanXxlRun(rows)
		if err != nil {
			return nil, err
		}
		out[r.logID] = r
	}
	return out, rows.Err()
}

// setPulled records that a fire's lines up to line are in logsvc.
func (d *xxlDriver) setPulled(ctx context.Context, id string, line int64) error {
	_, err := d.db.ExecContext(ctx, d.db.Q(`UPDATE xxl_runs SET pulled_line = $1 WHERE trigger_id = $2 AND pulled_line < $1`), line, id)
	return err
}

// finish marks a fire's result delivered; false when it was already.
func (d *xxlDriver) finish(ctx context.Context, id string) (bool, error) {
	res, err := d.db.ExecContext(ctx, d.db.Q(`UPDATE xxl_runs SET result_at = $1 WHERE trigger_id = $2 AND result_at IS NULL`), d.clk.Now().UnixMilli(), id)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// finished returns the ids among ids whose result has been delivered (by any replica).
func (d *xxlDriver) finished(ctx context.Context, ids []string) (map[string]bool, error) {
	out := map[string]bool{}
	if len(ids) == 0 {
		return out, nil
	}
	q, args := inList(`SELECT trigger_id FROM xxl_runs WHERE result_at IS NOT NULL AND trigger_id IN `, ids, 0)
	rows, err := d.db.QueryContext(ctx, d.db.Q(q), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out[id] = true
	}
	return out, rows.Err()
}
