// Package cluster runs the processes of a jobmesh cluster and watches them: it starts a service
// command and waits for the lines it prints once it serves, stops it with SIGTERM or kills it with
// SIGKILL, finds the scheduler leader among replicas, and reads a process's CPU time and memory
// from /proc. The failover test and the load tool (`jobmesh bench`) share it.
package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Spec says how to start one process.
type Spec struct {
	// Name names the process in errors and logs.
	Name string
	// Path is the program; Args its arguments (without the program name); Env is added to the
	// environment it inherits.
	Path string
	Args []string
	Env  []string
	// Log receives the process's stderr and every stdout line; nil discards them.
	Log io.Writer
	// Ready are the prefixes of the lines the process prints on stdout once it serves
	// ("scheduler grpc "); Start returns once it has seen each of them. What follows a prefix on
	// its line is the line's value (Proc.Value).
	Ready []string
	// ReadyTimeout bounds the wait for the Ready lines. Default 60s.
	ReadyTimeout time.Duration
}

// Proc is a started process.
type Proc struct {
	spec   Spec
	cmd    *exec.Cmd
	out    *lineWriter
	exited chan struct{} // closed once the process has been reaped
	err    error         // its exit status, once exited is closed

	mu      sync.Mutex
	stopped bool  // Stop or Kill was called: its end was asked for
	last    Usage // the last usage read, kept for after it is gone
}

// Start starts the process and waits until it has printed every Ready line. The process is
// killed if the calling thread's process dies (Linux), so none outlives a crashed test or tool.
func Start(ctx context.Context, spec Spec) (*Proc, error) {
	if spec.ReadyTimeout == 0 {
		spec.ReadyTimeout = 60 * time.Second
	}
	log := spec.Log
	if log == nil {
		log = io.Discard
	}
	p := &Proc{spec: spec, exited: make(chan struct{}), out: newLineWriter(spec.Ready, log)}
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Env = append(os.Environ(), spec.Env...)
	cmd.Stdout = p.out
	cmd.Stderr = &lockedWriter{w: log, mu: &p.out.mu}
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.Name, err)
	}
	p.cmd = cmd
	fmt.Fprintf(cmd.Stderr, "=== %s: started pid %d: %s %s\n", time.Now().Format(time.RFC3339Nano), cmd.Process.Pid, spec.Path, strings.Join(spec.Args, " "))
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	timeout := time.NewTimer(spec.ReadyTimeout)
	defer timeout.Stop()
	select {
	case <-p.out.ready:
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("%s exited before serving: %v", spec.Name, p.err)
	case <-timeout.C:
		p.Kill()
		return nil, fmt.Errorf("%s: no %q on stdout within %v", spec.Name, spec.Ready, spec.ReadyTimeout)
	case <-ctx.Done():
		p.Kill()
		return nil, fmt.Errorf("start %s: %w", spec.Name, ctx.Err())
	}
}

// Name is the Spec's name.
func (p *Proc) Name() string { return p.spec.Name }

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Value returns what followed prefix (one of the Ready prefixes) on its line, trimmed.
func (p *Proc) Value(prefix string) string { return p.out.value(prefix) }

// Exited is closed once the process has ended and been reaped.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Err is the process's exit status once Exited is closed (nil for a clean exit).
func (p *Proc) Err() error { return p.err }

// Crashed says whether the process ended without Stop or Kill being called, and how.
func (p *Proc) Crashed() (bool, error) {
	select {
	case <-p.exited:
	default:
		return false, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return false, nil
	}
	if p.err == nil {
		return true, errors.New("exited with status 0")
	}
	return true, p.err
}

// Kill sends SIGKILL and waits until the process is gone; it returns when the signal was sent.
// It reads the process's usage just before, so Usage still answers afterwards.
func (p *Proc) Kill() time.Time {
	p.markStopped()
	_, _ = p.Usage()
	at := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	return at
}

// Stop sends sig (SIGTERM for a clean stop) and waits up to grace for the process to end, then
// kills it. It returns the exit status: nil for a clean exit, an error if it had to be killed.
func (p *Proc) Stop(sig os.Signal, grace time.Duration) error {
	select {
	case <-p.exited:
		return p.err
	default:
	}
	p.markStopped()
	_, _ = p.Usage()
	_ = p.cmd.Process.Signal(sig)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
		return p.err
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("%s did not stop within %v of %v; killed", p.spec.Name, grace, sig)
	}
}

func (p *Proc) markStopped() {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
}

// Usage reads the process's CPU time and memory; once the process is gone it returns the last
// reading (taken by Kill or Stop just before the end).
func (p *Proc) Usage() (Usage, error) {
	u, err := ReadUsage(p.Pid())
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.exited:
		return p.last, nil
	default:
	}
	if err != nil {
		return p.last, err
	}
	p.last = u
	return u, nil
}

// lineWriter is a process's stdout: it copies every line to the log and notes the Ready lines.
type lineWriter struct {
	mu      sync.Mutex
	log     io.Writer
	partial bytes.Buffer
	want    []string
	values  map[string]string
	ready   chan struct{} // closed once every wanted prefix was seen
}

func newLineWriter(want []string, log io.Writer) *lineWriter {
	w := &lineWriter{log: log, want: want, values: map[string]string{}, ready: make(chan struct{})}
	if len(want) == 0 {
		close(w.ready)
	}
	return w
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, _ = w.log.Write(b)
	if len(w.values) == len(w.want) {
		return len(b), nil
	}
	w.partial.Write(b)
	for {
		i := bytes.IndexByte(w.partial.Bytes(), '\n')
		if i < 0 {
			break // the rest of the line is still to come
		}
		line := string(w.partial.Next(i + 1)[:i])
		for _, prefix := range w.want {
			if v, ok := strings.CutPrefix(line, prefix); ok {
				if _, seen := w.values[prefix]; !seen {
					w.values[prefix] = strings.TrimSpace(v)
				}
			}
		}
	}
	if len(w.values) == len(w.want) {
		close(w.ready)
	}
	return len(b), nil
}

func (w *lineWriter) value(prefix string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.values[prefix]
}

// lockedWriter serializes stderr with stdout's copies into the same log.
type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
