package queue

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Telemetry configures the engine's spans and metrics. The zero value
// records nothing, at no cost.
//
// Spans: leasegate.enqueue (the acquire transaction), leasegate.wait (with
// a "queue.position" event whenever the position changes and a
// "predecessor.left" event when the key ahead goes), leasegate.grant,
// leasegate.renew and leasegate.release, each with the attributes
// leasegate.shard, leasegate.outcome and, where known, the queue position
// and fencing token. Secrets, lock ids and waiter ids are never recorded.
// A grant that followed a traced release is linked to the release's span
// (see handoff.go).
//
// Metrics: leasegate_handoff_duration_seconds{shard}.
type Telemetry struct {
	// TracerProvider creates the engine's tracer; nil records no spans.
	TracerProvider trace.TracerProvider
	// MeterProvider creates the engine's meter; nil records no metrics.
	MeterProvider metric.MeterProvider
	// Cluster names the etcd cluster (the shard) in spans and metrics.
	Cluster string
}

// Span and attribute names.
const (
	spanEnqueue = "leasegate.enqueue"
	spanWait    = "leasegate.wait"
	spanGrant   = "leasegate.grant"
	spanRenew   = "leasegate.renew"
	spanRelease = "leasegate.release"

	attrShard    = "leasegate.shard"
	attrOutcome  = "leasegate.outcome"
	attrPosition = "leasegate.queue.position"
	attrToken    = "leasegate.fencing_token"
	attrName     = "leasegate.lock.name"
	attrElection = "leasegate.election.name"
	attrEpoch    = "leasegate.epoch"
	attrTTL      = "leasegate.lease.ttl_s"
	attrSession  = "leasegate.session"
)

const scopeName = "github.com/leasegate/leasegate/queue"

// nameAttr names a span's lock, or its election by the election's own name
// (without the engine's marker).
func nameAttr(name string) attribute.KeyValue {
	if n, ok := ElectionOf(name); ok {
		return attribute.String(attrElection, n)
	}
	return attribute.String(attrName, name)
}

// engineTel is an engine's instruments; nil fields record nothing.
type engineTel struct {
	tracer    trace.Tracer
	handoff   metric.Float64Histogram
	poolTakes metric.Int64Counter
	poolOpts  map[string]metric.AddOption // by outcome
	shard     attribute.KeyValue
	shardOpts metric.MeasurementOption
	ho        handoffLease
}

func newEngineTel(t Telemetry) *engineTel {
	et := &engineTel{shard: attribute.String(attrShard, t.Cluster), shardOpts: metric.WithAttributes(attribute.String("shard", t.Cluster))}
	if t.TracerProvider != nil {
		et.tracer = t.TracerProvider.Tracer(scopeName)
	}
	if t.MeterProvider != nil {
		h, err := t.MeterProvider.Meter(scopeName).Float64Histogram("leasegate.handoff.duration",
			metric.WithUnit("s"),
			metric.WithDescription("From the moment a waiter's gateway learns the key ahead of it went (release, expiry or a waiter giving up) to its grant."),
			metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
		if err == nil && h.Enabled(context.Background()) {
			et.handoff = h
		}
		c, err := t.MeterProvider.Meter(scopeName).Int64Counter("leasegate.lease_pool.takes",
			metric.WithDescription("Per-lock acquires by where their lease came from: hit (a pooled lease), miss (the pool had none: granted inline), lapsed (the pooled lease was gone by the enqueue: granted inline)."))
		if err == nil && c.Enabled(context.Background()) {
			et.poolTakes = c
			et.poolOpts = map[string]metric.AddOption{}
			for _, o := range []string{poolHit, poolMiss, poolLapsed} {
				et.poolOpts[o] = metric.WithAttributes(attribute.String("shard", t.Cluster), attribute.String("outcome", o))
			}
		}
	}
	return et
}

// Outcomes of a per-lock acquire's look into the lease pool.
const (
	poolHit    = "hit"
	poolMiss   = "miss"
	poolLapsed = "lapsed"
)

// observePoolTake counts one per-lock acquire's lease by outcome.
func (e *Engine) observePoolTake(ctx context.Context, outcome string) {
	if e.tel.poolTakes != nil {
		e.tel.poolTakes.Add(ctx, 1, e.tel.poolOpts[outcome])
	}
}

// span is one engine span; a nil *span (tracing off) ignores every call.
type span struct {
	s trace.Span
}

func (t *engineTel) start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, *span) {
	if t == nil || t.tracer == nil {
		return ctx, nil
	}
	ctx, s := t.tracer.Start(ctx, name, trace.WithAttributes(append(attrs, t.shard)...))
	if !s.IsRecording() {
		return ctx, nil
	}
	return ctx, &span{s: s}
}

func (s *span) set(kv ...attribute.KeyValue) {
	if s != nil {
		s.s.SetAttributes(kv...)
	}
}

func (s *span) event(name string, kv ...attribute.KeyValue) {
	if s != nil {
		s.s.AddEvent(name, trace.WithAttributes(kv...))
	}
}

// end records the outcome (ok when err is nil) and ends the span.
func (s *span) end(ok string, err error) {
	if s == nil {
		return
	}
	if err != nil {
		s.s.SetAttributes(attribute.String(attrOutcome, outcomeOf(err)))
		if !expectedError(err) {
			s.s.SetStatus(codes.Error, err.Error())
		}
	} else {
		s.s.SetAttributes(attribute.String(attrOutcome, ok))
	}
	s.s.End()
}

// outcomes name engine errors for the outcome attribute, the first match
// winning.
var outcomes = [...]struct {
	err  error
	name string
}{
	{ErrWaitTimeout, "wait_timeout"}, {ErrLeaseLost, "lease_lost"}, {ErrReleased, "released"},
	{ErrExpired, "expired"}, {ErrStolen, "stolen"}, {ErrNotOwner, "not_owner"},
	{ErrSessionLost, "session_lost"}, {ErrQueueFull, "queue_full"}, {ErrGuardFailed, "epoch_refused"},
	{ErrDetached, "detached"}, {ErrSuperseded, "superseded"}, {context.Canceled, "canceled"},
	{context.DeadlineExceeded, "deadline_exceeded"}, {ErrInvalidArgument, "invalid_argument"},
	{ErrInvalidName, "invalid_argument"}, {ErrInvalidTTL, "invalid_argument"},
}

// outcomeOf names an engine error for the outcome attribute.
func outcomeOf(err error) string {
	for _, o := range outcomes {
		if errors.Is(err, o.err) {
			return o.name
		}
	}
	return "error"
}

// expectedError reports answers that are the lock service doing its job,
// not failures of it: they do not mark the span as an error.
func expectedError(err error) bool {
	switch outcomeOf(err) {
	case "error", "deadline_exceeded":
		return false
	}
	return true
}

// traceEnqueue starts the enqueue span of r.
func (e *Engine) traceEnqueue(ctx context.Context, r *AcquireRequest, try bool) (context.Context, *span) {
	if e.tel.tracer == nil {
		return ctx, nil
	}
	return e.tel.start(ctx, spanEnqueue, nameAttr(r.Name), attribute.Int(attrEpoch, int(r.Epoch)),
		attribute.Bool(attrSession, r.Session != 0), attribute.Bool("leasegate.try", try))
}

// endEnqueue records what the acquire transaction found.
func (s *span) endEnqueue(q *enqueued, err error) {
	if s == nil {
		return
	}
	outcome := "enqueued"
	if q != nil {
		switch {
		case q.h.Revision == 0:
			outcome = "busy"
		case q.resumed:
			outcome = "resumed"
		}
		if q.h.Revision != 0 {
			s.set(attribute.Int64(attrToken, q.h.Token()))
			if q.holds {
				s.set(attribute.Bool("leasegate.first", true))
			}
		}
	}
	s.end(outcome, err)
}

// tracedWait is wait inside a leasegate.wait span whose events follow the
// queue position.
func (e *Engine) tracedWait(ctx context.Context, r *AcquireRequest, q *enqueued, began time.Time) (Grant, error) {
	ctx, sp := e.tel.start(ctx, spanWait, attribute.Int64(attrToken, q.h.Token()))
	if sp != nil && r.OnQueued != nil {
		onQueued := r.OnQueued
		rc := *r
		rc.OnQueued = func(pos int64) {
			sp.event("queue.position", attribute.Int64(attrPosition, pos))
			sp.set(attribute.Int64(attrPosition, pos))
			onQueued(pos)
		}
		r = &rc
	}
	g, err := e.wait(ctx, r, q, began)
	sp.end("granted", err)
	return g, err
}

// traceGrant starts the grant span of q; it is linked to the release that
// handed the lock over, when that release was traced.
func (e *Engine) traceGrant(ctx context.Context, q *enqueued) (context.Context, *span) {
	if e.tel.tracer == nil {
		return ctx, nil
	}
	ctx, sp := e.tel.start(ctx, spanGrant, attribute.Int64(attrToken, q.h.Token()), attribute.Bool("leasegate.resumed", q.resumed))
	if sp != nil && q.handoff != nil {
		sp.s.AddLink(trace.Link{SpanContext: q.handoff.span, Attributes: []attribute.KeyValue{attribute.String("leasegate.link", "previous holder's release")}})
		sp.set(attribute.Float64("leasegate.handoff.since_release_s", time.Since(q.handoff.at).Seconds()))
	}
	return ctx, sp
}

func (s *span) endGrant(g Grant, err error) {
	if err == nil {
		s.set(attribute.Int64(attrTTL, int64(g.TTL/time.Second)))
	}
	s.end("granted", err)
}

// traceHandle starts a renew or release span of the lock h names.
func (e *Engine) traceHandle(ctx context.Context, name string, h Handle) (context.Context, *span) {
	if e.tel.tracer == nil {
		return ctx, nil
	}
	return e.tel.start(ctx, name, nameAttr(h.Name), attribute.Int64(attrToken, h.Token()), attribute.Bool(attrSession, h.Session))
}

// observeHandoff records the time from the predecessor's departure, as
// seen by this waiter, to its grant.
func (e *Engine) observeHandoff(ctx context.Context, since time.Time) {
	if e.tel.handoff == nil || since.IsZero() {
		return
	}
	e.tel.handoff.Record(ctx, e.cfg.Clock.Now().Sub(since).Seconds(), e.tel.shardOpts)
}

// predecessorLeft notes on the wait span that the key ahead went.
func (e *Engine) predecessorLeft(ctx context.Context) {
	if e.tel.tracer != nil {
		trace.SpanFromContext(ctx).AddEvent("predecessor.left")
	}
}

func (s *span) endRelease(released bool, err error) {
	outcome := "not_held"
	if released {
		outcome = "released"
	}
	s.end(outcome, err)
}
