package sdk

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// A fire's trace context arrives in its Trigger (the scheduler's dispatch span). The run span
// is its child; the results sent to logsvc carry the run span's traceparent (a RUNNING result,
// or the result of a fire that never ran, the dispatch's), so logsvc's ingest spans join the
// fire's trace. Only W3C trace context is used, whatever propagator the process installed.
var w3c propagation.TraceContext

// traceparentOf returns the W3C traceparent of ctx's span, empty when it has none.
func traceparentOf(ctx context.Context) string {
	c := propagation.MapCarrier{}
	w3c.Inject(ctx, c)
	return c["traceparent"]
}

// traceIDOf returns the trace id a W3C traceparent names, empty when it is not a valid one.
func traceIDOf(traceparent string) string {
	if traceparent == "" {
		return ""
	}
	sc := trace.SpanContextFromContext(w3c.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent}))
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}
