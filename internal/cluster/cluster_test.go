package cluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the child process: with CLUSTER_TEST_CHILD set it prints its
// ready lines in pieces and then waits for SIGTERM (exit 0) or, with "crash", exits 3 at once.
func TestMain(m *testing.M) {
	switch os.Getenv("CLUSTER_TEST_CHILD") {
	case "":
		os.Exit(m.Run())
	case "crash":
		fmt.Fprintln(os.Stderr, "crashing")
		os.Exit(3)
	default:
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		fmt.Print("noise\nsvc grpc 127.0.0.1:")
		os.Stdout.Sync()
		time.Sleep(10 * time.Millisecond) // a line split over two writes
		fmt.Print("1234\nsvc http  127.0.0.1:80 \n")
		fmt.Fprintln(os.Stderr, "to stderr")
		<-sig
		os.Exit(0)
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestStartStopKill(t *testing.T) {
	t.Parallel()
	start := func(t *testing.T, mode string, log *syncBuf) (*Proc, error) {
		return Start(context.Background(), Spec{Name: "child", Path: os.Args[0], Args: []string{"-test.run=^$"},
			Env: []string{"CLUSTER_TEST_CHILD=" + mode}, Log: log, Ready: []string{"svc grpc ", "svc http "}, ReadyTimeout: 30 * time.Second})
	}
	t.Run("values, usage and a clean stop", func(t *testing.T) {
		t.Parallel()
		var log syncBuf
		p, err := start(t, "serve", &log)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Value("svc grpc "); got != "127.0.0.1:1234" {
			t.Errorf("grpc value = %q", got)
		}
		if got := p.Value("svc http "); got != "127.0.0.1:80" {
			t.Errorf("http value = %q", got)
		}
		u, err := p.Usage()
		if err != nil || u.PeakRSS <= 0 || u.RSS <= 0 {
			t.Errorf("Usage = %+v, %v; want memory", u, err)
		}
		if err := p.Stop(syscall.SIGTERM, 10*time.Second); err != nil {
			t.Errorf("Stop = %v, want a clean exit", err)
		}
		if crashed, _ := p.Crashed(); crashed {
			t.Error("a stopped process counts as crashed")
		}
		if after, err := p.Usage(); err != nil || after.PeakRSS == 0 {
			t.Errorf("Usage after the end = %+v, %v; want the last reading", after, err)
		}
		for _, want := range []string{"started pid", "noise", "to stderr"} {
			if !strings.Contains(log.String(), want) {
				t.Errorf("log lacks %q:\n%s", want, log.String())
			}
		}
	})
	t.Run("kill", func(t *testing.T) {
		t.Parallel()
		p, err := start(t, "serve", &syncBuf{})
		if err != nil {
			t.Fatal(err)
		}
		before := time.Now()
		if at := p.Kill(); at.Before(before) {
			t.Errorf("Kill returned %v, before it was called", at)
		}
		if p.Err() == nil {
			t.Error("a killed process exited cleanly")
		}
		if crashed, _ := p.Crashed(); crashed {
			t.Error("a killed process counts as crashed")
		}
	})
	t.Run("exits before serving", func(t *testing.T) {
		t.Parallel()
		if _, err := start(t, "crash", &syncBuf{}); err == nil || !strings.Contains(err.Error(), "exited before serving") {
			t.Errorf("Start = %v, want exited before serving", err)
		}
	})
}

func TestParseStatCPU(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		stat        string
		want, child time.Duration
		ok          bool
	}{
		{"1234 (jobmesh) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 31 0 0 20 0 9 0", 2810 * time.Millisecond, 0, true},
		{"1234 (a b) c) R 1 1 1 0 -1 0 0 0 0 0 7 3 40 2 20", 100 * time.Millisecond, 420 * time.Millisecond, true},
		{"1234 jobmesh S 1", 0, 0, false},
		{"1234 (x) S 1 2", 0, 0, false},
		{"1234 (x) S 1 1 1 0 -1 0 0 0 0 0 7 3 x 2 20", 0, 0, false},
	} {
		got, child, err := parseStatCPU(tc.stat)
		if (err == nil) != tc.ok || got != tc.want || child != tc.child {
			t.Errorf("parseStatCPU(%q) = %v, %v, %v; want %v, %v, ok %v", tc.stat, got, child, err, tc.want, tc.child, tc.ok)
		}
	}
	if got := statusKB("Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t1024 kB\n", "VmHWM:"); got != 2048 {
		t.Errorf("statusKB VmHWM = %d, want 2048", got)
	}
	if got := statusKB("Name:\tx\n", "VmRSS:"); got != 0 {
		t.Errorf("statusKB of a missing key = %d, want 0", got)
	}
}
