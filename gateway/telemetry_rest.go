package gateway

import (
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// restHandler wraps the REST API with a server span per call (a new trace
// linked to the caller's context, REST callers being untrusted) and the
// same metrics as the Connect calls. The handler records the shard it
// routed to, the outcome and any lost lease in the call's record; the
// wrapper reads neither the request body nor the response body.
func (t *telemetry) restHandler(next http.Handler) http.Handler {
	if t == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := strings.TrimPrefix(r.URL.Path, "/api/v1/locks/")
		switch op {
		case "acquire", "renew", "release":
		default:
			next.ServeHTTP(w, r)
			return
		}
		ctx := r.Context()
		var span trace.Span
		if t.tracer != nil {
			opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
				attribute.String("http.request.method", r.Method), attribute.String("http.route", r.URL.Path))}
			if remote := trace.SpanContextFromContext(t.prop.Extract(ctx, propagation.HeaderCarrier(r.Header))); remote.IsValid() {
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: remote}))
			}
			ctx, span = t.tracer.Start(ctx, r.Method+" /api/v1/locks/"+op, opts...)
			defer span.End()
		}
		ctx, rec := withRecord(ctx)
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		start := time.Now()
		next.ServeHTTP(sw, r.WithContext(ctx))
		d := time.Since(start)
		shard, outcome, loss, err := rec.read()
		switch {
		case err != nil:
			outcome = outcomeOf(err)
		case outcome == "":
			outcome = "ok"
		}
		t.lost(ctx, shard, loss)
		var hist metric.Float64Histogram
		attrs := []attribute.KeyValue{}
		switch op {
		case "acquire":
			hist = t.m.histogram("acquire")
			attrs = append(attrs, attribute.String("mode", "try"))
		case "renew":
			hist = t.m.histogram("renew")
		case "release":
			hist = t.m.histogram("release")
		}
		if hist != nil {
			attrs = append(attrs, attribute.String("shard", shard), attribute.String("outcome", outcome))
			hist.Record(ctx, d.Seconds(), metric.WithAttributes(attrs...))
		}
		if span != nil {
			span.SetAttributes(attribute.Int("http.response.status_code", sw.status), attribute.String("leasegate.outcome", outcome), attribute.String("leasegate.shard", shard))
			if sw.status >= 500 {
				span.SetStatus(codes.Error, outcome)
			}
		}
		t.logCall(ctx, r.URL.Path, shard, err, d)
	})
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

// statusWriter keeps the status the handler answered with, for the span.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}
