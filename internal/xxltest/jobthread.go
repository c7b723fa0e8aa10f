package xxltest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/jobmesh/jobmesh/internal/xxl"
)

// jobThread is XXL-JOB's JobThread: one per job id, running its queued triggers one at a time.
// Its fields are guarded by the executor's mutex.
type jobThread struct {
	e       *Executor
	jobID   int64
	key     string // the handler's identity: a BEAN name, or the GLUE kind and update time
	name    string
	handler Handler
	serial  int

	queue      []xxl.TriggerParam
	queued     map[int64]bool // logIds queued and not started (triggerLogIdSet)
	running    bool
	stopped    bool
	stopReason string
	cancelRun  context.CancelFunc
	wake       chan struct{}
	done       chan struct{}
}

func (t *jobThread) busyLocked() bool { return t.running || len(t.queue) > 0 }

func (t *jobThread) wakeUp() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// stopLocked is toStop + interrupt: the running run is cancelled and reported killed with reason,
// and the queued ones after it. The caller has removed t from the executor's map.
func (t *jobThread) stopLocked(reason string) {
	if t.stopped {
		return
	}
	t.stopped, t.stopReason = true, reason
	if t.cancelRun != nil {
		t.cancelRun()
	}
	t.wakeUp()
}

func (t *jobThread) loop() {
	e := t.e
	defer e.wg.Done()
	defer close(t.done)
	idle := time.NewTimer(e.cfg.IdleTimeout)
	defer idle.Stop()
	for {
		e.mu.Lock()
		if t.stopped {
			rest := t.queue
			t.queue, t.queued = nil, map[int64]bool{}
			reason := t.stopReason
			e.notifyLocked()
			e.mu.Unlock()
			for _, p := range rest {
				e.callback(p, xxl.CodeFail, reason+xxl.MsgKilledQueued)
			}
			return
		}
		if len(t.queue) == 0 {
			e.mu.Unlock()
			select {
			case <-t.wake:
			case <-idle.C:
				e.mu.Lock()
				if len(t.queue) == 0 && e.threads[t.jobID] == t {
					delete(e.threads, t.jobID)
					t.stopped, t.stopReason = true, "excutor idel times over limit."
				}
				e.mu.Unlock()
				idle.Reset(e.cfg.IdleTimeout)
			}
			continue
		}
		p := t.queue[0]
		t.queue = t.queue[1:]
		delete(t.queued, p.LogID)
		t.running = true
		ctx, cancel := context.WithCancel(e.ctx)
		t.cancelRun = cancel
		e.notifyLocked()
		e.mu.Unlock()

		code, msg := t.execute(ctx, p)
		cancel()

		e.mu.Lock()
		t.running, t.cancelRun = false, nil
		stopped, reason := t.stopped, t.stopReason
		e.mu.Unlock()
		if stopped {
			e.callback(p, xxl.CodeFail, reason+xxl.MsgKilledRunning)
		} else {
			e.callback(p, code, msg)
		}
		if !idle.Stop() {
			select {
			case <-idle.C:
			default:
			}
		}
		idle.Reset(e.cfg.IdleTimeout)
	}
}

// execute runs one trigger as JobThread does and returns its handle code and message.
func (t *jobThread) execute(ctx context.Context, p xxl.TriggerParam) (code int64, msg string) {
	e := t.e
	job := &Job{Param: p, e: e, code: xxl.CodeSuccess, name: t.name}
	job.Log("<br>----------- xxl-job job execute start -----------<br>----------- Param:%s", p.ExecutorParams)
	done := make(chan string, 1) // the panic message, "" when the handler returned
	hctx, hcancel := context.WithCancel(ctx)
	defer hcancel()
	e.hwg.Add(1)
	go func() {
		defer e.hwg.Done()
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Sprintf("panic: %v\n%s", r, debug.Stack())
			}
		}()
		t.handler(hctx, job)
		done <- ""
	}()
	var timeout <-chan time.Time
	var interrupted <-chan struct{}
	if p.ExecutorTimeout > 0 {
		tm := time.NewTimer(time.Duration(p.ExecutorTimeout) * time.Second)
		defer tm.Stop()
		timeout = tm.C
		interrupted = ctx.Done() // FutureTask.get is interrupted by a kill
	}
	select {
	case perr := <-done:
		if perr != "" {
			job.Log("<br>----------- JobThread Exception:%s<br>----------- xxl-job job execute end(error) -----------", perr)
			return xxl.CodeFail, perr
		}
	case <-timeout:
		hcancel()
		job.Log("<br>----------- xxl-job job execute timeout")
		job.Log("java.util.concurrent.TimeoutException")
		job.Result(xxl.CodeTimeout, xxl.MsgTimeout)
		// the interrupted handler goes on alone, as the FutureTask thread does
	case <-interrupted:
		hcancel()
		job.Log("<br>----------- JobThread toStop, stopReason:%s", t.reasonNow())
		return xxl.CodeFail, "java.lang.InterruptedException"
	}
	code, msg = job.code, job.msg
	if code <= 0 {
		code, msg = xxl.CodeFail, xxl.MsgResultLost
	} else if len(msg) > 50000 {
		msg = msg[:50000] + "..."
	}
	job.Log("<br>----------- xxl-job job execute end(finish) -----------<br>----------- Result: handleCode=%d, handleMsg = %s", code, nullStr(msg))
	return code, msg
}

func (t *jobThread) reasonNow() string {
	t.e.mu.Lock()
	defer t.e.mu.Unlock()
	return t.stopReason
}

// runScript runs an interpreter on a script file with XXL-JOB's arguments, its output appended
// to the run's log, and returns the exit code.
func (e *Executor) runScript(ctx context.Context, cmdName, file string, p xxl.TriggerParam) (int, error) {
	cmd := exec.CommandContext(ctx, cmdName, file, p.ExecutorParams,
		strconv.FormatInt(p.BroadcastIndex, 10), strconv.FormatInt(p.BroadcastTotal, 10))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		e.appendRaw(p.LogDateTime, p.LogID, sc.Text())
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	if err != nil {
		return 0, err
	}
	return 0, nil
}

// logFile is {LogDir}/{yyyy-MM-dd of logDateTim}/{logId}.log.
func (e *Executor) logFile(logDateTim, logID int64) string {
	day := time.UnixMilli(logDateTim).In(e.cfg.Location).Format("2006-01-02")
	return filepath.Join(e.cfg.LogDir, day, strconv.FormatInt(logID, 10)+".log")
}

// appendLog writes one XxlJobHelper.log line: time, caller, thread, message.
func (e *Executor) appendLog(logDateTim, logID int64, caller, msg string) {
	now := time.Now().Format("2006-01-02 15:04:05")
	e.appendRaw(logDateTim, logID, fmt.Sprintf("%s [xxltest.%s#execute]-[0]-[xxl-job, JobThread-%d] %s", now, caller, logID, msg))
}

// appendRaw appends text to a run's log file, lines ending in "\r\n" as the executor writes them.
// The caller must not hold e.mu.
func (e *Executor) appendRaw(logDateTim, logID int64, text string) {
	e.logMu.Lock()
	defer e.logMu.Unlock()
	name := e.logFile(logDateTim, logID)
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		e.log.Error("xxltest: log dir", "error", err)
		return
	}
	f, err := os.OpenFile(name, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		e.log.Error("xxltest: log file", "error", err)
		return
	}
	_, _ = f.WriteString(strings.ReplaceAll(text, "\n", "\r\n") + "\r\n")
	f.Close()
	e.mu.Lock() // a new line is a change Wait callers may wait for
	e.notifyLocked()
	e.mu.Unlock()
}

// readLog is XxlJobFileAppender.readLog: lines fromLine.. of the file, each ending in "\n";
// toLineNum is the file's line count; isEnd is false for an existing file.
func (e *Executor) readLog(logDateTim, logID, fromLine int64) xxl.LogResult {
	e.logMu.Lock()
	data, err := os.ReadFile(e.logFile(logDateTim, logID))
	e.logMu.Unlock()
	if err != nil {
		return xxl.LogResult{FromLineNum: fromLine, ToLineNum: 0, LogContent: xxl.MsgLogFileNotExist, IsEnd: true}
	}
	// LineNumberReader ends a line at \n, \r or \r\n.
	s := strings.ReplaceAll(strings.ReplaceAll(string(data), "\r\n", "\n"), "\r", "\n")
	lines := strings.Split(s, "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	var b strings.Builder
	for i, l := range lines {
		if int64(i+1) >= fromLine {
			b.WriteString(l)
			b.WriteString("\n")
		}
	}
	return xxl.LogResult{FromLineNum: fromLine, ToLineNum: int64(len(lines)), LogContent: b.String()}
}
