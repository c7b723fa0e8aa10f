package sdk_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"syscall"
	"testing"
	"time"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk/sdktest"
)

// benchExecutor starts an executor with a no-op handler delivering to a fake logsvc (through the
// spool) and returns it with a channel of ended fires.
func benchExecutor(b *testing.B) (*sdk.Executor, executorv1.ExecutorServiceClient, chan sdk.Result) {
	b.Helper()
	ingest := sdktest.NewIngest()
	ended := make(chan sdk.Result, 1<<16)
	e, err := sdk.New(sdk.Config{
		AppName: "bench", InstanceID: "b1", ListenAddr: "127.0.0.1:0", LogsvcAddr: ingest.Serve(b), LogDir: b.TempDir(), AccessToken: "bench-token",
		IdleTimeout: time.Hour, Logger: slog.New(slog.DiscardHandler), OnResult: func(r sdk.Result) { ended <- r },
		Insecure: true,
	})
	if err != nil {
		b.Fatal(err)
	}
	e.Handle("noop", func(context.Context, *sdk.Job) error { return nil })
	if err := e.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sdktest.Stop(e) })
	return e, sdktest.Client(b, e.Addr(), "bench-token"), ended
}

// cpuTime is the CPU time (user and system) this process has used so far.
func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRunsNoop measures fires per second through one executor: Run calls of 100 fires over
// 100 jobs, each fire a no-op handler whose RUNNING and final results go through the spool.
// cpu-µs/run is the process's CPU time per fire (executor, fake logsvc and client together):
// unlike runs/s, a busy neighbour on the machine hardly moves it.
func BenchmarkRunsNoop(b *testing.B) {
	_, cli, ended := benchExecutor(b)
	const batch = 100
	n := 0
	cpu := cpuTime(b)
	b.ResetTimer()
	for b.Loop() {
		trs := make([]*executorv1.Trigger, batch)
		for i := range trs {
			trs[i] = &executorv1.Trigger{TriggerId: fmt.Sprintf("%d-%d-0-0", i+1, n), JobId: int64(i + 1), Handler: "noop", ShardTotal: 1}
			n++
		}
		if _, err := cli.Run(context.Background(), &executorv1.RunRequest{Triggers: trs}); err != nil {
			b.Fatal(err)
		}
		for range batch {
			<-ended
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "runs/s")
	b.ReportMetric(float64((cpuTime(b)-cpu).Microseconds())/float64(n), "cpu-µs/run")
}

// BenchmarkRunsNoopOnePerCall is BenchmarkRunsNoop with one fire per Run call, as a scheduler
// that does not batch sends them: 100 calls at a time, each of one fire of its own job.
func BenchmarkRunsNoopOnePerCall(b *testing.B) {
	_, cli, ended := benchExecutor(b)
	const batch = 100
	n := 0
	cpu := cpuTime(b)
	errs := make(chan error, batch)
	b.ResetTimer()
	for b.Loop() {
		for i := range batch {
			tr := &executorv1.Trigger{TriggerId: fmt.Sprintf("%d-%d-0-0", i+1, n), JobId: int64(i + 1), Handler: "noop", ShardTotal: 1}
			n++
			go func() {
				_, err := cli.Run(context.Background(), &executorv1.RunRequest{Triggers: []*executorv1.Trigger{tr}})
				errs <- err
			}()
		}
		for range batch {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
			<-ended
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "runs/s")
	b.ReportMetric(float64((cpuTime(b)-cpu).Microseconds())/float64(n), "cpu-µs/run")
}

// BenchmarkIdleWorkerMemory measures the heap an idle job worker (one per job, kept until
// IdleTimeout) costs, after its one fire has ended.
func BenchmarkIdleWorkerMemory(b *testing.B) {
	const workers = 2000
	for b.Loop() {
		b.StopTimer()
		_, cli, ended := benchExecutor(b)
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		trs := make([]*executorv1.Trigger, workers)
		for i := range trs {
			trs[i] = &executorv1.Trigger{TriggerId: fmt.Sprintf("%d-1-0-0", i+1), JobId: int64(i + 1), Handler: "noop", ShardTotal: 1}
		}
		b.StartTimer()
		if _, err := cli.Run(context.Background(), &executorv1.RunRequest{Triggers: trs}); err != nil {
			b.Fatal(err)
		}
		for range workers {
			<-ended
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		// Includes each worker's goroutine stack (counted by StackInuse) and the fire remembered
		// for duplicate detection.
		perWorker := float64(int64(after.HeapAlloc+after.StackInuse)-int64(before.HeapAlloc+before.StackInuse)) / workers
		b.ReportMetric(perWorker, "B/idle-worker")
		b.StartTimer()
	}
}
