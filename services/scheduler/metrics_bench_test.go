package scheduler

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// BenchmarkMetricsSent measures what recording one dispatched fire costs with a real meter
// provider (lateness histogram and outcome counter): the hot-path price of metrics. It installs
// the global MeterProvider for the rest of the test binary, so run it alone:
// go test -run '^$' -bench BenchmarkMetricsSent ./services/scheduler/
func BenchmarkMetricsSent(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	otel.SetMeterProvider(mp)
	mt := newMetrics("bench")
	now := time.Now()
	fireMs := now.Add(-3 * time.Millisecond).UnixMilli()
	b.ReportAllocs()
	for b.Loop() {
		mt.sent(triggerCron, fireMs, now, outcomeAccepted)
	}
}
