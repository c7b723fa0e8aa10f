package logsvc

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync"
	"time"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	"github.com/jobmesh/jobmesh/internal/db"
)

// ExecutorView tells which executors are online: the registry's live view.
type ExecutorView interface {
	// Online reports whether an executor serves address now. ok is false while the view is not
	// known (not loaded yet, or its watch is broken): then no run is declared lost.
	Online(address string) (online, ok bool)
	// ExecutorCount is how many executors are online, for the dashboard.
	ExecutorCount() int
}

// RegistryView is an ExecutorView that follows the registry's WatchExecutors stream: a snapshot,
// then every change, so asking about an address costs no RPC and no query.
type RegistryView struct {
	client registryv1.RegistryServiceClient
	log    *slog.Logger

	mu    sync.Mutex
	execs map[string]string // app/instance → address
	addrs map[string]int    // address → instances serving it
	ready bool
	// changed is closed and replaced at every applied event (tests wait on it).
	changed chan struct{}

	life    sync.Mutex
	started bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// NewRegistryView returns a view over the registry's client; Start makes it follow.
func NewRegistryView(client registryv1.RegistryServiceClient, log *slog.Logger) *RegistryView {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &RegistryView{client: client, log: log, execs: map[string]string{}, addrs: map[string]int{}, changed: make(chan struct{})}
}

// Start follows the registry until Stop, reconnecting after errors.
func (v *RegistryView) Start(ctx context.Context) error {
	v.life.Lock()
	defer v.life.Unlock()
	if v.started {
		return fmt.Errorf("logsvc: registry view already started")
	}
	v.started = true
	ctx, v.cancel = context.WithCancel(context.WithoutCancel(ctx))
	v.done = make(chan struct{})
	go func() {
		defer close(v.done)
		v.run(ctx)
	}()
	return nil
}

// Stop ends the watch and waits for it. It is idempotent.
func (v *RegistryView) Stop() {
	v.life.Lock()
	cancel, done := v.cancel, v.done
	v.cancel = nil
	v.life.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (v *RegistryView) run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := v.follow(ctx)
		v.setReady(false)
		if ctx.Err() != nil {
			return
		}
		v.log.Warn("executor watch broken; lost-run detection paused until it resumes", "error", err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (v *RegistryView) follow(ctx context.Context) error {
	st, err := v.client.WatchExecutors(ctx, &registryv1.WatchExecutorsRequest{})
	if err != nil {
		return err
	}
	for {
		ev, err := st.Recv()
		if err != nil {
			return err
		}
		v.apply(ev)
	}
}

func (v *RegistryView) apply(ev *registryv1.WatchExecutorsResponse) {
	v.mu.Lock()
	defer v.mu.Unlock()
	switch ev.GetType() {
	case registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_SNAPSHOT:
		v.execs, v.addrs = map[string]string{}, map[string]int{}
		v.ready = true
	case registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_PUT, registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_DELETE:
	default:
		return
	}
	for _, e := range ev.GetExecutors() {
		key := e.GetAppName() + "/" + e.GetInstanceId()
		if old, ok := v.execs[key]; ok {
			delete(v.execs, key)
			if v.addrs[old]--; v.addrs[old] <= 0 {
				delete(v.addrs, old)
			}
		}
		if ev.GetType() != registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_DELETE {
			v.execs[key] = e.GetAddress()
			v.addrs[e.GetAddress()]++
		}
	}
	close(v.changed)
	v.changed = make(chan struct{})
}

func (v *RegistryView) setReady(ready bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.ready = ready
}

// Online implements ExecutorView.
func (v *RegistryView) Online(address string) (online, ok bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.addrs[address] > 0, v.ready
}

// ExecutorCount implements ExecutorView.
func (v *RegistryView) ExecutorCount() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.execs)
}

// changes returns a channel closed at the next applied event.
func (v *RegistryView) changes() <-chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.changed
}

// sweepLost marks failed every run still RUNNING LostAfter after it was triggered whose executor
// has left the registry (XXL-JOB's lost-job rule). It reads only running rows (runs_running)
// and asks the in-memory view about their addresses: no NOT IN over the registry. It returns
// how many runs it marked.
func (s *Service) sweepLost(ctx context.Context) (int, error) {
	view := s.cfg.Executors
	if view == nil {
		return 0, nil
	}
	if _, ok := view.Online(""); !ok {
		return 0, nil // the view is not known: nobody can be called lost
	}
	now := s.now()
	cutoff := now.Add(-s.cfg.LostAfter).UnixMilli()
	type cand struct{ id, addr string }
	var lost []cand
	afterSched, afterSeq := int64(-1<<62), int64(0)
	for {
		rows, err := s.store.QueryContext(ctx, s.store.Q(fmt.Sprintf(`SELECT scheduled_ms, seq, trigger_id, executor_address, trigger_ms
			FROM runs WHERE status = %d AND scheduled_ms <= $1 AND (scheduled_ms, seq) > ($2, $3)
			ORDER BY scheduled_ms, seq LIMIT $4`, statusRunning)), cutoff, afterSched, afterSeq, deleteBatch)
		if err != nil {
			return 0, fmt.Errorf("find running runs: %w", err)
		}
		n := 0
		for rows.Next() {
			var c cand
			var trig int64
			if err := rows.Scan(&afterSched, &afterSeq, &c.id, &c.addr, &trig); err != nil {
				rows.Close()
				return 0, fmt.Errorf("find running runs: %w", err)
			}
			n++
			if trig > cutoff {
				continue // dispatched later than scheduled (a retry, a slow trigger): not yet
			}
			online, ok := view.Online(c.addr)
			if !ok {
				rows.Close()
				return 0, nil
			}
			if !online || c.addr == "" {
				lost = append(lost, c)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, fmt.Errorf("find running runs: %w", err)
		}
		if n < deleteBatch {
			break
		}
	}
	if len(lost) == 0 {
		return 0, nil
	}
	marked := 0
	for _, chunk := range chunks(lost, rowsPerStatement) {
		var ids []string
		err := s.inTx(ctx, func(tx *db.Tx) error {
			ids = ids[:0]
			var done []*run
			for _, c := range chunk {
				msg := fmt.Sprintf("lost: still running %v after it was triggered, and its executor %q has left the registry", s.cfg.LostAfter, c.addr)
				// Guarded by status: a result that landed since the scan wins.
				r, err := scanIngest(tx.QueryRowContext(ctx, s.store.Q(`UPDATE runs SET status = $1, end_ms = $2,
						handle_message = CASE WHEN handle_message = '' THEN $3 ELSE handle_message || ' | ' || $3 END
					WHERE trigger_id = $4 AND status = $5 RETURNING `+ingestColumns),
					statusFail, now.UnixMilli(), msg, c.id, statusRunning))
				if err == sql.ErrNoRows {
					continue
				}
				if err != nil {
					return fmt.Errorf("mark run %q lost: %w", c.id, err)
				}
				ids = append(ids, c.id)
				if r.outcome != outcomeNone {
					done = append(done, &r) // without its record it waits, like a result
				}
			}
			return s.complete(ctx, tx, done, now.UnixMilli())
		})
		if err != nil {
			return marked, err
		}
		marked += len(ids)
		for _, id := range ids {
			s.log.WarnContext(ctx, "run lost: marked failed", "trigger_id", id)
		}
		s.hub.runsChanged(ids)
		s.hub.completionsChanged()
	}
	return marked, nil
}

// sweepUnrecorded completes the runs that ended RecordWait ago or more without their trigger
// record ever arriving (the scheduler died before sending it): the scheduler then still gets
// their completion, so a FIX_DELAY job does not wait forever. The run keeps what its result
// said; a record that arrives later fills the trigger fields without completing it again.
func (s *Service) sweepUnrecorded(ctx context.Context) (int, error) {
	now := s.now()
	cutoff := now.Add(-s.cfg.RecordWait).UnixMilli()
	total := 0
	for {
		var ids []string
		err := s.inTx(ctx, func(tx *db.Tx) error {
			ids = ids[:0]
			// The literal predicate matches runs_unrecorded's.
			rows, err := tx.QueryContext(ctx, s.store.Q(fmt.Sprintf(`SELECT trigger_id FROM runs
				WHERE trigger_outcome = %d AND status > %d AND end_ms <= $1 ORDER BY end_ms LIMIT $2`, outcomeNone, statusRunning)),
				cutoff, rowsPerStatement)
			if err != nil {
				return fmt.Errorf("find runs without a record: %w", err)
			}
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return fmt.Errorf("find runs without a record: %w", err)
				}
				ids = append(ids, id)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return fmt.Errorf("find runs without a record: %w", err)
			}
			if len(ids) == 0 {
				return nil
			}
			// It reached an executor: the result says so. A successful run needs no alarm.
			q := `UPDATE runs SET trigger_outcome = ` + s.ph(1) + `, trigger_message = ` + s.ph(2) + `,
					alarm_status = ` + fmt.Sprintf(`CASE WHEN status = %d AND alarm_status = %d THEN %d ELSE alarm_status END`,
				statusSuccess, alarmPending, alarmNotNeeded) + `
				WHERE trigger_outcome = ` + s.ph(3) + ` AND trigger_id IN ` + s.in(len(ids), 4)
			args := append([]any{outcomeOK, "the scheduler's trigger record never arrived; completed from the executor's result", outcomeNone}, anys(ids)...)
			rows, err = tx.QueryContext(ctx, q+` RETURNING `+ingestColumns, args...)
			if err != nil {
				return fmt.Errorf("complete runs without a record: %w", err)
			}
			var done []*run
			for rows.Next() {
				r, err := scanIngest(rows)
				if err != nil {
					rows.Close()
					return fmt.Errorf("complete runs without a record: %w", err)
				}
				done = append(done, &r)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return fmt.Errorf("complete runs without a record: %w", err)
			}
			return s.complete(ctx, tx, done, now.UnixMilli())
		})
		if err != nil {
			return total, err
		}
		total += len(ids)
		if len(ids) > 0 {
			s.log.WarnContext(ctx, "completed runs whose trigger record never arrived", "runs", len(ids))
			s.hub.runsChanged(ids)
			s.hub.completionsChanged()
		}
		if len(ids) < rowsPerStatement {
			return total, nil
		}
	}
}
