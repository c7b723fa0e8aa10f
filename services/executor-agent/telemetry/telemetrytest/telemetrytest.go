// Package telemetrytest is an OTLP trace receiver for tests: it serves the OTLP TraceService over
// gRPC and OTLP/HTTP (/v1/traces, protobuf) on loopback, as a collector would, and keeps every
// span it receives, so a test can point the real exporters (telemetry.StartTracing, a jobmesh
// process through its OTEL_* environment) at it and assert the spans that arrive.
package telemetrytest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	collectortracev1 "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonv1 "go.opentelemetry.io/proto/otlp/common/v1"
	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened with its resource and scope.
type Span struct {
	// Service is the resource's service.name.
	Service string
	// Scope is the instrumentation scope (tracer) name.
	Scope string
	// Name is the span name.
	Name string
	// TraceID, SpanID and ParentSpanID are lower-case hex; ParentSpanID is empty for a root.
	TraceID, SpanID, ParentSpanID string
	// Kind is the span kind, e.g. SPAN_KIND_CLIENT.
	Kind string
	// Attrs are the span's attributes: strings, int64s, float64s, bools, or []any for arrays.
	Attrs map[string]any
	// Links are the span's links.
	Links []Link
	// StatusCode is STATUS_CODE_UNSET, STATUS_CODE_OK or STATUS_CODE_ERROR; StatusMessage says why.
	StatusCode, StatusMessage string
	// Start and End bound the span.
	Start, End time.Time
}

// Link is a span link.
type Link struct {
	// TraceID and SpanID are lower-case hex.
	TraceID, SpanID string
	// Attrs are the link's attributes.
	Attrs map[string]any
}

// Receiver collects spans exported to it over OTLP/gRPC and OTLP/HTTP.
type Receiver struct {
	collectortracev1.UnimplementedTraceServiceServer

	grpcAddr, httpAddr string

	mu      sync.Mutex
	spans   []Span
	changed chan struct{} // closed and replaced whenever spans arrive
}

// Start serves a receiver on loopback until the test ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{changed: make(chan struct{})}
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	collectortracev1.RegisterTraceServiceServer(g, r)
	go func() { _ = g.Serve(gln) }()
	t.Cleanup(g.Stop)
	hln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", r.serveHTTP)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(hln) }()
	t.Cleanup(func() { hs.Close() })
	r.grpcAddr, r.httpAddr = gln.Addr().String(), hln.Addr().String()
	return r
}

// GRPCEndpoint is the OTEL_EXPORTER_OTLP_ENDPOINT for OTEL_EXPORTER_OTLP_PROTOCOL=grpc.
func (r *Receiver) GRPCEndpoint() string { return "http://" + r.grpcAddr }

// HTTPEndpoint is the OTEL_EXPORTER_OTLP_ENDPOINT for OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf.
func (r *Receiver) HTTPEndpoint() string { return "http://" + r.httpAddr }

// Export implements the OTLP TraceService.
func (r *Receiver) Export(_ context.Context, req *collectortracev1.ExportTraceServiceRequest) (*collectortracev1.ExportTraceServiceResponse, error) {
	r.add(req)
	return &collectortracev1.ExportTraceServiceResponse{}, nil
}

func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	var body io.Reader = req.Body
	if strings.EqualFold(req.Header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		defer zr.Close()
		body = zr
	}
	data, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "content type "+ct+": want application/x-protobuf", http.StatusUnsupportedMediaType)
		return
	}
	msg := &collectortracev1.ExportTraceServiceRequest{}
	if err := proto.Unmarshal(data, msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.add(msg)
	out, _ := proto.Marshal(&collectortracev1.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = io.Copy(w, bytes.NewReader(out))
}

func (r *Receiver) add(req *collectortracev1.ExportTraceServiceRequest) {
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		service, _ := attrs(rs.GetResource().GetAttributes())["service.name"].(string)
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				got = append(got, flatten(service, ss.GetScope().GetName(), s))
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spans = append(r.spans, got...)
	close(r.changed)
	r.changed = make(chan struct{})
}

func flatten(service, scope string, s *tracev1.Span) Span {
	out := Span{
		Service: service, Scope: scope, Name: s.GetName(),
		TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
		ParentSpanID: hex.EncodeToString(s.GetParentSpanId()), Kind: s.GetKind().String(),
		Attrs: attrs(s.GetAttributes()), StatusCode: s.GetStatus().GetCode().String(), StatusMessage: s.GetStatus().GetMessage(),
		Start: time.Unix(0, int64(s.GetStartTimeUnixNano())), End: time.Unix(0, int64(s.GetEndTimeUnixNano())),
	}
	for _, l := range s.GetLinks() {
		out.Links = append(out.Links, Link{TraceID: hex.EncodeToString(l.GetTraceId()), SpanID: hex.EncodeToString(l.GetSpanId()), Attrs: attrs(l.GetAttributes())})
	}
	return out
}

func attrs(kvs []*commonv1.KeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = value(kv.GetValue())
	}
	return m
}

func value(v *commonv1.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonv1.AnyValue_StringValue:
		return x.StringValue
	case *commonv1.AnyValue_IntValue:
		return x.IntValue
	case *commonv1.AnyValue_DoubleValue:
		return x.DoubleValue
	case *commonv1.AnyValue_BoolValue:
		return x.BoolValue
	case *commonv1.AnyValue_ArrayValue:
		out := make([]any, 0, len(x.ArrayValue.GetValues()))
		for _, e := range x.ArrayValue.GetValues() {
			out = append(out, value(e))
		}
		return out
	default:
		return fmt.Sprint(v)
	}
}

// Spans returns every span received so far, in arrival order.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Wait returns the spans received once done says they are complete, or fails the test with
// what arrived when timeout passes first. done is called again after every export.
func (r *Receiver) Wait(t testing.TB, timeout time.Duration, done func([]Span) bool) []Span {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		spans, changed := append([]Span(nil), r.spans...), r.changed
		r.mu.Unlock()
		if done(spans) {
			return spans
		}
		select {
		case <-changed:
		case <-deadline.C:
			var b strings.Builder
			for _, s := range spans {
				fmt.Fprintf(&b, "\n  %s %s/%s trace %s span %s parent %s", s.Service, s.Scope, s.Name, s.TraceID, s.SpanID, s.ParentSpanID)
			}
			t.Fatalf("spans not complete after %v; got %d:%s", timeout, len(spans), b.String())
			return nil
		}
	}
}
