package sdk_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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
		AppName: "test-app", InstanceID: "t1", ListenAddr: "127.0.0.1:0", LogsvcAddr: deadAddr(t),
		LogDir: logDir, SpoolDir: spoolDir, SpoolMaxBytes: 64 << 10, StopGrace: time.Second,
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
		OnResult: func(r sdk.Result) { results <- r },
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
	cli := sdktest.Client(t, e.Addr(), "")
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
	e.Stop()
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
	t.Cleanup(e2.Stop)
	h2 := &harness{exec: e2, ingest: ingest}
	for _, id := range ids {
		h2.wantResult(t, id, logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
		if got, want := ingest.Statuses(id), []logsv1.RunStatus{logsv1.RunStatus_RUN_STATUS_RUNNING, logsv1.RunStatus_RUN_STATUS_SUCCESS}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("fire %s: results arrived as %v, want %v", id, got, want)
		}
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
