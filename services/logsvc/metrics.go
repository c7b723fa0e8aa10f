package logsvc

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/services/executor-agent/telemetry/instrument"
)

// meterName is the instrumentation scope of logsvc's instruments.
const meterName = "github.com/jobmesh/jobmesh/services/logsvc"

// The ingest streams, the values of the jobmesh.ingest.stream attribute.
const (
	streamRecords = "trigger_records"
	streamResults = "results"
	streamLines   = "log_lines"
)

// lagBuckets extend the latency buckets to an hour: a backlog replayed from an agent's spool
// after an outage is minutes or hours old.
var lagBuckets = append(append([]float64(nil), instrument.LatencyBuckets...), 300, 900, 3600)

// metrics are logsvc's ingest instruments, on the global MeterProvider (installed by
// telemetry.StartMetrics; no-ops without it). Attribute sets are built once per stream.
type metrics struct {
	size     metric.Int64Histogram
	duration metric.Float64Histogram
	lag      metric.Float64Histogram
	streams  map[string]*streamAttrs

	reg metric.Registration
}

// streamAttrs are one stream's attribute sets: committed, and failed by error type.
type streamAttrs struct {
	ok                       []metric.RecordOption
	invalid, store, canceled []metric.RecordOption
}

func newMetrics() *metrics {
	m := otel.Meter(meterName)
	mt := &metrics{streams: map[string]*streamAttrs{}}
	mt.size, _ = m.Int64Histogram("jobmesh.logsvc.ingest.batch.size", metric.WithUnit("{item}"),
		metric.WithDescription("Items (trigger records, results or log lines) in one committed ingest batch."),
		metric.WithExplicitBucketBoundaries(instrument.SizeBuckets...))
	mt.duration, _ = m.Float64Histogram("jobmesh.logsvc.ingest.duration", metric.WithUnit("s"),
		metric.WithDescription("Time to store one ingest batch, from its queueing for a write cycle to commit; error.type is set when it was not stored."),
		metric.WithExplicitBucketBoundaries(instrument.LatencyBuckets...))
	mt.lag, _ = m.Float64Histogram("jobmesh.logsvc.ingest.lag", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest item of a committed batch at commit: event time (dispatch, run start or end, line written) to stored."),
		metric.WithExplicitBucketBoundaries(lagBuckets...))
	for _, st := range []string{streamRecords, streamResults, streamLines} {
		set := func(kv ...attribute.KeyValue) []metric.RecordOption {
			return []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(append(kv, attribute.String("jobmesh.ingest.stream", st))...))}
		}
		mt.streams[st] = &streamAttrs{
			ok:       set(),
			invalid:  set(attribute.String("error.type", "invalid")),
			store:    set(attribute.String("error.type", "store")),
			canceled: set(attribute.String("error.type", "canceled")),
		}
	}
	return mt
}

// observe registers the callback that reports the ingest queue.
func (mt *metrics) observe(s *Service) {
	m := otel.Meter(meterName)
	queued, _ := m.Int64ObservableUpDownCounter("jobmesh.logsvc.ingest.queued", metric.WithUnit("{item}"),
		metric.WithDescription("Items of ingest batches received and not yet committed; at jobmesh.logsvc.ingest.queued.limit senders are held back."))
	limit, _ := m.Int64ObservableUpDownCounter("jobmesh.logsvc.ingest.queued.limit", metric.WithUnit("{item}"),
		metric.WithDescription("Items of ingest batches held at most (MaxQueuedItems)."))
	mt.reg, _ = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(queued, int64(s.queue.queued()))
		o.ObserveInt64(limit, int64(s.cfg.MaxQueuedItems))
		return nil
	}, queued, limit)
}

// stop unregisters the callback.
func (mt *metrics) stop() {
	if mt.reg != nil {
		_ = mt.reg.Unregister()
	}
}

// batch records one ingest batch of stream: n items, the oldest item's event time (Unix ms, 0
// when none says), the time it took and how it ended.
func (mt *metrics) batch(stream string, n int, oldestMs int64, took time.Duration, committedAt time.Time, err error) {
	a := mt.streams[stream]
	ctx := context.Background()
	switch {
	case err == nil:
		mt.duration.Record(ctx, took.Seconds(), a.ok...)
		mt.size.Record(ctx, int64(n), a.ok...)
		if oldestMs > 0 {
			mt.lag.Record(ctx, max(committedAt.Sub(time.UnixMilli(oldestMs)).Seconds(), 0), a.ok...)
		}
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		mt.duration.Record(ctx, took.Seconds(), a.canceled...)
	case isFieldError(err):
		mt.duration.Record(ctx, took.Seconds(), a.invalid...)
	default:
		mt.duration.Record(ctx, took.Seconds(), a.store...)
	}
}

func isFieldError(err error) bool {
	var fe *apierr.FieldError
	var fs apierr.Fields
	return errors.As(err, &fe) || errors.As(err, &fs)
}

// oldest returns the earliest non-zero of the times t picks from items.
func oldest[T any](items []T, t func(T) int64) int64 {
	var min int64
	for _, it := range items {
		if v := t(it); v > 0 && (min == 0 || v < min) {
			min = v
		}
	}
	return min
}

// recordsStats, resultsStats and linesStats measure a batch of each stream.
func recordsStats(r *logsv1.IngestTriggerRecordsRequest) (int, int64) {
	return len(r.GetRecords()), oldest(r.GetRecords(), (*logsv1.TriggerRecord).GetTriggerUnixMs)
}

func resultsStats(r *logsv1.IngestResultsRequest) (int, int64) {
	return len(r.GetResults()), oldest(r.GetResults(), func(x *logsv1.RunResult) int64 {
		if x.GetStatus() == logsv1.RunStatus_RUN_STATUS_RUNNING {
			return x.GetStartUnixMs()
		}
		return x.GetEndUnixMs()
	})
}

func linesStats(r *logsv1.IngestLogLinesRequest) (int, int64) {
	return len(r.GetLines()), oldest(r.GetLines(), (*logsv1.LogLine).GetUnixMs)
}
