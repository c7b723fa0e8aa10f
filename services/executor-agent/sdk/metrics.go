package sdk

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/telemetry/instrument"
)

// meterName is the instrumentation scope of the executor's instruments.
const meterName = "github.com/jobmesh/jobmesh/services/executor-agent/sdk"

// metrics are an executor's instruments, on the global MeterProvider (installed by
// telemetry.StartMetrics; no-ops without it). Every series carries the executor's app name, so
// a process embedding executors of several apps keeps them apart; attribute sets are built
// once, so recording a fire allocates nothing beyond what the SDK needs.
type metrics struct {
	lateness metric.Float64Histogram
	finished metric.Int64Counter

	app      attribute.KeyValue
	byType   map[schedulerv1.TriggerType][]metric.RecordOption
	byStatus map[logsv1.RunStatus][]metric.AddOption

	reg metric.Registration
}

func newMetrics(app string) *metrics {
	m := otel.Meter(meterName)
	mt := &metrics{
		app:      attribute.String("jobmesh.executor.app", app),
		byType:   map[schedulerv1.TriggerType][]metric.RecordOption{},
		byStatus: map[logsv1.RunStatus][]metric.AddOption{},
	}
	mt.lateness, _ = m.Float64Histogram("jobmesh.executor.fire.lateness", metric.WithUnit("s"),
		metric.WithDescription("Scheduled fire time to the handler's start on the executor (includes time queued behind the job's running fire)."),
		metric.WithExplicitBucketBoundaries(instrument.LatencyBuckets...))
	mt.finished, _ = m.Int64Counter("jobmesh.executor.runs.finished", metric.WithUnit("{run}"),
		metric.WithDescription("Fires ended on this executor, by final status."))
	for v, name := range schedulerv1.TriggerType_name {
		t := strings.ToLower(strings.TrimPrefix(name, "TRIGGER_TYPE_"))
		mt.byType[schedulerv1.TriggerType(v)] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(mt.app, attribute.String("jobmesh.trigger.type", t)))}
	}
	for v, name := range logsv1.RunStatus_name {
		st := strings.ToLower(strings.TrimPrefix(name, "RUN_STATUS_"))
		mt.byStatus[logsv1.RunStatus(v)] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(mt.app, attribute.String("jobmesh.run.status", st)))}
	}
	return mt
}

// observe registers the callback that reports, at each collection, the fires running and
// queued, and what waits for logsvc's acknowledgement (items and spool bytes).
func (mt *metrics) observe(e *Executor) {
	m := otel.Meter(meterName)
	runs, _ := m.Int64ObservableUpDownCounter("jobmesh.executor.runs", metric.WithUnit("{run}"),
		metric.WithDescription("Fires on this executor now: running handlers, and fires queued behind them."))
	pending, _ := m.Int64ObservableUpDownCounter("jobmesh.executor.delivery.pending", metric.WithUnit("{item}"),
		metric.WithDescription("Results and log lines not yet acknowledged by logsvc."))
	spoolSize, _ := m.Int64ObservableUpDownCounter("jobmesh.executor.spool.size", metric.WithUnit("By"),
		metric.WithDescription("Bytes in the on-disk spool of results and log lines not yet acknowledged by logsvc."))
	running := metric.WithAttributeSet(attribute.NewSet(mt.app, attribute.String("jobmesh.run.state", "running")))
	queued := metric.WithAttributeSet(attribute.NewSet(mt.app, attribute.String("jobmesh.run.state", "queued")))
	app := metric.WithAttributeSet(attribute.NewSet(mt.app))
	mt.reg, _ = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		var nRunning, nQueued int64
		e.mu.Lock()
		for w := range e.allWorkers {
			if w.running != nil {
				nRunning++
			}
			nQueued += int64(len(w.queue))
		}
		e.mu.Unlock()
		o.ObserveInt64(runs, nRunning, running)
		o.ObserveInt64(runs, nQueued, queued)
		o.ObserveInt64(pending, int64(e.out.pending()), app)
		var bytes int64
		if so, ok := e.out.(*streamOutbox); ok {
			bytes = so.sp.Bytes()
		}
		o.ObserveInt64(spoolSize, bytes, app)
		return nil
	}, runs, pending, spoolSize)
}

// stop unregisters the callback.
func (mt *metrics) stop() {
	if mt.reg != nil {
		_ = mt.reg.Unregister()
	}
}

// started records a handler's start for a fire scheduled at scheduledMs (0: not said).
func (mt *metrics) started(tt schedulerv1.TriggerType, scheduledMs int64, at time.Time) {
	if scheduledMs <= 0 {
		return
	}
	mt.lateness.Record(context.Background(), max(at.Sub(time.UnixMilli(scheduledMs)).Seconds(), 0), mt.byType[tt]...)
}

// ended counts a fire's end.
func (mt *metrics) ended(status logsv1.RunStatus) {
	mt.finished.Add(context.Background(), 1, mt.byStatus[status]...)
}
