package devstack_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/internal/modproxy"
)

// outsideProgram is an application outside the repository that embeds the SDK: it registers the
// handler "outside" with its group's executor and serves until SIGTERM, then stops gracefully.
const outsideProgram = `package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jobmesh/jobmesh/services/executor-agent/meshtls"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	tls, err := meshtls.Load(meshtls.Files{Cert: os.Getenv("APP_TLS_CERT"), Key: os.Getenv("APP_TLS_KEY"), CA: os.Getenv("APP_TLS_CA")})
	if err != nil {
		return err
	}
	ex, err := sdk.New(sdk.Config{
		AppName: "outside", InstanceID: "outside-1", ListenAddr: "127.0.0.1:0",
		RegistryAddr: os.Getenv("APP_REGISTRY_ADDR"), LogsvcAddr: os.Getenv("APP_LOGSVC_ADDR"),
		AccessToken: os.Getenv("APP_ACCESS_TOKEN"), TLS: tls, LogDir: os.Getenv("APP_LOG_DIR"),
	})
	if err != nil {
		return err
	}
	ex.Handle("outside", func(ctx context.Context, job *sdk.Job) error {
		job.Logf("hello %s from outside the repository", job.Params)
		job.SetMessage("handled outside: " + job.Params)
		return nil
	})
	if err := ex.Start(ctx); err != nil {
		return err
	}
	fmt.Println("ready", ex.AdvertiseAddr())
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return ex.Stop(sctx)
}
`

// forbiddenInSDK are import path prefixes that must stay out of the SDK's import graph: an
// application embedding an executor brings its own telemetry, and the agent module depends on
// no database or etcd server.
var forbiddenInSDK = []string{
	"go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters", "github.com/prometheus/",
	"go.etcd.io/", "github.com/jackc/", "modernc.org/",
}

// TestSDKFromOutsideTheRepository builds a program outside the repository that imports the SDK
// the way a user's would be built: it requires the agent module at the version the repository
// requires, and go mod tidy and go build do the rest, with no go.work and no replace directive.
// The repository's modules come from a module proxy made from the working tree at the versions
// the go.mod files require (internal/modproxy), never from the network, so the build fails if
// the SDK module is not importable as published. The
// program then joins a running jobmesh as an executor of its own group, a job fired through the
// scheduler runs in it, and its result, with the handler's success message, and output are
// stored in logsvc. Stopped with SIGTERM, it leaves its group and exits cleanly.
func TestSDKFromOutsideTheRepository(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	mods, err := modproxy.Published(root)
	if err != nil {
		t.Fatal(err)
	}
	proxy := t.TempDir()
	if err := modproxy.Build(proxy, mods); err != nil {
		t.Fatal(err)
	}
	env, err := modproxy.Env(proxy, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	app := t.TempDir()
	if err := os.WriteFile(filepath.Join(app, "main.go"), []byte(outsideProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	// goCmd runs go in the program's directory. With -x, go logs every fetch from the network
	// ("# get https://…"); none may be of a jobmesh module, which must come from the proxy.
	goCmd := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = app, env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		for line := range strings.Lines(stderr.String()) {
			if strings.HasPrefix(line, "# get ") && !strings.HasPrefix(line, "# get file:") && strings.Contains(line, "/jobmesh/") {
				t.Errorf("go %s fetched a jobmesh module from the network: %s", strings.Join(args, " "), line)
			}
		}
		return stdout.String()
	}
	var agent modproxy.Module
	for _, m := range mods {
		if m.Path == modproxy.AgentPath {
			agent = m
		}
	}
	goCmd("mod", "init", "example.com/outside")
	goCmd("mod", "edit", "-require="+agent.Path+"@"+agent.Version)
	goCmd("mod", "tidy", "-x")
	bin := filepath.Join(app, "outside")
	goCmd("build", "-x", "-o", bin, ".")

	// The repository's modules came from the proxy: at its versions, unreplaced, with its zips.
	sums, err := os.ReadFile(filepath.Join(app, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mods {
		var got struct {
			Version string
			Replace *struct{ Path string }
		}
		if err := json.Unmarshal([]byte(goCmd("list", "-m", "-json", m.Path)), &got); err != nil {
			t.Fatal(err)
		}
		if got.Version != m.Version || got.Replace != nil {
			t.Errorf("%s: got version %s (replaced by %v), want %s from the proxy", m.Path, got.Version, got.Replace, m.Version)
		}
		sum, err := modproxy.Sum(proxy, m)
		if err != nil {
			t.Fatal(err)
		}
		if line := m.Path + " " + m.Version + " " + sum; !strings.Contains(string(sums), line+"\n") {
			t.Errorf("go.sum lacks %q: the module did not come from the proxy\n%s", line, sums)
		}
	}
	// The SDK links no exporter, Prometheus client, OTel SDK, database or etcd.
	deps := strings.Fields(goCmd("list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", agent.Path+"/sdk"))
	for _, d := range deps {
		for _, f := range forbiddenInSDK {
			if strings.HasPrefix(d, f) {
				t.Errorf("the SDK imports %s", d)
			}
		}
	}
	t.Logf("the SDK's import graph outside the standard library: %d packages", len(deps))

	// A jobmesh, and a group for the program.
	st := startStack(t, "")
	base := "http://" + st.HTTPAddr + "/api/v1"
	const token = "outside-group-access-token-0123456789"
	var group struct{ Group struct{ ID string } }
	if code := call(t, "POST", base+"/executor-groups", map[string]any{"app_name": "outside", "title": "outside", "access_token": token}, &group); code != http.StatusOK {
		t.Fatalf("create group = %d", code)
	}

	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "APP_TLS_CERT="+st.TLSFiles.Cert, "APP_TLS_KEY="+st.TLSFiles.Key, "APP_TLS_CA="+st.TLSFiles.CA,
		"APP_REGISTRY_ADDR="+st.RegistryAddr, "APP_LOGSVC_ADDR="+st.LogsAddr, "APP_ACCESS_TOKEN="+token, "APP_LOG_DIR="+t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var exitErr error
	exited, ready := make(chan struct{}), make(chan string, 1)
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "ready "); ok {
				ready <- addr
			}
		}
		exitErr = cmd.Wait()
	}()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill() // this test's own child, by its pid
			<-exited
		}
	})
	var addr string
	select {
	case addr = <-ready:
	case <-exited:
		t.Fatalf("program exited before it was ready: %v\n%s", exitErr, stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("program not ready within 60s\n%s", stderr.String())
	}
	waitGroupAddresses(t, base, group.Group.ID, addr)

	// A job of the group, fired through the scheduler, runs in the program.
	id := createJob(t, base, map[string]any{"name": "outside", "group_id": group.Group.ID, "handler": "outside",
		"params": "world", "schedule": map[string]any{"type": "SCHEDULE_TYPE_NONE"}})
	var trig struct {
		TriggerIDs []string `json:"trigger_ids"`
	}
	if code := call(t, "POST", base+"/jobs/"+id+":trigger", map[string]any{}, &trig); code != http.StatusOK || len(trig.TriggerIDs) != 1 {
		t.Fatalf("trigger = %d %+v", code, trig)
	}
	waitRuns(t, base, id, func(rs []fullRun) bool {
		return len(rs) == 1 && rs[0].Status != "" && rs[0].Status != "RUN_STATUS_RUNNING"
	})
	var got struct {
		Run struct {
			Status          string `json:"status"`
			ExecutorAddress string `json:"executor_address"`
			HandleMessage   string `json:"handle_message"`
		}
	}
	if code := call(t, "GET", base+"/logs/"+trig.TriggerIDs[0], nil, &got); code != http.StatusOK {
		t.Fatalf("GET run = %d", code)
	}
	if got.Run.Status != "RUN_STATUS_SUCCESS" || got.Run.ExecutorAddress != addr || got.Run.HandleMessage != "handled outside: world" {
		t.Errorf("run = %+v, want SUCCESS on %s with the message %q", got.Run, addr, "handled outside: world")
	}
	var lines struct{ Lines []struct{ Text string } }
	if code := call(t, "GET", base+"/logs/"+trig.TriggerIDs[0]+"/lines", nil, &lines); code != http.StatusOK {
		t.Fatalf("GET lines = %d", code)
	}
	if len(lines.Lines) != 1 || lines.Lines[0].Text != "hello world from outside the repository" {
		t.Errorf("run output = %+v, want the handler's line", lines.Lines)
	}

	// SIGTERM: the program stops gracefully, leaving its group.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if exitErr != nil {
			t.Errorf("program exit after SIGTERM: %v, want a clean exit\n%s", exitErr, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("program still running 30s after SIGTERM")
	}
	waitGroupAddresses(t, base, group.Group.ID)
}
