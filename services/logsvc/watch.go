package logsvc

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
)

// hub tells waiting streams that this process committed something they may want: a channel is
// closed on change and replaced, so a waiter takes the channel before reading the store and
// cannot miss a change that lands after its read.
type hub struct {
	mu          sync.Mutex
	completions chan struct{}
	runs        map[string]*runSignal // only runs somebody tails
}

type runSignal struct {
	ch   chan struct{}
	refs int
}

func newHub() *hub {
	return &hub{completions: make(chan struct{}), runs: map[string]*runSignal{}}
}

// completionsSignal returns a channel closed at the next new completion.
func (h *hub) completionsSignal() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.completions
}

func (h *hub) completionsChanged() {
	h.mu.Lock()
	defer h.mu.Unlock()
	close(h.completions)
	h.completions = make(chan struct{})
}

// watchRun registers interest in run id until release is called.
func (h *hub) watchRun(id string) (release func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.runs[id]
	if r == nil {
		r = &runSignal{ch: make(chan struct{})}
		h.runs[id] = r
	}
	r.refs++
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if r.refs--; r.refs == 0 {
			delete(h.runs, id)
		}
	}
}

// runSignal returns a channel closed at the next change to run id (watchRun must be held).
func (h *hub) runSignal(id string) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.runs[id].ch
}

// runsChanged wakes the tails of runs ids.
func (h *hub) runsChanged(ids []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.runs) == 0 {
		return
	}
	for _, id := range ids {
		if r := h.runs[id]; r != nil {
			close(r.ch)
			r.ch = make(chan struct{})
		}
	}
}

// wait blocks until signal fires, the fallback poll interval passes, or ctx ends.
func (s *Service) wait(ctx context.Context, signal <-chan struct{}) error {
	t := time.NewTimer(s.cfg.FallbackPoll)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-signal:
	case <-t.C:
	}
	return nil
}

// completionCursorHeader is the response header of WatchCompletions that carries the stream's
// starting cursor (the proto's documented contract).
const completionCursorHeader = "x-jobmesh-completion-cursor"

// WatchCompletions implements LogService. after_cursor 0 starts at the newest completion, so
// only runs ending after the call are sent (or at the oldest, with from_oldest). The response
// headers are sent once the starting cursor is fixed, and carry it (completionCursorHeader): a
// client that waits for them knows no later completion will be missed, and where the stream
// starts.
func (s *Service) WatchCompletions(req *logsv1.WatchCompletionsRequest, stream grpc.ServerStreamingServer[logsv1.WatchCompletionsResponse]) error {
	ctx := stream.Context()
	cursor := req.GetAfterCursor()
	if cursor < 0 {
		return apierr.Field("after_cursor", "must not be negative, got %d", cursor)
	}
	if cursor == 0 && !req.GetFromOldest() {
		if err := s.store.QueryRowContext(ctx, `SELECT COALESCE(MAX(cursor), 0) FROM completions`).Scan(&cursor); err != nil {
			return fmt.Errorf("read newest completion: %w", err)
		}
	}
	if err := stream.SendHeader(metadata.Pairs(completionCursorHeader, strconv.FormatInt(cursor, 10))); err != nil {
		return err
	}
	for {
		signal := s.hub.completionsSignal()
		cs, err := s.completionsAfter(ctx, cursor)
		if err != nil {
			return err
		}
		if len(cs) > 0 {
			if err := stream.Send(&logsv1.WatchCompletionsResponse{Completions: cs}); err != nil {
				return err
			}
			cursor = cs[len(cs)-1].GetCursor()
			if len(cs) == s.cfg.WatchBatch {
				continue // more may be waiting
			}
		}
		if err := s.wait(ctx, signal); err != nil {
			return nil // the client went away
		}
	}
}

func (s *Service) completionsAfter(ctx context.Context, cursor int64) ([]*logsv1.Completion, error) {
	rows, err := s.store.QueryContext(ctx, s.store.Q(`SELECT cursor, trigger_id, job_id, status, trigger_outcome, attempt,
			shard_index, shard_total, scheduled_ms, end_ms, trigger_type, params, replaces_status, outputs
		FROM completions WHERE cursor > $1 ORDER BY cursor LIMIT $2`), cursor, s.cfg.WatchBatch)
	if err != nil {
		return nil, fmt.Errorf("read completions: %w", err)
	}
	defer rows.Close()
	var out []*logsv1.Completion
	for rows.Next() {
		c := &logsv1.Completion{}
		var (
			st, outcome, tt, replaces int32
			outputs                   string
		)
		if err := rows.Scan(&c.Cursor, &c.TriggerId, &c.JobId, &st, &outcome, &c.Attempt, &c.ShardIndex, &c.ShardTotal,
			&c.ScheduledUnixMs, &c.EndUnixMs, &tt, &c.Params, &replaces, &outputs); err != nil {
			return nil, fmt.Errorf("read completions: %w", err)
		}
		c.Outputs = decodeOutputs(outputs)
		c.Status, c.TriggerOutcome, c.TriggerType = logsv1.RunStatus(st), logsv1.TriggerOutcome(outcome), schedulerv1.TriggerType(tt)
		c.ReplacesStatus = logsv1.RunStatus(replaces)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read completions: %w", err)
	}
	return out, nil
}

// TailRun implements LogService: the lines from from_line, then new ones as they are stored;
// the stream ends once the run has ended and every line is sent, and its last message carries
// the final status. The first message is sent at once, even without lines.
func (s *Service) TailRun(req *logsv1.TailRunRequest, stream grpc.ServerStreamingServer[logsv1.TailRunResponse]) error {
	ctx := stream.Context()
	id := req.GetId()
	if id == "" {
		return apierr.Field("id", "required")
	}
	next := req.GetFromLine()
	if next < 0 {
		return apierr.Field("from_line", "must not be negative, got %d", next)
	}
	next = max(next, 1)
	release := s.hub.watchRun(id)
	defer release()
	first := true
	for {
		signal := s.hub.runSignal(id)
		// Status before lines: when the run had ended, every line it wrote is already stored
		// by the time it is read.
		st, found, err := s.runStatus(ctx, id)
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("run %q: %w", id, apierr.ErrRunNotFound)
		}
		lines, more, err := s.readLines(ctx, id, next, s.cfg.TailBatch)
		if err != nil {
			return err
		}
		if len(lines) > 0 {
			next = lines[len(lines)-1].GetLineNo() + 1
		}
		ended := final(int32(st)) && !more
		if first || len(lines) > 0 || ended {
			if err := stream.Send(&logsv1.TailRunResponse{Lines: lines, Status: st}); err != nil {
				return err
			}
		}
		if ended {
			return nil
		}
		first = false
		if more {
			continue
		}
		if err := s.wait(ctx, signal); err != nil {
			return nil // the client went away
		}
	}
}
