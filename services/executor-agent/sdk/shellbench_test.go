package sdk_test

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
)

// cpuWithChildren is the CPU time (user and system) of this process and of its children that
// have been waited for.
func cpuWithChildren(b *testing.B) time.Duration {
	b.Helper()
	var self, children syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &self); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(self.Utime.Nano() + self.Stime.Nano() + children.Utime.Nano() + children.Stime.Nano())
}

// reportCPU reports CPU µs per op of this process and its children since cpu0.
func reportCPU(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64((cpuWithChildren(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/fire")
}

// BenchmarkShellFire runs GLUE_SHELL fires of `echo hi`, one after the other, through the real
// path: Run call, worker, GLUE source file, process group, environment, output lines to the
// local log and (through the spool) a fake logsvc. cpu-µs/fire counts the agent and the shell;
// BenchmarkShellBaseline is the shell alone, so the difference is what jobmesh adds.
func BenchmarkShellFire(b *testing.B) {
	_, cli, ended := benchExecutor(b)
	cpu := cpuWithChildren(b)
	n := 0
	for b.Loop() {
		n++
		tr := &executorv1.Trigger{TriggerId: fmt.Sprintf("1-%d-0-0", n), JobId: 1, GlueType: schedulerv1.GlueType_GLUE_TYPE_GLUE_SHELL,
			GlueSource: "echo hi", GlueUpdatedUnixMs: 1, ShardTotal: 1}
		if _, err := cli.Run(context.Background(), &executorv1.RunRequest{Triggers: []*executorv1.Trigger{tr}}); err != nil {
			b.Fatal(err)
		}
		if r := <-ended; r.Status != sdk.StatusSuccess {
			b.Fatalf("fire %s: %s %s", r.TriggerID, r.Status, r.Message)
		}
	}
	b.StopTimer()
	reportCPU(b, cpu)
}

// BenchmarkShellBaseline is what BenchmarkShellFire's script costs without jobmesh: bash -c
// 'echo hi', its output read through a pipe.
func BenchmarkShellBaseline(b *testing.B) {
	cpu := cpuWithChildren(b)
	for b.Loop() {
		cmd := exec.Command("bash", "-c", "echo hi")
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		for sc.Scan() {
		}
		if err := cmd.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportCPU(b, cpu)
}

// BenchmarkShellFireConcurrent is BenchmarkShellFire with 8 fires in flight at once (8 jobs, a
// new fire of a job as soon as its last one ends): each fire's end then finds the other fires'
// processes started since its own.
func BenchmarkShellFireConcurrent(b *testing.B) {
	_, cli, ended := benchExecutor(b)
	const inFlight = 8
	fire := func(job int64, n int) {
		tr := &executorv1.Trigger{TriggerId: fmt.Sprintf("%d-%d-0-0", job, n), JobId: job, GlueType: schedulerv1.GlueType_GLUE_TYPE_GLUE_SHELL,
			GlueSource: "echo hi", GlueUpdatedUnixMs: 1, ShardTotal: 1}
		if _, err := cli.Run(context.Background(), &executorv1.RunRequest{Triggers: []*executorv1.Trigger{tr}}); err != nil {
			b.Fatal(err)
		}
	}
	cpu := cpuWithChildren(b)
	sent := 0
	for job := int64(1); job <= inFlight && sent < b.N; job++ {
		sent++
		fire(job, sent)
	}
	for done := 0; done < b.N; done++ {
		r := <-ended
		if r.Status != sdk.StatusSuccess {
			b.Fatalf("fire %s: %s %s", r.TriggerID, r.Status, r.Message)
		}
		if sent < b.N {
			sent++
			fire(r.JobID, sent)
		}
	}
	b.StopTimer()
	reportCPU(b, cpu)
}
