package scheduler

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/telemetry/instrument"
)

// meterName is the instrumentation scope of the scheduler's instruments.
const meterName = "github.com/jobmesh/jobmesh/services/scheduler"

// Fire outcomes, the values of the jobmesh.fire.outcome attribute of jobmesh.scheduler.fires.
const (
	outcomeAccepted  = "accepted"  // the executor accepted the fire
	outcomeDuplicate = "duplicate" // the executor had accepted that trigger id before
	outcomeRejected  = "rejected"  // the executor refused it (block strategy, unknown handler…)
	outcomeFailed    = "failed"    // the Run call failed (executor unreachable, deadline)
	outcomeNoRoute   = "no_route"  // no executor to send it to (empty group, routing failure)
	outcomePoolFull  = "pool_full" // the trigger pool's queue was full
	// outcomeOverloaded: executors were full, and none took the fire within the misfire threshold.
	outcomeOverloaded = "overloaded"
	// outcomeUnknown: the executor did not answer within the misfire threshold, and the fire went
	// to no other (it may run there: its report decides).
	outcomeUnknown = "unknown"
	// outcomeSkipped: a misfire its job's misfire strategy skipped (recorded SKIPPED, not sent).
	outcomeSkipped = "skipped"
)

// fireOutcomes lists the outcomes, for precomputing their attribute sets.
var fireOutcomes = []string{outcomeAccepted, outcomeDuplicate, outcomeRejected, outcomeFailed, outcomeNoRoute, outcomePoolFull,
	outcomeOverloaded, outcomeUnknown, outcomeSkipped}

// metrics are the scheduler's instruments. Attribute sets are built once, so recording a fire
// allocates nothing beyond what the SDK needs.
type metrics struct {
	lateness   metric.Float64Histogram
	fires      metric.Int64Counter
	rejections metric.Int64Counter
	scan       metric.Float64Histogram
	scanJobs   metric.Int64Histogram
	runFires   metric.Int64Histogram

	byOutcome map[string][]metric.AddOption
	byType    map[triggerType][]metric.RecordOption
	byPool    map[string]metric.MeasurementOption
	replica   attribute.KeyValue

	reg metric.Registration
}

// newMetrics creates the scheduler's instruments on the global MeterProvider (installed by
// telemetry.StartMetrics; a no-op without it). Instrument errors only mean a misconfigured
// provider, which then hands out no-op instruments; they are not fatal.
func newMetrics(replicaID string) *metrics {
	m := otel.Meter(meterName)
	mt := &metrics{
		byOutcome: map[string][]metric.AddOption{},
		byType:    map[triggerType][]metric.RecordOption{},
		byPool:    map[string]metric.MeasurementOption{},
		replica:   attribute.String("jobmesh.scheduler.replica.id", replicaID),
	}
	mt.lateness, _ = m.Float64Histogram("jobmesh.scheduler.fire.lateness", metric.WithUnit("s"),
		metric.WithDescription("Scheduled fire time to the Run call sent to the executor; 0 for a fire sent ahead of its time."),
		metric.WithExplicitBucketBoundaries(instrument.LatencyBuckets...))
	mt.fires, _ = m.Int64Counter("jobmesh.scheduler.fires", metric.WithUnit("{fire}"),
		metric.WithDescription("Fires dispatched or given up, one per trigger id (a sharded fire counts once per shard), by outcome."))
	mt.rejections, _ = m.Int64Counter("jobmesh.scheduler.pool.rejections", metric.WithUnit("{fire}"),
		metric.WithDescription("Fires refused because the trigger pool's queue was full."))
	mt.scan, _ = m.Float64Histogram("jobmesh.scheduler.preread.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of one pre-read scan: the fenced transaction that arms the window's fires."),
		metric.WithExplicitBucketBoundaries(instrument.LatencyBuckets...))
	mt.scanJobs, _ = m.Int64Histogram("jobmesh.scheduler.preread.jobs", metric.WithUnit("{job}"),
		metric.WithDescription("Due jobs read by one pre-read scan (the batch size)."),
		metric.WithExplicitBucketBoundaries(instrument.SizeBuckets...))
	mt.runFires, _ = m.Int64Histogram("jobmesh.scheduler.run.batch.size", metric.WithUnit("{fire}"),
		metric.WithDescription("Fires carried by one Run call: the fires queued for an executor while the previous call was in flight."),
		metric.WithExplicitBucketBoundaries(instrument.SizeBuckets...))
	for _, o := range fireOutcomes {
		mt.byOutcome[o] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("jobmesh.fire.outcome", o)))}
	}
	for v, name := range schedulerv1.TriggerType_name {
		t := strings.ToLower(strings.TrimPrefix(name, "TRIGGER_TYPE_"))
		mt.byType[triggerType(v)] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("jobmesh.trigger.type", t)))}
	}
	for _, p := range []string{"fast", "slow"} {
		mt.byPool[p] = metric.WithAttributeSet(attribute.NewSet(attribute.String("jobmesh.pool.name", p)))
	}
	// Every outcome and pool series exists from the start at 0, so rates and failure panels
	// read 0 rather than "no data" until the first failure.
	ctx := context.Background()
	for _, o := range fireOutcomes {
		mt.fires.Add(ctx, 0, mt.byOutcome[o]...)
	}
	for _, p := range mt.byPool {
		mt.rejections.Add(ctx, 0, p)
	}
	return mt
}

// observe registers the callback that reports the scheduler's sizes and leadership at each
// collection: ring size, trigger pool queues, fires awaiting their executors' answers, leader
// status and epoch.
func (mt *metrics) observe(s *Service) {
	m := otel.Meter(meterName)
	ringSize, _ := m.Int64ObservableUpDownCounter("jobmesh.scheduler.ring.size", metric.WithUnit("{fire}"),
		metric.WithDescription("Fires armed in the time rings of the partitions this replica leads."))
	queue, _ := m.Int64ObservableUpDownCounter("jobmesh.scheduler.pool.queue.size", metric.WithUnit("{fire}"),
		metric.WithDescription("Fires waiting in a trigger pool's queue."))
	queueCap, _ := m.Int64ObservableUpDownCounter("jobmesh.scheduler.pool.queue.limit", metric.WithUnit("{fire}"),
		metric.WithDescription("Capacity of a trigger pool's queue; a fire beyond it is rejected."))
	inflight, _ := m.Int64ObservableUpDownCounter("jobmesh.scheduler.dispatch.inflight", metric.WithUnit("{fire}"),
		metric.WithDescription("Fires handed to their executors' Run calls and not answered yet: queued behind a call in flight, or in it."))
	waiting, _ := m.Int64ObservableUpDownCounter("jobmesh.scheduler.dispatch.waiting", metric.WithUnit("{fire}"),
		metric.WithDescription("Fires waiting for their executors to take them: full, unreachable, or not answering (back-pressure)."))
	leader, _ := m.Int64ObservableGauge("jobmesh.scheduler.leader",
		metric.WithDescription("1 while this replica leads at least one partition, 0 otherwise."))
	led, _ := m.Int64ObservableGauge("jobmesh.scheduler.partitions.led", metric.WithUnit("{partition}"),
		metric.WithDescription("Partitions this replica leads."))
	epoch, _ := m.Int64ObservableGauge("jobmesh.scheduler.partition.epoch",
		metric.WithDescription("Epoch (etcd revision that elected this replica) of each partition it leads, by jobmesh.partition."))
	handovers, _ := m.Int64ObservableCounter("jobmesh.scheduler.partition.handovers", metric.WithUnit("{partition}"),
		metric.WithDescription("Partitions this replica stopped leading: handed over to balance the replicas, at shutdown, or lost."))
	revoked, _ := m.Int64ObservableCounter("jobmesh.scheduler.peer.revocations", metric.WithUnit("{session}"),
		metric.WithDescription("Sessions of stopped peer replicas (their address refused connections) this replica revoked, so that their partitions were taken over before their leases expired."))
	replica := metric.WithAttributeSet(attribute.NewSet(mt.replica))
	pools := []*pool{s.fast, s.slow}
	mt.reg, _ = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s.mu.Lock()
		var size int64
		for p, l := range s.engines {
			size += int64(l.ring.Len())
			o.ObserveInt64(epoch, l.epoch, metric.WithAttributes(mt.replica, attribute.Int("jobmesh.partition", p)))
		}
		n := int64(len(s.engines))
		s.mu.Unlock()
		o.ObserveInt64(ringSize, size, replica)
		o.ObserveInt64(inflight, s.execs.inflight.Load(), replica)
		o.ObserveInt64(waiting, int64(s.waits.waiting()), replica)
		o.ObserveInt64(leader, min(n, 1), replica)
		o.ObserveInt64(led, n, replica)
		st := s.parts.Status()
		o.ObserveInt64(handovers, st.Handovers, replica)
		o.ObserveInt64(revoked, st.Revoked, replica)
		for _, p := range pools {
			o.ObserveInt64(queue, int64(len(p.queue)), mt.byPool[p.name])
			o.ObserveInt64(queueCap, int64(cap(p.queue)), mt.byPool[p.name])
		}
		return nil
	}, ringSize, queue, queueCap, inflight, waiting, leader, led, epoch, handovers, revoked)
}

// stop unregisters the callback.
func (mt *metrics) stop() {
	if mt.reg != nil {
		_ = mt.reg.Unregister()
	}
}

// sent records a Run call for a fire scheduled at fireMs, sent at now, and its outcome.
func (mt *metrics) sent(tt triggerType, fireMs int64, now time.Time, outcome string) {
	late := now.Sub(time.UnixMilli(fireMs)).Seconds()
	if late < 0 {
		late = 0 // a manual fire's time is taken before routing; never negative
	}
	mt.lateness.Record(context.Background(), late, mt.byType[tt]...)
	mt.fires.Add(context.Background(), 1, mt.byOutcome[outcome]...)
}

// gaveUp counts a fire that reached no executor.
func (mt *metrics) gaveUp(outcome string) {
	mt.fires.Add(context.Background(), 1, mt.byOutcome[outcome]...)
}

// rejected counts a fire refused by a full trigger pool.
func (mt *metrics) rejected(p *pool) {
	mt.rejections.Add(context.Background(), 1, mt.byPool[p.name])
	mt.gaveUp(outcomePoolFull)
}

// scanned records one successful pre-read.
func (mt *metrics) scanned(took time.Duration, jobs int) {
	mt.scan.Record(context.Background(), took.Seconds())
	mt.scanJobs.Record(context.Background(), int64(jobs))
}

// runBatch records the number of fires one Run call carried.
func (mt *metrics) runBatch(fires int) {
	mt.runFires.Record(context.Background(), int64(fires))
}
