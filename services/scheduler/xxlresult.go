package scheduler

import (
	"context"
	"crypto/subtle"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/xxl"
)

// An XXL-JOB run's output lives on its executor; logsvc gets it by /log: every XxlLogPoll while
// the run is live (the follower, for the runs this replica sent), and once more when the callback
// brings the result (XxlCallback, on any replica). Lines keep the executor's line numbers, which
// logsvc dedupes by (trigger id, line number), so the two never double a line.

// DefaultXxlLogPoll is Config.XxlLogPoll's default.
const DefaultXxlLogPoll = time.Second

// Bounds of the follower: runs polled at once, and how many polls in a row may fail before a
// run is given up (its executor is gone; logsvc's lost-run sweep ends the run).
const (
	xxlFollowParallel = 8
	xxlFollowFailures = 30
	maxXxlCallback    = 10_000
)

// liveRun is a run the follower polls.
type liveRun struct {
	triggerID     string
	logID         int64
	logDate       int64
	addr, token   string
	pulled, fails int64
}

// xxlFollower polls the live runs this replica sent for new lines.
type xxlFollower struct {
	d     *xxlDriver
	every time.Duration
	mu    sync.Mutex
	runs  map[string]*liveRun
	wake  chan struct{}
}

func newXxlFollower(d *xxlDriver, every time.Duration) *xxlFollower {
	if every <= 0 {
		every = DefaultXxlLogPoll
	}
	return &xxlFollower{d: d, every: every, runs: map[string]*liveRun{}, wake: make(chan struct{}, 1)}
}

// add starts following a run the executor accepted.
func (f *xxlFollower) add(r *liveRun) {
	f.mu.Lock()
	f.runs[r.triggerID] = r
	f.mu.Unlock()
}

// drop stops following a run (its result came).
func (f *xxlFollower) drop(id string) {
	f.mu.Lock()
	delete(f.runs, id)
	f.mu.Unlock()
}

// following reports how many runs are followed.
func (f *xxlFollower) following() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.runs)
}

// run polls every f.every until ctx ends.
func (f *xxlFollower) run(ctx context.Context) {
	t := time.NewTicker(f.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.round(ctx)
	}
}

// round pulls new lines of every followed run, xxlFollowParallel at a time, after dropping the
// runs whose result another replica delivered.
func (f *xxlFollower) round(ctx context.Context) {
	f.mu.Lock()
	runs := make([]*liveRun, 0, len(f.runs))
	ids := make([]string, 0, len(f.runs))
	for id, r := range f.runs {
		runs, ids = append(runs, r), append(ids, id)
	}
	f.mu.Unlock()
	if len(runs) == 0 {
		return
	}
	done := map[string]bool{}
	for chunk := range slices.Chunk(ids, 1000) {
		m, err := f.d.finished(ctx, chunk)
		if err != nil {
			f.d.log.Warn("XXL-JOB log follower cannot read which runs finished", "error", err)
			return
		}
		for id := range m {
			done[id] = true
		}
	}
	sem := make(chan struct{}, xxlFollowParallel)
	var wg sync.WaitGroup
	for _, r := range runs {
		if done[r.triggerID] {
			f.drop(r.triggerID)
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, xxl.DefaultTimeout)
			defer cancel()
			if _, err := f.d.pull(cctx, r); err != nil {
				if r.fails++; r.fails >= xxlFollowFailures {
					f.d.log.Warn("XXL-JOB log follower gives up a run whose executor does not answer", "trigger_id", r.triggerID,
						"address", r.addr, "error", err)
					f.drop(r.triggerID)
				}
				return
			}
			r.fails = 0
		}()
	}
	wg.Wait()
}

// pull copies a run's lines after r.pulled from its executor's /log into logsvc and returns how
// many it copied.
func (d *xxlDriver) pull(ctx context.Context, r *liveRun) (int, error) {
	lr, rt, err := d.http.Log(ctx, r.addr, r.token, xxl.LogParam{LogDateTim: r.logDate, LogID: r.logID, FromLineNum: r.pulled + 1})
	if err != nil {
		return 0, err
	}
	if rt.Code != xxl.CodeSuccess {
		return 0, fmt.Errorf("XXL-JOB executor %s /log: code %d: %s", r.addr, rt.Code, rt.Msg)
	}
	if lr.IsEnd && lr.ToLineNum == 0 { // no log file (yet, or any more)
		return 0, nil
	}
	lines := xxl.SplitLines(lr.LogContent)
	if len(lines) == 0 {
		return 0, nil
	}
	now := d.clk.Now().UnixMilli()
	var token string
	if d.delivery != nil {
		token = d.delivery.Sum(r.triggerID)
	}
	out := make([]*logsv1.LogLine, len(lines))
	for i, l := range lines {
		if len(l) > maxXxlLine {
			l = strings.ToValidUTF8(l[:maxXxlLine], "")
		}
		out[i] = &logsv1.LogLine{TriggerId: r.triggerID, LineNo: lr.FromLineNum + int64(i), UnixMs: now, Text: l, DeliveryToken: token}
	}
	for chunk := range slices.Chunk(out, 10_000) {
		if err := d.ingestLines(ctx, chunk); err != nil {
			return 0, err
		}
	}
	last := lr.FromLineNum + int64(len(lines)) - 1
	r.pulled = max(r.pulled, last)
	if err := d.setPulled(ctx, r.triggerID, last); err != nil {
		d.log.Warn("cannot record the XXL-JOB log lines copied; they are copied again", "trigger_id", r.triggerID, "error", err)
	}
	return len(lines), nil
}

// ingestLines sends one batch of lines to logsvc and waits for its acknowledgement.
func (d *xxlDriver) ingestLines(ctx context.Context, lines []*logsv1.LogLine) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := d.ingest.IngestLogLines(ctx)
	if err != nil {
		return fmt.Errorf("logsvc log lines: %w", err)
	}
	if err := st.Send(&logsv1.IngestLogLinesRequest{BatchId: 1, Lines: lines}); err != nil {
		return fmt.Errorf("logsvc log lines: %w", err)
	}
	if _, err := st.Recv(); err != nil {
		return fmt.Errorf("logsvc log lines: %w", err)
	}
	return st.CloseSend()
}

// ingestResult sends one final result to logsvc and waits for its acknowledgement (a run that
// had its final result already refuses it: the first result stays).
func (d *xxlDriver) ingestResult(ctx context.Context, res *logsv1.RunResult) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := d.ingest.IngestResults(ctx)
	if err != nil {
		return fmt.Errorf("logsvc results: %w", err)
	}
	if err := st.Send(&logsv1.IngestResultsRequest{BatchId: 1, Results: []*logsv1.RunResult{res}}); err != nil {
		return fmt.Errorf("logsvc results: %w", err)
	}
	if _, err := st.Recv(); err != nil {
		return fmt.Errorf("logsvc results: %w", err)
	}
	return st.CloseSend()
}

// xxlStatus maps a callback's handleCode and handleMsg to the run's final status.
func xxlStatus(code int32, msg string) logsv1.RunStatus {
	switch {
	case code == xxl.CodeSuccess:
		return logsv1.RunStatus_RUN_STATUS_SUCCESS
	case code == xxl.CodeTimeout:
		return logsv1.RunStatus_RUN_STATUS_TIMEOUT
	case xxl.KilledMessage(msg):
		return logsv1.RunStatus_RUN_STATUS_KILLED
	default:
		return logsv1.RunStatus_RUN_STATUS_FAIL
	}
}

// XxlCallback implements SchedulerService: each item whose log id names a fire sent to an
// XXL-JOB executor, and whose group's token the executor presented, becomes that fire's result
// in logsvc, after its log is pulled once more. A repeat (the result was delivered) is applied
// again as nothing. Items of groups whose token was not presented are refused (Unauthenticated,
// naming them) after the others are applied; the executor sends the list again.
func (s *Service) XxlCallback(ctx context.Context, req *schedulerv1.XxlCallbackRequest) (*schedulerv1.XxlCallbackResponse, error) {
	items := req.GetItems()
	if len(items) == 0 || len(items) > maxXxlCallback {
		return nil, status.Errorf(codes.InvalidArgument, "items: between 1 and %d, got %d", maxXxlCallback, len(items))
	}
	ids := make([]int64, 0, len(items))
	for _, it := range items {
		ids = append(ids, it.GetLogId())
	}
	runs, err := s.xxl.runsByLogID(ctx, ids)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "read the fires of the callback: %v", err)
	}
	resp := &schedulerv1.XxlCallbackResponse{}
	var refused []string
	tokens := map[int64]string{} // group → the token its executors present
	for _, it := range items {
		r := runs[it.GetLogId()]
		if r == nil {
			resp.UnknownLogIds = append(resp.UnknownLogIds, it.GetLogId())
			continue
		}
		want, ok := tokens[r.groupID]
		if !ok {
			want = s.xxl.fallback
			if g, err := s.groups.group(ctx, r.groupID); err == nil && g.GetAccessToken() != "" {
				want = g.GetAccessToken()
			}
			tokens[r.groupID] = want
		}
		if want != "" && subtle.ConstantTimeCompare([]byte(want), []byte(req.GetAccessToken())) != 1 {
			refused = append(refused, fmt.Sprintf("%d (group %d)", it.GetLogId(), r.groupID))
			continue
		}
		if err := s.applyXxlResult(ctx, r, it, want); err != nil {
			return nil, status.Errorf(codes.Unavailable, "log id %d: %v", it.GetLogId(), err)
		}
		resp.AppliedLogIds = append(resp.AppliedLogIds, it.GetLogId())
	}
	if len(refused) > 0 {
		return nil, status.Errorf(codes.Unauthenticated, "The access token is wrong for log ids %s (applied: %v, unknown: %v)",
			strings.Join(refused, ", "), resp.AppliedLogIds, resp.UnknownLogIds)
	}
	return resp, nil
}

// applyXxlResult delivers one callback item: the last lines, the result, then result_at. A
// fire whose result_at is set was delivered before: nothing is done.
func (s *Service) applyXxlResult(ctx context.Context, r *xxlRun, it *schedulerv1.XxlCallbackItem, token string) error {
	if r.resultAt.Valid {
		return nil
	}
	live := &liveRun{triggerID: r.triggerID, logID: r.logID, logDate: r.logDate, addr: r.addr, token: token, pulled: r.pulled}
	pctx, cancel := context.WithTimeout(ctx, xxl.DefaultTimeout)
	if _, err := s.xxl.pull(pctx, live); err != nil {
		s.log.Warn("the last XXL-JOB log lines could not be read; the run keeps what was copied", "trigger_id", r.triggerID,
			"address", r.addr, "error", err)
	}
	cancel()
	msg := it.GetHandleMsg()
	if len(msg) > maxXxlLine {
		msg = strings.ToValidUTF8(msg[:maxXxlLine], "")
	}
	res := &logsv1.RunResult{TriggerId: r.triggerID, JobId: r.jobID, Status: xxlStatus(it.GetHandleCode(), msg), Message: msg,
		StartUnixMs: r.sentAtMs, EndUnixMs: s.clk.Now().UnixMilli(), ExecutorAddress: r.addr}
	if s.delivery != nil {
		res.DeliveryToken = s.delivery.Sum(r.triggerID)
	}
	if err := s.xxl.ingestResult(ctx, res); err != nil {
		return err
	}
	if _, err := s.xxl.finish(ctx, r.triggerID); err != nil {
		return fmt.Errorf("record the result delivered: %w", err)
	}
	s.xxl.follow.drop(r.triggerID)
	return nil
}
