package sdk

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
)

// glue says how a GLUE script type runs: XXL-JOB's GlueTypeEnum command and suffix.
type glue struct {
	interpreter string
	suffix      string
}

var glues = map[schedulerv1.GlueType]glue{
	schedulerv1.GlueType_GLUE_TYPE_GLUE_SHELL:      {"bash", ".sh"},
	schedulerv1.GlueType_GLUE_TYPE_GLUE_PYTHON:     {"python3", ".py"},
	schedulerv1.GlueType_GLUE_TYPE_GLUE_PYTHON2:    {"python", ".py"},
	schedulerv1.GlueType_GLUE_TYPE_GLUE_NODEJS:     {"node", ".js"},
	schedulerv1.GlueType_GLUE_TYPE_GLUE_PHP:        {"php", ".php"},
	schedulerv1.GlueType_GLUE_TYPE_GLUE_POWERSHELL: {"pwsh", ".ps1"},
}

// lookInterpreter finds a script interpreter on PATH. A path found is remembered for
// interpreterTTL (every fire asked PATH again: a stat per directory); one not found is looked
// for again at the next fire, so an interpreter installed meanwhile is found at once.
func (e *Executor) lookInterpreter(name string) (string, error) {
	now := time.Now()
	e.interpMu.Lock()
	c, ok := e.interps[name]
	e.interpMu.Unlock()
	if ok && now.Sub(c.at) < interpreterTTL {
		return c.path, nil
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("interpreter %s not found on this executor", name)
	}
	e.interpMu.Lock()
	e.interps[name] = interpreter{path: p, at: now}
	e.interpMu.Unlock()
	return p, nil
}

// interpreterTTL is how long a found interpreter's path is trusted without looking again.
const interpreterTTL = 10 * time.Second

// interpreter is a remembered interpreter path.
type interpreter struct {
	path string
	at   time.Time
}

// glueVersion names a GLUE source version: its update time, or a hash of the source when the
// scheduler sent none.
func glueVersion(t *executorv1.Trigger) string {
	if ms := t.GetGlueUpdatedUnixMs(); ms != 0 {
		return strconv.FormatInt(ms, 10)
	}
	sum := sha256.Sum256([]byte(t.GetGlueSource()))
	return "h" + hex.EncodeToString(sum[:8])
}

// scriptHandler runs a GLUE script: `<interpreter> <file> <params> <shard index> <shard total>`.
// The script file is the worker's: a worker runs one GLUE version of one job (its key names
// the version), writes the file at its first fire and deletes it when it ends.
func (e *Executor) scriptHandler(g glue, t *executorv1.Trigger) HandlerFunc {
	return func(ctx context.Context, job *Job) error {
		w := job.run.w
		if w.script == "" {
			file, err := e.writeScript(g, t)
			if err != nil {
				return err
			}
			w.script = file
		}
		interp, err := e.lookInterpreter(g.interpreter)
		if err != nil {
			return err
		}
		return e.runProcess(ctx, job, interp, w.script, job.Params, strconv.Itoa(job.ShardIndex), strconv.Itoa(job.ShardTotal))
	}
}

// glueSeq numbers the GLUE script files an executor writes, so that two workers of one job
// and version (one replacing the other) never share a file.
var glueSeq atomic.Uint64

// writeScript writes the GLUE source to LogDir/glue/<job>_<version>_<n><suffix> and returns
// the path. It writes aside and renames, so the file is whole whenever it exists.
func (e *Executor) writeScript(g glue, t *executorv1.Trigger) (string, error) {
	dir := filepath.Join(e.cfg.LogDir, "glue")
	path := filepath.Join(dir, fmt.Sprintf("%d_%s_%d%s", t.GetJobId(), glueVersion(t), glueSeq.Add(1), g.suffix))
	f, err := os.CreateTemp(dir, ".glue-*")
	if err != nil {
		return "", fmt.Errorf("glue script: %w", err)
	}
	_, werr := f.WriteString(t.GetGlueSource())
	cerr := f.Close()
	if err := errors.Join(werr, cerr, os.Chmod(f.Name(), 0o700), os.Rename(f.Name(), path)); err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("glue script: %w", err)
	}
	return path, nil
}

// clearScripts deletes the GLUE script files and fire files (fireFiles) left by an executor
// that did not stop (at Start, when no worker holds one).
func (e *Executor) clearScripts() error {
	return errors.Join(clearDir(filepath.Join(e.cfg.LogDir, "glue")), clearDir(filepath.Join(e.cfg.LogDir, "fires")))
}

// clearDir deletes the files in dir.
func clearDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, ent := range ents {
		if !ent.IsDir() {
			if err := os.Remove(filepath.Join(dir, ent.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// commandHandler is the built-in "command" handler: it runs params as a program and its
// arguments, without a shell.
func (e *Executor) commandHandler(ctx context.Context, job *Job) error {
	argv, err := commandArgs(job.Params)
	if err != nil {
		return err
	}
	prog, err := exec.LookPath(argv[0])
	if err != nil {
		return fmt.Errorf("command %s not found on this executor", argv[0])
	}
	return e.runProcess(ctx, job, prog, argv[1:]...)
}

// commandArgs reads "command" params: a JSON array of strings, or words split on whitespace.
func commandArgs(params string) ([]string, error) {
	p := strings.TrimSpace(params)
	var argv []string
	if strings.HasPrefix(p, "[") {
		if err := json.Unmarshal([]byte(p), &argv); err != nil {
			return nil, fmt.Errorf("command params: want a JSON array of strings: %w", err)
		}
	} else {
		argv = strings.Fields(p)
	}
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New(`command params name no program: want ["prog", "arg", ...] or "prog arg ..."`)
	}
	return argv, nil
}

// runProcess runs prog in its own process group, with stdout and stderr as the fire's log
// lines. When ctx ends the fire's processes get SIGTERM, and SIGKILL after KillGrace. When prog
// exits, whatever it left running is killed, so nothing outlives the fire: its process group,
// and the processes that left the group (setsid, a new group) found by fireProcesses.
func (e *Executor) runProcess(ctx context.Context, job *Job, prog string, args ...string) error {
	if job.run == nil {
		return errors.New("runProcess: job is not an executor fire")
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("output pipe: %w", err)
	}
	ff, err := e.prepareFiles(job)
	if err != nil {
		pr.Close()
		pw.Close()
		return err
	}
	defer ff.remove()
	cmd := exec.Command(prog, args...)
	var left int
	cmd.Env, left = processEnv(ctx, job, ff)
	if left > 0 {
		job.run.logLine(contextLeftLine(left))
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if null, err := devNull(); err == nil {
		cmd.Stdin = null // else exec opens it, as it does for every command
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return fmt.Errorf("start %s: %w", filepath.Base(prog), err)
	}
	pw.Close()
	pgid := cmd.Process.Pid
	win := newPidWindow(pgid)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		copyLines(pr, job.run)
	}()
	// The worker waits for the leader itself; only a cancelled fire gets a goroutine (the
	// context's AfterFunc), which sends SIGTERM, and SIGKILL after KillGrace.
	var kill struct {
		sync.Mutex
		exited bool
		t      *time.Timer
	}
	stopKill := context.AfterFunc(ctx, func() {
		kill.Lock()
		defer kill.Unlock()
		if kill.exited {
			return
		}
		// Found while the leader lives: its children that left the group are still its children.
		signalFire(win, job.TriggerID, syscall.SIGTERM)
		kill.t = time.AfterFunc(e.cfg.KillGrace, func() {
			kill.Lock()
			defer kill.Unlock()
			if !kill.exited {
				signalFire(win, job.TriggerID, syscall.SIGKILL)
			}
		})
	})
	werr := cmd.Wait()
	cancelled := !stopKill()
	kill.Lock()
	kill.exited = true
	if kill.t != nil {
		kill.t.Stop()
	}
	kill.Unlock()
	// The leader's end ends its group, and whatever of the fire left it. (ESRCH when nothing
	// is left.)
	signalFire(win, job.TriggerID, syscall.SIGKILL)
	t := time.NewTimer(e.cfg.KillGrace + time.Second)
	select {
	case <-readDone:
	case <-t.C:
		// A process that left the group (setsid) still holds the output open: stop reading it.
		e.log.WarnContext(ctx, "a process outside the fire's process group keeps its output open; no longer reading it", "trigger_id", job.TriggerID)
		pr.Close()
		<-readDone
	}
	t.Stop()
	pr.Close()

	if cmd.ProcessState != nil {
		trace.SpanFromContext(ctx).SetAttributes(attribute.Int("process.exit.code", cmd.ProcessState.ExitCode()))
	}
	if cancelled {
		return context.Cause(ctx)
	}
	// What the process published: its marker lines, then its output file. A refused output
	// fails a fire that otherwise succeeded, naming it; the outputs taken go with the result.
	outErr := errors.Join(job.run.scriptOutputErr(), job.run.readOutputFile(ff.output))
	var ee *exec.ExitError
	if errors.As(werr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Errorf("killed by signal %s", ws.Signal())
		}
		return fmt.Errorf("exit code %d", ee.ExitCode())
	}
	if werr != nil {
		return werr
	}
	return outErr
}

// devNull is /dev/null opened once, the stdin of every fire's process (exec opened and closed it
// for each).
var devNull = sync.OnceValues(func() (*os.File, error) { return os.Open(os.DevNull) })

// signalFire sends sig to the fire's process group (its leader's pid) and to every process of
// the fire that left it.
func signalFire(win pidWindow, triggerID string, sig syscall.Signal) {
	pgid := win.leader
	_ = syscall.Kill(-pgid, sig)
	for _, p := range fireProcesses(win, pgid, triggerID) {
		_ = syscall.Kill(p, sig)
	}
}

// lineReaders are the buffers copyLines reads output with (64 KiB each: allocating and
// zeroing one per fire was a tenth of a script fire's own CPU).
var lineReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, maxText) }}

// copyLines turns a process's output into log lines; a line longer than maxText is split.
func copyLines(rd io.Reader, r *run) {
	br := lineReaders.Get().(*bufio.Reader)
	br.Reset(rd)
	defer func() {
		br.Reset(nil)
		lineReaders.Put(br)
	}()
	var n int64
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			n++
			text := string(bytes.TrimSuffix(line, []byte{'\n'}))
			r.logLine(text)
			if strings.HasPrefix(text, outputMarker) {
				r.markerOutput(n, strings.TrimSuffix(text[len(outputMarker):], "\r"))
			}
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

// processEnv is the agent's environment without its own JOBMESH_* and trace variables (the
// access token must not leak into scripts), plus the fire's, its workflow context and files
// (contextEnv, whose left it returns).
func processEnv(ctx context.Context, job *Job, ff fireFiles) ([]string, int) {
	parent := os.Environ()
	env := make([]string, 0, len(parent)+10+len(job.Context))
	for _, kv := range parent {
		if strings.HasPrefix(kv, "JOBMESH_") || strings.HasPrefix(kv, "TRACEPARENT=") || strings.HasPrefix(kv, "TRACESTATE=") {
			continue
		}
		env = append(env, kv)
	}
	var sched int64
	if !job.ScheduledTime.IsZero() {
		sched = job.ScheduledTime.UnixMilli()
	}
	env = append(env,
		"JOBMESH_JOB_ID="+strconv.FormatInt(job.ID, 10),
		"JOBMESH_TRIGGER_ID="+job.TriggerID,
		"JOBMESH_SCHEDULED_UNIX_MS="+strconv.FormatInt(sched, 10),
		"JOBMESH_ATTEMPT="+strconv.Itoa(job.Attempt),
		"JOBMESH_SHARD_INDEX="+strconv.Itoa(job.ShardIndex),
		"JOBMESH_SHARD_TOTAL="+strconv.Itoa(job.ShardTotal),
		"JOBMESH_PARAMS="+job.Params,
	)
	cenv, left := contextEnv(job, ff)
	env = append(env, cenv...)
	// The run span's context (the scheduler's when this process does not trace): the script's
	// own spans join the fire's trace.
	carrier := propagation.MapCarrier{}
	w3c.Inject(ctx, carrier)
	if tp := carrier["traceparent"]; tp != "" {
		env = append(env, "TRACEPARENT="+tp)
		if ts := carrier["tracestate"]; ts != "" {
			env = append(env, "TRACESTATE="+ts)
		}
	}
	return env, left
}
