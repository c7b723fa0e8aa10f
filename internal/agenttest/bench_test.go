package agenttest

import (
	"context"
	"fmt"
	"log/slog"
	"syscall"
	"testing"
	"time"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk/sdktest"
)

// cpuTime is the CPU time (user and system) this process has used so far.
func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAgentToLogsvc measures no-op fires through an in-process executor into the real
// logsvc on Postgres: Run calls of 100 fires over 100 jobs, every result through the executor's
// spool and result stream, timed until logsvc has stored them all. cpu-µs/run is this process's
// CPU time per fire (executor, logsvc and client; Postgres runs apart and is not counted).
func BenchmarkAgentToLogsvc(b *testing.B) {
	ls := newLogsvc(b)
	ls.up()
	ended := make(chan sdk.Result, 1<<16)
	ex, err := sdk.New(sdk.Config{
		AppName: "bench", InstanceID: "b1", ListenAddr: "127.0.0.1:0", LogsvcAddr: ls.addr, LogDir: b.TempDir(), AccessToken: groupToken,
		IdleTimeout: time.Hour, Logger: slog.New(slog.DiscardHandler), OnResult: func(r sdk.Result) { ended <- r },
		Insecure: true,
	})
	if err != nil {
		b.Fatal(err)
	}
	ex.Handle("noop", func(context.Context, *sdk.Job) error { return nil })
	if err := ex.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sdktest.Stop(ex) })
	cli := sdktest.Client(b, ex.Addr(), groupToken)
	ctx := context.Background()

	const batch = 100
	cpu := cpuTime(b)
	b.ResetTimer()
	for i := range b.N {
		trs := make([]*executorv1.Trigger, batch)
		for j := range trs {
			trs[j] = &executorv1.Trigger{TriggerId: fmt.Sprintf("%d-%d-0-0", j+1, i), JobId: int64(j + 1), Handler: "noop", ShardTotal: 1}
		}
		if _, err := cli.Run(ctx, &executorv1.RunRequest{Triggers: trs}); err != nil {
			b.Fatal(err)
		}
		for range batch {
			<-ended
		}
	}
	// Delivery runs behind the fires: wait until logsvc has stored every result.
	want := b.N * batch
	deadline := time.Now().Add(wait)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		var stored int
		if err := ls.d.QueryRowContext(ctx, ls.d.Q(`SELECT count(*) FROM runs WHERE status = $1`), int32(logsv1.RunStatus_RUN_STATUS_SUCCESS)).Scan(&stored); err != nil {
			b.Fatalf("count stored results: %v", err)
		}
		if stored == want {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("after %v, logsvc stores %d of %d results", wait, stored, want)
		}
		<-tick.C
	}
	b.StopTimer()
	b.ReportMetric(float64(want)/b.Elapsed().Seconds(), "runs/s")
	b.ReportMetric(float64((cpuTime(b)-cpu).Microseconds())/float64(want), "cpu-µs/run")
}
