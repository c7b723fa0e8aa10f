package scheduler

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobmesh/jobmesh/services/executor-agent/telemetry/instrument"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/route"
)

// One fire is one trace: its root is the jobmesh.fire span (never a child of the pre-read that
// armed it, which serves many fires), with a jobmesh.dispatch span per executor the fire goes
// to. The dispatch span's context travels in the Trigger to the executor (whose run span is its
// child) and in the trigger record to logsvc.

var tracer = otel.Tracer("github.com/jobmesh/jobmesh/services/scheduler")

// noSpan stands for a fire's spans when no tracer provider is installed: it records nothing and
// ending it does nothing.
var noSpan = trace.SpanFromContext(context.Background())

// w3c carries the fire's context to executors and logsvc: W3C trace context only, whatever
// global propagator the process installed.
var w3c propagation.TraceContext

// startFire starts the root span of one fire, linked to cause when it is valid (the API call of
// a manual trigger). Attributes are computed only when the span records, so an untraced
// scheduler pays for no formatting.
func (s *Service) startFire(f *fire, cause trace.Link) (context.Context, trace.Span) {
	if !instrument.TracerInstalled() { // the span would record nothing and carry no context
		return context.Background(), noSpan
	}
	var ctx context.Context
	var span trace.Span
	if cause.SpanContext.IsValid() {
		ctx, span = tracer.Start(context.Background(), "jobmesh.fire", trace.WithNewRoot(), trace.WithLinks(cause))
	} else {
		ctx, span = tracer.Start(context.Background(), "jobmesh.fire", trace.WithNewRoot())
	}
	if span.IsRecording() {
		j := f.job
		sched := time.UnixMilli(f.fireMs)
		span.SetAttributes(
			attribute.Int64("jobmesh.job_id", j.ID),
			attribute.Int64("jobmesh.group_id", j.GroupID),
			attribute.String("jobmesh.trigger_type", f.trigType.String()),
			attribute.Int("jobmesh.attempt", int(f.attempt)),
			attribute.String("jobmesh.scheduled_time", sched.UTC().Format(time.RFC3339Nano)),
			// Negative for a fire sent ahead of its time (dispatch lead): how far ahead it left.
			attribute.Float64("jobmesh.lateness_ms", float64(s.clk.Now().Sub(sched).Microseconds())/1000),
			attribute.String("jobmesh.route_strategy", j.Route.String()),
		)
	}
	return ctx, span
}

// endFire records where a fire went and whether it reached every executor (failed of them did
// not, the first because of msg), and ends its span.
func endFire(span trace.Span, ids, addrs []string, failed int, msg string) {
	if span.IsRecording() {
		if len(ids) == 1 {
			span.SetAttributes(attribute.String("jobmesh.trigger_id", ids[0]))
		} else {
			span.SetAttributes(attribute.StringSlice("jobmesh.trigger_ids", ids))
		}
		if len(addrs) == 1 {
			span.SetAttributes(attribute.String("jobmesh.executor_address", addrs[0]))
		} else if len(addrs) > 1 {
			span.SetAttributes(attribute.StringSlice("jobmesh.executor_addresses", addrs))
		}
		outcome := "OK"
		if failed > 0 {
			outcome = "FAILED"
			if failed < len(ids) {
				msg = fmt.Sprintf("%d of %d shards reached no executor: %s", failed, len(ids), msg)
			}
			span.SetStatus(codes.Error, msg)
		}
		span.SetAttributes(attribute.String("jobmesh.trigger_outcome", outcome))
	}
	span.End()
}

// startDispatch starts the span of one Run to one executor, a child of the fire's.
func startDispatch(ctx context.Context, id string, t route.Target) (context.Context, trace.Span) {
	if !instrument.TracerInstalled() {
		return ctx, noSpan
	}
	ctx, span := tracer.Start(ctx, "jobmesh.dispatch")
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("jobmesh.trigger_id", id),
			attribute.String("jobmesh.executor_address", t.Address),
			attribute.Int("jobmesh.shard_index", t.ShardIndex),
			attribute.Int("jobmesh.shard_total", max(t.ShardTotal, 1)),
		)
	}
	return ctx, span
}

// endDispatch records the executor's answer (ACCEPTED, DUPLICATE, REJECTED, or the error that
// kept the fire from it) and ends the span.
func endDispatch(span trace.Span, answer string, failed bool, msg string) {
	if span.IsRecording() {
		outcome := "OK"
		if failed {
			outcome = "FAILED"
			span.SetStatus(codes.Error, msg)
		}
		span.SetAttributes(attribute.String("jobmesh.trigger_outcome", outcome), attribute.String("jobmesh.executor_answer", answer))
	}
	span.End()
}

// traceOf returns the trace id and the W3C trace context of ctx's span, for the Trigger and the
// trigger record; both are empty when the fire is not traced.
func traceOf(ctx context.Context) (traceID string, tc map[string]string) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return "", nil
	}
	tc = make(map[string]string, 2)
	w3c.Inject(ctx, propagation.MapCarrier(tc))
	return sc.TraceID().String(), tc
}
