package gateway

import (
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// restPrefix is where the REST lock calls live.
const restPrefix = "/api/v1/locks/"

// newRESTTracing returns the otelhttp options of the REST calls: the
// service's providers (no-op ones for a signal that is off, never the
// global ones), its propagator, and a new root per call on a public
// endpoint.
func (t *telemetry) newRESTTracing(cfg Telemetry) []otelhttp.Option {
	var tp trace.TracerProvider = tracenoop.NewTracerProvider()
	if cfg.TracerProvider != nil {
		tp = cfg.TracerProvider
	}
	var mp metric.MeterProvider = metricnoop.NewMeterProvider()
	if cfg.MeterProvider != nil {
		mp = cfg.MeterProvider
	}
	opts := []otelhttp.Option{otelhttp.WithTracerProvider(tp), otelhttp.WithMeterProvider(mp), otelhttp.WithPropagators(t.prop)}
	if cfg.PublicEndpoint {
		opts = append(opts, otelhttp.WithPublicEndpointFn(func(*http.Request) bool { return true }))
	}
	return opts
}

// restHandler wraps the REST lock calls in otelhttp — a server span named
// "POST /api/v1/locks/acquire" … with the HTTP semantic-convention
// attributes, and the http.server.request.duration metric — and records
// the same leasegate metrics as the Connect calls. The handler records the
// shard it routed to, the outcome and any lost lease in the call's record;
// this wrapper adds them to the span and reads neither the request body
// nor the response body.
func (t *telemetry) restHandler(next http.Handler) http.Handler {
	if t == nil {
		return next
	}
	traced := otelhttp.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.serveREST(w, r, next)
	}), "leasegate.rest", t.rest...)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch strings.TrimPrefix(r.URL.Path, restPrefix) {
		case "acquire", "renew", "release":
		default:
			next.ServeHTTP(w, r)
			return
		}
		// The route is the path itself: otelhttp takes http.route and the
		// span name from the pattern, which the outer mux left at its
		// catch-all "/api/v1/".
		r = r.WithContext(r.Context())
		r.Pattern = r.URL.Path
		traced.ServeHTTP(w, r)
	})
}

// serveREST runs one REST lock call inside otelhttp's span.
func (t *telemetry) serveREST(w http.ResponseWriter, r *http.Request, next http.Handler) {
	op := strings.TrimPrefix(r.URL.Path, restPrefix)
	ctx, rec := withRecord(r.Context())
	start := time.Now()
	next.ServeHTTP(w, r.WithContext(ctx))
	d := time.Since(start)
	shard, outcome, loss, err := rec.read()
	switch {
	case err != nil:
		outcome = outcomeOf(err)
	case outcome == "":
		outcome = "ok"
	}
	t.lost(ctx, shard, loss)
	if hist := t.m.histogram(op); hist != nil {
		attrs := []attribute.KeyValue{attribute.String("shard", shard), attribute.String("outcome", outcome)}
		if op == "acquire" {
			attrs = append(attrs, attribute.String("mode", "try"))
		}
		hist.Record(ctx, d.Seconds(), metric.WithAttributes(attrs...))
	}
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("leasegate.outcome", outcome), attribute.String("leasegate.shard", shard))
	t.logCall(ctx, r.URL.Path, shard, err, d)
}

func (m *instruments) histogram(op string) metric.Float64Histogram {
	if m == nil {
		return nil
	}
	switch op {
	case "acquire":
		return m.acquire
	case "renew":
		return m.renew
	}
	return m.release
}
