// Package scheduler is the scheduler service: jobs and their schedules, partitions led through
// etcd, the pre-read loop, the millisecond time ring, dispatch to executors and trigger records to
// logsvc. Jobs hash to partitions; every replica serves the job API and leads its fair share of
// the partitions, each through a partition engine (engine.go) whose scheduling writes are fenced
// by the partition's epoch.
package scheduler

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/clock"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/lograte"
	"github.com/jobmesh/jobmesh/internal/seal"
	"github.com/jobmesh/jobmesh/services/executor-agent/ackstream"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/partition"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/ring"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/route"
)

//go:embed migrations
var migrations embed.FS

// MigrationsFS returns the scheduler's migrations, a folder per dialect.
func MigrationsFS() fs.FS {
	sub, _ := fs.Sub(migrations, "migrations")
	return sub
}

// DefaultPartitions is Config.Partitions's default: the partition count of a new cluster.
const DefaultPartitions = partition.DefaultCount

// DefaultDispatchLead is Config.DispatchLead's default.
const DefaultDispatchLead = 200 * time.Millisecond

// DefaultRecordQueue is Config.RecordQueue's default: 25 s of 20,000 fires/s while logsvc is
// slow or away, about 160 MB of records at most.
const DefaultRecordQueue = 500_000

// DefaultMisfireThreshold is Config.MisfireThreshold's default.
const DefaultMisfireThreshold = 5 * time.Second

// DefaultExecutorQueue and DefaultExecutorQueueTotal are Config.ExecutorQueue's and
// Config.ExecutorQueueTotal's defaults.
const (
	DefaultExecutorQueue      = 10_000
	DefaultExecutorQueueTotal = 100_000
)

// Config tunes the scheduler. Zero values take the documented defaults.
type Config struct {
	// ReplicaID names this replica among the partitions' leaders; default hostname-pid.
	ReplicaID string
	// SessionTTL is the etcd session TTL: how long a crashed leader keeps leadership. Default 2 s.
	SessionTTL time.Duration
	// PreReadWindow is how far ahead the pre-read loop arms fires. Default 5 s.
	PreReadWindow time.Duration
	// PreReadInterval is the pause between scans when the last one was not full. Default 1 s.
	PreReadInterval time.Duration
	// PreReadBatch caps jobs read per scan. Default 5000.
	PreReadBatch int
	// MisfireThreshold: a fire later than this is a misfire. Default 5 s.
	MisfireThreshold time.Duration
	// DispatchTimeout bounds one Run call. Default 3 s.
	DispatchTimeout time.Duration
	// DispatchLead is how long before its time a scheduled fire is sent to executors that hold a
	// fire until its time (registered with holds_fires; the Go SDK and the agent do), so that it
	// starts on time whatever the dispatch costs, and the fires of a few milliseconds share one
	// Run call. Default 200 ms; negative sends every fire at its time.
	DispatchLead time.Duration
	// FastWorkers and SlowWorkers size the trigger pools. Defaults 64 and 32.
	FastWorkers, SlowWorkers int
	// PoolQueue bounds each trigger pool's queue. Default 20000.
	PoolQueue int
	// ExecutorQueue bounds the fires that wait for one executor to take them (it said it is full,
	// could not be reached, or did not answer): beyond it a fire is given up at once. A waiting
	// fire holds about 0.5 KB (its Trigger, trigger record and dispatch state; the job's
	// definition and GLUE source are shared), up to 2 KB with a recording trace span or params of
	// its own. Default 10,000.
	ExecutorQueue int
	// ExecutorQueueTotal bounds the waiting fires over all executors. Default 100,000: about
	// 50 MB, at most 200 MB.
	ExecutorQueueTotal int
	// RecordQueue caps the trigger records held for logsvc, queued or sent and not yet
	// acknowledged; beyond it new records are dropped and logged (their runs are completed
	// without them: logsvc's sweepUnrecorded). Default DefaultRecordQueue.
	RecordQueue int
	// Clock drives scheduling; default the wall clock.
	Clock clock.Clock
	// Partitions is the partition count a new cluster gets (DefaultPartitions when 0). The first
	// replica of a cluster stores it in etcd; from then on it is fixed, and a replica started with
	// another count uses the stored one.
	Partitions int
	// Logger receives the scheduler's logs; nil discards them.
	Logger *slog.Logger
	// ExecutorDialOptions are used to dial executors (credentials, stats handlers).
	ExecutorDialOptions []grpc.DialOption
	// AdvertiseAddr is where the other replicas reach this one's JobService (host:port), stored
	// in its etcd member key: they forward the manual triggers of the partitions it leads to it.
	// Empty advertises nothing: the others dispatch those triggers themselves.
	AdvertiseAddr string
	// PeerDialOptions are used to dial the other replicas to forward manual triggers to the
	// leaders of their partitions (the mesh's transport credentials and the internal token). Nil
	// turns forwarding off: every manual trigger is dispatched by the replica that receives it.
	PeerDialOptions []grpc.DialOption
	// FromReplica reports whether a call comes from another replica of the mesh: one that
	// presents the internal token (auth.IsInternalCaller). Only such a call may carry a trigger
	// forwarded to this replica as its partition's leader; anyone else's is refused
	// (PermissionDenied). Required with PeerDialOptions.
	FromReplica func(ctx context.Context) bool
	// DeliverySecret is the secret the scheduler seals each fire's delivery token with (the
	// services' internal token, which logsvc checks the tokens with): an executor can deliver
	// results and lines only for the fires sent to it. Empty sends fires without a token, and
	// logsvc then refuses their executors' deliveries.
	DeliverySecret string
	// XxlAccessToken is the XXL-JOB-ACCESS-TOKEN presented to XXL-JOB executors of a group that
	// has no access token, and expected on their callbacks; empty for none.
	XxlAccessToken string
	// XxlLogPoll is how often the output of live XXL-JOB runs is read into logsvc. Default 1 s.
	XxlLogPoll time.Duration
}

func (c *Config) setDefaults() {
	if c.ReplicaID == "" {
		h, _ := os.Hostname()
		c.ReplicaID = fmt.Sprintf("%s-%d", h, os.Getpid())
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = 2 * time.Second
	}
	if c.PreReadWindow == 0 {
		c.PreReadWindow = 5 * time.Second
	}
	if c.PreReadInterval == 0 {
		c.PreReadInterval = time.Second
	}
	if c.PreReadBatch == 0 {
		c.PreReadBatch = 5000
	}
	if c.MisfireThreshold == 0 {
		c.MisfireThreshold = DefaultMisfireThreshold
	}
	if c.DispatchTimeout == 0 {
		c.DispatchTimeout = 3 * time.Second
	}
	if c.DispatchLead == 0 {
		c.DispatchLead = DefaultDispatchLead
	}
	if c.FastWorkers == 0 {
		c.FastWorkers = 64
	}
	if c.SlowWorkers == 0 {
		c.SlowWorkers = 32
	}
	if c.PoolQueue == 0 {
		c.PoolQueue = 20000
	}
	if c.RecordQueue == 0 {
		c.RecordQueue = DefaultRecordQueue
	}
	if c.ExecutorQueue == 0 {
		c.ExecutorQueue = DefaultExecutorQueue
	}
	if c.ExecutorQueueTotal == 0 {
		c.ExecutorQueueTotal = DefaultExecutorQueueTotal
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.XxlLogPoll == 0 {
		c.XxlLogPoll = DefaultXxlLogPoll
	}
}

func (c *Config) validate() error {
	switch {
	case c.PeerDialOptions != nil && c.FromReplica == nil:
		return errors.New("scheduler: forwarding triggers (PeerDialOptions) needs FromReplica, to take the others' forwarded calls")
	case c.SessionTTL < time.Second:
		return fmt.Errorf("scheduler: session ttl %v: at least 1s", c.SessionTTL)
	case c.PreReadWindow < 100*time.Millisecond:
		return fmt.Errorf("scheduler: pre-read window %v: at least 100ms", c.PreReadWindow)
	case c.PreReadInterval <= 0 || c.PreReadInterval > c.PreReadWindow:
		return fmt.Errorf("scheduler: pre-read interval %v: between 1ms and the window %v", c.PreReadInterval, c.PreReadWindow)
	case c.PreReadBatch < 1:
		return fmt.Errorf("scheduler: pre-read batch %d: at least 1", c.PreReadBatch)
	case c.DispatchLead > time.Minute:
		return fmt.Errorf("scheduler: dispatch lead %v: at most 1m (executors hold a fire at most that long)", c.DispatchLead)
	case c.DispatchLead >= c.PreReadWindow:
		return fmt.Errorf("scheduler: dispatch lead %v: less than the pre-read window %v", c.DispatchLead, c.PreReadWindow)
	case c.MisfireThreshold < 0:
		return fmt.Errorf("scheduler: misfire threshold %v: not negative", c.MisfireThreshold)
	case c.FastWorkers < 1 || c.SlowWorkers < 1 || c.PoolQueue < 1:
		return errors.New("scheduler: trigger pool workers and queue: at least 1")
	case c.RecordQueue < 1:
		return fmt.Errorf("scheduler: record queue %d: at least 1", c.RecordQueue)
	case c.XxlLogPoll < 10*time.Millisecond:
		return fmt.Errorf("scheduler: xxl log poll %v: at least 10ms", c.XxlLogPoll)
	case c.ExecutorQueue < 1 || c.ExecutorQueueTotal < c.ExecutorQueue:
		return fmt.Errorf("scheduler: executor queue %d and total %d: at least 1, and the total at least the one", c.ExecutorQueue, c.ExecutorQueueTotal)
	}
	return nil
}

// Deps are the scheduler's clients of other services.
type Deps struct {
	Store    *db.DB
	Etcd     *clientv3.Client
	Registry registryv1.RegistryServiceClient
	Ingest   logsv1.IngestServiceClient
	Logs     logsv1.LogServiceClient
}

// Service serves JobService and SchedulerService and, while it leads, schedules.
type Service struct {
	schedulerv1.UnimplementedJobServiceServer
	schedulerv1.UnimplementedSchedulerServiceServer
	schedulerv1.UnimplementedWorkflowServiceServer

	cfg      Config
	log      *slog.Logger
	clk      clock.Clock
	jobs     jobStore
	etcd     *clientv3.Client
	logs     logsv1.LogServiceClient
	groups   *routeView
	router   *route.Router
	delivery *seal.Key // seals fires' delivery tokens; nil without Config.DeliverySecret
	execs    *executorPool
	// gaveUpLog and failedLog write the per-fire warnings "trigger given up" and "trigger
	// failed" at most firesLoggedPerSecond times a second each: an overloaded scheduler gives
	// fires up by the thousand a second, and each one's record in logsvc keeps its reason.
	gaveUpLog, failedLog *lograte.Limiter
	// xxl drives the XXL-JOB executors (xxl.go) and follows their runs' output.
	xxl      *xxlDriver
	fast     *pool
	slow     *pool
	slowness *slowTracker
	metrics  *metrics
	records  *ackstream.Sender[*logsv1.TriggerRecord, logsv1.IngestTriggerRecordsRequest, logsv1.IngestTriggerRecordsResponse]
	dropped  dropReport // trigger records the records queue refused
	// rowAcks deletes the rows of dispatched retry, child and workflow node fires once logsvc
	// has acknowledged their trigger records.
	rowAcks *rowAcks
	// waits holds the fires waiting for their executors to take them (back-pressure).
	waits *backlogs

	// peers are the connections to the other replicas that manual triggers are forwarded over;
	// nil without Config.PeerDialOptions.
	peers *peers
	// parts decides which partitions this replica leads; it runs an engine for each (lead).
	parts *partition.Manager
	// count is the cluster's partition count, 0 until the manager knows it (partCount).
	count atomic.Int32
	// completions is the replica's completion stream, shared by its engines.
	completions *completionFollower
	// assignMu guards assigned: whether this replica gave the jobs written before partitions
	// existed theirs (assignPartitions).
	assignMu sync.Mutex
	assigned bool

	// graphs keeps the workflow versions' graphs read ([2]int64{workflow, version} →
	// *workflow.Graph): a version never changes.
	graphs sync.Map
	// wfAlarms wakes the loop that sends failed workflow instances' alarms (wfalarm.go).
	wfAlarms *wfAlarmSender

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	engines map[int]*engine // the partitions this replica leads
}

// New returns a scheduler; Start begins its background work.
func New(cfg Config, deps Deps) (*Service, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if deps.Store == nil || deps.Etcd == nil || deps.Registry == nil || deps.Ingest == nil || deps.Logs == nil {
		return nil, errors.New("scheduler: store, etcd, registry, ingest and logs clients are required")
	}
	s := &Service{
		cfg: cfg, log: cfg.Logger, clk: cfg.Clock, jobs: store{deps.Store}, etcd: deps.Etcd, logs: deps.Logs,
		groups: newRouteView(deps.Registry, cfg.Logger, credentialKey(cfg.DeliverySecret)),
		execs:  newExecutorPool(cfg.ExecutorDialOptions), metrics: newMetrics(cfg.ReplicaID),
	}
	s.gaveUpLog = lograte.New(cfg.Logger, slog.LevelWarn, "trigger given up", firesLoggedPerSecond, time.Second)
	s.failedLog = lograte.New(cfg.Logger, slog.LevelWarn, "trigger failed", firesLoggedPerSecond, time.Second)
	if cfg.DeliverySecret != "" {
		s.delivery = seal.New(cfg.DeliverySecret, seal.Delivery)
	}
	s.xxl = newXxlDriver(deps.Store, deps.Ingest, cfg, s.delivery)
	s.execs.xxl = s.xxl
	s.execs.batched, s.execs.clk, s.execs.health.clk = s.metrics.runBatch, cfg.Clock, cfg.Clock
	s.waits = newBacklogs(s, cfg.ExecutorQueue, cfg.ExecutorQueueTotal)
	s.execs.health.room = s.waits.kick
	s.router = route.New(route.Options{Prober: s.execs, Now: cfg.Clock.Now})
	s.slowness = newSlowTracker(cfg.Clock)
	s.rowAcks = newRowAcks(s)
	s.fast = newPool("fast", cfg.FastWorkers, cfg.PoolQueue)
	s.slow = newPool("slow", cfg.SlowWorkers, cfg.PoolQueue)
	s.engines = map[int]*engine{}
	s.wfAlarms = newWfAlarmSender()
	s.completions = newCompletionFollower()
	if cfg.PeerDialOptions != nil {
		s.peers = newPeers(cfg.PeerDialOptions, cfg.DispatchTimeout)
	}
	var peerStopped func(ctx context.Context, id, addr string) error
	if s.peers != nil {
		peerStopped = s.peerStopped
	}
	parts, err := partition.New(partition.Config{Etcd: deps.Etcd, ReplicaID: cfg.ReplicaID, Address: cfg.AdvertiseAddr, Count: cfg.Partitions,
		SessionTTL: cfg.SessionTTL, Logger: cfg.Logger, Lead: s.lead, PeerStopped: peerStopped})
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	s.parts = parts
	s.records = ackstream.New(ackstream.Config[*logsv1.TriggerRecord, logsv1.IngestTriggerRecordsRequest, logsv1.IngestTriggerRecordsResponse]{
		Name: "trigger records",
		Open: func(ctx context.Context) (ackstream.Stream[logsv1.IngestTriggerRecordsRequest, logsv1.IngestTriggerRecordsResponse], error) {
			return deps.Ingest.IngestTriggerRecords(ctx)
		},
		Batch: func(id uint64, items []*logsv1.TriggerRecord) *logsv1.IngestTriggerRecordsRequest {
			return &logsv1.IngestTriggerRecordsRequest{BatchId: id, Records: items}
		},
		Acked: func(r *logsv1.IngestTriggerRecordsResponse) uint64 { return r.GetBatchId() },
		// A fire's record must not wait out logsvc's commit of earlier batches, or its result,
		// which comes on the agent's stream, waits for it in logsvc (and a workflow node's next
		// node with it). logsvc acknowledges a record once its run is stored, which for a fire
		// dispatched ahead of its time is when its result has come: the dispatch lead and more.
		// At 250 fires a second four batches in flight kept records lingering 7 ms (p50). logsvc
		// reads at most 64 batches of a stream ahead of their acknowledgement
		// (maxStreamBatches): more in flight would wait in the connection's buffers.
		Window:     64,
		MaxPending: cfg.RecordQueue,
		Logger:     cfg.Logger,
		OnAck:      s.rowAcks.acked,
	})
	return s, nil
}

// credentialKey fingerprints access tokens as the registry does (seal.Credential), from the
// services' secret; nil without one.
func credentialKey(secret string) *seal.Key {
	if secret == "" {
		return nil
	}
	return seal.New(secret, seal.Credential)
}

// Register adds JobService, SchedulerService and WorkflowService to g.
func (s *Service) Register(g *grpc.Server) {
	schedulerv1.RegisterJobServiceServer(g, s)
	schedulerv1.RegisterSchedulerServiceServer(g, s)
	schedulerv1.RegisterWorkflowServiceServer(g, s)
}

// Start begins following the executor view, delivering trigger records, following completions
// and campaigning for partitions.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("scheduler: already started")
	}
	s.started = true
	ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.records.Start(ctx)
	s.rowAcks.start()
	s.metrics.observe(s)
	s.fast.start(s.dispatchScheduled)
	s.slow.start(s.dispatchScheduled)
	s.wg.Add(7)
	go func() { defer s.wg.Done(); s.groups.run(ctx) }()
	go func() { defer s.wg.Done(); s.wfAlarmLoop(ctx) }()
	go func() { defer s.wg.Done(); s.listenHandoffs(ctx) }()
	go func() { defer s.wg.Done(); s.xxl.follow.run(ctx) }()
	go func() {
		defer s.wg.Done()
		// A replica that joins takes partitions over at once, many in parallel (all its old ones
		// after a restart): with the store's connections open first, their takeovers do not each
		// wait for Postgres to start a backend.
		wctx, cancel := context.WithTimeout(ctx, warmTimeout)
		if err := s.jobs.warm(wctx); err != nil && ctx.Err() == nil {
			s.log.Warn("opening the store's connections ahead of need failed; they open as needed", "error", err)
		}
		cancel()
		if err := s.parts.Run(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("partition manager stopped", "error", err)
		}
	}()
	go func() { defer s.wg.Done(); s.followCompletions(ctx) }()
	go func() { defer s.wg.Done(); s.execs.pruneLoop(ctx, s.log) }()
	if s.peers != nil {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.prunePeersLoop(ctx) }()
	}
	return nil
}

// warmTimeout bounds the opening of the store's connections before a replica joins: a store
// that does not answer is met by the takeovers, which say so.
const warmTimeout = 2 * time.Second

// firesLoggedPerSecond bounds each per-fire warning ("trigger failed", "trigger given up") to so
// many lines a second; the lines past it are counted in one line at the second's end.
const firesLoggedPerSecond = 20

// StopAdvertising tells the other replicas that this one is stopping: it withdraws its address
// from its member key, so that they stop forwarding manual triggers to it and do not take the
// end of its server for a crash (which would have them revoke its session and take its
// partitions before it has handed them over). Call it before the replica's gRPC server stops,
// and Stop after.
func (s *Service) StopAdvertising() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.parts.StopAdvertising(ctx); err != nil {
		s.log.Warn("withdrawing the replica's address failed: the others may take its stop for a crash and its partitions before it hands them over (fenced)", "error", err)
	}
}

// Stop hands its partitions over, stops firing, drains the trigger pools, flushes trigger records and
// closes executor and peer connections. It is idempotent.
func (s *Service) Stop() {
	s.mu.Lock()
	cancel := s.cancel
	s.cancel = nil
	s.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel() // ends the partition manager: every engine stops its ring and hands its partition over
	s.wg.Wait()
	s.fast.stop()
	s.slow.stop()
	s.waits.close() // what still waits for an executor (manual triggers) is given up, recorded
	fctx, fcancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := s.records.Flush(fctx); err != nil {
		s.log.Warn("trigger records not all acknowledged at shutdown", "pending", s.records.Pending())
	}
	fcancel()
	s.records.Stop()
	s.rowAcks.stop() // deletes the rows the last acknowledgements settled
	s.execs.close()
	if s.peers != nil {
		s.peers.close()
	}
	s.metrics.stop()
}

// GetStatus implements SchedulerService.
func (s *Service) GetStatus(context.Context, *schedulerv1.GetStatusRequest) (*schedulerv1.GetStatusResponse, error) {
	st := s.parts.Status()
	resp := &schedulerv1.GetStatusResponse{ReplicaId: s.cfg.ReplicaID, PartitionCount: int32(st.Count), Replicas: st.Replicas}
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, o := range st.Owners {
		ps := &schedulerv1.PartitionStatus{Partition: int32(p), LeaderId: o.Leader, Epoch: o.Epoch}
		if l := s.engines[p]; l != nil {
			ps.RingSize = int64(l.ring.Len())
			resp.Leader, resp.RingSize, resp.Epoch = true, resp.RingSize+ps.RingSize, max(resp.Epoch, l.epoch)
		}
		if p == 0 {
			resp.LeaderId = o.Leader
		}
		resp.Partitions = append(resp.Partitions, ps)
	}
	return resp, nil
}

// partCount returns the cluster's partition count, 0 while the partition manager does not know
// it yet.
func (s *Service) partCount() int { return int(s.count.Load()) }

// partitionCount returns the cluster's partition count, waiting for the partition manager to
// read it from etcd (Unavailable when ctx ends first).
func (s *Service) partitionCount(ctx context.Context) (int, error) {
	if n := s.partCount(); n > 0 {
		return n, nil
	}
	n, err := s.parts.Count(ctx)
	if err != nil {
		return 0, status.Errorf(codes.Unavailable, "the cluster's partition count is not known yet (etcd unreachable?): %v", err)
	}
	s.count.Store(int32(n))
	return n, nil
}

// engineOf returns the engine of job id's partition when this replica leads it, else nil.
func (s *Service) engineOf(id int64) *engine {
	n := s.partCount()
	if n == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.engines[partition.PartitionOf(id, n)]
}

// minKillTimeout is the least a kill waits for its executor's answer.
const minKillTimeout = 10 * time.Second

// KillTrigger implements SchedulerService.
func (s *Service) KillTrigger(ctx context.Context, req *schedulerv1.KillTriggerRequest) (*schedulerv1.KillTriggerResponse, error) {
	if req.GetAddress() == "" {
		return &schedulerv1.KillTriggerResponse{Message: "the run has no executor address"}, nil
	}
	cli, err := s.execs.client(req.GetAddress())
	if err != nil {
		return nil, err
	}
	// A kill is someone's action, not the hot path: it waits for a loaded executor longer than
	// a dispatch does (the caller's deadline still bounds it).
	ctx, cancel := context.WithTimeout(ctx, max(s.cfg.DispatchTimeout, minKillTimeout))
	defer cancel()
	ctx = s.killContext(ctx, req.GetJobId(), req.GetAddress())
	resp, err := cli.Kill(ctx, &executorv1.KillRequest{JobId: req.GetJobId(), TriggerId: req.GetTriggerId()})
	if err != nil {
		return nil, fmt.Errorf("kill %s on %s: %w", req.GetTriggerId(), req.GetAddress(), err)
	}
	return &schedulerv1.KillTriggerResponse{Killed: resp.GetKilled(), Message: resp.GetMessage()}, nil
}

// disarm removes a job's armed fires from its partition's ring when this replica leads it.
func (s *Service) disarm(jobID int64) {
	if l := s.engineOf(jobID); l != nil {
		for _, e := range l.ring.RemoveJob(jobID) {
			l.disarmEntry(e)
		}
	}
	s.router.Forget(jobID)
}

// ringEntry is what the ring holds for one armed fire.
type ringEntry = ring.Entry[*fire]
