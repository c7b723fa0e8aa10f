// Package logsvc is the execution-log service: it stores what happens to every fire (the
// scheduler's trigger records, the executors' results and output lines), answers the UI's
// queries about runs, follows a run's output live, and publishes every run that ends so the
// scheduler leader can retry, fire child jobs and plan FIX_DELAY. Ingestion is idempotent by
// trigger id, so at-least-once senders get exactly-once storage.
package logsvc

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/grpc"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/lograte"
	"github.com/jobmesh/jobmesh/internal/seal"
)

//go:embed migrations
var migrations embed.FS

// MigrationsFS returns the logs schema's goose migrations, a folder per dialect ("postgres",
// "sqlite"), ready for db.DB.Migrate.
func MigrationsFS() fs.FS {
	sub, _ := fs.Sub(migrations, "migrations")
	return sub
}

// Killer reaches the scheduler to kill a run on its executor (SchedulerService.KillTrigger):
// logsvc knows where a run is, the scheduler owns the connections to executors.
type Killer interface {
	KillTrigger(ctx context.Context, triggerID string, jobID int64, address string) (killed bool, msg string, err error)
}

// DefaultLostAfter is Config.LostAfter's default: the registry's default executor TTL (10 s: an
// executor is out of the registry that long after its last heartbeat) and 20 s more for an
// executor's spooled reports to reach logsvc. XXL-JOB waits 10 minutes; a lost run's retry
// waits as long.
const DefaultLostAfter = 30 * time.Second

// Config tunes the service; the zero value is ready to use.
type Config struct {
	// Logger receives the service's logs; nil discards them.
	Logger *slog.Logger
	// WatchBatch caps the completions in one WatchCompletions message; 0 means 500.
	WatchBatch int
	// TailBatch caps the lines in one TailRun message; 0 means 1000.
	TailBatch int
	// FallbackPoll is how often a completion watch or a tail re-reads the store when no signal
	// came from this process's writers, to see writes made through another replica; 0 means 1 s.
	FallbackPoll time.Duration
	// Retention deletes runs scheduled longer ago than this, once at Start and then daily
	// (XXL-JOB's logretentiondays); 0 means 30 days, negative keeps everything.
	Retention time.Duration
	// Executors is the registry's live view (a RegistryView); nil turns off lost-run detection
	// and the dashboard's executor count.
	Executors ExecutorView
	// LostAfter is how long after its trigger, beyond its job's timeout (when the job has one and
	// Jobs can read it), a run still RUNNING is decided without the executor's word: failed as
	// lost when its executor has left the registry, or as not delivered when its dispatch's
	// answer never came (trigger outcome UNKNOWN) and no executor reported it. 0 means
	// DefaultLostAfter. The executor's report, should it come later, still decides the run.
	LostAfter time.Duration
	// RecordWait is how long a run that ended waits for its trigger record before it is
	// completed without it; 0 means 10 minutes.
	RecordWait time.Duration
	// SweepInterval is how often lost runs and runs without a record are looked for; 0 means
	// 10 seconds.
	SweepInterval time.Duration
	// Jobs reads jobs from the scheduler (SchedulerJobs): alarm emails and names, and the
	// dashboard's job count. nil sends alarms without them.
	Jobs Jobs
	// Workflows counts workflow instances in the scheduler (SchedulerWorkflows), for reports
	// and the dashboard. nil leaves them out.
	Workflows Workflows
	// AlarmChannels deliver failure alarms (EmailChannel, WebhookChannel, or any other). With
	// none, failed runs are marked NOT_NEEDED.
	AlarmChannels []AlarmChannel
	// MaxQueuedItems caps the items (records, results, lines) of the ingest batches received and
	// not yet committed, across all streams; a stream whose batch must wait reads nothing more,
	// so a slow store pushes back on senders through gRPC flow control instead of filling
	// memory. 0 means 50,000.
	MaxQueuedItems int
	// DeliverySecret is the secret fires' delivery tokens are sealed with (the services' internal
	// token; scheduler.Config.DeliverySecret): an executor's results and lines are stored only
	// when they carry their fire's delivery token, which the scheduler sends only to the
	// executor it dispatched the fire to. Empty refuses every executor's delivery.
	DeliverySecret string
	// Executor identifies a call made with an executor group's credential (auth.ExecutorOf);
	// its deliveries are checked as DeliverySecret says. Calls it does not identify come from
	// services and are trusted (the guard lets nobody else deliver). Nil identifies none.
	Executor func(ctx context.Context) (groupID int64, app string, ok bool)
}

func (c *Config) validate() error {
	switch {
	case c.WatchBatch < 0:
		return fmt.Errorf("logsvc: watch batch %d: must not be negative", c.WatchBatch)
	case c.TailBatch < 0:
		return fmt.Errorf("logsvc: tail batch %d: must not be negative", c.TailBatch)
	case c.FallbackPoll < 0:
		return fmt.Errorf("logsvc: fallback poll %v: must not be negative", c.FallbackPoll)
	case c.Retention > 0 && c.Retention < 24*time.Hour:
		return fmt.Errorf("logsvc: retention %v: at least 24h (negative disables it)", c.Retention)
	case c.LostAfter < 0:
		return fmt.Errorf("logsvc: lost after %v: must not be negative", c.LostAfter)
	case c.RecordWait < 0:
		return fmt.Errorf("logsvc: record wait %v: must not be negative", c.RecordWait)
	case c.SweepInterval < 0:
		return fmt.Errorf("logsvc: sweep interval %v: must not be negative", c.SweepInterval)
	case c.MaxQueuedItems < 0:
		return fmt.Errorf("logsvc: max queued items %d: must not be negative", c.MaxQueuedItems)
	}
	if c.LostAfter == 0 {
		c.LostAfter = DefaultLostAfter
	}
	if c.RecordWait == 0 {
		c.RecordWait = 10 * time.Minute
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = 10 * time.Second
	}
	if c.MaxQueuedItems == 0 {
		c.MaxQueuedItems = 50000
	}
	if c.WatchBatch == 0 {
		c.WatchBatch = 500
	}
	if c.TailBatch == 0 {
		c.TailBatch = 1000
	}
	if c.FallbackPoll == 0 {
		c.FallbackPoll = time.Second
	}
	if c.Retention == 0 {
		c.Retention = 30 * 24 * time.Hour
	}
	return nil
}

// Service serves IngestService and LogService over the logs store.
type Service struct {
	logsv1.UnimplementedIngestServiceServer
	logsv1.UnimplementedLogServiceServer

	cfg    Config
	log    *slog.Logger
	store  *db.DB
	killer Killer
	now    func() time.Time
	hub    *hub
	// noJobLog and sweepJobLog write the per-run warnings that a job could not be read (for an
	// alarm, for the lost-run sweeps) at most 20 times a second each: a scheduler too busy to
	// answer fails every such read at once.
	noJobLog, sweepJobLog *lograte.Limiter
	// queue holds the ingest batches waiting for their write cycle (commit.go).
	queue *queue
	// beforeCommit, when set (tests only), runs between a transaction's last write and its
	// commit: where a crash must lose the batch and its acknowledgement together.
	beforeCommit func(context.Context, *db.Tx)
	// beforeInsertRuns, when set (tests only), runs before a write cycle inserts the runs it
	// did not find: where another replica may store one of them first.
	beforeInsertRuns func(context.Context)
	metrics          *metrics
	// delivery checks executors' delivery tokens; nil without Config.DeliverySecret.
	delivery *seal.Key

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// New returns the service over its store (schema "logs", migrated with MigrationsFS) and the
// scheduler's kill path.
func New(cfg Config, store *db.DB, killer Killer) (*Service, error) {
	if store == nil || killer == nil {
		return nil, errors.New("logsvc: store and killer are required")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Service{cfg: cfg, log: log, store: store, killer: killer, now: time.Now, hub: newHub(),
		queue: newQueue(), metrics: newMetrics(),
		noJobLog:    lograte.New(log, slog.LevelWarn, "alarm: cannot read the job; sending without its name and emails", 20, time.Second),
		sweepJobLog: lograte.New(log, slog.LevelWarn, "cannot read a job for the lost-run and missing-record sweeps; going on without its timeout and group", 20, time.Second)}
	if cfg.DeliverySecret != "" {
		s.delivery = seal.New(cfg.DeliverySecret, seal.Delivery)
	}
	return s, nil
}

// Register adds IngestService and LogService to g.
func (s *Service) Register(g *grpc.Server) {
	logsv1.RegisterIngestServiceServer(g, s)
	logsv1.RegisterLogServiceServer(g, s)
}

// Start runs the background work until Stop: retention, the lost-run and missing-record
// sweeps, alarms and the per-job report counters. The RPCs work without it.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("logsvc: already started")
	}
	ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.done = make(chan struct{})
	s.started = true
	s.metrics.observe(s)
	var wg sync.WaitGroup
	wg.Go(func() { s.retain(ctx) })
	wg.Go(func() { s.sweep(ctx) })
	wg.Go(func() { s.alarms(ctx) })
	wg.Go(func() { s.jobCounts(ctx) })
	go func() {
		defer close(s.done)
		wg.Wait()
	}()
	return nil
}

// sweep looks for lost runs and runs without a record, and prunes old per-minute counts, every
// SweepInterval until ctx ends.
func (s *Service) sweep(ctx context.Context) {
	every(ctx, s.cfg.SweepInterval, func() {
		if _, err := s.sweepLost(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("lost-run sweep failed", "error", err)
		}
		if _, err := s.sweepUnrecorded(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("missing-record sweep failed", "error", err)
		}
		if err := s.pruneMinutes(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("pruning per-minute counts failed", "error", err)
		}
	})
}

// every runs fn every d until ctx ends.
func every(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fn()
	}
}

// Stop ends the background work and waits for it. It is idempotent.
func (s *Service) Stop() {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.cancel = nil
	s.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
		s.metrics.stop()
	}
}

// retain prunes old runs now and then daily, until ctx ends.
func (s *Service) retain(ctx context.Context) {
	if s.cfg.Retention < 0 {
		return
	}
	t := time.NewTicker(24 * time.Hour)
	defer t.Stop()
	for {
		if n, err := s.prune(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Error("retention pass failed", "error", err)
		} else if n > 0 {
			s.log.Info("retention pass deleted old runs", "deleted", n, "retention", s.cfg.Retention.String())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// prune deletes runs scheduled before now−Retention, and completions recorded before it.
func (s *Service) prune(ctx context.Context) (int64, error) {
	cutoff := s.now().Add(-s.cfg.Retention).UnixMilli()
	n, err := s.clearBefore(ctx, 0, 0, cutoff)
	if err != nil {
		return n, err
	}
	if _, err := s.countJobs(ctx); err != nil {
		return n, err
	}
	for {
		// Cursors follow creation (writers serialize on completionsLock; created_ms is taken
		// shortly before): the oldest completions are the first cursors, and a batch that holds
		// a newer one is the last.
		// Never one the per-job counters have not counted yet.
		res, err := s.store.ExecContext(ctx, s.store.Q(`DELETE FROM completions WHERE created_ms < $1 AND cursor IN
			(SELECT cursor FROM completions WHERE cursor <= (SELECT position FROM cursors WHERE name = $3) ORDER BY cursor LIMIT $2)`),
			cutoff, deleteBatch, jobCountCursor)
		if err != nil {
			return n, fmt.Errorf("prune completions: %w", err)
		}
		if k, _ := res.RowsAffected(); k < deleteBatch {
			return n, nil
		}
	}
}

// inTx runs fn in a transaction and commits it, retrying a few times when Postgres aborts it
// for a deadlock or a serialization failure, or a write cycle met a run stored concurrently
// (fn must be safe to run again).
func (s *Service) inTx(ctx context.Context, fn func(tx *db.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := s.tx(ctx, fn)
		if err == nil || attempt == 3 || !retryable(err) {
			return err
		}
		if errors.Is(err, errNotFresh) { // expected now and then: nothing went wrong
			s.log.DebugContext(ctx, "write cycle run again reading every run", "attempt", attempt, "error", err)
			continue
		}
		s.log.WarnContext(ctx, "transaction aborted by the store; retrying", "attempt", attempt, "error", err)
	}
}

func (s *Service) tx(ctx context.Context, fn func(tx *db.Tx) error) error {
	tx, err := s.store.Begin(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	if s.beforeCommit != nil {
		s.beforeCommit(ctx, tx)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.Is(err, errRunRace) || errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}
