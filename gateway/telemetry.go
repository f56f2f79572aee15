package gateway

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/otelconnect"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

// Telemetry configures the service's traces and metrics. The zero value
// (the default) records nothing.
//
// Traces: a server span per RPC (connectrpc.com/otelconnect) and per REST
// call (otelhttp, with the HTTP semantic-convention attributes), with a
// leasegate.route child span, made where the handler routes the name,
// naming the shard the router picked and events for circuit-breaker
// refusals; the lock engine's spans nest below. A caller's W3C trace
// context continues into the server span, whoever the caller is;
// PublicEndpoint turns that off for gateways that untrusted callers reach:
// each call then starts a new trace linked to the caller's context.
//
// Metrics (Prometheus names): leasegate_acquire_duration_seconds{shard,
// outcome, mode}, leasegate_wait_duration_seconds{shard, outcome},
// leasegate_renew_duration_seconds{shard, outcome},
// leasegate_release_duration_seconds{shard, outcome}, leasegate_waiters
// {shard}, leasegate_lease_losses_total{shard, reason} and
// leasegate_rate_limit_rejections_total{limit}. Lock names, client ids and
// lock ids are never labels.
type Telemetry struct {
	// TracerProvider creates the service's tracers; nil records no spans.
	TracerProvider trace.TracerProvider
	// MeterProvider creates its meters; nil records no metrics.
	MeterProvider metric.MeterProvider
	// Propagator reads callers' trace context; nil means W3C trace context and baggage.
	Propagator propagation.TextMapPropagator
	// PublicEndpoint starts every call's server span as the root of a new
	// trace, linked to the caller's context instead of continuing it, as
	// otelhttp's WithPublicEndpointFn and otelconnect's default do. Set it
	// when callers are not trusted to choose the trace (and with it the
	// sampling decision) the gateway's spans join. Default false: callers'
	// traces continue.
	PublicEndpoint bool
}

const scopeName = "github.com/leasegate/leasegate/gateway"

// telemetry is the service's instruments; a nil *telemetry records nothing.
type telemetry struct {
	s     *Service
	prop  propagation.TextMapPropagator
	trace connect.Interceptor // nil without tracing
	rest  []otelhttp.Option   // the REST calls' spans and HTTP metrics
	m     *instruments        // nil without metrics
	sets  sync.Map            // labelKey → metric.MeasurementOption
}

// labelKey is one combination of a measurement's labels; an empty field is
// a label the measurement does not have.
type labelKey struct{ shard, outcome, mode, reason string }

// labels returns the measurement option of one combination of labels,
// built once: a new attribute set per call is a sort, a hash and
// allocations, and the combinations are few (shards × outcomes × modes).
func (t *telemetry) labels(shard, outcome, mode string) metric.MeasurementOption {
	return t.labelsOf(labelKey{shard: shard, outcome: outcome, mode: mode})
}

func (t *telemetry) labelsOf(k labelKey) metric.MeasurementOption {
	if o, ok := t.sets.Load(k); ok {
		return o.(metric.MeasurementOption)
	}
	kv := []attribute.KeyValue{attribute.String("shard", k.shard)}
	for _, l := range [...][2]string{{"outcome", k.outcome}, {"mode", k.mode}, {"reason", k.reason}} {
		if l[1] != "" {
			kv = append(kv, attribute.String(l[0], l[1]))
		}
	}
	o, _ := t.sets.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(kv...)))
	return o.(metric.MeasurementOption)
}

type instruments struct {
	acquire, wait, renew, release metric.Float64Histogram
	waiters                       metric.Int64UpDownCounter
	losses, refusals              metric.Int64Counter
	forced                        metric.Int64Counter
}

// newTelemetry builds the service's instruments from cfg.
func newTelemetry(s *Service, cfg Telemetry) (*telemetry, error) {
	if cfg.TracerProvider == nil && cfg.MeterProvider == nil {
		return nil, nil
	}
	t := &telemetry{s: s, prop: cmp.Or(cfg.Propagator, propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))}
	if cfg.TracerProvider != nil {
		opts := []otelconnect.Option{
			otelconnect.WithTracerProvider(cfg.TracerProvider), otelconnect.WithPropagator(t.prop),
			otelconnect.WithoutMetrics(),
		}
		if !cfg.PublicEndpoint {
			opts = append(opts, otelconnect.WithTrustRemote())
		}
		ic, err := otelconnect.NewInterceptor(opts...)
		if err != nil {
			return nil, err
		}
		t.trace = ic
	}
	t.rest = t.newRESTTracing(cfg)
	if cfg.MeterProvider != nil {
		m, err := newInstruments(cfg.MeterProvider.Meter(scopeName))
		if err != nil {
			return nil, err
		}
		t.m = m
		s.lim.onRefusal = func(kind string) {
			m.refusals.Add(context.Background(), 1, metric.WithAttributes(attribute.String("limit", kind)))
		}
	}
	return t, nil
}

func newInstruments(m metric.Meter) (*instruments, error) {
	var errs []error
	hist := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(latencyBuckets...))
		errs = append(errs, err)
		return h
	}
	in := &instruments{
		acquire: hist("leasegate.acquire.duration", "Acquire calls from request to grant or refusal, by shard, outcome and mode (try, immediate, queued)."),
		wait:    hist("leasegate.wait.duration", "Time queued behind other holders, from the first queue position to grant or giving up."),
		renew:   hist("leasegate.renew.duration", "Renew calls, by shard and outcome."),
		release: hist("leasegate.release.duration", "Release calls, by shard and outcome."),
	}
	counter := func(name, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	var err error
	in.waiters, err = m.Int64UpDownCounter("leasegate.waiters", metric.WithDescription("Acquire calls this gateway holds in a queue, by shard."))
	errs = append(errs, err)
	in.losses = counter("leasegate.lease.losses", "Leases found lost, by shard and reason (expired, stolen, waiter_lease_lost, session_lost).")
	in.refusals = counter("leasegate.rate_limit.rejections", "Calls refused by a rate limit or cap, by limit.")
	in.forced = counter("leasegate.force_releases", "Holders evicted by AdminService.ForceRelease, by shard.")
	return in, errors.Join(errs...)
}

// latencyBuckets are the bounds, in seconds, of the latency histograms:
// 0.5 ms to 60 s.
var latencyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// handlerOptions are the Connect options the telemetry adds: tracing
// outermost, then metrics.
func (t *telemetry) handlerOptions() []connect.HandlerOption {
	if t == nil {
		return nil
	}
	var ics []connect.Interceptor
	if t.trace != nil {
		ics = append(ics, t.trace)
	}
	ics = append(ics, (*callRecorder)(t))
	return []connect.HandlerOption{connect.WithInterceptors(ics...)}
}

// outcomeOf names a call's result: "ok" or the Connect code.
func outcomeOf(err error) string {
	if err == nil {
		return "ok"
	}
	return connect.CodeOf(err).String()
}

// lossReason names a lost lease from an error's ErrorInfo, or "".
func lossReason(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return ""
	}
	for _, d := range ce.Details() {
		v, derr := d.Value()
		if derr != nil {
			continue
		}
		if info, ok := v.(*errdetails.ErrorInfo); ok {
			switch v1.ErrorReason(v1.ErrorReason_value[info.Reason]) {
			case v1.ErrorReason_LOCK_EXPIRED:
				return "expired"
			case v1.ErrorReason_LOCK_STOLEN:
				return "stolen"
			case v1.ErrorReason_LEASE_LOST:
				return "waiter_lease_lost"
			case v1.ErrorReason_SESSION_LOST:
				return "session_lost"
			}
		}
	}
	return ""
}

func (t *telemetry) lost(ctx context.Context, shard, reason string) {
	if reason != "" && t.m != nil {
		t.m.losses.Add(ctx, 1, t.labelsOf(labelKey{shard: shard, reason: reason}))
	}
}

// callDone records the call's duration d in hist (nil: not measured) by
// shard, outcome and mode, labels the call's span with outcome and writes
// the call's request-scoped log line: at debug level always, at warn level
// when the store failed. It never logs the request.
func (t *telemetry) callDone(ctx context.Context, hist metric.Float64Histogram, procedure, shard, outcome, mode string, err error, d time.Duration) {
	if hist != nil {
		hist.Record(ctx, d.Seconds(), t.labels(shard, outcome, mode))
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.String("leasegate.outcome", outcome))
	}
	level := slog.LevelDebug
	if code := connect.CodeOf(err); err != nil && (code == connect.CodeUnavailable || code == connect.CodeInternal || code == connect.CodeUnknown) {
		level = slog.LevelWarn
	}
	if !t.s.log.Enabled(ctx, level) {
		return
	}
	t.s.log.LogAttrs(ctx, level, "call", slog.String("procedure", procedure), slog.String("shard", shard),
		slog.String("outcome", outcomeOf(err)), slog.Duration("duration", d))
}

// callRecorder is the metrics and logging interceptor.
type callRecorder telemetry

func (c *callRecorder) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	t := (*telemetry)(c)
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		ctx, rec := withRecord(ctx)
		start := time.Now()
		resp, err := next(ctx, req)
		t.unaryDone(ctx, rec, req, resp, err, time.Since(start))
		return resp, err
	}
}

// unaryDone records a unary call by what its handler put in rec.
func (t *telemetry) unaryDone(ctx context.Context, rec *callRecord, req connect.AnyRequest, resp connect.AnyResponse, err error, d time.Duration) {
	outcome := outcomeOf(err)
	got := rec.read()
	shard := got.shard
	if err == nil && got.outcome != "" {
		outcome = got.outcome
	}
	var hist metric.Float64Histogram
	mode := ""
	switch req.Any().(type) {
	case *v1.TryAcquireRequest:
		hist, mode = t.m.histogram("acquire"), "try"
	case *v1.RenewRequest:
		hist = t.m.histogram("renew")
		t.lost(ctx, shard, lossReason(err))
	case *v1.ReleaseRequest, *v1.ResignRequest:
		hist = t.m.histogram("release")
	case *v1.KeepAliveSessionRequest:
		if err != nil {
			t.lost(ctx, "all", lossReason(err))
			break
		}
		// Each lease of a session lives and dies on its own shard.
		for _, sh := range resp.Any().(*v1.KeepAliveSessionResponse).Shards {
			if sh.State == v1.ShardLeaseState_SHARD_LEASE_STATE_LOST {
				t.lost(ctx, sh.Shard, "session_lost")
			}
		}
		shard = rec.currentShard()
	default:
		shard = rec.currentShard()
	}
	t.callDone(ctx, hist, req.Spec().Procedure, shard, outcome, mode, err, d)
}

func (c *callRecorder) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (c *callRecorder) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	t := (*telemetry)(c)
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		proc := conn.Spec().Procedure
		if proc != leasegatev1connect.LockServiceAcquireProcedure && proc != leasegatev1connect.ElectionServiceCampaignProcedure {
			return next(ctx, conn)
		}
		ctx, rec := withRecord(ctx)
		a := &acquireConn{StreamingHandlerConn: conn, t: t, ctx: ctx, rec: rec, start: time.Now(), procedure: proc}
		err := next(ctx, a)
		a.done(err)
		return err
	}
}

// acquireConn times a streaming Acquire from the call to its first queue
// position (it is then a waiter) and to its end, on the recorded shard.
type acquireConn struct {
	connect.StreamingHandlerConn
	t         *telemetry
	ctx       context.Context
	rec       *callRecord
	start     time.Time
	queuedAt  time.Time
	waitShard string
	procedure string // Acquire, or an election's Campaign
}

func (a *acquireConn) Send(msg any) error {
	if a.queuedAt.IsZero() && isQueued(msg) {
		a.queuedAt, a.waitShard = time.Now(), orUnknown(a.rec.currentShard())
		a.t.waitBegan(a.ctx, a.waitShard)
	}
	return a.StreamingHandlerConn.Send(msg)
}

// waitBegan counts a call queued on shard as a waiter (leasegate_waiters)
// from its first queue position until waitEnded.
func (t *telemetry) waitBegan(ctx context.Context, shard string) {
	if t != nil && t.m != nil {
		t.m.waiters.Add(ctx, 1, t.labels(shard, "", ""))
	}
}

// waitEnded ends the wait waitBegan counted, begun at at, with outcome:
// one waiter fewer, and the wait in leasegate_wait_duration_seconds.
func (t *telemetry) waitEnded(ctx context.Context, shard, outcome string, at, now time.Time) {
	if t != nil && t.m != nil {
		t.m.waiters.Add(ctx, -1, t.labels(shard, "", ""))
		t.m.wait.Record(ctx, now.Sub(at).Seconds(), t.labels(shard, outcome, ""))
	}
}

// isQueued reports whether msg is a streaming acquire's queue position.
func isQueued(msg any) bool {
	m, ok := msg.(interface{ GetQueued() *v1.Queued })
	return ok && m.GetQueued() != nil
}

func (a *acquireConn) done(err error) {
	now := time.Now()
	outcome, mode := outcomeOf(err), "immediate"
	shard := a.rec.read().shard
	if !a.queuedAt.IsZero() {
		mode = "queued"
		a.t.waitEnded(a.ctx, a.waitShard, outcome, a.queuedAt, now)
	}
	a.t.lost(a.ctx, shard, lossReason(err))
	a.t.callDone(a.ctx, a.t.m.histogram("acquire"), a.procedure, shard, outcome, mode, err, now.Sub(a.start))
}

// restPrefix is where the REST lock calls live.
const restPrefix = "/api/v1/locks/"

// newRESTTracing returns the REST calls' otelhttp options: the service's
// providers (no-op ones for a signal that is off, never the global ones),
// its propagator, and a new root per call on a public endpoint.
func (t *telemetry) newRESTTracing(cfg Telemetry) []otelhttp.Option {
	tp := cmp.Or[trace.TracerProvider](cfg.TracerProvider, tracenoop.NewTracerProvider())
	mp := cmp.Or[metric.MeterProvider](cfg.MeterProvider, metricnoop.NewMeterProvider())
	// Without tracing a caller's trace context has nothing to join, and is not
	// read (nor is it by the Connect calls, with no tracing interceptor then).
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

// restCall wraps the REST lock call op ("acquire", "renew", "release") in
// otelhttp — a server span "POST /api/v1/locks/<op>" and the
// http.server.request.duration metric, both taking http.route from the
// pattern the mux matched — and records the leasegate metrics the Connect
// calls do from the call's record: it reads no body and matches no path.
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
		ctx, rec := withRecord(r.Context())
		start := time.Now()
		next.ServeHTTP(w, r.WithContext(ctx))
		d := time.Since(start)
		got := rec.read()
		shard, outcome, mode, err := got.shard, got.outcome, cmp.Or(got.mode, mode), got.err
		switch {
		case err != nil:
			outcome = outcomeOf(err)
		case outcome == "":
			outcome = "ok"
		}
		t.lost(ctx, shard, got.loss)
		if !got.queuedAt.IsZero() {
			t.waitEnded(ctx, got.waitShard, outcome, got.queuedAt, start.Add(d))
		}
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.SetAttributes(attribute.String("leasegate.shard", shard))
		}
		t.callDone(ctx, hist, path, shard, outcome, mode, err, d)
	}), "leasegate.rest", t.rest...)
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
