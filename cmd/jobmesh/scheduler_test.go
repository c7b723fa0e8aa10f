package main

import (
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/services/scheduler"
)

func TestParseSchedulerFlags(t *testing.T) {
	full := []string{"--etcd-endpoints", " http://a:2379, http://b:2379 ,", "--database-url", "postgres://u@h/db",
		"--registry-addr", "127.0.0.1:9011", "--logs-addr", "127.0.0.1:9012",
		"--internal-token", strings.Repeat("s", 32), "--insecure"}

	t.Run("defaults and the comma list", func(t *testing.T) {
		c, err := parseSchedulerFlags(full, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"http://a:2379", "http://b:2379"}; !slices.Equal(c.EtcdEndpoints, want) {
			t.Errorf("etcd endpoints = %q, want %q", c.EtcdEndpoints, want)
		}
		if c.GRPCAddr != "127.0.0.1:9010" || c.SessionTTL != 2*time.Second || c.ReplicaID != "" {
			t.Errorf("grpc addr, session ttl, replica id = %q, %v, %q; want 127.0.0.1:9010, 2s, empty", c.GRPCAddr, c.SessionTTL, c.ReplicaID)
		}
	})

	t.Run("required flags are named", func(t *testing.T) {
		_, err := parseSchedulerFlags(nil, io.Discard)
		for _, f := range []string{"--etcd-endpoints", "--database-url", "--registry-addr", "--logs-addr", "--internal-token"} {
			if err == nil || !strings.Contains(err.Error(), f+": required") {
				t.Errorf("error %v does not name %s as required", err, f)
			}
		}
	})

	t.Run("TLS or --insecure", func(t *testing.T) {
		noTLS := slices.DeleteFunc(slices.Clone(full), func(a string) bool { return a == "--insecure" })
		_, err := parseSchedulerFlags(noTLS, io.Discard)
		for _, f := range []string{"--tls-cert", "--tls-key", "--tls-ca", "--insecure"} {
			if err == nil || !strings.Contains(err.Error(), f) {
				t.Errorf("without TLS flags or --insecure: error %v does not name %s", err, f)
			}
		}
		_, err = parseSchedulerFlags(append(slices.Clone(full), "--tls-cert", "c.pem"), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--insecure") {
			t.Errorf("--insecure with --tls-cert: error = %v, want one naming --insecure", err)
		}
	})

	t.Run("session ttl in whole seconds", func(t *testing.T) {
		_, err := parseSchedulerFlags(append(slices.Clone(full), "--session-ttl", "1500ms"), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--session-ttl") {
			t.Errorf("error = %v, want one naming --session-ttl", err)
		}
	})

	t.Run("dispatch lead", func(t *testing.T) {
		c, err := parseSchedulerFlags(full, io.Discard)
		if err != nil || c.DispatchLead != 200*time.Millisecond || leadConfig(c.DispatchLead) != 200*time.Millisecond {
			t.Errorf("default dispatch lead = %v (error %v), want 200ms", c.DispatchLead, err)
		}
		c, err = parseSchedulerFlags(append(slices.Clone(full), "--dispatch-lead", "0"), io.Discard)
		if err != nil || leadConfig(c.DispatchLead) >= 0 {
			t.Errorf("--dispatch-lead 0 = %v (error %v), want off (negative in the scheduler's config)", leadConfig(c.DispatchLead), err)
		}
		for _, bad := range []string{"-1ms", "5s"} {
			_, err := parseSchedulerFlags(append(slices.Clone(full), "--dispatch-lead", bad), io.Discard)
			if err == nil || !strings.Contains(err.Error(), "--dispatch-lead") {
				t.Errorf("--dispatch-lead %s: error = %v, want one naming --dispatch-lead", bad, err)
			}
		}
	})

	t.Run("record queue", func(t *testing.T) {
		c, err := parseSchedulerFlags(full, io.Discard)
		if err != nil || c.RecordQueue != scheduler.DefaultRecordQueue {
			t.Errorf("default record queue = %d (error %v), want %d", c.RecordQueue, err, scheduler.DefaultRecordQueue)
		}
		c, err = parseSchedulerFlags(append(slices.Clone(full), "--record-queue", "2000000"), io.Discard)
		if err != nil || c.RecordQueue != 2_000_000 {
			t.Errorf("--record-queue 2000000 = %d (error %v)", c.RecordQueue, err)
		}
		_, err = parseSchedulerFlags(append(slices.Clone(full), "--record-queue", "0"), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--record-queue") {
			t.Errorf("--record-queue 0: error = %v, want one naming --record-queue", err)
		}
	})

	t.Run("misfire threshold and executor queues", func(t *testing.T) {
		c, err := parseSchedulerFlags(full, io.Discard)
		if err != nil || c.MisfireThreshold != scheduler.DefaultMisfireThreshold ||
			c.ExecutorQueue != scheduler.DefaultExecutorQueue || c.ExecutorQueueTotal != scheduler.DefaultExecutorQueueTotal {
			t.Errorf("defaults = %v, %d, %d (error %v); want %v, %d, %d", c.MisfireThreshold, c.ExecutorQueue, c.ExecutorQueueTotal, err,
				scheduler.DefaultMisfireThreshold, scheduler.DefaultExecutorQueue, scheduler.DefaultExecutorQueueTotal)
		}
		t.Setenv("JOBMESH_EXECUTOR_QUEUE_TOTAL", "5000")
		c, err = parseSchedulerFlags(append(slices.Clone(full), "--misfire-threshold", "30s", "--executor-queue", "500"), io.Discard)
		if err != nil || c.MisfireThreshold != 30*time.Second || c.ExecutorQueue != 500 || c.ExecutorQueueTotal != 5000 {
			t.Errorf("--misfire-threshold 30s --executor-queue 500, JOBMESH_EXECUTOR_QUEUE_TOTAL=5000: got %v, %d, %d (error %v)",
				c.MisfireThreshold, c.ExecutorQueue, c.ExecutorQueueTotal, err)
		}
		for _, bad := range []struct {
			args []string
			flag string
		}{
			{[]string{"--misfire-threshold", "0"}, "--misfire-threshold"},
			{[]string{"--misfire-threshold", "500ms"}, "--misfire-threshold"},
			{[]string{"--misfire-threshold", "11m"}, "--misfire-threshold"},
			{[]string{"--executor-queue", "0"}, "--executor-queue "},
			{[]string{"--executor-queue-total", "0"}, "--executor-queue-total"},
			{[]string{"--executor-queue", "6000"}, "--executor-queue-total 5000: at least 1, and at least --executor-queue (6000)"},
		} {
			_, err := parseSchedulerFlags(append(slices.Clone(full), bad.args...), io.Discard)
			if err == nil || !strings.Contains(err.Error(), bad.flag) {
				t.Errorf("%v: error = %v, want one naming %s", bad.args, err, bad.flag)
			}
		}
	})

	t.Run("metrics address", func(t *testing.T) {
		c, err := parseSchedulerFlags(append(slices.Clone(full), "--metrics-addr", "0.0.0.0:9464"), io.Discard)
		if err != nil || c.MetricsAddr != "0.0.0.0:9464" {
			t.Errorf("metrics addr = %q (error %v), want 0.0.0.0:9464", c.MetricsAddr, err)
		}
		_, err = parseSchedulerFlags(append(slices.Clone(full), "--metrics-addr", "9464"), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--metrics-addr") {
			t.Errorf("error = %v, want one naming --metrics-addr", err)
		}
	})

	t.Run("environment twins, and the command line wins", func(t *testing.T) {
		t.Setenv("JOBMESH_REPLICA_ID", "from-env")
		t.Setenv("JOBMESH_SESSION_TTL", "2s")
		t.Setenv("JOBMESH_GRPC_ADDR", "127.0.0.1:0")
		c, err := parseSchedulerFlags(append(slices.Clone(full), "--grpc-addr", "127.0.0.1:7000"), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if c.ReplicaID != "from-env" || c.SessionTTL != 2*time.Second || c.GRPCAddr != "127.0.0.1:7000" {
			t.Errorf("replica id, session ttl, grpc addr = %q, %v, %q; want from-env, 2s, 127.0.0.1:7000", c.ReplicaID, c.SessionTTL, c.GRPCAddr)
		}
	})
}

// TestAdvertiseAddr: a replica advertises --advertise-addr, else its listener's actual address
// unless it listens on every interface; a malformed --advertise-addr is refused.
func TestAdvertiseAddr(t *testing.T) {
	for _, tc := range []struct {
		flag, listen, want string // want "port" stands for the listener's address
	}{
		{"", "127.0.0.1:0", "port"},
		{"", "0.0.0.0:0", ""},
		{"", "[::]:0", ""},
		{"sched-1.internal:9010", "0.0.0.0:0", "sched-1.internal:9010"},
	} {
		ln, err := net.Listen("tcp", tc.listen)
		if err != nil {
			t.Logf("listen %s: %v (skipped)", tc.listen, err) // e.g. no IPv6
			continue
		}
		want := tc.want
		if want == "port" {
			want = ln.Addr().String()
		}
		if got := advertiseAddr(tc.flag, ln); got != want {
			t.Errorf("advertiseAddr(%q) listening on %s = %q, want %q", tc.flag, ln.Addr(), got, want)
		}
		ln.Close()
	}
	full := []string{"--etcd-endpoints", "http://a:2379", "--database-url", "postgres://u@h/db",
		"--registry-addr", "127.0.0.1:9011", "--logs-addr", "127.0.0.1:9012",
		"--internal-token", strings.Repeat("s", 32), "--insecure"}
	for _, bad := range []string{"no-port", "0.0.0.0:9010", "[::]:9010", "host:0"} {
		if _, err := parseSchedulerFlags(append(slices.Clone(full), "--advertise-addr", bad), io.Discard); err == nil || !strings.Contains(err.Error(), "--advertise-addr") {
			t.Errorf("--advertise-addr %s: error = %v, want one naming --advertise-addr", bad, err)
		}
	}
	if c, err := parseSchedulerFlags(append(slices.Clone(full), "--advertise-addr", "10.0.0.5:9010"), io.Discard); err != nil || c.AdvertiseAddr != "10.0.0.5:9010" {
		t.Errorf("--advertise-addr 10.0.0.5:9010 = %q, %v", c.AdvertiseAddr, err)
	}
}
