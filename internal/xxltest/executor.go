// Package xxltest is a faithful XXL-JOB executor in Go for tests: an HTTP server that speaks the
// executor side of XXL-JOB's protocol as xxl-job-core 2.4.2 does (exact paths, POST only, HTTP 200
// with code 500 errors, Gson bodies, one thread and queue per job id with the block strategies,
// timeouts, kills by job, a per-run log file read by line, batched and retried callbacks, a
// registry heartbeat and registryRemove on a graceful stop). It records what it received, so
// tests can assert the exact JSON an admin sent.
package xxltest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jobmesh/jobmesh/internal/xxl"
)

// Config configures a test executor. Zero durations take XXL-JOB's values.
type Config struct {
	// AppName is the executor's appname (registryKey); required when AdminAddresses is set.
	AppName string
	// AdminAddresses are the admin base URLs, e.g. "http://127.0.0.1:8080/xxl-job-admin"; tried
	// in order (failover). Empty: no registry heartbeat and no callbacks are sent (they queue).
	AdminAddresses []string
	// AccessToken is checked on every request and sent on every call; empty for none.
	AccessToken string
	// Listen is the address the HTTP server binds; default "127.0.0.1:0".
	Listen string
	// Address is the registryValue; default "http://{bound address}/".
	Address string
	// RegistryInterval is the pause between registry rounds (XXL-JOB: 30 s).
	RegistryInterval time.Duration
	// CallbackRetryInterval is how often failed callback lists are sent again (XXL-JOB: 30 s).
	CallbackRetryInterval time.Duration
	// IdleTimeout ends a job thread that had nothing to run this long (XXL-JOB: 90 s).
	IdleTimeout time.Duration
	// LogDir holds the run logs ({LogDir}/{yyyy-MM-dd}/{logId}.log) and GLUE scripts; required.
	LogDir string
	// Location picks the date directory of a run's log from its logDateTime; default time.Local.
	Location *time.Location
	// Groovy compiles a GLUE_GROOVY source into a handler; an error is /run's code 500 message.
	// Nil: every GLUE_GROOVY source fails to compile.
	Groovy func(source string) (Handler, error)
	// Logger receives the executor's own diagnostics; default discards.
	Logger *slog.Logger
}

// Handler runs one trigger. It must return when ctx ends (a kill, a timeout, a COVER_EARLY
// trigger, the executor's stop). Without a call to Job.Fail or Job.Success the run succeeds with
// no message; a panic fails it with the panic and stack as the message.
type Handler func(ctx context.Context, job *Job)

// Job is what a handler sees of its run (XxlJobHelper).
type Job struct {
	// Param is the trigger as received.
	Param xxl.TriggerParam

	e    *Executor
	code int64
	msg  string
	name string
	set  bool
}

// Log appends a line to the run's log, as XxlJobHelper.log does.
func (j *Job) Log(format string, args ...any) {
	j.e.appendLog(j.Param.LogDateTime, j.Param.LogID, j.name, fmt.Sprintf(format, args...))
}

// Success sets the result to success with a message (XxlJobHelper.handleSuccess).
func (j *Job) Success(msg string) { j.code, j.msg, j.set = xxl.CodeSuccess, msg, true }

// Fail sets the result to failure with a message (XxlJobHelper.handleFail).
func (j *Job) Fail(msg string) { j.code, j.msg, j.set = xxl.CodeFail, msg, true }

// Result sets any handle code (a code <= 0 is reported as "job handle result lost.").
func (j *Job) Result(code int64, msg string) { j.code, j.msg, j.set = code, msg, true }

// Request is one HTTP request the executor received.
type Request struct {
	Method string
	// URI is the request URI as sent (path and query).
	URI string
	// Token is the XXL-JOB-ACCESS-TOKEN header; HasToken says whether it was present.
	Token    string
	HasToken bool
	Body     []byte
	// Answer is the ReturnT the executor answered.
	Answer xxl.ReturnT
}

// AdminCall is one call the executor made to an admin.
type AdminCall struct {
	// Endpoint is "api/registry", "api/registryRemove" or "api/callback".
	Endpoint string
	// Admin is the admin base address that answered (or the last one tried).
	Admin string
	Body  []byte
	// OK is true when an admin answered HTTP 200 with code 200.
	OK bool
	// Answer is the admin's ReturnT, Err the failure of the call.
	Answer xxl.ReturnT
	Err    error
}

// Executor is a running test executor.
type Executor struct {
	cfg    Config
	log    *slog.Logger
	client xxl.Client

	ln      net.Listener
	srv     *http.Server
	address string

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // background loops and job threads
	hwg    sync.WaitGroup // handler goroutines

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every change (Wait)
	handlers map[string]Handler
	threads  map[int64]*jobThread
	requests []Request
	runs     map[int64]int // /run calls per logId
	calls    []AdminCall
	cbQueue  []xxl.HandleCallbackParam
	cbWake   chan struct{}
	cbFailed [][]xxl.HandleCallbackParam
	stopped  bool
	crashed  bool
	threadN  int
	logMu    sync.Mutex
}

// New makes an executor; Start binds it.
func New(cfg Config) (*Executor, error) {
	if cfg.LogDir == "" {
		return nil, errors.New("xxltest: Config.LogDir is required")
	}
	if len(cfg.AdminAddresses) > 0 && cfg.AppName == "" {
		return nil, errors.New("xxltest: Config.AppName is required with AdminAddresses")
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.RegistryInterval <= 0 {
		cfg.RegistryInterval = 30 * time.Second
	}
	if cfg.CallbackRetryInterval <= 0 {
		cfg.CallbackRetryInterval = 30 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 90 * time.Second
	}
	if cfg.Location == nil {
		cfg.Location = time.Local
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Executor{cfg: cfg, log: log, changed: make(chan struct{}), handlers: map[string]Handler{},
		threads: map[int64]*jobThread{}, runs: map[int64]int{}, cbWake: make(chan struct{}, 1),
		client: xxl.Client{HTTP: &http.Client{Timeout: xxl.DefaultTimeout}}}, nil
}

// Handle registers a BEAN handler under name (an @XxlJob method).
func (e *Executor) Handle(name string, h Handler) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.handlers[name] = h
}

// Start binds the HTTP server and starts the registry, callback and retry loops; they run until
// Stop or Crash (ctx only bounds Start itself).
func (e *Executor) Start(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", e.cfg.Listen)
	if err != nil {
		return fmt.Errorf("xxltest: listen %s: %w", e.cfg.Listen, err)
	}
	e.ln = ln
	e.address = e.cfg.Address
	if e.address == "" {
		e.address = "http://" + ln.Addr().String() + "/"
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.srv = &http.Server{Handler: http.HandlerFunc(e.serve), ReadHeaderTimeout: 10 * time.Second}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		if err := e.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.log.Error("xxltest: serve", "error", err)
		}
	}()
	e.wg.Add(3)
	go e.registryLoop()
	go e.callbackLoop()
	go e.retryLoop()
	return nil
}

// Address is the executor's registryValue ("http://127.0.0.1:PORT/").
func (e *Executor) Address() string { return e.address }

// Stop shuts down as XXL-JOB's executor does on SIGTERM: the server stops, registryRemove is sent
// once, every job thread is killed ("web container destroy and kill the job."), and the
// callbacks queued by then are sent once. Idempotent.
func (e *Executor) Stop() {
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return
	}
	e.stopped = true
	e.mu.Unlock()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = e.srv.Shutdown(sctx)
	if len(e.cfg.AdminAddresses) > 0 {
		e.adminCall(sctx, "api/registryRemove", e.registryParam())
	}
	e.mu.Lock()
	threads := make([]*jobThread, 0, len(e.threads))
	for id, t := range e.threads {
		threads = append(threads, t)
		delete(e.threads, id)
	}
	for _, t := range threads {
		t.stopLocked(xxl.MsgDestroyReason)
	}
	e.mu.Unlock()
	for _, t := range threads {
		<-t.done
	}
	e.cancel()
	e.wg.Wait()
	// The last callback round, as TriggerCallbackThread does when it stops.
	e.mu.Lock()
	list := e.takeQueueLocked()
	e.mu.Unlock()
	if len(list) > 0 && len(e.cfg.AdminAddresses) > 0 {
		e.sendCallback(sctx, list)
	}
	e.hwg.Wait()
}

// Crash stops everything at once, like SIGKILL: connections drop, no registryRemove, no more
// callbacks (queued ones are lost). Idempotent; Stop after Crash does nothing.
func (e *Executor) Crash() {
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return
	}
	e.stopped, e.crashed = true, true
	for id, t := range e.threads {
		t.stopLocked("crash")
		delete(e.threads, id)
	}
	e.cbQueue = nil
	e.mu.Unlock()
	_ = e.srv.Close()
	e.cancel()
	e.wg.Wait()
	e.hwg.Wait()
}

// Wait blocks until cond (called with no lock held) is true, re-checking it after every change
// of the executor's state, or until ctx ends.
func (e *Executor) Wait(ctx context.Context, cond func() bool) error {
	for {
		e.mu.Lock()
		ch := e.changed
		e.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("xxltest: condition not met: %w", ctx.Err())
		}
	}
}

// Requests returns the requests received so far, in order.
func (e *Executor) Requests() []Request {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Request(nil), e.requests...)
}

// RequestsTo returns the requests received for one path ("/run"), in order.
func (e *Executor) RequestsTo(uri string) []Request {
	var out []Request
	for _, r := range e.Requests() {
		if r.URI == uri {
			out = append(out, r)
		}
	}
	return out
}

// RunCount returns how many /run requests carried logID (accepted or not).
func (e *Executor) RunCount(logID int64) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.runs[logID]
}

// AdminCalls returns the calls made to the admin so far, in order.
func (e *Executor) AdminCalls() []AdminCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]AdminCall(nil), e.calls...)
}

// Callbacks returns the callback items an admin accepted (code 200), in the order sent.
func (e *Executor) Callbacks() []xxl.HandleCallbackParam {
	var out []xxl.HandleCallbackParam
	for _, c := range e.AdminCalls() {
		if c.Endpoint != "api/callback" || !c.OK {
			continue
		}
		var items []xxl.HandleCallbackParam
		if err := xxl.Unmarshal(c.Body, &items); err == nil {
			out = append(out, items...)
		}
	}
	return out
}

// PendingCallbacks returns how many callback items wait to be sent or sent again.
func (e *Executor) PendingCallbacks() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := len(e.cbQueue)
	for _, l := range e.cbFailed {
		n += len(l)
	}
	return n
}

// Running reports whether a job's thread is running a trigger or has triggers queued.
func (e *Executor) Running(jobID int64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.threads[jobID]
	return t != nil && t.busyLocked()
}

// RetryCallbacksNow sends the failed callback lists again at once (what the retry timer does).
func (e *Executor) RetryCallbacksNow(ctx context.Context) {
	e.mu.Lock()
	lists := e.cbFailed
	e.cbFailed = nil
	e.mu.Unlock()
	for _, l := range lists {
		e.sendCallback(ctx, l)
	}
}

// ReadLog reads a run's log as /log answers it.
func (e *Executor) ReadLog(logDateTim, logID, fromLine int64) xxl.LogResult {
	return e.readLog(logDateTim, logID, fromLine)
}

// notifyLocked wakes Wait callers; e.mu is held.
func (e *Executor) notifyLocked() {
	close(e.changed)
	e.changed = make(chan struct{})
}

func (e *Executor) registryParam() xxl.RegistryParam {
	return xxl.RegistryParam{RegistryGroup: "EXECUTOR", RegistryKey: e.cfg.AppName, RegistryValue: e.address}
}

func (e *Executor) registryLoop() {
	defer e.wg.Done()
	if len(e.cfg.AdminAddresses) == 0 {
		return
	}
	for {
		ctx, cancel := context.WithTimeout(e.ctx, xxl.DefaultTimeout)
		e.adminCall(ctx, "api/registry", e.registryParam())
		cancel()
		t := time.NewTimer(e.cfg.RegistryInterval)
		select {
		case <-e.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// adminCall tries the admins in order until one answers code 200, and records the call.
func (e *Executor) adminCall(ctx context.Context, endpoint string, body any) bool {
	payload, _ := xxl.Marshal(body)
	call := AdminCall{Endpoint: endpoint, Body: payload}
	for _, admin := range e.cfg.AdminAddresses {
		call.Admin = admin
		rt, err := e.client.Call(ctx, admin, e.cfg.AccessToken, endpoint, body)
		call.Answer, call.Err = rt, err
		if err == nil && rt.Code == xxl.CodeSuccess {
			call.OK = true
			break
		}
	}
	e.mu.Lock()
	if !e.crashed || endpoint != "api/callback" {
		e.calls = append(e.calls, call)
	}
	e.notifyLocked()
	e.mu.Unlock()
	return call.OK
}

// callback queues one run's result.
func (e *Executor) callback(p xxl.TriggerParam, code int64, msg string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.crashed {
		return
	}
	e.cbQueue = append(e.cbQueue, xxl.HandleCallbackParam{LogID: p.LogID, LogDateTim: p.LogDateTime, HandleCode: code, HandleMsg: msg})
	e.notifyLocked()
	select {
	case e.cbWake <- struct{}{}:
	default:
	}
}

// takeQueueLocked takes the queued callbacks as TriggerCallbackThread does: the first item
// taken goes last, after the rest drained behind it.
func (e *Executor) takeQueueLocked() []xxl.HandleCallbackParam {
	if len(e.cbQueue) == 0 {
		return nil
	}
	first, rest := e.cbQueue[0], e.cbQueue[1:]
	list := append(append([]xxl.HandleCallbackParam(nil), rest...), first)
	e.cbQueue = nil
	return list
}

func (e *Executor) callbackLoop() {
	defer e.wg.Done()
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-e.cbWake:
		}
		if len(e.cfg.AdminAddresses) == 0 {
			continue // they stay queued
		}
		e.mu.Lock()
		list := e.takeQueueLocked()
		e.mu.Unlock()
		if len(list) > 0 {
			e.sendCallback(e.ctx, list)
		}
	}
}

func (e *Executor) retryLoop() {
	defer e.wg.Done()
	t := time.NewTicker(e.cfg.CallbackRetryInterval)
	defer t.Stop()
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-t.C:
			e.RetryCallbacksNow(e.ctx)
		}
	}
}

// sendCallback sends one list; on failure it is kept for the retry loop. Each run's log gets
// XXL-JOB's line saying how the callback went.
func (e *Executor) sendCallback(ctx context.Context, list []xxl.HandleCallbackParam) {
	cctx, cancel := context.WithTimeout(ctx, xxl.DefaultTimeout)
	defer cancel()
	ok := e.adminCall(cctx, "api/callback", list)
	line := "<br>----------- xxl-job job callback finish."
	if !ok {
		calls := e.AdminCalls()
		last := calls[len(calls)-1]
		line = fmt.Sprintf("<br>----------- xxl-job job callback fail, callbackResult:ReturnT [code=%d, msg=%s, content=null]", last.Answer.Code, nullStr(last.Answer.Msg))
		if last.Err != nil {
			line = "<br>----------- xxl-job job callback fail, callbackResult:" + last.Err.Error()
		}
		e.mu.Lock()
		if !e.crashed {
			e.cbFailed = append(e.cbFailed, list)
			e.notifyLocked()
		}
		e.mu.Unlock()
	}
	for _, it := range list {
		e.appendLog(it.LogDateTim, it.LogID, "TriggerCallbackThread", line)
	}
}

func nullStr(s string) string {
	if s == "" {
		return "null"
	}
	return s
}

// serve answers one request as EmbedServer does: POST only, the token, then the exact URI.
func (e *Executor) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 5<<20+1))
	rec := Request{Method: r.Method, URI: r.RequestURI, Body: body}
	rec.Token = r.Header.Get(xxl.TokenHeader)
	_, rec.HasToken = r.Header[http.CanonicalHeaderKey(xxl.TokenHeader)]
	rt := e.process(r.Method, r.RequestURI, rec.Token, body)
	rec.Answer = rt
	e.mu.Lock()
	e.requests = append(e.requests, rec)
	e.notifyLocked()
	e.mu.Unlock()
	out, _ := xxl.Marshal(rt)
	w.Header().Set("Content-Type", "text/html;charset=UTF-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
}

func fail(msg string) xxl.ReturnT { return xxl.ReturnT{Code: xxl.CodeFail, Msg: msg} }

var ok = xxl.ReturnT{Code: xxl.CodeSuccess}

func (e *Executor) process(method, uri, token string, body []byte) xxl.ReturnT {
	if method != http.MethodPost {
		return fail(xxl.MsgMethodNotAllow)
	}
	if strings.TrimSpace(uri) == "" {
		return fail("invalid request, uri-mapping empty.")
	}
	if strings.TrimSpace(e.cfg.AccessToken) != "" && token != e.cfg.AccessToken {
		return fail(xxl.MsgTokenWrong)
	}
	if len(body) > 5<<20 {
		return fail("request error:io.netty.handler.codec.TooLongFrameException: HTTP content length exceeded 5242880 bytes.")
	}
	parse := func(v any) error {
		if err := xxl.Unmarshal(body, v); err != nil {
			return fmt.Errorf("com.google.gson.JsonSyntaxException: %w", err)
		}
		return nil
	}
	switch uri {
	case "/beat":
		return ok
	case "/idleBeat":
		var p xxl.IdleBeatParam
		if err := parse(&p); err != nil {
			return fail("request error:" + err.Error())
		}
		return e.idleBeat(p)
	case "/run":
		var p xxl.TriggerParam
		if err := parse(&p); err != nil {
			return fail("request error:" + err.Error())
		}
		return e.run(p)
	case "/kill":
		var p xxl.KillParam
		if err := parse(&p); err != nil {
			return fail("request error:" + err.Error())
		}
		return e.kill(p)
	case "/log":
		var p xxl.LogParam
		if err := parse(&p); err != nil {
			return fail("request error:" + err.Error())
		}
		lr := e.readLog(p.LogDateTim, p.LogID, p.FromLineNum)
		content, _ := xxl.Marshal(lr)
		return xxl.ReturnT{Code: xxl.CodeSuccess, Content: content}
	default:
		return fail("invalid request, uri-mapping(" + uri + ") not found.")
	}
}

func (e *Executor) idleBeat(p xxl.IdleBeatParam) xxl.ReturnT {
	e.mu.Lock()
	defer e.mu.Unlock()
	if t := e.threads[p.JobID]; t != nil && t.busyLocked() {
		return fail(xxl.MsgIdleBusy)
	}
	return ok
}

func (e *Executor) kill(p xxl.KillParam) xxl.ReturnT {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.threads[p.JobID]
	if t == nil {
		return xxl.ReturnT{Code: xxl.CodeSuccess, Msg: xxl.MsgAlreadyKilled}
	}
	delete(e.threads, p.JobID)
	t.stopLocked(xxl.MsgKillReason)
	e.notifyLocked()
	return ok
}

// scriptCommands are the interpreters and file suffixes of the script GLUE types.
var scriptCommands = map[string][2]string{
	"GLUE_SHELL":      {"bash", ".sh"},
	"GLUE_PYTHON":     {"python", ".py"},
	"GLUE_PHP":        {"php", ".php"},
	"GLUE_NODEJS":     {"node", ".js"},
	"GLUE_POWERSHELL": {"powershell", ".ps1"},
}

// run is ExecutorBizImpl.run: find or replace the job's thread, apply the block strategy, queue.
func (e *Executor) run(p xxl.TriggerParam) xxl.ReturnT {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.runs[p.LogID]++
	if e.stopped {
		return fail("executor stopped")
	}
	t := e.threads[p.JobID]
	var removeReason string
	var h Handler
	var key, name string
	switch glue := p.GlueType; {
	case glue == "BEAN":
		nh := e.handlers[p.ExecutorHandler]
		key, name = "bean:"+p.ExecutorHandler, p.ExecutorHandler
		if t != nil && t.key != key {
			removeReason, t = xxl.MsgChangeHandler, nil
		}
		if t == nil {
			if nh == nil {
				return fail("job handler [" + p.ExecutorHandler + "] not found.")
			}
			h = nh
		}
	case glue == "GLUE_GROOVY":
		key, name = fmt.Sprintf("groovy:%d", p.GlueUpdatetime), "GlueJobHandler"
		if t != nil && t.key != key {
			removeReason, t = xxl.MsgChangeSource, nil
		}
		if t == nil {
			if e.cfg.Groovy == nil {
				return fail("startup failed:\nscript.groovy: no Groovy engine in this executor")
			}
			nh, err := e.cfg.Groovy(p.GlueSource)
			if err != nil {
				return fail(err.Error())
			}
			h = nh
		}
	case scriptCommands[glue][0] != "":
		key, name = fmt.Sprintf("script:%d", p.GlueUpdatetime), "ScriptJobHandler"
		if t != nil && t.key != key {
			removeReason, t = xxl.MsgChangeSource, nil
		}
		if t == nil {
			h = e.scriptHandler(p)
		}
	default:
		g := p.GlueType
		if g == "" {
			g = "null"
		}
		return fail("glueType[" + g + "] is not valid.")
	}
	if t != nil {
		switch p.ExecutorBlockStrategy {
		case "DISCARD_LATER":
			if t.busyLocked() {
				return fail(xxl.MsgDiscardLater)
			}
		case "COVER_EARLY":
			if t.busyLocked() {
				removeReason, h, t = xxl.MsgCoverEarly, t.handler, nil
			}
		}
	}
	if t == nil {
		if old := e.threads[p.JobID]; old != nil {
			old.stopLocked(removeReason)
		}
		e.threadN++
		t = &jobThread{e: e, jobID: p.JobID, key: key, name: name, handler: h, queued: map[int64]bool{},
			wake: make(chan struct{}, 1), done: make(chan struct{}), serial: e.threadN}
		e.threads[p.JobID] = t
		e.wg.Add(1)
		go t.loop()
	}
	if t.queued[p.LogID] {
		return fail(fmt.Sprintf("%s%d", xxl.MsgRepeatTrigger, p.LogID))
	}
	t.queued[p.LogID] = true
	t.queue = append(t.queue, p)
	t.wakeUp()
	e.notifyLocked()
	return ok
}

// scriptHandler runs a script GLUE source as ScriptJobHandler: saved under gluesource/, run with
// its interpreter and the arguments param, shard index, shard total, output into the run's log.
func (e *Executor) scriptHandler(p xxl.TriggerParam) Handler {
	cmdName, suffix := scriptCommands[p.GlueType][0], scriptCommands[p.GlueType][1]
	return func(ctx context.Context, job *Job) {
		dir := filepath.Join(e.cfg.LogDir, "gluesource")
		file := filepath.Join(dir, fmt.Sprintf("%d_%d%s", job.Param.JobID, job.Param.GlueUpdatetime, suffix))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			job.Fail(err.Error())
			return
		}
		if err := os.WriteFile(file, []byte(job.Param.GlueSource), 0o755); err != nil {
			job.Fail(err.Error())
			return
		}
		job.Log("----------- script file:%s -----------", file)
		code, err := e.runScript(ctx, cmdName, file, job.Param)
		if err != nil {
			job.Fail(err.Error())
			return
		}
		if code != 0 {
			job.Fail(fmt.Sprintf("script exit value(%d) is failed", code))
		}
	}
}
