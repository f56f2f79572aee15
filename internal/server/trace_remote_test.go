package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasegate/leasegate/internal/server"
	"github.com/leasegate/leasegate/internal/telemetry"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

// tracedGateway starts a gateway whose spans go to an in-memory exporter
// and whose metrics to a manual reader; public sets --trace-public-endpoint.
func tracedGateway(t *testing.T, public bool) (*server.Server, *tracetest.InMemoryExporter, *sdkmetric.ManualReader) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	srv := startGateway(t, &telemetry.Providers{TracerProvider: tp, MeterProvider: mp, Propagator: telemetry.Propagator()},
		func(c *server.Config) { c.TracePublicEndpoint = public })
	return srv, exp, reader
}

// callerSpan is a span of a caller outside the gateway's process: only its
// context crosses, as a traceparent header.
func callerSpan(t *testing.T) (context.Context, trace.SpanContext) {
	t.Helper()
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("k6").Start(context.Background(), "caller")
	span.End()
	return ctx, span.SpanContext()
}

// serverSpan returns the one exported span called name.
func serverSpan(t *testing.T, exp *tracetest.InMemoryExporter, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans called %q; want 1 (all: %v)", len(found), name, newSpanTree(exp.GetSpans()).names())
	}
	return found[0]
}

func (t spanTree) names() []string {
	var out []string
	for _, s := range t.spans {
		out = append(out, s.Name)
	}
	return out
}

// plainTryAcquire calls TryAcquire with a bare Connect client — no SDK, no
// Leasegate-Client header — that sends ctx's traceparent, as a Connect
// client in another language or grpcurl with -H traceparent does.
func plainTryAcquire(t *testing.T, srv *server.Server, ctx context.Context) {
	t.Helper()
	c := leasegatev1connect.NewLockServiceClient(http.DefaultClient, srv.URL())
	req := connect.NewRequest(&v1.TryAcquireRequest{Name: "traced/plain", TtlMs: 5000})
	telemetry.Propagator().Inject(ctx, propagation.HeaderCarrier(req.Header()))
	if req.Header().Get("traceparent") == "" || req.Header().Get("Leasegate-Client") != "" {
		t.Fatalf("request headers %v; want a traceparent and no Leasegate-Client", req.Header())
	}
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.TryAcquire(cctx, req); err != nil {
		t.Fatal(err)
	}
}

// TestPlainConnectCallerTraceContinues: a caller that is not the Go SDK
// still gets the gateway's server span as a child of its own, in its
// trace.
func TestPlainConnectCallerTraceContinues(t *testing.T) {
	t.Parallel()
	srv, exp, _ := tracedGateway(t, false)
	ctx, caller := callerSpan(t)
	plainTryAcquire(t, srv, ctx)
	s := serverSpan(t, exp, "leasegate.v1.LockService/TryAcquire")
	if s.SpanContext.TraceID() != caller.TraceID() || s.Parent.SpanID() != caller.SpanID() {
		t.Errorf("server span in trace %s under %s; want trace %s under the caller's span %s",
			s.SpanContext.TraceID(), s.Parent.SpanID(), caller.TraceID(), caller.SpanID())
	}
	if len(s.Links) != 0 {
		t.Errorf("server span links %v; want none when the trace continues", s.Links)
	}
}

// TestPublicEndpointLinksCallerTrace: with --trace-public-endpoint the
// server span roots a new trace and links to the caller's span.
func TestPublicEndpointLinksCallerTrace(t *testing.T) {
	t.Parallel()
	srv, exp, _ := tracedGateway(t, true)
	ctx, caller := callerSpan(t)
	plainTryAcquire(t, srv, ctx)
	s := serverSpan(t, exp, "leasegate.v1.LockService/TryAcquire")
	if s.SpanContext.TraceID() == caller.TraceID() || s.Parent.IsValid() {
		t.Errorf("server span in trace %s with parent %v; want a new root, not the caller's trace %s", s.SpanContext.TraceID(), s.Parent, caller.TraceID())
	}
	if len(s.Links) != 1 || s.Links[0].SpanContext.SpanID() != caller.SpanID() || s.Links[0].SpanContext.TraceID() != caller.TraceID() {
		t.Errorf("server span links %v; want one link to the caller's span %v", s.Links, caller)
	}

	// REST calls are treated alike.
	restPost(t, srv, ctx, "acquire", `{"name":"traced/public-rest","ttlMs":5000}`)
	r := serverSpan(t, exp, "POST /api/v1/locks/acquire")
	if r.SpanContext.TraceID() == caller.TraceID() || len(r.Links) != 1 || r.Links[0].SpanContext.SpanID() != caller.SpanID() {
		t.Errorf("REST span in trace %s, links %v; want a new trace linked to %v", r.SpanContext.TraceID(), r.Links, caller)
	}
}

func restPost(t *testing.T, srv *server.Server, ctx context.Context, op, body string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL()+"/api/v1/locks/"+op, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	telemetry.Propagator().Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestRESTSpanSemconv: a REST call's span continues the caller's trace and
// carries the HTTP semantic-convention attributes beside leasegate's, and
// http.server.request.duration is recorded.
func TestRESTSpanSemconv(t *testing.T) {
	t.Parallel()
	srv, exp, reader := tracedGateway(t, false)
	ctx, caller := callerSpan(t)
	if code := restPost(t, srv, ctx, "acquire", `{"name":"traced/rest","ttlMs":5000}`); code != http.StatusOK {
		t.Fatalf("REST acquire = %d; want 200", code)
	}
	s := serverSpan(t, exp, "POST /api/v1/locks/acquire")
	if s.SpanKind != trace.SpanKindServer || s.SpanContext.TraceID() != caller.TraceID() || s.Parent.SpanID() != caller.SpanID() {
		t.Errorf("REST span kind %v trace %s parent %s; want a server span under the caller's %s", s.SpanKind, s.SpanContext.TraceID(), s.Parent.SpanID(), caller.SpanID())
	}
	for key, want := range map[string]string{
		"http.request.method":       "POST",
		"http.response.status_code": "200",
		"http.route":                "/api/v1/locks/acquire",
		"url.path":                  "/api/v1/locks/acquire",
		"leasegate.outcome":         "ok",
		"leasegate.shard":           "main",
	} {
		if v, ok := attr(s, key); !ok || v.Emit() != want {
			t.Errorf("REST span %s = %q (present %v); want %q", key, v.Emit(), ok, want)
		}
	}
	newSpanTree(exp.GetSpans()).child(t, s, "leasegate.route")

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "http.server.request.duration" {
				continue
			}
			h, ok := m.Data.(metricdata.Histogram[float64])
			found = ok && len(h.DataPoints) > 0 && h.DataPoints[0].Count > 0
		}
	}
	if !found {
		t.Error("no http.server.request.duration data point after a REST call")
	}
}
