package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/etcdembed"
	"github.com/jobmesh/jobmesh/services/executor-agent/meshtls"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk/sdktest"
)

// TestClusterOfServiceCommands runs the cluster layout: `jobmesh registry`, `jobmesh logsvc`,
// `jobmesh gateway` and two `jobmesh scheduler` replicas, each with only its flags, on one etcd
// and one Postgres database, plus an SDK executor that demands its group's access token (the
// scheduler reads it from the registry as a service). A job created through the gateway's REST
// API fires on the executor and its successful run and output come back through the gateway;
// every command stops cleanly when its context ends.
func TestClusterOfServiceCommands(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// Every hop is mutual TLS with certificates of one CA; etcd has a CA of its own.
	certDir := t.TempDir()
	ca, err := meshtls.EnsureCA(certDir)
	if err != nil {
		t.Fatal(err)
	}
	node, err := ca.Leaf("node")
	if err != nil {
		t.Fatal(err)
	}
	nodeID, err := meshtls.Load(node)
	if err != nil {
		t.Fatal(err)
	}
	etcdCA, err := meshtls.EnsureCA(filepath.Join(certDir, "etcd"))
	if err != nil {
		t.Fatal(err)
	}
	etcdServer, err := etcdCA.Leaf("server")
	if err != nil {
		t.Fatal(err)
	}
	etcdClient, err := etcdCA.Leaf("client")
	if err != nil {
		t.Fatal(err)
	}
	etcd, err := etcdembed.Start(ctx, etcdembed.Config{Dir: t.TempDir(), Unsafe: true, TLS: &etcdServer, ClientTLS: &etcdClient})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	tlsArgs := []string{"--tls-cert", node.Cert, "--tls-key", node.Key, "--tls-ca", node.CA}
	etcdArgs := []string{"--etcd-cert", etcdClient.Cert, "--etcd-key", etcdClient.Key, "--etcd-ca", etcdClient.CA}

	addr := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	const (
		internal = "internal-secret-internal-secret-0123"
		password = "cluster-admin-password"
		groupTok = "cluster-group-access-token"
	)
	type proc struct {
		name string
		run  func(context.Context, []string, io.Writer, io.Writer) error
		args []string
		up   string // the line printed once it serves
	}
	// The processes must know each other's addresses before they listen, so the test picks free
	// ports first; another test may take one meanwhile, and then the cluster starts again.
	var (
		sched1, sched2, reg, logs, authAddr, httpAddr string
		stopAll                                       func()
	)
	for attempt := 1; stopAll == nil; attempt++ {
		sched1, sched2, reg, logs, authAddr, httpAddr = addr(), addr(), addr(), addr(), addr(), addr()
		common := append([]string{"--internal-token", internal, "--log-level", "warn"}, tlsArgs...)
		procs := []proc{
			{"registry", runRegistry, append([]string{"--grpc-addr", reg, "--etcd-endpoints", etcd.Endpoint(), "--database-url", dbURL,
				"--scheduler-addr", sched1, "--logs-addr", logs, "--auth-addr", authAddr}, etcdArgs...), "registry grpc "},
			{"logsvc", runLogsvc, []string{"--grpc-addr", logs, "--database-url", dbURL,
				"--scheduler-addr", sched1, "--registry-addr", reg, "--auth-addr", authAddr}, "logsvc grpc "},
			{"gateway", runGateway, []string{"--http-addr", httpAddr, "--grpc-addr", authAddr, "--database-url", dbURL,
				"--admin-password", password, "--scheduler-addr", sched1, "--registry-addr", reg, "--logs-addr", logs}, "gateway http "},
		}
		for i, s := range []string{sched1, sched2} {
			procs = append(procs, proc{fmt.Sprintf("scheduler-%d", i+1), runScheduler, append([]string{"--grpc-addr", s, "--etcd-endpoints", etcd.Endpoint(),
				"--database-url", dbURL, "--registry-addr", reg, "--logs-addr", logs, "--auth-addr", authAddr,
				"--replica-id", fmt.Sprintf("r%d", i+1), "--session-ttl", "2s"}, etcdArgs...), "scheduler grpc "})
		}

		pctx, stop := context.WithCancel(context.Background())
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			starting = true
			portRace = false
		)
		for _, p := range procs {
			out := newLineWaiter()
			var stderr bytes.Buffer
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := p.run(pctx, append(p.args, common...), out, &lockedWriter{w: &stderr, mu: &mu})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil && starting && attempt < 3 && strings.Contains(err.Error(), "address already in use"):
					portRace = true
				case err != nil:
					t.Errorf("%s: %v\n%s", p.name, err, stderr.String())
				}
				out.close()
			}()
			if !out.wait(p.up, 60*time.Second) {
				stop()
				wg.Wait()
				if portRace {
					t.Logf("attempt %d: a port was taken before %s listened; starting again", attempt, p.name)
					break
				}
				t.Fatalf("%s did not print %q", p.name, p.up)
			}
		}
		mu.Lock()
		raced := portRace
		starting = false
		mu.Unlock()
		if raced {
			stop() // already stopped above; for the analyzers
			continue
		}
		stopAll = func() {
			stop()
			wg.Wait()
		}
	}
	defer stopAll()

	base := "http://" + httpAddr
	// Every server answers the health protocol without a token, over mutual TLS only; a closed
	// port does not.
	if err := runHealth(ctx, append(tlsArgs, reg, logs, authAddr, sched1, sched2, base+"/healthz"), io.Discard, io.Discard); err != nil {
		t.Errorf("jobmesh health on the cluster: %v", err)
	}
	for _, a := range []string{reg, logs, authAddr, sched1, sched2} {
		if err := runHealth(ctx, []string{"--timeout", "2s", "--insecure", a}, io.Discard, io.Discard); err == nil {
			t.Errorf("jobmesh health --insecure %s: served in plaintext, want refused", a)
		}
	}
	if err := runHealth(ctx, append(tlsArgs, "--timeout", "300ms", addr()), io.Discard, io.Discard); err == nil {
		t.Error("jobmesh health on a closed port succeeded")
	}

	var login struct {
		Token string `json:"token"`
	}
	if code := rest(t, "", "POST", base+"/api/v1/auth/login", map[string]any{"username": "admin", "password": password}, &login); code != 200 {
		t.Fatalf("login = %d", code)
	}
	tok := login.Token
	var group struct {
		Group struct {
			ID string `json:"id"`
		} `json:"group"`
	}
	if code := rest(t, tok, "POST", base+"/api/v1/executor-groups", map[string]any{"app_name": "cluster-app", "title": "Cluster",
		"address_type": "ADDRESS_TYPE_AUTO", "access_token": groupTok}, &group); code != 200 {
		t.Fatalf("create group = %d", code)
	}

	// The executor registers with the registry and delivers to logsvc with its group's token.
	ex, err := sdk.New(sdk.Config{AppName: "cluster-app", InstanceID: "e1", ListenAddr: "127.0.0.1:0", RegistryAddr: reg,
		LogsvcAddr: logs, LogDir: t.TempDir(), AccessToken: groupTok, TLS: nodeID,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ex.Handle("hello", func(ctx context.Context, job *sdk.Job) error {
		job.Logf("hello from %s", job.TriggerID)
		return nil
	})
	if err := ex.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer sdktest.Stop(ex)

	var job struct {
		Job struct {
			ID string `json:"id"`
		} `json:"job"`
	}
	if code := rest(t, tok, "POST", base+"/api/v1/jobs", map[string]any{"name": "hello", "group_id": group.Group.ID,
		"schedule": map[string]any{"type": "SCHEDULE_TYPE_FIX_RATE", "expression": "1s"}, "glue_type": "GLUE_TYPE_BEAN",
		"handler": "hello", "status": "JOB_STATUS_RUNNING"}, &job); code != 200 {
		t.Fatalf("create job = %d", code)
	}

	// A run of the schedule succeeds and its output line reaches logsvc, read through the gateway.
	deadline := time.Now().Add(45 * time.Second)
	for {
		if time.Now().After(deadline) {
			t.Fatal("no successful run with its output within 45s")
		}
		time.Sleep(200 * time.Millisecond)
		var list struct {
			Runs []struct {
				ID     string `json:"id"`
				Status string `json:"status"`
			} `json:"runs"`
		}
		if code := rest(t, tok, "GET", base+"/api/v1/logs?job_id="+job.Job.ID, nil, &list); code != 200 {
			t.Fatalf("list runs = %d", code)
		}
		found := false
		for _, r := range list.Runs {
			if r.Status != "RUN_STATUS_SUCCESS" {
				continue
			}
			var lines struct {
				Lines []struct {
					Text string `json:"text"`
				} `json:"lines"`
			}
			rest(t, tok, "GET", base+"/api/v1/logs/"+r.ID+"/lines", nil, &lines)
			for _, l := range lines.Lines {
				found = found || strings.Contains(l.Text, "hello from "+r.ID)
			}
		}
		if found {
			break
		}
	}
	// A manual trigger sent (through the gateway) to scheduler-1 of a job whose partition
	// scheduler-2 leads is forwarded there, over mutual TLS with the internal token, and runs.
	var status struct {
		Partitions []struct {
			Partition int    `json:"partition"`
			LeaderID  string `json:"leader_id"`
		} `json:"partitions"`
	}
	if code := rest(t, tok, "GET", base+"/api/v1/scheduler/status", nil, &status); code != 200 || len(status.Partitions) == 0 {
		t.Fatalf("scheduler status = %d, %d partitions", code, len(status.Partitions))
	}
	var manual string
	for i := 0; manual == "" && i < 32; i++ {
		if code := rest(t, tok, "POST", base+"/api/v1/jobs", map[string]any{"name": fmt.Sprintf("manual-%d", i), "group_id": group.Group.ID,
			"schedule": map[string]any{"type": "SCHEDULE_TYPE_NONE"}, "glue_type": "GLUE_TYPE_BEAN", "handler": "hello"}, &job); code != 200 {
			t.Fatalf("create job = %d", code)
		}
		var id int
		fmt.Sscan(job.Job.ID, &id)
		if status.Partitions[id%len(status.Partitions)].LeaderID == "r2" {
			manual = job.Job.ID
		}
	}
	if manual == "" {
		t.Fatal("no job of a partition r2 leads in 32 jobs")
	}
	var trig struct {
		TriggerIDs []string `json:"trigger_ids"`
	}
	if code := rest(t, tok, "POST", base+"/api/v1/jobs/"+manual+":trigger", map[string]any{}, &trig); code != 200 || len(trig.TriggerIDs) != 1 {
		t.Fatalf("trigger job %s = %d, trigger ids %v", manual, code, trig.TriggerIDs)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		var run struct {
			Run struct {
				Status string `json:"status"`
			} `json:"run"`
		}
		if rest(t, tok, "GET", base+"/api/v1/logs/"+trig.TriggerIDs[0], nil, &run); run.Run.Status == "RUN_STATUS_SUCCESS" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("manual run %s of job %s: %q, not a success within 30s", trig.TriggerIDs[0], manual, run.Run.Status)
		}
	}
	// People's tokens are checked by every service: no token, no jobs.
	if code := rest(t, "", "GET", base+"/api/v1/jobs", nil, nil); code != http.StatusUnauthorized {
		t.Errorf("GET /api/v1/jobs without a token = %d, want 401", code)
	}
}

// rest makes a JSON call with bearer token tok (none when empty) and decodes the answer into out.
func rest(t *testing.T, tok, method, url string, body, out any) int {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Logf("%s %s = %d: %s", method, url, resp.StatusCode, raw)
	}
	if out != nil && resp.StatusCode == 200 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: decode %q: %v", method, url, raw, err)
		}
	}
	return resp.StatusCode
}

// lineWaiter is a stdout that lets a test wait for a line with a prefix.
type lineWaiter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	change chan struct{}
	closed bool
}

func newLineWaiter() *lineWaiter { return &lineWaiter{change: make(chan struct{}, 1)} }

func (w *lineWaiter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	select {
	case w.change <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (w *lineWaiter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	select {
	case w.change <- struct{}{}:
	default:
	}
}

// wait reports whether a line starting with prefix was written within d.
func (w *lineWaiter) wait(prefix string, d time.Duration) bool {
	timeout := time.After(d)
	for {
		w.mu.Lock()
		for _, l := range strings.Split(w.buf.String(), "\n") {
			if strings.HasPrefix(l, prefix) {
				w.mu.Unlock()
				return true
			}
		}
		closed := w.closed
		w.mu.Unlock()
		if closed {
			return false
		}
		select {
		case <-w.change:
		case <-timeout:
			return false
		}
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
