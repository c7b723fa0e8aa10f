package sdk_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk/sdktest"
)

// BenchmarkBurstStart measures how close together a burst of held fires starts: burst jobs
// (as many `* * * * * ?` jobs) each send one fire due at the same instant, ahead of it by the
// dispatch lead, in Run calls of 500; every job's worker exists already (a previous second's
// fire). A no-op handler records when it starts. It reports the spread (last start − first
// start) and the p50 and p99 of start − due, per burst, and the best burst's spread and p99 (on
// a shared machine, the bursts that no other process held up show the code's own cost).
func BenchmarkBurstStart(b *testing.B) {
	const (
		burst = 5000
		call  = 500
		lead  = 200 * time.Millisecond
	)
	ingest := sdktest.NewIngest()
	ended := make(chan sdk.Result, 2*burst)
	e, err := sdk.New(sdk.Config{
		AppName: "bench", InstanceID: "b1", ListenAddr: "127.0.0.1:0", LogsvcAddr: ingest.Serve(b), LogDir: b.TempDir(),
		AccessToken: "bench-token", Capacity: 2 * burst, IdleTimeout: time.Hour, Logger: slog.New(slog.DiscardHandler),
		OnResult: func(r sdk.Result) { ended <- r },
	})
	if err != nil {
		b.Fatal(err)
	}
	starts := make([]atomic.Int64, burst+1) // by job id: the start's UnixNano
	e.Handle("stamp", func(_ context.Context, job *sdk.Job) error {
		starts[job.ID].Store(time.Now().UnixNano())
		return nil
	})
	if err := e.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sdktest.Stop(e) })
	cli := sdktest.Client(b, e.Addr(), "bench-token")

	send := func(round int, due time.Time) {
		for lo := 1; lo <= burst; lo += call {
			var trs []*executorv1.Trigger
			for job := lo; job < lo+call; job++ {
				trs = append(trs, &executorv1.Trigger{TriggerId: fmt.Sprintf("%d-%d-0-0", job, round), JobId: int64(job), Handler: "stamp", ShardTotal: 1})
			}
			if !due.IsZero() {
				// As the scheduler does: the call's fires built, one delay for its fires of one
				// millisecond, from just before the call.
				delay := time.Until(due).Microseconds()
				for _, tr := range trs {
					tr.StartDelayUs = delay
				}
			}
			if _, err := cli.Run(context.Background(), &executorv1.RunRequest{Triggers: trs}); err != nil {
				b.Fatal(err)
			}
		}
		for range burst {
			<-ended
		}
	}
	send(0, time.Time{}) // every job's worker, as after a previous second

	var spread, p50, p99 time.Duration
	bestSpread, bestP99 := time.Duration(1<<62), time.Duration(1<<62)
	round := 0
	for b.Loop() {
		round++
		due := time.Now().Add(lead)
		send(round, due)
		lat := make([]time.Duration, 0, burst)
		first, last := int64(1<<62), int64(0)
		for job := 1; job <= burst; job++ {
			at := starts[job].Load()
			first, last = min(first, at), max(last, at)
			lat = append(lat, time.Duration(at-due.UnixNano()))
		}
		slices.Sort(lat)
		spread += time.Duration(last - first)
		p50 += lat[len(lat)/2]
		p99 += lat[len(lat)*99/100]
		bestSpread, bestP99 = min(bestSpread, time.Duration(last-first)), min(bestP99, lat[len(lat)*99/100])
	}
	n := time.Duration(b.N)
	b.ReportMetric(float64((spread/n).Microseconds())/1000, "spread-ms")
	b.ReportMetric(float64((p50/n).Microseconds())/1000, "p50-late-ms")
	b.ReportMetric(float64((p99/n).Microseconds())/1000, "p99-late-ms")
	b.ReportMetric(float64(bestSpread.Microseconds())/1000, "best-spread-ms")
	b.ReportMetric(float64(bestP99.Microseconds())/1000, "best-p99-late-ms")
}
