package gateway

import (
	"net/http"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
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
	// Without tracing a caller's trace context has nothing to join: it is
	// not read (as the Connect calls, which have no tracing interceptor
	// then, do not read it).
	var prop propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator()
	if cfg.TracerProvider != nil {
		prop = t.prop
	}
	opts := []otelhttp.Option{otelhttp.WithTracerProvider(tp), otelhttp.WithMeterProvider(mp), otelhttp.WithPropagators(prop)}
	if cfg.PublicEndpoint {
		opts = append(opts, otelhttp.WithPublicEndpointFn(func(*http.Request) bool { return true }))
	}
	return opts
}

// restCall wraps the REST lock call op ("acquire", "renew", "release"),
// which the mux routed once by its path, in otelhttp — a server span named
// "POST /api/v1/locks/acquire" … with the HTTP semantic-convention
// attributes, and the http.server.request.duration metric, both taking
// http.route from the pattern the mux matched — and records the same
// leasegate metrics as the Connect calls. The handler records the shard it
// routed to, the outcome and any lost lease in the call's record; this
// wrapper adds them to the span and reads neither the request body nor the
// response body, nor matches the path again.
func (t *telemetry) restCall(op string, next http.Handler) http.Handler {
	if t == nil {
		return next
	}
	hist, mode := t.m.histogram(op), ""
	if op == "acquire" {
		mode = "try"
	}
	path := restPrefix + op
	return otelhttp.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.serveREST(w, r, path, hist, mode, next)
	}), "leasegate.rest", t.rest...)
}

// serveREST runs one REST lock call inside otelhttp's span.
func (t *telemetry) serveREST(w http.ResponseWriter, r *http.Request, path string, hist metric.Float64Histogram, mode string, next http.Handler) {
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
	if at, waitShard := rec.waitBegan(); !at.IsZero() {
		t.waitEnded(ctx, waitShard, outcome, at, start.Add(d))
	}
	if hist != nil {
		hist.Record(ctx, d.Seconds(), t.labels(shard, outcome, rec.modeOr(mode)))
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.String("leasegate.outcome", outcome), attribute.String("leasegate.shard", shard))
	}
	t.logCall(ctx, path, shard, err, d)
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
