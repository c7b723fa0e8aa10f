package db

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// meterName is the instrumentation scope of the connection pool instruments.
const meterName = "github.com/jobmesh/jobmesh/internal/db"

// observePool registers the callback that reports the store's connection pool (database/sql's
// DBStats) at each collection, under the OpenTelemetry database client conventions where one
// fits: db.client.connection.pool.name is the service's schema, db.system.name the dialect. The
// global MeterProvider is installed by telemetry.StartMetrics; without it this is a no-op.
func (d *DB) observePool() error {
	m := otel.Meter(meterName)
	count, err := m.Int64ObservableUpDownCounter("db.client.connection.count", metric.WithUnit("{connection}"),
		metric.WithDescription("Open connections by state: used (in a query or transaction) or idle."))
	if err != nil {
		return err
	}
	maxConns, err := m.Int64ObservableUpDownCounter("db.client.connection.max", metric.WithUnit("{connection}"),
		metric.WithDescription("Most open connections allowed."))
	if err != nil {
		return err
	}
	waits, err := m.Int64ObservableCounter("jobmesh.db.client.connection.waits", metric.WithUnit("{wait}"),
		metric.WithDescription("Times a query waited for a free connection."))
	if err != nil {
		return err
	}
	waited, err := m.Float64ObservableCounter("jobmesh.db.client.connection.wait_time", metric.WithUnit("s"),
		metric.WithDescription("Total time queries waited for a free connection."))
	if err != nil {
		return err
	}
	pool := []attribute.KeyValue{
		attribute.String("db.client.connection.pool.name", d.schema),
		attribute.String("db.system.name", map[Dialect]string{Postgres: "postgresql", SQLite: "sqlite"}[d.dialect]),
	}
	all := metric.WithAttributeSet(attribute.NewSet(pool...))
	used := metric.WithAttributeSet(attribute.NewSet(append(pool, attribute.String("db.client.connection.state", "used"))...))
	idle := metric.WithAttributeSet(attribute.NewSet(append(pool, attribute.String("db.client.connection.state", "idle"))...))
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := d.Stats()
		o.ObserveInt64(count, int64(st.InUse), used)
		o.ObserveInt64(count, int64(st.Idle), idle)
		o.ObserveInt64(maxConns, int64(st.MaxOpenConnections), all)
		o.ObserveInt64(waits, st.WaitCount, all)
		o.ObserveFloat64(waited, st.WaitDuration.Seconds(), all)
		return nil
	}, count, maxConns, waits, waited)
	if err != nil {
		return fmt.Errorf("db: pool metrics: %w", err)
	}
	d.metrics = reg
	return nil
}

// Close unregisters the pool's metrics and closes the pool.
func (d *DB) Close() error {
	if d.metrics != nil {
		_ = d.metrics.Unregister()
	}
	return d.DB.Close()
}
