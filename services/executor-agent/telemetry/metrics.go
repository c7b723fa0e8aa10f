package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
)

// OTLPMetricsConfigured reports whether metrics are pushed over OTLP: when the environment names
// an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_METRICS_ENDPOINT), or
// OTEL_METRICS_EXPORTER=otlp asks for the default one (localhost), unless OTEL_SDK_DISABLED=true
// or OTEL_METRICS_EXPORTER=none (or prometheus: the endpoint alone) turns the push off.
func OTLPMetricsConfigured() bool {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	switch strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_METRICS_EXPORTER"))) {
	case "none", "prometheus":
		return false
	case "otlp":
		return true
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") != ""
}

// Metrics is a process's OpenTelemetry meter provider: a Prometheus endpoint and, when the
// environment asks for it, an OTLP push exporter. StartMetrics installs it as the global
// MeterProvider, so the services' instruments (created with otel.Meter) report to it.
type Metrics struct {
	provider *sdkmetric.MeterProvider // nil when metrics are off
	handler  http.Handler             // nil without a Prometheus endpoint
	srv      *http.Server
	served   chan struct{}
	addr     string

	once    sync.Once
	stopErr error
}

// StartMetrics installs the process's global MeterProvider with the resource service.name =
// service. With addr set it serves Prometheus text format on http://addr/metrics (port 0 picks
// one; Addr tells which); when OTLPMetricsConfigured it also pushes every
// OTEL_METRIC_EXPORT_INTERVAL (default 60 s) over OTLP, gRPC unless
// OTEL_EXPORTER_OTLP_[METRICS_]PROTOCOL is http/protobuf (as traces do), to the endpoint,
// headers and TLS the other OTEL_EXPORTER_OTLP_[METRICS_]* variables give. With neither, metrics are off: nothing
// is installed and instruments stay no-ops. Call it once per process, before the services are
// created, and Shutdown at exit.
func StartMetrics(ctx context.Context, service, addr string) (*Metrics, error) {
	m := &Metrics{}
	switch v := strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_METRICS_EXPORTER"))); v {
	case "", "otlp", "none", "prometheus":
	default:
		return nil, fmt.Errorf("OTEL_METRICS_EXPORTER=%q: want otlp, prometheus or none", os.Getenv("OTEL_METRICS_EXPORTER"))
	}
	push := OTLPMetricsConfigured()
	if addr == "" && !push {
		return m, nil
	}
	res, err := serviceResource(service)
	if err != nil {
		return nil, err
	}
	opts := []sdkmetric.Option{sdkmetric.WithResource(res)}
	if addr != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		exp, err := otelprom.New(otelprom.WithRegisterer(reg),
			otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
		if err != nil {
			return nil, fmt.Errorf("prometheus exporter: %w", err)
		}
		opts = append(opts, sdkmetric.WithReader(exp))
		m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	}
	if push {
		exp, err := otlpMetricExporter(ctx)
		if err != nil {
			return nil, err
		}
		opts = append(opts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)))
	}
	m.provider = sdkmetric.NewMeterProvider(opts...)
	if addr != "" {
		if err := m.serve(ctx, addr); err != nil {
			_ = m.provider.Shutdown(context.Background())
			return nil, err
		}
	}
	otel.SetMeterProvider(m.provider)
	return m, nil
}

// otlpMetricExporter builds the OTLP exporter the standard OTEL_EXPORTER_OTLP_* variables
// describe.
func otlpMetricExporter(ctx context.Context) (sdkmetric.Exporter, error) {
	env := "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"
	proto := os.Getenv(env)
	if proto == "" {
		env = "OTEL_EXPORTER_OTLP_PROTOCOL"
		proto = os.Getenv(env)
	}
	var (
		exp sdkmetric.Exporter
		err error
	)
	switch strings.ToLower(strings.TrimSpace(proto)) {
	case "", "grpc":
		exp, err = otlpmetricgrpc.New(ctx)
	case "http/protobuf":
		exp, err = otlpmetrichttp.New(ctx)
	default:
		return nil, fmt.Errorf("%s=%q: want grpc or http/protobuf", env, proto)
	}
	if err != nil {
		return nil, fmt.Errorf("otlp metric exporter: %w", err)
	}
	return exp, nil
}

// serviceResource describes the process: the SDK's defaults and OTEL_RESOURCE_ATTRIBUTES, with
// service.name set to service.
func serviceResource(service string) (*resource.Resource, error) {
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(service)))
	if err != nil && !errors.Is(err, resource.ErrSchemaURLConflict) {
		return nil, fmt.Errorf("otel resource: %w", err)
	}
	return res, nil
}

// serve listens on addr and serves /metrics there until Shutdown.
func (m *Metrics) serve(ctx context.Context, addr string) error {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics endpoint: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.handler)
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	m.addr = ln.Addr().String()
	m.served = make(chan struct{})
	go func() {
		defer close(m.served)
		_ = m.srv.Serve(ln) // ends with http.ErrServerClosed at Shutdown
	}()
	return nil
}

// Addr is the address /metrics is served on ("127.0.0.1:43121" for port 0); empty when there
// is no Prometheus endpoint.
func (m *Metrics) Addr() string { return m.addr }

// Handler serves the Prometheus text format, for a process that mounts /metrics on a listener
// of its own; nil when there is no Prometheus endpoint.
func (m *Metrics) Handler() http.Handler { return m.handler }

// Shutdown stops serving /metrics and flushes the OTLP exporter. It is a no-op when metrics are
// off, and safe to call more than once.
func (m *Metrics) Shutdown(ctx context.Context) error {
	if m == nil || m.provider == nil {
		return nil
	}
	m.once.Do(func() {
		var errs []error
		if m.srv != nil {
			if err := m.srv.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("metrics endpoint: %w", err))
			}
			<-m.served
		}
		if err := m.provider.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("meter provider: %w", err))
		}
		m.stopErr = errors.Join(errs...)
	})
	return m.stopErr
}
