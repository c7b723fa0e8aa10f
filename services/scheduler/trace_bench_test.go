package scheduler

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobmesh/jobmesh/internal/clock"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/route"
)

// discardExporter takes spans and drops them: the benchmark measures the scheduler's side.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkTraceFire measures the spans of one fire to one executor (fire and dispatch, the
// trace context for the Trigger and the record): "off" with no tracer provider installed (the
// default), "sampled" with a real one exporting every span. The second installs the global
// TracerProvider for the rest of the test binary, so run it alone:
// go test -run '^$' -bench BenchmarkTraceFire ./services/scheduler/
func BenchmarkTraceFire(b *testing.B) {
	s := &Service{clk: clock.Real()}
	f := &fire{job: &jobRow{ID: 7, GroupID: 3, Route: route.First}, fireMs: time.Now().UnixMilli(),
		kind: kindScheduled, trigType: triggerCron}
	t := route.Target{Address: "10.0.0.1:9999", ShardTotal: 1}
	one := func() {
		ctx, span := s.startFire(f, trace.Link{})
		dctx, ds := startDispatch(ctx, "7-1-0-0", t)
		if _, tc := traceOf(dctx); tc["traceparent"] == "x" {
			b.Fatal("unreachable")
		}
		endDispatch(ds, "ACCEPTED", false, "")
		endFire(span, []string{"7-1-0-0"}, []string{t.Address}, 0, "")
	}
	b.Run("off", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			one()
		}
	})
	b.Run("sampled", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
		defer tp.Shutdown(context.Background())
		otel.SetTracerProvider(tp)
		b.ReportAllocs()
		for b.Loop() {
			one()
		}
	})
}
