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
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
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

// OTLPConfigured reports whether the environment names an OTLP traces endpoint.
func OTLPConfigured() bool {
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// StartTracing installs the global W3C propagator always, and an OTLP/gRPC tracer provider when an
// endpoint is configured (OTEL_EXPORTER_OTLP_ENDPOINT and the other standard OTEL_* variables,
// including OTEL_TRACES_SAMPLER). It returns a shutdown function that flushes spans; it is a no-op
// when tracing is off.
func StartTracing(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if !OTLPConfigured() || strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(service)))
	if err != nil && !errors.Is(err, resource.ErrSchemaURLConflict) {
		return nil, fmt.Errorf("otel resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}
