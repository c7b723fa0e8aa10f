package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobmesh/jobmesh/services/executor-agent/telemetry"
	"github.com/jobmesh/jobmesh/services/executor-agent/telemetry/instrument"
	"github.com/jobmesh/jobmesh/services/executor-agent/telemetry/telemetrytest"
)

// otelVars are cleared before each case, so the machine's environment cannot leak in.
var otelVars = []string{
	"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
	"OTEL_RESOURCE_ATTRIBUTES",
}

// setEnv sets the OTel variables of one case (the rest empty) and puts the global tracer
// provider back when the test ends. Tests that call it cannot run in parallel.
func setEnv(t *testing.T, env map[string]string) {
	t.Helper()
	for _, k := range otelVars {
		t.Setenv(k, env[k])
	}
	prev := otel.GetTracerProvider()
	t.Cleanup(func() {
		if otel.GetTracerProvider() != prev {
			otel.SetTracerProvider(prev)
		}
	})
}

// traceOne starts tracing, ends one span and flushes; it returns the span's context.
func traceOne(t *testing.T, service string) trace.SpanContext {
	t.Helper()
	ctx := context.Background()
	shutdown, err := telemetry.StartTracing(ctx, service)
	if err != nil {
		t.Fatalf("StartTracing: %v", err)
	}
	_, span := otel.Tracer("telemetry_test").Start(ctx, "one")
	span.End()
	if err := shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	return span.SpanContext()
}

// TestStartTracingExports sends a span through the real exporter of each OTLP transport the
// protocol variables choose, to a receiver that speaks only that transport's port.
func TestStartTracingExports(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  func(r *telemetrytest.Receiver) map[string]string
	}{
		{"default protocol is grpc", func(r *telemetrytest.Receiver) map[string]string {
			return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": r.GRPCEndpoint()}
		}},
		{"http/protobuf", func(r *telemetrytest.Receiver) map[string]string {
			return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": r.HTTPEndpoint(), "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
		}},
		{"traces protocol wins over the general one", func(r *telemetrytest.Receiver) map[string]string {
			return map[string]string{
				// A signal's own endpoint is the whole URL, path included.
				"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": r.HTTPEndpoint() + "/v1/traces", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
				"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := telemetrytest.Start(t)
			setEnv(t, tc.env(r))
			sc := traceOne(t, "jobmesh-test")
			spans := r.Wait(t, 30*time.Second, func(s []telemetrytest.Span) bool { return len(s) > 0 })
			got := spans[0]
			if got.Name != "one" || got.TraceID != sc.TraceID().String() || got.Service != "jobmesh-test" {
				t.Errorf("span: got %q trace %s service %q, want \"one\" trace %s service jobmesh-test", got.Name, got.TraceID, got.Service, sc.TraceID())
			}
		})
	}
}

// TestStartTracingOff: without an endpoint, or when disabled, nothing is exported and the
// global tracer provider is left alone; the W3C propagator is installed either way.
func TestStartTracingOff(t *testing.T) {
	for _, env := range []map[string]string{
		{},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_SDK_DISABLED": "true"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_TRACES_EXPORTER": "none"},
	} {
		setEnv(t, env)
		if telemetry.TracingEnabled() {
			t.Errorf("%v: TracingEnabled is true", env)
		}
		before := otel.GetTracerProvider()
		if sc := traceOne(t, "off"); sc.IsValid() {
			t.Errorf("%v: a span got a real context %v with tracing off", env, sc)
		}
		if otel.GetTracerProvider() != before {
			t.Errorf("%v: StartTracing replaced the tracer provider with tracing off", env)
		}
		if f := otel.GetTextMapPropagator().Fields(); !strings.Contains(strings.Join(f, ","), "traceparent") {
			t.Errorf("%v: propagator fields %v: want traceparent", env, f)
		}
	}
}

// TestStartTracingSampler: the SDK reads OTEL_TRACES_SAMPLER; always_off leaves root spans
// unsampled and parentbased_always_on follows a sampled parent.
func TestStartTracingSampler(t *testing.T) {
	r := telemetrytest.Start(t)
	setEnv(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": r.GRPCEndpoint(), "OTEL_TRACES_SAMPLER": "always_off"})
	if sc := traceOne(t, "sampled"); sc.IsSampled() {
		t.Errorf("always_off: root span sampled")
	}
	setEnv(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": r.GRPCEndpoint(), "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"})
	if sc := traceOne(t, "sampled"); sc.IsSampled() {
		t.Errorf("traceidratio 0: root span sampled")
	}
	if n := len(r.Spans()); n != 0 {
		t.Errorf("unsampled spans exported: got %d, want 0", n)
	}
}

// TestStartTracingRefusesBadSettings names the variable that is wrong instead of silently
// tracing with defaults.
func TestStartTracingRefusesBadSettings(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "udp"}, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
		{map[string]string{"OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER"},
		{map[string]string{"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1.5"}, "OTEL_TRACES_SAMPLER_ARG"},
		{map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"},
	} {
		tc.env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:1"
		setEnv(t, tc.env)
		_, err := telemetry.StartTracing(context.Background(), "bad")
		if err == nil || !strings.Contains(err.Error(), tc.want+"=") {
			t.Errorf("%v: got error %v, want one naming %s", tc.env, err, tc.want)
		}
	}
}

// TestLoggerStampsTraceIDs: a line logged with a traced context carries trace_id and span_id;
// one logged without does not.
func TestLoggerStampsTraceIDs(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log, err := telemetry.NewLogger(telemetry.Config{Service: "test", Format: "json", Output: &buf})
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c},
		SpanID:  trace.SpanID{0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31}, TraceFlags: trace.FlagsSampled,
	})
	log.InfoContext(trace.ContextWithSpanContext(context.Background(), sc), "inside")
	log.InfoContext(context.Background(), "outside")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2: %s", len(lines), buf.String())
	}
	var in, out map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &in); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &out); err != nil {
		t.Fatal(err)
	}
	if in["trace_id"] != "0af7651916cd43dd8448eb211c80319c" || in["span_id"] != "b7ad6b7169203331" || in["service"] != "test" {
		t.Errorf("traced line: got %v, want trace_id, span_id and service", in)
	}
	if _, ok := out["trace_id"]; ok {
		t.Errorf("untraced line has a trace_id: %v", out)
	}
}

// TestTracerInstalled: no tracer provider is installed until StartTracing installs one (with
// tracing on), and putting the default one back counts as none again.
func TestTracerInstalled(t *testing.T) {
	setEnv(t, map[string]string{})
	if _, err := telemetry.StartTracing(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	if instrument.TracerInstalled() {
		t.Fatal("tracing off: a tracer provider is installed, want none")
	}
	recv := telemetrytest.Start(t)
	setEnv(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": recv.GRPCEndpoint()})
	prev := otel.GetTracerProvider()
	shutdown, err := telemetry.StartTracing(context.Background(), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(context.Background())
	if !instrument.TracerInstalled() {
		t.Error("tracing on: no tracer provider installed")
	}
	otel.SetTracerProvider(prev)
	if instrument.TracerInstalled() {
		t.Error("default provider put back: still installed")
	}
}
