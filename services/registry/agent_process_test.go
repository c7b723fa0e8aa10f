package registry_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/etcdembed/etcdtest"
	"github.com/jobmesh/jobmesh/services/registry"
)

// TestAgentProcessLeavesTheView runs the real jobmesh-agent binary against the registry: killed
// with SIGKILL, its registration stream breaks and the registry revokes its lease; stopped with
// SIGTERM it ends the stream itself. Either way it leaves the live view at once, long before the
// registry's TTL, which only removes executors whose connection went silent (XXL-JOB takes 90 s
// for all of them).
func TestAgentProcessLeavesTheView(t *testing.T) {
	t.Parallel()
	bin := buildAgent(t)
	// A TTL far above the waits below: leaving proves the lease was revoked, not expired.
	c, regAddr := serveAt(t, dbtest.Store{Name: "sqlite", Config: db.Config{DataDir: t.TempDir()}}, etcdtest.Client(t),
		registry.Config{ExecutorTTL: 5 * time.Minute})
	const app = "proc-app"
	ensureGroup(t, c, app)
	st, err := c.WatchExecutors(t.Context(), &registryv1.WatchExecutorsRequest{AppName: app})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	if ev := recvWithin(t, st); ev.Type != registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_SNAPSHOT || len(ev.Executors) != 0 {
		t.Fatalf("first event = %v, want an empty snapshot", ev)
	}

	// waitEvent reads the stream until an event of type typ about instance arrives.
	waitEvent := func(typ registryv1.ExecutorEventType, instance string, logs string) time.Time {
		t.Helper()
		for {
			ev := recvWithinOr(t, st, 30*time.Second, logs)
			for _, e := range ev.Executors {
				if ev.Type == typ && e.InstanceId == instance {
					return time.Now()
				}
			}
		}
	}

	t.Run("SIGKILL", func(t *testing.T) {
		a := startAgent(t, bin, regAddr, app, "killed")
		waitEvent(registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_PUT, "killed", a.logPath)
		killedAt := a.signal(syscall.SIGKILL)
		left := waitEvent(registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_DELETE, "killed", a.logPath)
		t.Logf("SIGKILLed agent left the view %v after the kill", left.Sub(killedAt).Round(time.Millisecond))
	})

	t.Run("SIGTERM", func(t *testing.T) {
		a := startAgent(t, bin, regAddr, app, "stopped")
		waitEvent(registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_PUT, "stopped", a.logPath)
		a.signal(syscall.SIGTERM)
		waitEvent(registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_DELETE, "stopped", a.logPath)
		select {
		case <-a.exited:
			if a.err != nil {
				t.Errorf("agent exit after SIGTERM: %v, want a clean exit", a.err)
			}
		case <-time.After(30 * time.Second):
			t.Error("agent still running 30s after SIGTERM")
		}
	})
}

// agentProc is one jobmesh-agent process.
type agentProc struct {
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{} // closed once the process is reaped
	err     error         // its exit status, once exited is closed
}

// startAgent runs the agent binary registered with the registry at regAddr as app/instance.
func startAgent(t *testing.T, bin, regAddr, app, instance string) *agentProc {
	t.Helper()
	dir := t.TempDir()
	logPath := filepath.Join(dir, "agent.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close() // the child has its own copy
	cmd := exec.Command(bin, "--app-name", app, "--instance-id", instance, "--listen-addr", "127.0.0.1:0",
		"--registry-addr", regAddr, "--log-dir", filepath.Join(dir, "logs"), "--insecure")
	cmd.Env = append(os.Environ(), "OTEL_SDK_DISABLED=true", "JOBMESH_ACCESS_TOKEN="+agentToken)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start agent: %v", err)
	}
	a := &agentProc{cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		a.err = cmd.Wait()
		close(a.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-a.exited:
		default:
			_ = cmd.Process.Kill() // only this test's own child, by its pid
			<-a.exited
		}
	})
	return a
}

// signal sends sig to the agent and returns when it was sent.
func (a *agentProc) signal(sig syscall.Signal) time.Time {
	at := time.Now()
	_ = a.cmd.Process.Signal(sig)
	return at
}

// buildAgent builds cmd/jobmesh-agent into the test's temporary directory. It builds inside the
// agent's own module, so it works with and without go.work.
func buildAgent(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build jobmesh-agent: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "jobmesh-agent")
	cmd := exec.Command(goBin, "build", "-o", bin, "./cmd/jobmesh-agent")
	cmd.Dir = filepath.Join("..", "executor-agent")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build ./cmd/jobmesh-agent: %v\n%s", err, out.String())
	}
	return bin
}
