package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// restHandler wraps the REST API with a server span per call (a new trace
// linked to the caller's context, REST callers being untrusted) and the
// same metrics as the Connect calls.
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
		// Peek at the body for the name or lock id, to label the shard;
		// the handler still reads and validates it strictly.
		var peek struct {
			Name   string `json:"name"`
			LockID string `json:"lockId"`
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, t.s.cfg.MaxBodyBytes+1))
		if err == nil {
			_ = json.Unmarshal(body, &peek)
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		if op == "acquire" {
			t.traceRoute(ctx, peek.Name)
		}
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		start := time.Now()
		next.ServeHTTP(sw, r.WithContext(ctx))
		d := time.Since(start)
		outcome := restOutcome(sw.status)
		var shard string
		var hist metric.Float64Histogram
		attrs := []attribute.KeyValue{}
		switch op {
		case "acquire":
			shard, hist = t.shardOfName(peek.Name), t.m.histogram("acquire")
			if outcome == "ok" && bytes.HasPrefix(sw.head, []byte(`{"acquired":false`)) {
				outcome = "busy"
			}
			attrs = append(attrs, attribute.String("mode", "try"))
		case "renew":
			shard, hist = t.shardOfLockID(peek.LockID), t.m.histogram("renew")
			switch {
			case bytes.Contains(sw.head, []byte(`"reason":"expired"`)):
				t.lost(ctx, shard, "expired")
			case bytes.Contains(sw.head, []byte(`"reason":"stolen"`)):
				t.lost(ctx, shard, "stolen")
			}
		case "release":
			shard, hist = t.shardOfLockID(peek.LockID), t.m.histogram("release")
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
		t.logCall(ctx, r.URL.Path, shard, restErr(sw.status), d)
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

// restOutcome names a REST status as the Connect code it stands for.
func restOutcome(status int) string {
	if status < 300 {
		return "ok"
	}
	return restCode(status).String()
}

func restCode(status int) connect.Code {
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusMethodNotAllowed:
		return connect.CodeInvalidArgument
	case http.StatusUnauthorized:
		return connect.CodeUnauthenticated
	case http.StatusForbidden:
		return connect.CodePermissionDenied
	case http.StatusNotFound:
		return connect.CodeNotFound
	case http.StatusConflict:
		return connect.CodeFailedPrecondition
	case http.StatusTooManyRequests:
		return connect.CodeResourceExhausted
	case 499:
		return connect.CodeCanceled
	case http.StatusGatewayTimeout:
		return connect.CodeDeadlineExceeded
	}
	return connect.CodeUnavailable
}

// restErr is an error standing for a REST status, for logCall.
func restErr(status int) error {
	if status < 300 {
		return nil
	}
	return connect.NewError(restCode(status), nil)
}

// statusWriter keeps the status and the first bytes of the body.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
	head   []byte
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	if n := 64 - len(w.head); n > 0 {
		w.head = append(w.head, b[:min(n, len(b))]...)
	}
	return w.ResponseWriter.Write(b)
}
