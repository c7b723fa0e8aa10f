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

// jobLookups reads jobs through Config.Jobs for one sweep, each at most once: their group and
// timeout. A job that cannot be read is unknown (zero JobInfo, ok false), and said so once.
type jobLookups struct {
	s     *Service
	known map[int64]JobInfo
	bad   map[int64]bool
}

func (s *Service) lookups() *jobLookups {
	return &jobLookups{s: s, known: map[int64]JobInfo{}, bad: map[int64]bool{}}
}

// jobLookupTimeout bounds one job lookup of a sweep.
const jobLookupTimeout = 5 * time.Second

func (l *jobLookups) job(ctx context.Context, id int64) (JobInfo, bool) {
	if j, ok := l.known[id]; ok {
		return j, true
	}
	if l.s.cfg.Jobs == nil || id <= 0 || l.bad[id] {
		return JobInfo{}, false
	}
	cctx, cancel := context.WithTimeout(ctx, jobLookupTimeout)
	j, err := l.s.cfg.Jobs.Job(cctx, id)
	cancel()
	if err != nil {
		l.bad[id] = true
		l.s.sweepJobLog.Log(ctx, "job_id", id, "error", err)
		return JobInfo{}, false
	}
	l.known[id] = j
	return j, true
}

// lostCand is a running run the lost-run sweep looks at.
type lostCand struct {
	id, addr string
	job, at  int64 // at: when it was triggered (scheduled, when the record is missing)
	unknown  bool  // its dispatch's answer never came, and its executor never reported it
	departed bool  // its executor has left the registry
}

// sweepLost decides the runs still RUNNING LostAfter plus their job's timeout (when logsvc can
// read it) after they were triggered, when the executor's word cannot come any more:
//   - a run its executor reported, whose executor has left the registry, fails as lost
//     (XXL-JOB's lost-job rule, with a threshold near the executor TTL rather than 10 minutes);
//   - a run whose dispatch's answer never came (trigger outcome UNKNOWN) and that no executor
//     reported fails as not delivered (outcome FAILED), whether its executor left or, still
//     online, said nothing in all that time.
//
// Either way the executor's report, should it come after all, reopens the run (merge.go). It
// reads only running rows (runs_running) and asks the in-memory view about their addresses:
// no NOT IN over the registry. Without a registry view (or while it is not known) only UNKNOWN
// runs are decided. It returns how many runs it decided.
func (s *Service) sweepLost(ctx context.Context) (int, error) {
	view := s.cfg.Executors
	viewKnown := false
	if view != nil {
		_, viewKnown = view.Online("")
	}
	now := s.now()
	cutoff := now.Add(-s.cfg.LostAfter).UnixMilli()
	var cands []lostCand
	afterSched, afterSeq := int64(-1<<62), int64(0)
	for {
		rows, err := s.store.QueryContext(ctx, s.store.Q(fmt.Sprintf(`SELECT scheduled_ms, seq, trigger_id, executor_address, trigger_ms,
				job_id, trigger_outcome
			FROM runs WHERE status = %d AND scheduled_ms <= $1 AND (scheduled_ms, seq) > ($2, $3)
			ORDER BY scheduled_ms, seq LIMIT $4`, statusRunning)), cutoff, afterSched, afterSeq, deleteBatch)
		if err != nil {
			return 0, fmt.Errorf("find running runs: %w", err)
		}
		n := 0
		for rows.Next() {
			var c lostCand
			var trig int64
			var outcome int32
			if err := rows.Scan(&afterSched, &afterSeq, &c.id, &c.addr, &trig, &c.job, &outcome); err != nil {
				rows.Close()
				return 0, fmt.Errorf("find running runs: %w", err)
			}
			n++
			if c.at = trig; c.at == 0 {
				c.at = afterSched
			}
			if c.at > cutoff {
				continue // dispatched later than scheduled (a retry, a slow trigger): not yet
			}
			c.unknown = outcome == outcomeUnknown
			if viewKnown {
				online, ok := view.Online(c.addr)
				c.departed = ok && (!online || c.addr == "")
				viewKnown = ok
			}
			if c.unknown || c.departed {
				cands = append(cands, c)
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
	// Each run's own threshold: LostAfter plus its job's timeout, when known.
	jobs := s.lookups()
	limits := map[string]time.Duration{}
	due := cands[:0]
	for _, c := range cands {
		limit := s.cfg.LostAfter
		if j, ok := jobs.job(ctx, c.job); ok && j.Timeout > 0 {
			limit += j.Timeout
		}
		if now.Sub(time.UnixMilli(c.at)) >= limit {
			limits[c.id] = limit
			due = append(due, c)
		}
	}
	decided := 0
	for _, chunk := range chunks(due, rowsPerStatement) {
		var ids []string
		err := s.inTx(ctx, func(tx *db.Tx) error {
			ids = ids[:0]
			var done []completion
			for _, c := range chunk {
				r, err := s.decideLost(ctx, tx, c, limits[c.id], now)
				if err == sql.ErrNoRows {
					continue // a report or a record decided it since the scan
				}
				if err != nil {
					return fmt.Errorf("mark run %q lost: %w", c.id, err)
				}
				ids = append(ids, c.id)
				before := r
				before.status, before.outcome = statusRunning, r.outcome
				if c.unknown {
					before.outcome, before.judged = outcomeUnknown, judgedNo
				} else if r.judged != judgedReopened {
					before.judged = judgedNo
				}
				if p, ok := publish(&before, &r); ok { // without its record it waits, like a result
					done = append(done, p)
				}
			}
			return s.complete(ctx, tx, nil, done, now.UnixMilli())
		})
		if err != nil {
			return decided, err
		}
		decided += len(ids)
		for _, id := range ids {
			s.log.WarnContext(ctx, "run decided by the lost-run sweep: marked failed", "trigger_id", id)
		}
		s.hub.runsChanged(ids)
		s.hub.completionsChanged()
	}
	return decided, nil
}

// decideLost fails one candidate of sweepLost, guarded by its state: a report or record that
// landed since the scan wins (sql.ErrNoRows). It returns the row as written.
func (s *Service) decideLost(ctx context.Context, tx *db.Tx, c lostCand, limit time.Duration, now time.Time) (run, error) {
	if c.unknown {
		msg := fmt.Sprintf("not delivered: the dispatch's answer never came, and executor %q reported nothing within %v after the trigger", c.addr, limit)
		if c.departed {
			msg = fmt.Sprintf("not delivered: the dispatch's answer never came, and executor %q left the registry without reporting the fire within %v after the trigger", c.addr, limit)
		}
		return scanIngest(tx.QueryRowContext(ctx, s.store.Q(`UPDATE runs SET status = $1, trigger_outcome = $2, end_ms = $3,
				handle_message = $4, judged = $5
			WHERE trigger_id = $6 AND status = $7 AND trigger_outcome = $8 RETURNING `+ingestColumns),
			statusFail, outcomeFailed, now.UnixMilli(), msg+"; the executor's report, should it come, still decides the run", judgedByLogsvc,
			c.id, statusRunning, outcomeUnknown))
	}
	msg := fmt.Sprintf("lost: still running %v after it was triggered, and its executor %q has left the registry", limit, c.addr)
	return scanIngest(tx.QueryRowContext(ctx, s.store.Q(`UPDATE runs SET status = $1, end_ms = $2,
			handle_message = CASE WHEN handle_message = '' THEN $3 ELSE handle_message || ' | ' || $3 END,
			judged = CASE WHEN judged = $4 THEN $5 ELSE judged END
		WHERE trigger_id = $6 AND status = $7 AND trigger_outcome <> $8 RETURNING `+ingestColumns),
		statusFail, now.UnixMilli(), msg, judgedNo, judgedByLogsvc, c.id, statusRunning, outcomeUnknown))
}

// unrecordedMessage is the trigger message of a run completed without its trigger record.
const unrecordedMessage = "the scheduler's trigger record never arrived: completed from the executor's result, " +
	"with the job, scheduled time, shard and attempt its trigger id names and the job's executor group"

// groupUnrecorded gives the ended runs without a trigger record and without a group (the
// oldest rowsPerStatement of them) their job's executor group, so that the console and the
// reports place them while they wait for their record.
func (s *Service) groupUnrecorded(ctx context.Context, jobs *jobLookups) error {
	// The literal predicate matches runs_unrecorded's.
	rows, err := s.store.QueryContext(ctx, s.store.Q(fmt.Sprintf(`SELECT trigger_id, job_id FROM runs
		WHERE trigger_outcome = %d AND status > %d AND group_id = 0 ORDER BY end_ms LIMIT $1`, outcomeNone, statusRunning)),
		rowsPerStatement)
	if err != nil {
		return fmt.Errorf("find runs without a record or a group: %w", err)
	}
	byGroup := map[int64][]string{}
	var ids []string
	for rows.Next() {
		var (
			id  string
			job int64
		)
		if err := rows.Scan(&id, &job); err != nil {
			rows.Close()
			return fmt.Errorf("find runs without a record or a group: %w", err)
		}
		if j, ok := jobs.job(ctx, job); ok && j.GroupID != 0 {
			byGroup[j.GroupID] = append(byGroup[j.GroupID], id)
			ids = append(ids, id)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("find runs without a record or a group: %w", err)
	}
	if len(ids) == 0 {
		return nil
	}
	if err := s.inTx(ctx, func(tx *db.Tx) error { return s.setGroups(ctx, tx, byGroup) }); err != nil {
		return err
	}
	s.hub.runsChanged(ids)
	return nil
}

// setGroups sets the group of runs still without a record and a group: group id → trigger ids.
func (s *Service) setGroups(ctx context.Context, tx *db.Tx, byGroup map[int64][]string) error {
	for g, gids := range byGroup {
		q := `UPDATE runs SET group_id = ` + s.ph(1) + ` WHERE group_id = 0 AND trigger_outcome = ` + s.ph(2) +
			` AND trigger_id IN ` + s.in(len(gids), 3)
		if _, err := tx.ExecContext(ctx, q, append([]any{g, outcomeNone}, anys(gids)...)...); err != nil {
			return fmt.Errorf("fill the group of runs without a record: %w", err)
		}
	}
	return nil
}

// sweepUnrecorded completes the runs that ended RecordWait ago or more without their trigger
// record ever arriving (the scheduler died before sending it): the scheduler then still gets
// their completion, so a FIX_DELAY job does not wait forever. The run keeps what its result
// said and what its trigger id names (merge.go: fromID), and takes its job's executor group
// (when logsvc can read the job) at the first sweep after it ended, not only when it is
// completed; a record that arrives later fills the trigger fields without completing it again.
func (s *Service) sweepUnrecorded(ctx context.Context) (int, error) {
	now := s.now()
	cutoff := now.Add(-s.cfg.RecordWait).UnixMilli()
	jobs := s.lookups()
	if err := s.groupUnrecorded(ctx, jobs); err != nil {
		return 0, err
	}
	total := 0
	for {
		type cand struct {
			id         string
			job, group int64
		}
		var cands []cand
		// The literal predicate matches runs_unrecorded's.
		rows, err := s.store.QueryContext(ctx, s.store.Q(fmt.Sprintf(`SELECT trigger_id, job_id, group_id FROM runs
			WHERE trigger_outcome = %d AND status > %d AND end_ms <= $1 ORDER BY end_ms LIMIT $2`, outcomeNone, statusRunning)),
			cutoff, rowsPerStatement)
		if err != nil {
			return total, fmt.Errorf("find runs without a record: %w", err)
		}
		for rows.Next() {
			var c cand
			if err := rows.Scan(&c.id, &c.job, &c.group); err != nil {
				rows.Close()
				return total, fmt.Errorf("find runs without a record: %w", err)
			}
			cands = append(cands, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return total, fmt.Errorf("find runs without a record: %w", err)
		}
		if len(cands) == 0 {
			return total, nil
		}
		ids := make([]string, len(cands))
		byGroup := map[int64][]string{} // the runs to give their job's group
		for i, c := range cands {
			ids[i] = c.id
			if c.group != 0 {
				continue
			}
			if j, ok := jobs.job(ctx, c.job); ok && j.GroupID != 0 {
				byGroup[j.GroupID] = append(byGroup[j.GroupID], c.id)
			}
		}
		var completed []string
		err = s.inTx(ctx, func(tx *db.Tx) error {
			completed = completed[:0]
			if err := s.setGroups(ctx, tx, byGroup); err != nil {
				return err
			}
			// It reached an executor: the result says so. A successful run needs no alarm.
			q := `UPDATE runs SET trigger_outcome = ` + s.ph(1) + `, trigger_message = ` + s.ph(2) + `,
					alarm_status = ` + fmt.Sprintf(`CASE WHEN status = %d AND alarm_status = %d THEN %d ELSE alarm_status END`,
				statusSuccess, alarmPending, alarmNotNeeded) + `
				WHERE trigger_outcome = ` + s.ph(3) + ` AND status > ` + s.ph(4) + ` AND trigger_id IN ` + s.in(len(ids), 5)
			args := append([]any{outcomeOK, unrecordedMessage, outcomeNone, statusRunning}, anys(ids)...)
			rows, err := tx.QueryContext(ctx, q+` RETURNING `+ingestColumns, args...)
			if err != nil {
				return fmt.Errorf("complete runs without a record: %w", err)
			}
			var done []completion
			for rows.Next() {
				r, err := scanIngest(rows)
				if err != nil {
					rows.Close()
					return fmt.Errorf("complete runs without a record: %w", err)
				}
				before := r
				before.outcome = outcomeNone
				if p, ok := publish(&before, &r); ok {
					done = append(done, p)
				}
				completed = append(completed, r.id)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return fmt.Errorf("complete runs without a record: %w", err)
			}
			return s.complete(ctx, tx, nil, done, now.UnixMilli())
		})
		if err != nil {
			return total, err
		}
		total += len(completed)
		if len(completed) > 0 {
			s.log.WarnContext(ctx, "completed runs whose trigger record never arrived", "runs", len(completed))
			s.hub.runsChanged(completed)
			s.hub.completionsChanged()
		}
		if len(cands) < rowsPerStatement {
			return total, nil
		}
	}
}
