package telemetry

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// TraceHandler wraps a slog.Handler and adds trace_id and span_id to every
// record logged with a context that carries a valid span (the *Context
// logging methods), so a log line leads to its trace. Records without one
// pass through unchanged.
type TraceHandler struct {
	next slog.Handler
}

// NewTraceHandler returns a TraceHandler over next.
func NewTraceHandler(next slog.Handler) *TraceHandler { return &TraceHandler{next: next} }

// Enabled reports whether next handles level.
func (h *TraceHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle adds the span's ids, when there is one, and passes r on.
func (h *TraceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs returns a TraceHandler over next.WithAttrs(attrs).
func (h *TraceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &TraceHandler{next: h.next.WithAttrs(attrs)}
}

// WithGroup returns a TraceHandler over next.WithGroup(name). The ids are
// then added inside the group.
func (h *TraceHandler) WithGroup(name string) slog.Handler {
	return &TraceHandler{next: h.next.WithGroup(name)}
}
