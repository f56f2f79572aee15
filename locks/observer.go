package locks

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// scopeName is the instrumentation scope of the fleet's spans.
const scopeName = "github.com/leasegate/leasegate/locks"

// Note is where the fleet sent one call, for the call's telemetry: the
// caller puts one in the call's context (WithNote) and the fleet writes
// into it the shard it routed the call's name to, or the shard a held
// lock's id named, so the call's record names the shard the fleet acted
// on, never one re-derived from the request. It is safe for concurrent use
// (a waiting Acquire is read while it waits).
type Note struct {
	mu    sync.Mutex
	shard string
}

type noteKey struct{}

// WithNote returns ctx carrying a new Note.
func WithNote(ctx context.Context) (context.Context, *Note) {
	n := &Note{}
	return context.WithValue(ctx, noteKey{}, n), n
}

// Shard is the shard noted last, "" before any (and for a nil Note).
func (n *Note) Shard() string {
	if n == nil {
		return ""
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.shard
}

// note writes shard into ctx's Note, if it has one.
func note(ctx context.Context, shard string) {
	if n, ok := ctx.Value(noteKey{}).(*Note); ok {
		n.mu.Lock()
		n.shard = shard
		n.mu.Unlock()
	}
}

// routed notes a name routed by the shard map, to t or not at all (err),
// and traces it as a leasegate.route span under ctx's span when that span
// records: the shard, the epoch, the shard the name drains from and the
// shard's breaker state, or "unroutable".
func routed(ctx context.Context, t Target, err error) {
	if err == nil {
		note(ctx, t.Shard)
	}
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return
	}
	_, span := parent.TracerProvider().Tracer(scopeName).Start(ctx, "leasegate.route")
	defer span.End()
	if err != nil {
		span.SetAttributes(attribute.String("leasegate.outcome", "unroutable"))
		return
	}
	attrs := []attribute.KeyValue{attribute.String("leasegate.shard", t.Shard), attribute.Int("leasegate.epoch", int(t.Epoch))}
	if t.Previous != nil {
		attrs = append(attrs, attribute.String("leasegate.draining_from", t.Previous.Shard))
	}
	attrs = append(attrs, attribute.String("leasegate.breaker.state", t.Backend.Breaker.State().String()))
	span.SetAttributes(attrs...)
}
