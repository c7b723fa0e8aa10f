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

// lookInterpreter finds a script interpreter on PATH.
func lookInterpreter(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("interpreter %s not found on this executor", name)
	}
	return p, nil
}

// scriptHandler runs a GLUE script: `<interpreter> <file> <params> <shard index> <shard total>`.
func (e *Executor) scriptHandler(g glue, t *executorv1.Trigger) HandlerFunc {
	return func(ctx context.Context, job *Job) error {
		file, err := e.writeScript(g, t)
		if err != nil {
			return err
		}
		interp, err := lookInterpreter(g.interpreter)
		if err != nil {
			return err
		}
		return e.runProcess(ctx, job, interp, file, job.Params, strconv.Itoa(job.ShardIndex), strconv.Itoa(job.ShardTotal))
	}
}

// writeScript writes the GLUE source to LogDir/glue/<job>_<glue updated ms><suffix> once, and
// returns the path. Without an update time the name carries a hash of the source instead.
func (e *Executor) writeScript(g glue, t *executorv1.Trigger) (string, error) {
	version := strconv.FormatInt(t.GetGlueUpdatedUnixMs(), 10)
	if t.GetGlueUpdatedUnixMs() == 0 {
		sum := sha256.Sum256([]byte(t.GetGlueSource()))
		version = "h" + hex.EncodeToString(sum[:8])
	}
	dir := filepath.Join(e.cfg.LogDir, "glue")
	path := filepath.Join(dir, fmt.Sprintf("%d_%s%s", t.GetJobId(), version, g.suffix))
	if _, err := os.Stat(path); err == nil {
		return path, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("glue script: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("glue script: %w", err)
	}
	// Write aside and rename, so a concurrent reader never sees half a script.
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
	cmd := exec.Command(prog, args...)
	cmd.Env = processEnv(ctx, job)
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return fmt.Errorf("start %s: %w", filepath.Base(prog), err)
	}
	pw.Close()
	pgid := cmd.Process.Pid
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		copyLines(pr, job.run)
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	var werr error
	cancelled := false
	select {
	case werr = <-waited:
	case <-ctx.Done():
		cancelled = true
		// Found while the leader lives: its children that left the group are still its children.
		signalFire(pgid, job.TriggerID, syscall.SIGTERM)
		t := time.NewTimer(e.cfg.KillGrace)
		select {
		case werr = <-waited:
		case <-t.C:
			signalFire(pgid, job.TriggerID, syscall.SIGKILL)
			werr = <-waited
		}
		t.Stop()
	}
	// The leader's end ends its group, and whatever of the fire left it. (ESRCH when nothing
	// is left.)
	signalFire(pgid, job.TriggerID, syscall.SIGKILL)
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
	var ee *exec.ExitError
	if errors.As(werr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Errorf("killed by signal %s", ws.Signal())
		}
		return fmt.Errorf("exit code %d", ee.ExitCode())
	}
	return werr
}

// signalFire sends sig to the fire's process group (pgid, its leader's pid) and to every
// process of the fire that left it.
func signalFire(pgid int, triggerID string, sig syscall.Signal) {
	_ = syscall.Kill(-pgid, sig)
	for _, p := range fireProcesses(pgid, pgid, triggerID) {
		_ = syscall.Kill(p, sig)
	}
}

// copyLines turns a process's output into log lines; a line longer than maxText is split.
func copyLines(rd io.Reader, r *run) {
	br := bufio.NewReaderSize(rd, maxText)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			r.logLine(string(bytes.TrimSuffix(line, []byte{'\n'})))
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

// processEnv is the agent's environment without its own JOBMESH_* and trace variables (the
// access token must not leak into scripts), plus the fire's.
func processEnv(ctx context.Context, job *Job) []string {
	parent := os.Environ()
	env := make([]string, 0, len(parent)+9)
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
	return env
}
