package logsvc

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/etcdembed/etcdtest"
	"github.com/jobmesh/jobmesh/internal/grpcserver"
	"github.com/jobmesh/jobmesh/services/registry"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		os.Exit(crashChild()) // a logsvc process for TestKillBetweenBatchAndCommit
	}
	os.Exit(etcdtest.Main(m))
}

// serveRegistry runs a real registry over loopback gRPC and returns a client of it.
func serveRegistry(t *testing.T, st dbtest.Store, cli *clientv3.Client) registryv1.RegistryServiceClient {
	t.Helper()
	d := dbtest.Open(t, st.Config, "registry", registry.MigrationsFS())
	svc, err := registry.New(registry.Config{SealSecret: registrySealSecret}, d, cli)
	if err != nil {
		t.Fatalf("registry.New: %v", err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatalf("registry Start: %v", err)
	}
	t.Cleanup(svc.Stop)
	g := grpcserver.New(slog.New(slog.DiscardHandler))
	svc.Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial registry: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return registryv1.NewRegistryServiceClient(conn)
}

// registrySealSecret seals the registrations of serveRegistry's registries.
const registrySealSecret = "logsvc-test-registry-seal-secret-0123"

// registerExecutor puts an executor's key in etcd under a fresh lease, as the registry does for
// an agent.
func registerExecutor(t *testing.T, cli *clientv3.Client, app, inst, addr string) clientv3.LeaseID {
	t.Helper()
	ctx := ctxFor(t)
	lease, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatalf("grant: %v", err)
	}
	key, val, err := registry.Registration(registrySealSecret, &registryv1.Executor{AppName: app, InstanceId: inst, Address: addr, Version: "test", Capacity: 1}, lease.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, key, val, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatalf("put: %v", err)
	}
	return lease.ID
}

// viewUntil waits (bounded) until the view says addr is online or not.
func viewUntil(t *testing.T, v *RegistryView, addr string, online bool) {
	t.Helper()
	deadline := time.After(waitFor)
	for {
		ch := v.changes()
		if got, ok := v.Online(addr); ok && got == online {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("registry view: %s online=%v not seen within %v", addr, online, waitFor)
		}
	}
}

func TestLostRuns(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Client(t)
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			reg := serveRegistry(t, st, cli)
			app := "lost-" + st.Name
			alive, gone := "10.7.0.1:"+st.Name, "10.7.0.2:"+st.Name
			lease := registerExecutor(t, cli, app, "a", alive)

			view := NewRegistryView(reg, nil)
			e := newEnvWith(t, st, Config{Retention: -1, Executors: view}, false)
			now := time.UnixMilli(base).Add(time.Hour)
			e.svc.now = func() time.Time { return now }
			const job = 130
			rec := func(id, addr string, sched int64) *logsv1.TriggerRecord {
				r := record(id, job, sched)
				r.ExecutorAddress = addr
				return r
			}
			e.mustRecords(t, rec("130-alive", alive, base), rec("130-gone", gone, base),
				rec("130-recent", gone, now.Add(-10*time.Second).UnixMilli()), rec("130-done", gone, base))
			e.mustResults(t, result("130-done", job, logsv1.RunStatus_RUN_STATUS_SUCCESS, base),
				running("130-norecord", job, base, gone))
			w, cancel := watch(t, e, 0)
			defer cancel()

			// The view is not loaded yet: nobody can be called lost.
			if n, err := e.svc.sweepLost(ctxFor(t)); err != nil || n != 0 {
				t.Fatalf("sweep before the view is known: got %d, %v, want 0", n, err)
			}
			if err := view.Start(context.Background()); err != nil {
				t.Fatalf("view Start: %v", err)
			}
			t.Cleanup(view.Stop)
			t.Cleanup(view.Stop) // idempotent
			viewUntil(t, view, alive, true)

			n, err := e.svc.sweepLost(ctxFor(t))
			if err != nil || n != 2 {
				t.Fatalf("sweep: got %d, %v, want 2 (130-gone, 130-norecord)", n, err)
			}
			want := map[string]logsv1.RunStatus{
				"130-alive": logsv1.RunStatus_RUN_STATUS_RUNNING, "130-recent": logsv1.RunStatus_RUN_STATUS_RUNNING,
				"130-done": logsv1.RunStatus_RUN_STATUS_SUCCESS, "130-gone": logsv1.RunStatus_RUN_STATUS_FAIL,
				"130-norecord": logsv1.RunStatus_RUN_STATUS_FAIL,
			}
			for id, st := range want {
				if got := e.run(t, id).GetStatus(); got != st {
					t.Errorf("%s after the sweep: got %s, want %s", id, got, st)
				}
			}
			if msg := e.run(t, "130-gone").GetHandleMessage(); !strings.Contains(msg, "lost") || !strings.Contains(msg, gone) {
				t.Errorf("lost run's message: got %q, want the reason and the address", msg)
			}
			// The executor's late result overrules the sweep's judgement, once: the run is the
			// executor's, and a second result is refused as any is.
			if refused := e.mustResults(t, result("130-gone", job, logsv1.RunStatus_RUN_STATUS_SUCCESS, base)); len(refused) != 0 {
				t.Errorf("late result of a lost run: refused %v, want it taken", refused)
			}
			if r := e.run(t, "130-gone"); r.GetStatus() != logsv1.RunStatus_RUN_STATUS_SUCCESS || r.GetHandleMessage() != "done: RUN_STATUS_SUCCESS" {
				t.Errorf("lost run after its late result: got %v, want the result's SUCCESS", r)
			}
			if refused := e.mustResults(t, result("130-gone", job, logsv1.RunStatus_RUN_STATUS_FAIL, base)); !slices.Equal(refused, []string{"130-gone"}) {
				t.Errorf("second late result of a lost run: refused %v, want [130-gone]", refused)
			}

			// The live executor leaves: its run is lost at the next sweep, once.
			if _, err := cli.Revoke(ctxFor(t), lease); err != nil {
				t.Fatalf("revoke: %v", err)
			}
			viewUntil(t, view, alive, false)
			if n, err := e.svc.sweepLost(ctxFor(t)); err != nil || n != 1 {
				t.Fatalf("sweep after the executor left: got %d, %v, want 1", n, err)
			}
			if n, err := e.svc.sweepLost(ctxFor(t)); err != nil || n != 0 {
				t.Fatalf("sweep again: got %d, %v, want 0", n, err)
			}

			// The run without a record completes once the record wait has passed.
			if n, err := e.svc.sweepUnrecorded(ctxFor(t)); err != nil || n != 0 {
				t.Fatalf("missing-record sweep too early: got %d, %v, want 0", n, err)
			}
			now = now.Add(e.svc.cfg.RecordWait + time.Millisecond)
			if n, err := e.svc.sweepUnrecorded(ctxFor(t)); err != nil || n != 1 {
				t.Fatalf("missing-record sweep: got %d, %v, want 1", n, err)
			}
			if got, wantIDs := completionsOf(t, e, w, job), []string{"130-gone=FAIL", "130-gone=SUCCESS", "130-alive=FAIL", "130-norecord=FAIL"}; !slices.Equal(got, wantIDs) {
				t.Errorf("completions: got %v, want %v", got, wantIDs)
			}
			if r := e.run(t, "130-recent"); r.GetStatus() != logsv1.RunStatus_RUN_STATUS_RUNNING {
				t.Errorf("recent run: got %s, want RUNNING", r.GetStatus())
			}
		})
	}
}

// TestSuccessNeedsNoAlarm checks that a successful run's alarm status is NOT_NEEDED as soon as
// it is completed, by ingestion or by the missing-record sweep, before any alarm pass, while a
// failed one waits PENDING for the pass.
func TestSuccessNeedsNoAlarm(t *testing.T) {
	t.Parallel()
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnvWith(t, st, Config{Retention: -1, RecordWait: time.Minute}, false)
			now := time.UnixMilli(base)
			e.svc.now = func() time.Time { return now }
			const job = 135
			e.mustResults(t, result("135-a", job, logsv1.RunStatus_RUN_STATUS_SUCCESS, base))
			e.mustRecords(t, record("135-a", job, base), record("135-b", job, base))
			e.mustResults(t, result("135-b", job, logsv1.RunStatus_RUN_STATUS_FAIL, base),
				result("135-c", job, logsv1.RunStatus_RUN_STATUS_SUCCESS, base-10))
			if got := e.run(t, "135-c").GetAlarmStatus(); got != logsv1.AlarmStatus_ALARM_STATUS_PENDING {
				t.Errorf("alarm status of a run not completed yet: got %s, want PENDING", got)
			}
			now = now.Add(2 * time.Minute)
			if n, err := e.svc.sweepUnrecorded(ctxFor(t)); err != nil || n != 1 {
				t.Fatalf("missing-record sweep: got %d, %v, want 1", n, err)
			}
			for id, want := range map[string]logsv1.AlarmStatus{
				"135-a": logsv1.AlarmStatus_ALARM_STATUS_NOT_NEEDED, "135-b": logsv1.AlarmStatus_ALARM_STATUS_PENDING,
				"135-c": logsv1.AlarmStatus_ALARM_STATUS_NOT_NEEDED,
			} {
				if got := e.run(t, id).GetAlarmStatus(); got != want {
					t.Errorf("alarm status of %s before any alarm pass: got %s, want %s", id, got, want)
				}
			}
		})
	}
}

func TestResultWithoutRecordCompletesOnce(t *testing.T) {
	t.Parallel()
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnvWith(t, st, Config{Retention: -1, RecordWait: time.Minute}, false)
			now := time.UnixMilli(base)
			e.svc.now = func() time.Time { return now }
			const job = 131
			w, cancel := watch(t, e, 0)
			defer cancel()
			res := result("131-a", job, logsv1.RunStatus_RUN_STATUS_FAIL, base-10)
			e.mustResults(t, res)
			if n, err := e.svc.sweepUnrecorded(ctxFor(t)); err != nil || n != 0 {
				t.Fatalf("sweep within the wait: got %d, %v, want 0", n, err)
			}
			now = now.Add(2 * time.Minute)
			if n, err := e.svc.sweepUnrecorded(ctxFor(t)); err != nil || n != 1 {
				t.Fatalf("sweep after the wait: got %d, %v, want 1", n, err)
			}
			r := e.run(t, "131-a")
			if r.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK || !strings.Contains(r.GetTriggerMessage(), "never arrived") {
				t.Errorf("run completed without a record: got outcome %s message %q", r.GetTriggerOutcome(), r.GetTriggerMessage())
			}
			// The record arrives at last: it fills the run and completes nothing again.
			e.mustRecords(t, record("131-a", job, base-20))
			if r := e.run(t, "131-a"); r.GetAttempt() != 0 || r.GetHandler() != "demo" || r.GetStatus() != logsv1.RunStatus_RUN_STATUS_FAIL {
				t.Errorf("run after the late record: got %v", r)
			}
			if got := completionsOf(t, e, w, job); !slices.Equal(got, []string{"131-a=FAIL"}) {
				t.Errorf("completions: got %v, want [131-a] once", got)
			}
		})
	}
}

// TestRebuiltRecordFillsARunWithoutOne: LookupTriggers tells a new scheduler leader which runs
// have no trigger record (made from results, completed by the missing-record sweep or not yet),
// and the records it rebuilds for them fill their group, trigger type and message, keep the
// status the executor reported and publish no completion twice; a run whose record arrived
// keeps it.
func TestRebuiltRecordFillsARunWithoutOne(t *testing.T) {
	t.Parallel()
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnvWith(t, st, Config{Retention: -1, RecordWait: time.Minute}, false)
			now := time.UnixMilli(base)
			e.svc.now = func() time.Time { return now }
			const job = 132
			w, cancel := watch(t, e, 0)
			defer cancel()
			e.mustResults(t, result("132-a", job, logsv1.RunStatus_RUN_STATUS_FAIL, base-10))
			now = now.Add(2 * time.Minute)
			if n, err := e.svc.sweepUnrecorded(ctxFor(t)); err != nil || n != 1 {
				t.Fatalf("missing-record sweep: got %d, %v, want 1", n, err)
			}
			e.mustResults(t, result("132-b", job, logsv1.RunStatus_RUN_STATUS_SUCCESS, base))
			e.mustRecords(t, record("132-c", job, base))
			ids := []string{"132-a", "132-b", "132-c"}
			resp, err := e.logs.LookupTriggers(ctxFor(t), &logsv1.LookupTriggersRequest{TriggerIds: ids})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := resp.GetUnrecordedTriggerIds(), ids[:2]; !slices.Equal(got, want) {
				t.Fatalf("unrecorded: got %v, want %v", got, want)
			}
			for _, id := range ids {
				rec := record(id, job, base)
				rec.GroupId, rec.TriggerUnixMs, rec.TriggerMessage, rec.Rebuilt = 7, 0, "rebuilt by the new leader", true
				e.mustRecords(t, rec)
			}
			for id, want := range map[string]logsv1.RunStatus{"132-a": logsv1.RunStatus_RUN_STATUS_FAIL, "132-b": logsv1.RunStatus_RUN_STATUS_SUCCESS} {
				r := e.run(t, id)
				if r.GetStatus() != want || r.GetGroupId() != 7 || r.GetTriggerType() != schedulerv1.TriggerType_TRIGGER_TYPE_CRON ||
					r.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK || r.GetTriggerMessage() != "rebuilt by the new leader" {
					t.Errorf("run %s after its rebuilt record: got %v, want %s, group 7, CRON, OK, the rebuilt message", id, r, want)
				}
			}
			if r := e.run(t, "132-c"); r.GetGroupId() != 1 || r.GetTriggerMessage() != "route FIRST: 10.0.0.1:9999" {
				t.Errorf("run with its record after a rebuilt one: got %v, want its own record's group 1 and message", r)
			}
			resp, err = e.logs.LookupTriggers(ctxFor(t), &logsv1.LookupTriggersRequest{TriggerIds: ids})
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.GetUnrecordedTriggerIds(); len(got) != 0 {
				t.Errorf("unrecorded after the rebuilt records: got %v, want none", got)
			}
			if got := completionsOf(t, e, w, job); !slices.Equal(got, []string{"132-a=FAIL", "132-b=SUCCESS"}) {
				t.Errorf("completions: got %v, want 132-a=FAIL and 132-b=SUCCESS once each", got)
			}
		})
	}
}

// smtpServer is a minimal SMTP server: it accepts every message and hands it over.
type smtpServer struct {
	addr string
	msgs chan smtpMsg
}

type smtpMsg struct {
	from string
	to   []string
	data string
}

func newSMTPServer(t *testing.T) *smtpServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("smtp listen: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	s := &smtpServer{addr: ln.Addr().String(), msgs: make(chan smtpMsg, 16)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	return s
}

func (s *smtpServer) serve(c net.Conn) {
	defer c.Close()
	tp := textproto.NewConn(c)
	_ = tp.PrintfLine("220 localhost jobmesh-test ESMTP")
	var m smtpMsg
	for {
		l, err := tp.ReadLine()
		if err != nil {
			return
		}
		verb := strings.ToUpper(strings.SplitN(l, " ", 2)[0])
		switch verb {
		case "EHLO", "HELO":
			_ = tp.PrintfLine("250 localhost")
		case "MAIL":
			m = smtpMsg{from: l}
			_ = tp.PrintfLine("250 OK")
		case "RCPT":
			_, addr, _ := strings.Cut(l, ":")
			m.to = append(m.to, strings.Trim(addr, "<> "))
			_ = tp.PrintfLine("250 OK")
		case "DATA":
			_ = tp.PrintfLine("354 go ahead")
			b, err := tp.ReadDotBytes()
			if err != nil {
				return
			}
			m.data = string(b)
			s.msgs <- m
			_ = tp.PrintfLine("250 OK queued")
		case "QUIT":
			_ = tp.PrintfLine("221 bye")
			return
		default:
			_ = tp.PrintfLine("250 OK")
		}
	}
}

// fakeJobs is the scheduler's job directory as alarms see it.
type fakeJobs map[int64]JobInfo

func (f fakeJobs) Job(_ context.Context, id int64) (JobInfo, error) {
	j, ok := f[id]
	if !ok {
		return JobInfo{}, fmt.Errorf("job %d: not found", id)
	}
	return j, nil
}

func (f fakeJobs) CountJobs(context.Context, []int64) (int64, error) { return int64(len(f)), nil }

func TestAlarms(t *testing.T) {
	t.Parallel()
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			mail := newSMTPServer(t)
			var mu sync.Mutex
			attempts := map[string]int{}
			hooks := make(chan WebhookPayload, 16)
			hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var p WebhookPayload
				if err := json.NewDecoder(r.Body).Decode(&p); err != nil || r.Header.Get("Content-Type") != "application/json" {
					http.Error(w, "bad payload", http.StatusBadRequest)
					return
				}
				mu.Lock()
				attempts[p.TriggerID]++
				n := attempts[p.TriggerID]
				mu.Unlock()
				switch {
				case p.JobID == 141: // this receiver is down for good
					http.Error(w, "down", http.StatusServiceUnavailable)
				case n == 1: // the first delivery fails, the retry gets through
					http.Error(w, "busy", http.StatusServiceUnavailable)
				default:
					hooks <- p
				}
			}))
			t.Cleanup(hook.Close)
			jobs := fakeJobs{
				140: {Name: "nightly report", AlarmEmails: []string{"ops@example.com", "dev@example.com"}},
				141: {Name: "no mail"},
				142: {Name: "fine", AlarmEmails: []string{"ops@example.com"}},
			}
			cfg := Config{Retention: -1, Jobs: jobs, AlarmChannels: []AlarmChannel{
				&EmailChannel{Addr: mail.addr, From: "jobmesh@example.com"},
				&WebhookChannel{URL: hook.URL, Attempts: 3, Backoff: time.Millisecond},
			}}
			e := newEnvWith(t, st, cfg, false)
			e.mustRecords(t, record("140-a", 140, base), record("141-a", 141, base), record("142-a", 142, base))
			e.mustResults(t, result("140-a", 140, logsv1.RunStatus_RUN_STATUS_FAIL, base),
				result("141-a", 141, logsv1.RunStatus_RUN_STATUS_TIMEOUT, base), result("142-a", 142, logsv1.RunStatus_RUN_STATUS_SUCCESS, base))
			if got := e.run(t, "140-a").GetAlarmStatus(); got != logsv1.AlarmStatus_ALARM_STATUS_PENDING {
				t.Errorf("alarm status before the pass: got %s, want PENDING", got)
			}
			if n, err := e.svc.alarmPass(ctxFor(t)); err != nil || n != 2 {
				t.Fatalf("alarm pass: got %d, %v, want 2 (the failure and the timeout)", n, err)
			}
			select {
			case m := <-mail.msgs:
				if !slices.Equal(m.to, []string{"ops@example.com", "dev@example.com"}) {
					t.Errorf("mail to: got %v", m.to)
				}
				if !strings.Contains(m.data, "Subject: jobmesh alarm: job 140 nightly report failed") || !strings.Contains(m.data, "140-a") ||
					!strings.Contains(m.data, "done: RUN_STATUS_FAIL") {
					t.Errorf("mail: got\n%s", m.data)
				}
			case <-time.After(waitFor):
				t.Fatal("no alarm mail")
			}
			select {
			case m := <-mail.msgs:
				t.Errorf("a second mail (job 141 has no alarm emails, 142 succeeded): %v", m.to)
			default:
			}
			select {
			case p := <-hooks:
				if p.TriggerID != "140-a" || p.JobName != "nightly report" || p.Status != "RUN_STATUS_FAIL" || p.ExecutorAddress != "10.0.0.1:9999" {
					t.Errorf("webhook payload: got %+v", p)
				}
			case <-time.After(waitFor):
				t.Fatal("no webhook")
			}
			mu.Lock()
			if attempts["140-a"] != 2 || attempts["141-a"] != 3 || attempts["142-a"] != 0 {
				t.Errorf("webhook attempts: got %v, want 140-a 2, 141-a 3, 142-a none", attempts)
			}
			mu.Unlock()
			for id, want := range map[string]logsv1.AlarmStatus{
				"140-a": logsv1.AlarmStatus_ALARM_STATUS_SENT, "141-a": logsv1.AlarmStatus_ALARM_STATUS_FAILED,
				"142-a": logsv1.AlarmStatus_ALARM_STATUS_NOT_NEEDED,
			} {
				if got := e.run(t, id).GetAlarmStatus(); got != want {
					t.Errorf("alarm status of %s: got %s, want %s", id, got, want)
				}
			}
			if n, err := e.svc.alarmPass(ctxFor(t)); err != nil || n != 0 {
				t.Errorf("second pass: got %d, %v, want nothing to do", n, err)
			}

			// Two replicas race for the next failure: one mail, not two.
			other, err := New(cfg, e.db, e.killer)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			e.mustRecords(t, record("140-b", 140, base))
			e.mustResults(t, result("140-b", 140, logsv1.RunStatus_RUN_STATUS_KILLED, base))
			var wg sync.WaitGroup
			var handled atomic.Int64
			for _, s := range []*Service{e.svc, other} {
				wg.Go(func() {
					n, err := s.alarmPass(ctxFor(t))
					if err != nil {
						t.Errorf("racing alarm pass: %v", err)
					}
					handled.Add(int64(n))
				})
			}
			wg.Wait()
			if handled.Load() != 1 {
				t.Errorf("completions alarmed by two replicas: got %d, want 1", handled.Load())
			}
			select {
			case <-mail.msgs:
			case <-time.After(waitFor):
				t.Fatal("no alarm mail for 140-b")
			}
			select {
			case m := <-mail.msgs:
				t.Errorf("140-b alarmed twice: %v", m.to)
			default:
			}
		})
	}
}

func TestReportKeptAsRunsComplete(t *testing.T) {
	t.Parallel()
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnvWith(t, st, Config{Retention: -1, Jobs: fakeJobs{1: {}, 2: {}}}, false)
			ctx := ctxFor(t)
			day := time.Date(1998, 3, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
			e.mustRecords(t, record("150-a", 150, day), record("150-b", 150, day+1), record("150-c", 150, day+2),
				record("150-d", 150, day+3), record("151-a", 151, day+dayMs))
			e.mustResults(t, result("150-a", 150, logsv1.RunStatus_RUN_STATUS_SUCCESS, day), result("150-b", 150, logsv1.RunStatus_RUN_STATUS_SUCCESS, day),
				result("150-c", 150, logsv1.RunStatus_RUN_STATUS_FAIL, day), result("151-a", 151, logsv1.RunStatus_RUN_STATUS_TIMEOUT, day))
			// Resent results are refused and count nothing twice.
			e.mustResults(t, result("150-a", 150, logsv1.RunStatus_RUN_STATUS_SUCCESS, day), result("150-c", 150, logsv1.RunStatus_RUN_STATUS_FAIL, day))
			e.mustRecords(t, record("150-a", 150, day))
			report := func() []string {
				t.Helper()
				rep, err := e.logs.GetReport(ctx, &logsv1.GetReportRequest{StartDate: "1998-03-01", EndDate: "1998-03-02"})
				if err != nil {
					t.Fatalf("GetReport: %v", err)
				}
				var out []string
				for _, d := range rep.GetDays() {
					out = append(out, fmt.Sprintf("%s %d/%d/%d", d.GetDate(), d.GetRunning(), d.GetSuccess(), d.GetFail()))
				}
				for _, j := range rep.GetJobs() {
					out = append(out, fmt.Sprintf("job %d %d/%d %.2f", j.GetJobId(), j.GetSuccess(), j.GetFail(), j.GetSuccessRate()))
				}
				return out
			}
			want := []string{"1998-03-01 1/2/1", "1998-03-02 0/0/1", "job 150 2/1 0.67", "job 151 0/1 0.00"}
			if got := report(); !slices.Equal(got, want) {
				t.Errorf("report: got %v, want %v", got, want)
			}
			// The counters live apart from the runs: clearing runs keeps the finished ones
			// counted (as XXL-JOB's log report does); only the cleared running run goes.
			if _, err := e.logs.ClearRuns(ctx, &logsv1.ClearRunsRequest{JobId: 150, KeepNewest: 1}); err != nil {
				t.Fatalf("ClearRuns: %v", err)
			}
			want[0] = "1998-03-01 1/2/1" // 150-d, the newest, is the one kept and still running
			if got := report(); !slices.Equal(got, want) {
				t.Errorf("report after clearing runs: got %v, want %v", got, want)
			}
			var success, fail int64
			if err := e.db.QueryRowContext(ctx, e.db.Q(`SELECT success, fail FROM report_group_jobs WHERE job_id = $1 AND day = $2`), 150, day/dayMs).Scan(&success, &fail); err != nil {
				t.Fatalf("read report_group_jobs: %v", err)
			}
			if success != 2 || fail != 1 {
				t.Errorf("report_group_jobs row: got %d/%d, want 2/1", success, fail)
			}
			dash, err := e.logs.GetDashboard(ctx, &logsv1.GetDashboardRequest{})
			if err != nil {
				t.Fatalf("GetDashboard: %v", err)
			}
			if dash.GetRunCount() != 5 || dash.GetRunningCount() != 1 || dash.GetJobCount() != 2 {
				t.Errorf("dashboard: got %v, want run_count 5, running_count 1, job_count 2", dash)
			}
		})
	}
}

// The gateway serves TailRun as newline-delimited JSON: the UI reads one message per line as
// lines arrive, and the response ends when the run ends.
func TestTailThroughGateway(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dbtest.Stores(t)[0])
	srv := httptest.NewServer(gatewayMux(t, e))
	t.Cleanup(srv.Close)
	const job = 132
	e.mustRecords(t, record("132-a", job, base))
	e.mustLines(t, line("132-a", 1, "one"))
	ctx := ctxFor(t)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/v1/logs/132-a/lines:tail", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET tail: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET tail: %s", resp.Status)
	}
	lines := bufio.NewScanner(resp.Body)
	next := func() map[string]any {
		t.Helper()
		got, err := within(t, "tail chunk", func() (map[string]any, error) {
			if !lines.Scan() {
				return nil, io.EOF
			}
			var m struct {
				Result map[string]any `json:"result"`
			}
			return m.Result, json.Unmarshal(lines.Bytes(), &m)
		})
		if err != nil {
			t.Fatalf("tail chunk: %v", err)
		}
		return got
	}
	texts := func(m map[string]any) []string {
		var out []string
		ls, _ := m["lines"].([]any)
		for _, l := range ls {
			out = append(out, l.(map[string]any)["text"].(string))
		}
		return out
	}
	if m := next(); !slices.Equal(texts(m), []string{"one"}) || m["status"] != "RUN_STATUS_RUNNING" {
		t.Fatalf("first chunk: got %v", m)
	}
	e.mustLines(t, line("132-a", 2, "two"))
	if m := next(); !slices.Equal(texts(m), []string{"two"}) {
		t.Fatalf("second chunk: got %v", m)
	}
	e.mustResults(t, result("132-a", job, logsv1.RunStatus_RUN_STATUS_SUCCESS, base))
	if m := next(); m["status"] != "RUN_STATUS_SUCCESS" {
		t.Fatalf("last chunk: got %v, want the final status", m)
	}
	if _, err := within(t, "tail end", func() (bool, error) { return lines.Scan(), nil }); lines.Err() != nil || err != nil {
		t.Fatalf("after the end: %v %v", err, lines.Err())
	}
}

// TestStoreFailureIsUnavailable checks that a batch whose commit fails (Postgres kills the
// backend between the batch's writes and its commit) is neither acknowledged nor stored, that
// the sender is told to resend (Unavailable), and that the resent batch is stored once.
func TestStoreFailureIsUnavailable(t *testing.T) {
	t.Parallel()
	st := dbtest.Store{Name: "postgres", Config: db.Config{URL: dbtest.NewPostgres(t)}}
	e := newEnvWith(t, st, Config{Retention: -1}, false)
	admin := dbtest.Open(t, st.Config, "logs", MigrationsFS())
	var armed atomic.Bool
	e.svc.beforeCommit = func(ctx context.Context, tx *db.Tx) {
		if !armed.CompareAndSwap(true, false) {
			return
		}
		var pid int
		if err := tx.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			t.Errorf("backend pid: %v", err)
			return
		}
		if _, err := admin.ExecContext(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
			t.Errorf("terminate backend: %v", err)
		}
	}
	e.mustRecords(t, record("133-acked", 133, base))
	armed.Store(true)
	var recs []*logsv1.TriggerRecord
	for i := range 50 {
		recs = append(recs, record(fmt.Sprintf("133-%02d", i), 133, base))
	}
	err := e.records(t, recs...)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("batch whose commit failed: got %v, want Unavailable", err)
	}
	count := func() int {
		t.Helper()
		var n int
		if err := admin.QueryRowContext(ctxFor(t), `SELECT COUNT(*) FROM runs WHERE job_id = 133`).Scan(&n); err != nil {
			t.Fatalf("count: %v", err)
		}
		return n
	}
	if got := count(); got != 1 {
		t.Errorf("runs after the failed commit: got %d, want 1 (only the acknowledged one)", got)
	}
	e.mustRecords(t, recs...) // the sender resends
	e.mustRecords(t, recs...) // and once more
	if got := count(); got != 51 {
		t.Errorf("runs after resending: got %d, want 51", got)
	}
}

// TestRunStoredConcurrently runs two replicas on one database. Replica b stores a fire's
// record before a's cycle, and another's between a's read of the runs and its insert: a's insert
// then meets the run b committed, and the cycle is run again on the stored rows. Both final
// results a takes are applied to b's runs: nothing refused, one row per fire holding both
// sides, one completion each.
func TestRunStoredConcurrently(t *testing.T) {
	t.Parallel()
	st := dbtest.Store{Name: "postgres", Config: db.Config{URL: dbtest.NewPostgres(t)}}
	a := newEnvWith(t, st, Config{Retention: -1}, false)
	b := newEnvWith(t, st, Config{Retention: -1}, false)
	const job = 134
	b.mustRecords(t, record("134-before", job, base))
	stored := make(chan error, 1)
	var once sync.Once
	a.svc.beforeInsertRuns = func(ctx context.Context) {
		once.Do(func() { // runs in a's writer: it waits until b has committed the record
			stored <- func() error {
				ctx, cancel := context.WithTimeout(ctx, waitFor)
				defer cancel()
				st, err := b.ingest.IngestTriggerRecords(ctx)
				if err != nil {
					return err
				}
				req := &logsv1.IngestTriggerRecordsRequest{BatchId: 1, Records: []*logsv1.TriggerRecord{record("134-between", job, base)}}
				if err := st.Send(req); err != nil {
					return err
				}
				_, err = st.Recv()
				return err
			}()
		})
	}
	refused := a.mustResults(t, result("134-before", job, logsv1.RunStatus_RUN_STATUS_SUCCESS, base+3),
		result("134-between", job, logsv1.RunStatus_RUN_STATUS_SUCCESS, base+3))
	select {
	case err := <-stored:
		if err != nil {
			t.Fatalf("replica b storing the record: %v", err)
		}
	default:
		t.Fatal("replica a inserted no run: the race was not run")
	}
	if len(refused) != 0 {
		t.Errorf("refused %v, want none", refused)
	}
	for _, id := range []string{"134-before", "134-between"} {
		r := a.run(t, id)
		if r.GetStatus() != logsv1.RunStatus_RUN_STATUS_SUCCESS || r.GetTriggerOutcome() != logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK || r.GetHandler() != "demo" {
			t.Errorf("run %s: status %s, outcome %s, handler %q; want SUCCESS, OK and the record's handler", id, r.GetStatus(), r.GetTriggerOutcome(), r.GetHandler())
		}
		var n int
		if err := a.db.QueryRowContext(ctxFor(t), `SELECT COUNT(*) FROM completions WHERE trigger_id = $1`, id).Scan(&n); err != nil {
			t.Fatalf("count completions: %v", err)
		}
		if n != 1 {
			t.Errorf("run %s: %d completions, want 1", id, n)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := Config{}
	if err := c.validate(); err != nil {
		t.Fatalf("validate: %v", err)
	}
	if c.LostAfter != 30*time.Second || c.RecordWait != 10*time.Minute || c.SweepInterval != 10*time.Second || c.MaxQueuedItems != 50000 {
		t.Errorf("defaults: got %+v", c)
	}
	for _, bad := range []Config{{LostAfter: -1}, {RecordWait: -1}, {SweepInterval: -1}, {MaxQueuedItems: -1}} {
		if err := bad.validate(); err == nil {
			t.Errorf("validate(%+v): got nil, want an error", bad)
		}
	}
}

// gatewayMux serves the LogService REST mapping over the env's gRPC client, as the gateway does.
func gatewayMux(t *testing.T, e *env) http.Handler {
	t.Helper()
	mux := runtime.NewServeMux()
	if err := logsv1.RegisterLogServiceHandlerClient(context.Background(), mux, e.logs); err != nil {
		t.Fatalf("register gateway: %v", err)
	}
	return mux
}

// TestRetentionLeavesNewerRowsAlone prunes more old runs than one delete batch holds, with
// their lines and completions, and checks that newer runs, lines and completions stay.
func TestRetentionLeavesNewerRowsAlone(t *testing.T) {
	t.Parallel()
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnvWith(t, st, Config{Retention: 30 * 24 * time.Hour}, false)
			day := time.Date(1995, 1, 1, 0, 0, 0, 0, time.UTC)
			now := day.AddDate(0, 0, 60)
			e.svc.now = func() time.Time { return day } // completions written "then"
			var old, recent []*logsv1.TriggerRecord
			var oldRes, recentRes []*logsv1.RunResult
			var lines []*logsv1.LogLine
			for i := range deleteBatch + 300 {
				id := fmt.Sprintf("135-old-%05d", i)
				old = append(old, record(id, 135, day.UnixMilli()+int64(i)))
				oldRes = append(oldRes, result(id, 135, logsv1.RunStatus_RUN_STATUS_SUCCESS, day.UnixMilli()))
				lines = append(lines, line(id, 1, "old"), line(id, 2, "old"))
			}
			for i := range 20 {
				id := fmt.Sprintf("135-new-%02d", i)
				recent = append(recent, record(id, 135, now.AddDate(0, 0, -29).UnixMilli()))
				recentRes = append(recentRes, result(id, 135, logsv1.RunStatus_RUN_STATUS_SUCCESS, now.AddDate(0, 0, -29).UnixMilli()))
				lines = append(lines, line(id, 1, "new"))
			}
			e.mustRecords(t, append(old, recent...)...)
			e.mustResults(t, oldRes...)
			e.mustLines(t, lines...)
			e.svc.now = func() time.Time { return now.AddDate(0, 0, -1) } // recent completions
			e.mustResults(t, recentRes...)
			e.svc.now = func() time.Time { return now }
			n, err := e.svc.prune(ctxFor(t))
			if err != nil || n != int64(len(old)) {
				t.Fatalf("prune: got %d, %v, want %d", n, err, len(old))
			}
			count := func(q string) int {
				t.Helper()
				var n int
				if err := e.db.QueryRowContext(ctxFor(t), q).Scan(&n); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
				return n
			}
			for q, want := range map[string]int{
				`SELECT COUNT(*) FROM runs WHERE trigger_id LIKE '135-old-%'`:        0,
				`SELECT COUNT(*) FROM run_lines WHERE trigger_id LIKE '135-old-%'`:   0,
				`SELECT COUNT(*) FROM completions WHERE trigger_id LIKE '135-old-%'`: 0,
				`SELECT COUNT(*) FROM completions WHERE trigger_id LIKE '135-new-%'`: 20,
				`SELECT COUNT(*) FROM runs WHERE trigger_id LIKE '135-new-%'`:        20,
				`SELECT COUNT(*) FROM run_lines WHERE trigger_id LIKE '135-new-%'`:   20,
			} {
				if got := count(q); got != want {
					t.Errorf("%s: got %d, want %d", q, got, want)
				}
			}
		})
	}
}

// TestWorkflowAlarm: a failed workflow instance's alarm goes to its workflow's alarm emails and
// to the webhook, naming the instance and its failed nodes; a channel that fails makes the call
// fail (the scheduler sends it again), and an id that is no instance's is refused.
func TestWorkflowAlarm(t *testing.T) {
	t.Parallel()
	mail := newSMTPServer(t)
	hooks := make(chan WebhookPayload, 4)
	var down atomic.Bool
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p WebhookPayload
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			http.Error(w, "bad payload", http.StatusBadRequest)
			return
		}
		if down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		hooks <- p
	}))
	t.Cleanup(hook.Close)
	cfg := Config{Retention: -1, AlarmChannels: []AlarmChannel{
		&EmailChannel{Addr: mail.addr, From: "jobmesh@example.com"},
		&WebhookChannel{URL: hook.URL, Attempts: 2, Backoff: time.Millisecond},
	}}
	e := newEnvWith(t, dbtest.Stores(t)[0], cfg, false)
	req := &logsv1.SendWorkflowAlarmRequest{InstanceId: "w7-1700000000000", WorkflowId: 7, WorkflowName: "nightly etl", GroupId: 3,
		ScheduledUnixMs: 1_700_000_000_000, EndUnixMs: 1_700_000_060_000, FailedNodes: []string{"load: its run ended RUN_STATUS_FAIL"},
		AlarmEmails: []string{"data@example.com"}}
	resp, err := e.svc.SendWorkflowAlarm(ctxFor(t), req)
	if err != nil || !resp.GetSent() {
		t.Fatalf("SendWorkflowAlarm: %v, %v; want sent", resp, err)
	}
	select {
	case m := <-mail.msgs:
		if !slices.Equal(m.to, []string{"data@example.com"}) || !strings.Contains(m.data, "Subject: jobmesh alarm: workflow 7 nightly etl instance w7-1700000000000 failed") ||
			!strings.Contains(m.data, "load: its run ended RUN_STATUS_FAIL") {
			t.Errorf("mail to %v:\n%s", m.to, m.data)
		}
	case <-time.After(waitFor):
		t.Fatal("no alarm mail")
	}
	select {
	case p := <-hooks:
		if p.WorkflowInstanceID != "w7-1700000000000" || p.WorkflowID != 7 || p.WorkflowName != "nightly etl" || p.GroupID != 3 ||
			p.Status != "WORKFLOW_INSTANCE_STATUS_FAILED" || !slices.Equal(p.FailedNodes, req.FailedNodes) || p.TriggerID != "" {
			t.Errorf("webhook payload: %+v", p)
		}
	case <-time.After(waitFor):
		t.Fatal("no webhook")
	}
	down.Store(true)
	if _, err := e.svc.SendWorkflowAlarm(ctxFor(t), req); status.Code(err) != codes.Unavailable {
		t.Errorf("with the webhook down: %v, want Unavailable", err)
	}
	bad := proto.CloneOf(req)
	bad.InstanceId = "140-a"
	if _, err := e.svc.SendWorkflowAlarm(ctxFor(t), bad); status.Code(apierr.ToStatus(err)) != codes.InvalidArgument {
		t.Errorf("a run's id: %v, want InvalidArgument", err)
	}
}
