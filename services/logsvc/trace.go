package logsvc

import (
	"context"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
)

// Ingest joins each fire's trace without inventing parents for batches. Trigger records and
// results carry the traceparent of the span that sent them (the scheduler's dispatch, the
// agent's run). For a batch holding traced items logsvc records:
//   - one "jobmesh.ingest batch" span, a root of its own, linked to every traced item: the
//     commit is shared by many fires, so it belongs to none of their traces;
//   - per traced item, a "jobmesh.ingest trigger_record" or "jobmesh.ingest result" span, a
//     child of the item's sender in the fire's trace, linked back to the batch span, from the
//     batch's arrival to its acknowledgement.
// A batch with no traced item (an untraced sender, log lines) records nothing.

var tracer = otel.Tracer("github.com/jobmesh/jobmesh/services/logsvc")

// ingestBatch is what tracing needs of a batch: what its items are ("trigger_record",
// "result": the item spans' names end with it), its id, its size and its traced items.
type ingestBatch struct {
	kind  string
	id    uint64
	size  int
	items []ingestItem
}

// ingestItem is a traced item of a batch.
type ingestItem struct {
	sc    trace.SpanContext
	attrs []attribute.KeyValue
}

// parentOf returns the span context a W3C traceparent names; it is invalid for an empty or
// malformed one.
func parentOf(traceparent string) trace.SpanContext {
	if traceparent == "" {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent}))
}

// traceIDOf is the trace id to store with a run: the one the sender named, else the one of its
// traceparent.
func traceIDOf(traceID, traceparent string) string {
	if traceID != "" {
		return clean(traceID)
	}
	if sc := parentOf(traceparent); sc.IsValid() {
		return sc.TraceID().String()
	}
	return ""
}

// recordItems lists the traced trigger records of a batch.
func recordItems(req *logsv1.IngestTriggerRecordsRequest, _ *logsv1.IngestTriggerRecordsResponse) ingestBatch {
	out := ingestBatch{kind: "trigger_record", id: req.GetBatchId(), size: len(req.GetRecords())}
	for _, r := range req.GetRecords() {
		if sc := parentOf(r.GetTraceparent()); sc.IsValid() {
			out.items = append(out.items, ingestItem{sc, []attribute.KeyValue{
				attribute.String("jobmesh.trigger_id", r.GetTriggerId()),
				attribute.Int64("jobmesh.job_id", r.GetJobId()),
				attribute.String("jobmesh.trigger_outcome", strings.TrimPrefix(r.GetTriggerOutcome().String(), "TRIGGER_OUTCOME_")),
			}})
		}
	}
	return out
}

// resultItems lists the traced results of a batch, with whether logsvc refused them.
func resultItems(req *logsv1.IngestResultsRequest, resp *logsv1.IngestResultsResponse) ingestBatch {
	out := ingestBatch{kind: "result", id: req.GetBatchId(), size: len(req.GetResults())}
	for _, r := range req.GetResults() {
		if sc := parentOf(r.GetTraceparent()); sc.IsValid() {
			refused := r.GetStatus() != logsv1.RunStatus_RUN_STATUS_RUNNING && slices.Contains(resp.GetRefusedTriggerIds(), r.GetTriggerId())
			out.items = append(out.items, ingestItem{sc, []attribute.KeyValue{
				attribute.String("jobmesh.trigger_id", r.GetTriggerId()),
				attribute.Int64("jobmesh.job_id", r.GetJobId()),
				attribute.String("jobmesh.run_status", strings.TrimPrefix(r.GetStatus().String(), "RUN_STATUS_")),
				attribute.Bool("jobmesh.refused", refused),
			}})
		}
	}
	return out
}

// traceBatch records the spans of a batch that arrived at start and was written (or failed
// with err) just now, and returns the batch span's context for what is logged about it.
func traceBatch(ctx context.Context, b ingestBatch, start time.Time, err error) context.Context {
	items := b.items
	if len(items) == 0 {
		return ctx
	}
	end := time.Now()
	links := make([]trace.Link, len(items))
	for i, it := range items {
		links[i] = trace.Link{SpanContext: it.sc}
	}
	bctx, batch := tracer.Start(ctx, "jobmesh.ingest batch", trace.WithNewRoot(), trace.WithTimestamp(start), trace.WithLinks(links...),
		trace.WithAttributes(attribute.String("jobmesh.ingest", b.kind), attribute.Int64("jobmesh.batch_id", int64(b.id)), attribute.Int("jobmesh.batch_size", b.size)))
	link := trace.WithLinks(trace.Link{SpanContext: batch.SpanContext()})
	for _, it := range items {
		_, span := tracer.Start(trace.ContextWithRemoteSpanContext(ctx, it.sc), "jobmesh.ingest "+b.kind, trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithTimestamp(start), link, trace.WithAttributes(it.attrs...))
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End(trace.WithTimestamp(end))
	}
	if err != nil {
		batch.SetStatus(codes.Error, err.Error())
	}
	batch.End(trace.WithTimestamp(end))
	return bctx
}
