// Package sdk is the jobmesh executor engine. The jobmesh-agent sidecar runs it, and Go
// applications embed it to run their own handlers in-process: it serves ExecutorService to the
// scheduler, runs each job on its own worker with XXL-JOB's block strategies, runs GLUE scripts
// and commands in their own process groups, registers the executor with the registry (which
// keeps it in the live view while its heartbeats arrive), and delivers results and output lines
// to logsvc until they are acknowledged. It imports the OpenTelemetry API only: an application
// that wants its metrics and spans installs its own providers.
package sdk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
)

// HandlerFunc runs one fire of a job. It must return when ctx ends (timeout, kill, shutdown);
// a nil error means success, with the message the handler gave Job.SetMessage if any; anything
// else (and a panic) means failure with its message.
type HandlerFunc func(ctx context.Context, job *Job) error

// HandlerOption tunes a handler registered with Handle.
type HandlerOption struct{ apply func(*bean) }

// WithInit runs init once on each job's worker before its first fire (XXL-JOB's init method),
// e.g. to open a connection; an error fails that fire, and the next fire tries again.
func WithInit(init func() error) HandlerOption {
	return HandlerOption{func(b *bean) { b.init = init }}
}

// WithDestroy runs destroy when a worker whose init succeeded ends: reclaimed when idle,
// replaced, or at Stop (XXL-JOB's destroy method).
func WithDestroy(destroy func()) HandlerOption {
	return HandlerOption{func(b *bean) { b.destroy = destroy }}
}

// bean is a registered handler.
type bean struct {
	name    string
	fn      HandlerFunc
	init    func() error
	destroy func()
}

// Job is what a handler knows about the fire it runs.
type Job struct {
	// ID is the job id.
	ID int64
	// GroupID is the executor group id.
	GroupID int64
	// TriggerID is the fire's deterministic id; the same fire always has the same id.
	TriggerID string
	// Handler is the handler name (BEAN jobs).
	Handler string
	// Params is the job's parameter for this fire.
	Params string
	// ShardIndex is the 0-based shard of a sharded fire; ShardTotal is at least 1.
	ShardIndex, ShardTotal int
	// ScheduledTime is when the fire was due; zero when the scheduler did not say.
	ScheduledTime time.Time
	// Attempt is 0 for the first fire and n for the n-th retry.
	Attempt int
	// TriggerType says why it fired: CRON, MANUAL, RETRY, PARENT, API or MISFIRE.
	TriggerType string
	// TraceContext is the fire's W3C trace context ("traceparent", "tracestate").
	TraceContext map[string]string
	// Context is what a workflow node's fire receives: the instance's params, then the outputs
	// of the node's direct upstream nodes, each as "<node id>.<key>" and as the bare key (see
	// docs/workflows.md). Empty for a job's own fire.
	Context map[string]string
	// WorkflowInstanceID and WorkflowNodeID name the workflow instance and node of a node's
	// fire; empty for a job's own fire.
	WorkflowInstanceID, WorkflowNodeID string

	run *run
}

// Logf appends a line (or several, one per newline) to the fire's log: the local run log the
// Log call reads, and the lines streamed to logsvc. Lines logged after the handler returned are
// dropped.
func (j *Job) Logf(format string, args ...any) {
	if j.run == nil {
		return
	}
	j.run.logText(fmt.Sprintf(format, args...))
}

// SetMessage sets the message of the fire's result when the handler succeeds (XXL-JOB's
// handleSuccess): it is stored with the run, as a failure's error message is, and shown with it.
// The last call wins; a failure's message is its error's, whatever was set; a call after the
// handler returned is ignored. At most 64 KiB are kept.
func (j *Job) SetMessage(msg string) {
	if j.run == nil {
		return
	}
	j.run.setMessage(msg)
}

// Status is how a fire ended.
type Status string

// The statuses a fire ends with; they match logsvc's RunStatus names.
const (
	StatusSuccess Status = "SUCCESS"
	StatusFail    Status = "FAIL"
	StatusTimeout Status = "TIMEOUT"
	StatusKilled  Status = "KILLED"
)

// Result is a fire's end, as passed to Config.OnResult.
type Result struct {
	// TriggerID and JobID name the fire.
	TriggerID string
	JobID     int64
	// Status is how it ended; Message is the handler's success message (Job.SetMessage), or why
	// it did not succeed.
	Status  Status
	Message string
	// StartTime and EndTime bound the run; equal when the fire never started (killed while queued).
	StartTime, EndTime time.Time
	// Outputs is what the handler published (Job.SetOutput); nil for nothing.
	Outputs map[string]string
}

// Executor runs fires of jobs sent by the scheduler. Create it with New, register handlers with
// Handle, then Start; Stop(ctx) ends it gracefully.
type Executor struct {
	cfg Config
	log *slog.Logger

	interpMu sync.Mutex
	interps  map[string]interpreter // script interpreters found on PATH, by name

	hmu      sync.RWMutex
	handlers map[string]*bean
	hErrs    []error

	mu         sync.Mutex
	started    bool
	stopping   bool
	workers    map[int64]*worker    // the current worker of each job
	allWorkers map[*worker]struct{} // every live worker goroutine, replaced ones included
	active     map[string]*run      // held, queued or running fires by trigger id
	held       map[string]*run      // fires sent ahead of their time, until due (Trigger.start_delay_us)
	recent     *recentIDs           // recently accepted trigger ids → the day of their log file
	slots      int                  // run slots taken: fires running (handed to their worker goroutine)
	slotQueue  []*worker            // workers whose next fire waits for a run slot, in order
	wakes      []*worker            // workers handed a fire, to wake once mu is unlocked (unlockWake)
	day        string               // dayLocked's: the current UTC date, valid in [dayStart, dayEnd)
	dayStart   time.Time
	dayEnd     time.Time
	onReclaim  func(jobID int64) // test hook: a worker was reclaimed
	baseCtx    context.Context   // Start's values, never cancelled: parent of every run

	ln        net.Listener
	srv       *grpc.Server
	serveDone chan struct{}
	addr      string
	advertise string
	startTime time.Time
	out       outbox
	reg       *registrar
	regConn   *grpc.ClientConn
	metrics   *metrics
	runs      *runStore // the local copy of run output

	// Held fires (holdLoop): groups by due time, on one timer.
	holdMu             sync.Mutex
	holdQ              holdHeap
	holdWake           chan struct{}
	holdStop, holdDone chan struct{}

	// The finisher (finishLoop): fires whose handler returned, waiting for finishRest.
	finMu      sync.Mutex
	finCond    *sync.Cond
	finQ       []ending
	finStopped bool
	finDone    chan struct{}
	// handing counts fires handed to their worker goroutine and not yet taken up by it, and a
	// release of held fires in progress; the one that takes it to zero signals startsDone.
	handing    atomic.Int64
	startsDone chan struct{}

	// httpClient is the "http" handler's: one transport, its connections reused across fires.
	httpClient *http.Client

	retainStop, retainDone   chan struct{} // the run log pruner
	reclaimStop, reclaimDone chan struct{} // the idle worker reclaimer

	stopOnce sync.Once
	stopErr  error // the first Stop's answer
}

// New checks cfg and returns an executor with the built-in "command" and "http" handlers
// registered.
// Errors name the offending Config field.
func New(cfg Config) (*Executor, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("executor config: %w", err)
	}
	e := &Executor{
		cfg:        cfg,
		log:        cfg.Logger,
		handlers:   map[string]*bean{},
		interps:    map[string]interpreter{},
		workers:    map[int64]*worker{},
		allWorkers: map[*worker]struct{}{},
		active:     map[string]*run{},
		held:       map[string]*run{},
		recent:     newRecentIDs(recentCap),
		baseCtx:    context.Background(),
		out:        nopOutbox{},
		metrics:    newMetrics(cfg.AppName),
	}
	e.httpClient = e.newHTTPClient()
	e.runs = newRunStore(filepath.Join(cfg.LogDir, "runs"), cfg.Logger)
	e.finCond = sync.NewCond(&e.finMu)
	e.holdWake = make(chan struct{}, 1)
	e.startsDone = make(chan struct{}, 1)
	e.Handle(CommandHandler, e.commandHandler)
	e.Handle(HTTPHandler, e.httpHandler)
	return e, nil
}

// CommandHandler is the name of the built-in BEAN handler that runs a program without a shell:
// its params are a JSON array of strings ["prog", "arg1", ...] or a plain string split on
// whitespace.
const CommandHandler = "command"

// Handle registers h as the BEAN handler name, replacing any handler of that name (the built-in
// "command" and "http" included). It may be called before or after Start; a bad registration
// (empty name, nil handler) is reported by Start.
func (e *Executor) Handle(name string, h HandlerFunc, opts ...HandlerOption) {
	e.hmu.Lock()
	defer e.hmu.Unlock()
	switch {
	case strings.TrimSpace(name) == "":
		e.hErrs = append(e.hErrs, errors.New("Handle: handler name is empty"))
		return
	case h == nil:
		e.hErrs = append(e.hErrs, fmt.Errorf("Handle(%q): handler is nil", name))
		return
	}
	b := &bean{name: name, fn: h}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(b)
		}
	}
	e.handlers[name] = b
}

func (e *Executor) handler(name string) (*bean, bool) {
	e.hmu.RLock()
	defer e.hmu.RUnlock()
	b, ok := e.handlers[name]
	return b, ok
}

// Start listens, serves ExecutorService, starts delivery to logsvc and registers the executor
// with the registry (the first registration must succeed). ctx bounds start-up and lends its
// values to handlers; the executor runs until Stop.
func (e *Executor) Start(ctx context.Context) error {
	e.mu.Lock()
	if e.started {
		e.mu.Unlock()
		return errors.New("executor: already started")
	}
	e.started = true
	e.baseCtx = context.WithoutCancel(ctx)
	e.mu.Unlock()

	e.hmu.RLock()
	herr := errors.Join(e.hErrs...)
	e.hmu.RUnlock()
	if herr != nil {
		return fmt.Errorf("executor handlers: %w", herr)
	}
	for _, d := range []string{filepath.Join(e.cfg.LogDir, "runs"), filepath.Join(e.cfg.LogDir, "glue"), filepath.Join(e.cfg.LogDir, "fires")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("LogDir: %w", err)
		}
	}
	if err := e.clearScripts(); err != nil {
		e.log.Warn("deleting GLUE script files left from before the start", "error", err)
	}
	if n, err := e.pruneLogs(time.Now()); err != nil {
		e.log.Error("pruning run log files", "error", err)
	} else if n > 0 {
		e.log.Info("pruned run log files", "days", n, "retention_days", e.cfg.LogRetentionDays)
	}
	ln, err := net.Listen("tcp", e.cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("ListenAddr: listen on %s: %w", e.cfg.ListenAddr, err)
	}
	e.ln = ln
	e.addr = ln.Addr().String()
	e.advertise = e.cfg.AdvertiseAddr
	if e.advertise == "" {
		e.advertise = advertiseAddr(ln.Addr())
	}
	e.startTime = time.Now()

	if e.cfg.LogsvcAddr != "" {
		out, err := newStreamOutbox(e.cfg, e.log)
		if err != nil {
			ln.Close()
			return err
		}
		out.start(ctx)
		e.out = out
	}
	e.runs.start()
	e.finDone = make(chan struct{})
	go e.finishLoop()
	e.holdStop, e.holdDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(e.holdDone)
		e.holdLoop(e.holdStop)
	}()

	e.retainStop, e.retainDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(e.retainDone)
		e.retainLogs(e.retainStop)
	}()
	e.reclaimStop, e.reclaimDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(e.reclaimDone)
		e.reclaimLoop(e.reclaimStop)
	}()

	e.srv = grpc.NewServer(append(e.cfg.TLS.ServerOptions(),
		grpc.StatsHandler(receiptStamp{}), // first: the time a call arrived, before the others' work
		grpc.StatsHandler(otelgrpc.NewServerHandler()),
		grpc.ChainUnaryInterceptor(recoverUnary(e.log), authUnary(e.cfg.AccessToken)),
		grpc.MaxRecvMsgSize(64<<20),
		// Run calls are served by long-lived goroutines, whose stacks have grown already: a
		// goroutine per call grew its stack on every call (5 % of an agent's CPU under load).
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
	)...)
	executorv1.RegisterExecutorServiceServer(e.srv, &service{e: e})
	e.serveDone = make(chan struct{})
	go func() {
		defer close(e.serveDone)
		if err := e.srv.Serve(ln); err != nil {
			e.log.Error("executor gRPC server ended", "error", err)
		}
	}()

	if e.cfg.RegistryAddr != "" {
		err := e.startRegistrar(ctx)
		if err != nil {
			e.srv.Stop()
			<-e.serveDone
			close(e.holdStop)
			<-e.holdDone
			e.stopFinishing()
			e.runs.stop()
			e.out.stop()
			close(e.retainStop)
			<-e.retainDone
			close(e.reclaimStop)
			<-e.reclaimDone
			return err
		}
	}
	e.metrics.observe(e)
	if e.cfg.AccessToken == "" {
		e.log.Warn("executor serves without an access token (Insecure): anyone who reaches it runs code on it", "listen_addr", e.addr)
	}
	e.log.Info("executor started", "app", e.cfg.AppName, "instance", e.cfg.InstanceID, "listen_addr", e.addr,
		"advertise_addr", e.advertise, "logsvc_addr", e.cfg.LogsvcAddr, "registry_addr", e.cfg.RegistryAddr)
	return nil
}

// startRegistrar connects to the registry and registers the executor.
func (e *Executor) startRegistrar(ctx context.Context) error {
	conn, err := grpc.NewClient(e.cfg.RegistryAddr, dialOptions(e.cfg)...)
	if err != nil {
		return fmt.Errorf("RegistryAddr: dial %s: %w", e.cfg.RegistryAddr, err)
	}
	e.reg = newRegistrar(registryv1.NewRegistryServiceClient(conn), e.cfg, e.advertise, e.startTime, e.log)
	if err := e.reg.start(ctx); err != nil {
		conn.Close()
		return err
	}
	e.regConn = conn
	return nil
}

// Addr is the actual listen address after Start ("127.0.0.1:43121" for port 0).
func (e *Executor) Addr() string {
	return e.addr
}

// AdvertiseAddr is the address registered for the scheduler and reported in results.
func (e *Executor) AdvertiseAddr() string {
	return e.advertise
}

// Stop ends the executor gracefully and returns once it has ended. In order:
//
//  1. It leaves the registry's live view, so the scheduler routes no more fires to it, and
//     refuses any fire still sent (Run answers REJECTED).
//  2. Fires that have not started (queued behind their job's running fire, or held until their
//     start time) end KILLED.
//  3. It waits for the running handlers to return, until ctx ends; then it cancels those still
//     running (they end KILLED) and waits KillGrace for them. A handler that ignores
//     cancellation is reported KILLED and its late return ignored.
//  4. It stops serving ExecutorService and flushes results and log lines to logsvc for up to
//     5 s; what logsvc has not acknowledged stays in the spool for the next start.
//
// It returns nil after a clean drain; otherwise an error that says how many handlers ctx cut
// short (wrapping ctx's error) or what stayed in the spool. Stop is idempotent: later calls, concurrent
// ones included, wait for the first and return its error. Stopping an executor that never
// started returns nil.
func (e *Executor) Stop(ctx context.Context) error {
	e.stopOnce.Do(func() { e.stopErr = e.stop(ctx) })
	return e.stopErr
}

func (e *Executor) stop(ctx context.Context) error {
	e.mu.Lock()
	started := e.started
	e.stopping = true
	e.mu.Unlock()
	if !started {
		return nil
	}
	// 1. Take no new work: leave the view the scheduler routes over; accept refuses from now on.
	if e.reg != nil {
		e.reg.stop()
		e.regConn.Close()
	}

	// 2. Fires that have not started end KILLED now; running ones may finish.
	stopCause := &stopCause{status: logsv1.RunStatus_RUN_STATUS_KILLED, msg: "killed: executor stopping"}
	e.mu.Lock()
	var queued []*run
	var workers []*worker
	for _, r := range e.held { // fires not due yet end as queued ones do
		queued = append(queued, r)
	}
	clear(e.held)
	for w := range e.allWorkers {
		queued = append(queued, w.queue...)
		w.queue = nil
		w.retired = true
		w.signal()
		workers = append(workers, w)
	}
	clear(e.workers)
	e.mu.Unlock()
	for _, r := range queued {
		e.finishUnstarted(r, stopCause)
	}

	// 3. Wait for the running handlers, as long as ctx lets us.
	var errs []error
	if !waitWorkers(ctx.Done(), workers) {
		e.mu.Lock()
		running := e.runningLocked()
		e.mu.Unlock()
		if len(running) > 0 {
			e.log.Warn("handlers still running when the stop's context ended; killing them", "count", len(running), "error", ctx.Err())
			errs = append(errs, fmt.Errorf("executor stop: %d running handler(s) killed: %w", len(running), context.Cause(ctx)))
		}
		for _, r := range running {
			r.cancel(stopCause)
		}
		t := time.NewTimer(e.cfg.KillGrace + time.Second)
		if !waitWorkers(t.C, workers) {
			// Handlers that ignore cancellation: report them killed; their late return is ignored.
			e.mu.Lock()
			running = e.runningLocked()
			e.mu.Unlock()
			for _, r := range running {
				e.log.Error("handler ignores cancellation; reporting it killed", "trigger_id", r.t.GetTriggerId(), "job_id", r.t.GetJobId())
				e.finish(r, logsv1.RunStatus_RUN_STATUS_KILLED, "killed: executor stopping (handler did not return)", time.Time{}, time.Now(), "")
			}
		}
		t.Stop()
	}

	// 4. Stop serving, then deliver what is left.
	if e.srv != nil {
		done := make(chan struct{})
		go func() {
			defer close(done)
			e.srv.GracefulStop()
		}()
		t := time.NewTimer(2 * time.Second)
		select {
		case <-done:
		case <-t.C:
			e.srv.Stop()
			<-done
		}
		t.Stop()
		<-e.serveDone
	}

	close(e.holdStop)
	<-e.holdDone
	e.stopFinishing()
	e.runs.stop()
	fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := e.out.flush(fctx); err != nil {
		e.log.Warn("results and log lines not acknowledged by logsvc at stop; they stay in the spool and are delivered after the next start",
			"pending", e.out.pending(), "spool_dir", e.cfg.SpoolDir, "error", err)
		errs = append(errs, fmt.Errorf("executor stop: %d results and log lines not acknowledged by logsvc stay in the spool %s: %w", e.out.pending(), e.cfg.SpoolDir, err))
	}
	cancel()
	e.out.stop()
	if e.retainStop != nil {
		close(e.retainStop)
		<-e.retainDone
		close(e.reclaimStop)
		<-e.reclaimDone
	}
	e.metrics.stop()
	e.httpClient.CloseIdleConnections()
	e.log.Info("executor stopped", "app", e.cfg.AppName, "instance", e.cfg.InstanceID)
	return errors.Join(errs...)
}

// runningLocked lists the fires that are running now.
func (e *Executor) runningLocked() []*run {
	var rs []*run
	for w := range e.allWorkers {
		if w.running != nil {
			rs = append(rs, w.running)
		}
	}
	return rs
}

// waitWorkers waits until every worker goroutine has ended (true) or until giveUp (false).
func waitWorkers[T any](giveUp <-chan T, ws []*worker) bool {
	for _, w := range ws {
		select {
		case <-w.done:
		case <-giveUp:
			return false
		}
	}
	return true
}

// advertiseAddr turns a listener address into one others can dial: an unspecified host becomes
// the machine's first non-loopback IPv4 address (or 127.0.0.1 without one).
func advertiseAddr(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return a.String()
	}
	host := "127.0.0.1"
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, ia := range addrs {
			if n, ok := ia.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
				host = n.IP.String()
				break
			}
		}
	}
	return net.JoinHostPort(host, fmt.Sprint(tcp.Port))
}
