package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/protobuf/proto"

	"github.com/jobmesh/jobmesh/services/executor-agent/telemetry/instrument"
)

// These tests install the global MeterProvider, so they do not run in parallel.

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %d %s, want 200", resp.StatusCode, body)
	}
	return string(body)
}

// TestPrometheusEndpoint checks that instruments created from the global meter after
// StartMetrics are served with Prometheus names (unit and _total suffixes), the histogram with
// the latency buckets, and the process resource as target_info.
func TestPrometheusEndpoint(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "")
	t.Setenv("OTEL_METRICS_EXPORTER", "")
	m, err := StartMetrics(context.Background(), "telemetry-test", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("StartMetrics: %v", err)
	}
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	if m.Addr() == "" || m.Handler() == nil {
		t.Fatalf("Addr() = %q, Handler() = %v; want an address and a handler", m.Addr(), m.Handler())
	}

	meter := otel.Meter("github.com/jobmesh/jobmesh/services/executor-agent/telemetry/test")
	fires, err := meter.Int64Counter("jobmesh.test.fires", metric.WithUnit("{fire}"))
	if err != nil {
		t.Fatal(err)
	}
	late, err := meter.Float64Histogram("jobmesh.test.lateness", metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(instrument.LatencyBuckets...))
	if err != nil {
		t.Fatal(err)
	}
	ok := metric.WithAttributeSet(attribute.NewSet(attribute.String("jobmesh.fire.outcome", "accepted")))
	fires.Add(context.Background(), 3, ok)
	late.Record(context.Background(), 0.003)

	body := scrape(t, m.Addr())
	for _, want := range []string{
		`jobmesh_test_fires_total{jobmesh_fire_outcome="accepted",otel_scope_name="github.com/jobmesh/jobmesh/services/executor-agent/telemetry/test"`,
		`jobmesh_test_lateness_seconds_bucket{otel_scope_name="github.com/jobmesh/jobmesh/services/executor-agent/telemetry/test",otel_scope_schema_url="",otel_scope_version="",le="0.005"} 1`,
		`jobmesh_test_lateness_seconds_bucket{otel_scope_name="github.com/jobmesh/jobmesh/services/executor-agent/telemetry/test",otel_scope_schema_url="",otel_scope_version="",le="0.002"} 0`,
		`service_name="telemetry-test"`,
		"go_goroutines ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s; got:\n%s", want, body)
		}
	}
	if !strings.Contains(body, "} 3\n") {
		t.Errorf("/metrics: counter value 3 not found; got:\n%s", body)
	}

	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	if _, err := http.Get("http://" + m.Addr() + "/metrics"); err == nil {
		t.Errorf("/metrics still served after Shutdown")
	}
}

// TestMetricsOff checks that with no address and no OTLP endpoint nothing is installed or served.
func TestMetricsOff(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "")
	t.Setenv("OTEL_METRICS_EXPORTER", "")
	before := otel.GetMeterProvider()
	m, err := StartMetrics(context.Background(), "off", "")
	if err != nil {
		t.Fatalf("StartMetrics: %v", err)
	}
	if m.Addr() != "" || m.Handler() != nil {
		t.Errorf("Addr() = %q, Handler() = %v; want neither", m.Addr(), m.Handler())
	}
	if otel.GetMeterProvider() != before {
		t.Errorf("the global MeterProvider changed although metrics are off")
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// TestOTLPPush checks that with an OTLP/HTTP metrics endpoint in the environment the metrics
// are pushed there (Shutdown flushes them), and no Prometheus endpoint is needed for it.
func TestOTLPPush(t *testing.T) {
	got := make(chan *colmetricpb.ExportMetricsServiceRequest, 4)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := &colmetricpb.ExportMetricsServiceRequest{}
		if r.URL.Path != "/v1/metrics" || proto.Unmarshal(body, req) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		got <- req
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&colmetricpb.ExportMetricsServiceResponse{})
		_, _ = w.Write(out)
	}))
	defer recv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_METRICS_EXPORTER", "")
	t.Setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", recv.URL+"/v1/metrics")
	t.Setenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf")

	m, err := StartMetrics(context.Background(), "push-test", "")
	if err != nil {
		t.Fatalf("StartMetrics: %v", err)
	}
	c, err := otel.Meter("push").Int64Counter("jobmesh.test.pushed")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(context.Background(), 7)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	select {
	case req := <-got:
		var names []string
		var service string
		for _, rm := range req.GetResourceMetrics() {
			for _, a := range rm.GetResource().GetAttributes() {
				if a.GetKey() == "service.name" {
					service = a.GetValue().GetStringValue()
				}
			}
			for _, sm := range rm.GetScopeMetrics() {
				for _, mt := range sm.GetMetrics() {
					names = append(names, mt.GetName())
					if mt.GetName() == "jobmesh.test.pushed" {
						if v := mt.GetSum().GetDataPoints()[0].GetAsInt(); v != 7 {
							t.Errorf("pushed value = %d, want 7", v)
						}
					}
				}
			}
		}
		if service != "push-test" || !strings.Contains(strings.Join(names, ","), "jobmesh.test.pushed") {
			t.Errorf("pushed service %q metrics %v; want push-test with jobmesh.test.pushed", service, names)
		}
	default:
		t.Fatalf("nothing pushed to the OTLP endpoint by Shutdown")
	}

	t.Setenv("OTEL_METRICS_EXPORTER", "statsd")
	if _, err := StartMetrics(context.Background(), "bad", ""); err == nil || !strings.Contains(err.Error(), "OTEL_METRICS_EXPORTER") {
		t.Errorf("StartMetrics with OTEL_METRICS_EXPORTER=statsd = %v, want an error naming it", err)
	}
	t.Setenv("OTEL_METRICS_EXPORTER", "none")
	if OTLPMetricsConfigured() {
		t.Errorf("OTLPMetricsConfigured() with OTEL_METRICS_EXPORTER=none = true, want false")
	}
	t.Setenv("OTEL_METRICS_EXPORTER", "")
	t.Setenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "carrier-pigeon")
	if _, err := StartMetrics(context.Background(), "bad", ""); err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL") {
		t.Errorf("StartMetrics with a bad protocol = %v, want an error naming OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", err)
	}
}
