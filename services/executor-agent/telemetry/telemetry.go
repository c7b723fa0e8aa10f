// Package telemetry bootstraps logging, tracing and metrics the same way in every jobmesh
// process: a log/slog logger that stamps trace and span ids, and OpenTelemetry providers that stay
// off unless an OTLP endpoint is configured through the standard OTEL_* environment variables or
// (metrics) a Prometheus endpoint is asked for.
//
// It lives in the executor-agent module because that is the lightest module every binary links:
// the agent must not pull in the root module's database and etcd-server dependencies.
package telemetry

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Config says how a process logs and traces.
type Config struct {
	// Service is the OpenTelemetry service.name and the "service" attribute of every log line.
	Service string
	// Level is the lowest level logged: debug, info, warn or error. Empty means info.
	Level string
	// Format is "text" (the default, for people) or "json" (for collectors).
	Format string
	// Output receives log lines; nil means standard error.
	Output io.Writer
}

// ParseLevel turns a level name into a slog level.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if s == "" {
		return slog.LevelInfo, nil
	}
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("log level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// NewLogger returns the process logger described by cfg.
func NewLogger(cfg Config) (*slog.Logger, error) {
	level, err := ParseLevel(cfg.Level)
	if err != nil {
		return nil, err
	}
	out := cfg.Output
	if out == nil {
		out = os.Stderr
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch cfg.Format {
	case "", "text":
		h = slog.NewTextHandler(out, opts)
	case "json":
		h = slog.NewJSONHandler(out, opts)
	default:
		return nil, fmt.Errorf("log format %q: want text or json", cfg.Format)
	}
	l := slog.New(traceHandler{h})
	if cfg.Service != "" {
		l = l.With("service", cfg.Service)
	}
	return l, nil
}

// traceHandler adds trace_id and span_id to records logged inside a traced operation.
type traceHandler struct{ slog.Handler }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(as)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}

// TracingEnabled reports whether StartTracing exports spans: tracing is off by default and on
// when an OTLP endpoint is configured (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or OTEL_TRACES_EXPORTER=otlp asks for the default one
// (localhost); OTEL_SDK_DISABLED=true and OTEL_TRACES_EXPORTER=none turn it off again.
func TracingEnabled() bool {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	switch strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))) {
	case "none":
		return false
	case "otlp":
		return true
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// tracesProtocol is the OTLP transport for traces: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else
// OTEL_EXPORTER_OTLP_PROTOCOL, else grpc (as for metrics, so one OTEL_EXPORTER_OTLP_ENDPOINT
// serves both; the specification's default would be http/protobuf).
func tracesProtocol() (string, error) {
	name, v := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if v == "" {
		name, v = "OTEL_EXPORTER_OTLP_PROTOCOL", os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch p := strings.ToLower(strings.TrimSpace(v)); p {
	case "":
		return "grpc", nil
	case "grpc", "http/protobuf":
		return p, nil
	default:
		return "", fmt.Errorf("%s=%q: want grpc or http/protobuf", name, v)
	}
}

// checkTracesEnv refuses OTEL_* values the SDK would otherwise ignore with a warning, so a typo
// in the sampler does not silently trace everything.
func checkTracesEnv() error {
	if v := strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))); v != "" && v != "otlp" && v != "none" {
		return fmt.Errorf("OTEL_TRACES_EXPORTER=%q: want otlp or none", os.Getenv("OTEL_TRACES_EXPORTER"))
	}
	sampler := strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_SAMPLER")))
	switch sampler {
	case "", "always_on", "always_off", "parentbased_always_on", "parentbased_always_off":
	case "traceidratio", "parentbased_traceidratio":
		if arg := strings.TrimSpace(os.Getenv("OTEL_TRACES_SAMPLER_ARG")); arg != "" {
			r, err := strconv.ParseFloat(arg, 64)
			if err != nil || r < 0 || r > 1 {
				return fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: want a ratio from 0 to 1", arg)
			}
		}
	default:
		return fmt.Errorf("OTEL_TRACES_SAMPLER=%q: want always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio", os.Getenv("OTEL_TRACES_SAMPLER"))
	}
	return nil
}

// StartTracing installs the global W3C propagator always and, when TracingEnabled, an OTLP
// tracer provider as the global one. Everything else comes from the standard OTEL_* variables,
// which the OpenTelemetry SDK reads itself: the transport (OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL:
// grpc, the default, or http/protobuf), endpoint, headers, timeout and TLS
// (OTEL_EXPORTER_OTLP_[TRACES_]*), sampling (OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG; the
// default is parentbased_always_on), batching (OTEL_BSP_*), span limits (OTEL_SPAN_*) and
// resource attributes (OTEL_RESOURCE_ATTRIBUTES; service.name is service). It returns a
// shutdown function that flushes spans; it is a no-op when tracing is off.
func StartTracing(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if !TracingEnabled() {
		return func(context.Context) error { return nil }, nil
	}
	if err := checkTracesEnv(); err != nil {
		return nil, err
	}
	proto, err := tracesProtocol()
	if err != nil {
		return nil, err
	}
	var exp sdktrace.SpanExporter
	if proto == "grpc" {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter (%s): %w", proto, err)
	}
	res, err := serviceResource(service)
	if err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}
