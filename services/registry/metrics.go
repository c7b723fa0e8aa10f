package registry

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// meterName is the instrumentation scope of the registry's instruments.
const meterName = "github.com/jobmesh/jobmesh/services/registry"

// observeOnline registers the callback that reports, at each collection, the executors in the
// live view per app name (the members of the AUTO groups of that app). An app whose last
// executor left is reported as 0 rather than dropped, so the drop shows. The global
// MeterProvider is installed by telemetry.StartMetrics; without it this is a no-op.
func (v *view) observeOnline() (metric.Registration, error) {
	m := otel.Meter(meterName)
	online, err := m.Int64ObservableUpDownCounter("jobmesh.registry.executors.online", metric.WithUnit("{executor}"),
		metric.WithDescription("Executors registered and alive (lease kept) per app name."))
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex                         // readers (Prometheus, OTLP) may collect at once
	seen := map[string]metric.ObserveOption{} // app → its attribute set
	return m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		mu.Lock()
		defer mu.Unlock()
		counts := map[string]int64{}
		v.mu.RLock()
		for _, e := range v.execs {
			counts[e.AppName]++
		}
		v.mu.RUnlock()
		for app := range counts {
			if _, ok := seen[app]; !ok {
				seen[app] = metric.WithAttributeSet(attribute.NewSet(attribute.String("jobmesh.executor.app", app)))
			}
		}
		for app, attrs := range seen {
			o.ObserveInt64(online, counts[app], attrs)
		}
		return nil
	}, online)
}
