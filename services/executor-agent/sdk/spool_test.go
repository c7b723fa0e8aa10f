package sdk_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk/sdktest"
)

// syncBuffer is a log sink tests can read while the executor writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// deadAddr is a loopback address where nothing listens.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestSpoolFullKeepsResultsAndReplaysAfterRestart: with logsvc unreachable, a fire that logs
// more than the spool holds fills it; the executor says the spool is full, drops lines but keeps
// every result, and a new executor on the same spool delivers them once logsvc is there.
func TestSpoolFullKeepsResultsAndReplaysAfterRestart(t *testing.T) {
	t.Parallel()
	logDir, spoolDir := t.TempDir(), filepath.Join(t.TempDir(), "spool")
	var logs syncBuffer
	results := make(chan sdk.Result, 10)
	cfg := sdk.Config{
		AppName: "test-app", InstanceID: "t1", ListenAddr: "127.0.0.1:0", LogsvcAddr: deadAddr(t), AccessToken: "test-app-token",
		LogDir: logDir, SpoolDir: spoolDir, SpoolMaxBytes: 64 << 10,
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
		OnResult: func(r sdk.Result) { results <- r },
		Insecure: true,
	}
	e, err := sdk.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.Handle("chatty", func(ctx context.Context, job *sdk.Job) error {
		for i := range 2000 { // about 100 KiB of lines: more than the spool's 64 KiB
			job.Logf("%s line %04d %s", job.TriggerID, i+1, strings.Repeat("x", 20))
		}
		return nil
	})
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	cli := sdktest.Client(t, e.Addr(), "test-app-token")
	h := &harness{exec: e, cli: cli}
	ids := []string{"81-1-0-0", "82-1-0-0", "83-1-0-0"}
	for i, id := range ids {
		h.accept(t, bean(id, int64(81+i), "chatty", ""))
	}
	for range ids {
		select {
		case r := <-results:
			if r.Status != sdk.StatusSuccess {
				t.Fatalf("fire %s: got %s %q, want SUCCESS", r.TriggerID, r.Status, r.Message)
			}
		case <-time.After(wait):
			t.Fatal("fires did not end")
		}
	}
	// logsvc never answered: Stop says what stays in the spool.
	if err := sdktest.Stop(e); err == nil || !strings.Contains(err.Error(), "stay in the spool") {
		t.Fatalf("Stop with logsvc away: got %v, want an error saying results stay in the spool", err)
	}
	if !strings.Contains(logs.String(), "spool for logsvc is full") {
		t.Fatalf("executor log does not say the spool is full:\n%s", logs.String())
	}

	// Restart on the same spool with logsvc up.
	ingest := sdktest.NewIngest()
	cfg.LogsvcAddr = ingest.Serve(t)
	cfg.Logger = testLogger(t)
	cfg.OnResult = nil
	e2, err := sdk.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e2.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sdktest.Stop(e2) })
	h2 := &harness{exec: e2, ingest: ingest}
	for _, id := range ids {
		h2.wantResult(t, id, logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
		wantStatuses(t, ingest, id, logsv1.RunStatus_RUN_STATUS_SUCCESS)
	}
	// The first fire's lines fitted in part: those that were spooled arrive, numbered in order
	// from 1 with no gap; the rest stays in the local log file.
	lines := ingest.Lines(ids[0])
	if len(lines) == 0 || len(lines) >= 2000 {
		t.Fatalf("fire %s: got %d lines delivered, want some but not all 2000", ids[0], len(lines))
	}
	for i, l := range lines {
		if want := fmt.Sprintf("%s line %04d ", ids[0], i+1); l.GetLineNo() != int64(i+1) || !strings.HasPrefix(l.GetText(), want) {
			t.Fatalf("line %d: got %d %q, want %d %q…", i+1, l.GetLineNo(), l.GetText(), i+1, want)
		}
	}
}

// spoolCheckingIngest is the fake logsvc that, as each batch arrives, checks that every item in
// it is already in the executor's spool files (what a killed agent would replay): the spool
// record of a result is 'S' (RUNNING) or 'R' and of a line 'L', then the protobuf.
type spoolCheckingIngest struct {
	*sdktest.Ingest
	dir string

	mu      sync.Mutex
	checked int
	missing []string
}

func (f *spoolCheckingIngest) check(kind byte, m proto.Message, what string) {
	rec, err := proto.MarshalOptions{}.MarshalAppend([]byte{kind}, m)
	if err != nil {
		panic(err)
	}
	segs, _ := filepath.Glob(filepath.Join(f.dir, "*.seg"))
	found := false
	for _, s := range segs {
		if b, err := os.ReadFile(s); err == nil && bytes.Contains(b, rec) {
			found = true
			break
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checked++
	if !found {
		f.missing = append(f.missing, what)
	}
}

func (f *spoolCheckingIngest) IngestResults(stream grpc.BidiStreamingServer[logsv1.IngestResultsRequest, logsv1.IngestResultsResponse]) error {
	return f.Ingest.IngestResults(peekStream[logsv1.IngestResultsRequest, logsv1.IngestResultsResponse]{stream, func(req *logsv1.IngestResultsRequest) {
		for _, r := range req.GetResults() {
			kind := byte('R')
			if r.GetStatus() == logsv1.RunStatus_RUN_STATUS_RUNNING {
				kind = 'S'
			}
			f.check(kind, r, fmt.Sprintf("%s %s", r.GetStatus(), r.GetTriggerId()))
		}
	}})
}

func (f *spoolCheckingIngest) IngestLogLines(stream grpc.BidiStreamingServer[logsv1.IngestLogLinesRequest, logsv1.IngestLogLinesResponse]) error {
	return f.Ingest.IngestLogLines(peekStream[logsv1.IngestLogLinesRequest, logsv1.IngestLogLinesResponse]{stream, func(req *logsv1.IngestLogLinesRequest) {
		for _, l := range req.GetLines() {
			f.check('L', l, fmt.Sprintf("line %d of %s", l.GetLineNo(), l.GetTriggerId()))
		}
	}})
}

// peekStream shows each request a stream receives to peek first.
type peekStream[Req, Resp any] struct {
	grpc.BidiStreamingServer[Req, Resp]
	peek func(*Req)
}

func (p peekStream[Req, Resp]) Recv() (*Req, error) {
	req, err := p.BidiStreamingServer.Recv()
	if err == nil {
		p.peek(req)
	}
	return req, err
}

// TestItemsAreSpooledBeforeTheyAreSent: with spool writes grouped, every result and line logsvc
// receives was already written to the spool, for fires that end at once, fires that log, and
// fires killed while queued.
func TestItemsAreSpooledBeforeTheyAreSent(t *testing.T) {
	t.Parallel()
	spoolDir := filepath.Join(t.TempDir(), "spool")
	f := &spoolCheckingIngest{Ingest: sdktest.NewIngest(), dir: spoolDir}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	logsv1.RegisterIngestServiceServer(srv, f)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	e, err := sdk.New(sdk.Config{
		AppName: "test-app", InstanceID: "t1", ListenAddr: "127.0.0.1:0", LogsvcAddr: ln.Addr().String(), AccessToken: "test-app-token",
		LogDir: t.TempDir(), SpoolDir: spoolDir, Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	e.Handle("noop", func(context.Context, *sdk.Job) error { return nil })
	e.Handle("chatty", func(_ context.Context, job *sdk.Job) error {
		for i := range 5 {
			job.Logf("%s line %d", job.TriggerID, i+1)
		}
		return nil
	})
	release := make(chan struct{})
	e.Handle("block", func(ctx context.Context, _ *sdk.Job) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sdktest.Stop(e) })
	h := &harness{exec: e, ingest: f.Ingest, cli: sdktest.Client(t, e.Addr(), "test-app-token")}

	var fires []*executorv1.Trigger
	for i := range 60 {
		handler := []string{"noop", "chatty"}[i%2]
		fires = append(fires, bean(fmt.Sprintf("9%02d-1-0-0", i), int64(900+i), handler, ""))
	}
	fires = append(fires, bean("990-1-0-0", 990, "block", ""), bean("990-2-0-0", 990, "block", ""))
	h.run(t, fires...)
	if resp, err := h.cli.Kill(ctxFor(t), &executorv1.KillRequest{TriggerId: "990-2-0-0"}); err != nil || !resp.GetKilled() {
		t.Fatalf("Kill: got %v %v, want killed", resp, err)
	}
	close(release)
	for _, fr := range fires {
		want := logsv1.RunStatus_RUN_STATUS_SUCCESS
		if fr.GetTriggerId() == "990-2-0-0" {
			want = logsv1.RunStatus_RUN_STATUS_KILLED
		}
		h.wantResult(t, fr.GetTriggerId(), want, "")
	}
	for i := 1; i < 60; i += 2 {
		h.waitLines(t, fires[i].GetTriggerId(), 5)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// 62 final results and 30×5 lines at least; RUNNING results too, unless merged.
	if f.checked < 62+150 || len(f.missing) > 0 {
		t.Fatalf("checked %d items; %d were not in the spool when logsvc got them: %q", f.checked, len(f.missing), f.missing)
	}
}
