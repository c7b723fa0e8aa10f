// Package instrument holds what jobmesh's traces and metrics share and needs only the
// OpenTelemetry API: histogram bounds, and whether a tracer provider is installed. The Go SDK
// uses it instead of package telemetry, so an application embedding an executor links no OTLP
// exporter, Prometheus client or OpenTelemetry SDK: it installs its own providers, or none.
package instrument

import "go.opentelemetry.io/otel"

// LatencyBuckets are the histogram bounds, in seconds, of latencies that are normally a few
// milliseconds (fire lateness, ingest latency) but must still show the long tail.
var LatencyBuckets = []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// SizeBuckets are the histogram bounds of batch sizes (items per batch, up to the 10,000 an
// ingest batch or a pre-read may hold).
var SizeBuckets = []float64{0, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}

// defaultTracerProvider is OpenTelemetry's global tracer provider before any is installed.
var defaultTracerProvider = otel.GetTracerProvider()

// TracerInstalled reports whether a tracer provider has been installed as the global one
// (otel.SetTracerProvider: by telemetry.StartTracing with tracing on, a test, or a program
// embedding the SDK). Without one every span is a non-recording copy of its parent's context,
// which records nothing and costs allocations, so a per-fire path skips starting its spans; the
// context a fire carries in (and passes on) is unaffected.
func TracerInstalled() bool { return otel.GetTracerProvider() != defaultTracerProvider }
