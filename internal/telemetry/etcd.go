package telemetry

import (
	"context"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// LatencyBuckets are the histogram bucket bounds, in seconds, of every
// leasegate latency: 0.5 ms to 60 s.
var LatencyBuckets = []float64{
	0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
}

// EtcdDialOptions instruments the gRPC client of one etcd cluster:
//   - a child span per unary etcd call (Range, Txn, LeaseGrant …) made
//     within a traced request. Streams (Watch, LeaseKeepAlive) are
//     long-lived and shared by many requests, and calls made outside any
//     request (background revocations, the shard-map watch) would be
//     orphan root spans: neither is traced.
//   - leasegate_etcd_request_duration_seconds{shard, method, code}.
//
// It returns nil when p records nothing.
func (p *Providers) EtcdDialOptions(shard string) []grpc.DialOption {
	if p == nil {
		return nil
	}
	var opts []grpc.DialOption
	prop := p.Propagator
	if prop == nil {
		prop = Propagator()
	}
	if p.TracerProvider != nil {
		opts = append(opts, grpc.WithStatsHandler(otelgrpc.NewClientHandler(
			otelgrpc.WithTracerProvider(childOnlyProvider{tp: p.TracerProvider}),
			otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
			otelgrpc.WithPropagators(prop),
			otelgrpc.WithFilter(func(info *stats.RPCTagInfo) bool { return !isEtcdStream(info.FullMethodName) }),
			otelgrpc.WithSpanAttributes(attribute.String(AttrShard, shard)),
		)))
	}
	if p.MeterProvider != nil {
		h, err := p.MeterProvider.Meter(ScopeName).Float64Histogram("leasegate.etcd.request.duration",
			metric.WithUnit("s"),
			metric.WithDescription("Latency of unary etcd requests, by shard, method and gRPC code."),
			metric.WithExplicitBucketBoundaries(LatencyBuckets...))
		if err == nil && h.Enabled(context.Background()) {
			// The label sets are built once per method and code: a new set
			// per call is a sort, a hash and allocations on every etcd
			// request.
			type key struct {
				method string
				code   codes.Code
			}
			var sets sync.Map // key → metric.MeasurementOption
			labels := func(method string, code codes.Code) metric.MeasurementOption {
				k := key{method, code}
				if o, ok := sets.Load(k); ok {
					return o.(metric.MeasurementOption)
				}
				o, _ := sets.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(attribute.String("shard", shard),
					attribute.String("method", method[strings.LastIndexByte(method, '/')+1:]),
					attribute.String("code", code.String()))))
				return o.(metric.MeasurementOption)
			}
			opts = append(opts, grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
				start := time.Now()
				err := invoker(ctx, method, req, reply, cc, callOpts...)
				h.Record(ctx, time.Since(start).Seconds(), labels(method, status.Code(err)))
				return err
			}))
		}
	}
	return opts
}

// AttrShard is the span attribute naming the etcd cluster (shard).
const AttrShard = "leasegate.shard"

func isEtcdStream(method string) bool {
	return strings.HasSuffix(method, "/Watch") || strings.HasSuffix(method, "/LeaseKeepAlive") ||
		strings.HasSuffix(method, "/Snapshot") || strings.HasSuffix(method, "/Observe")
}

// childOnlyProvider hands out tracers that start spans only under a valid
// parent; without one they return the context's (non-recording) span.
type childOnlyProvider struct {
	embedded.TracerProvider
	tp trace.TracerProvider
}

func (p childOnlyProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return childOnlyTracer{t: p.tp.Tracer(name, opts...)}
}

type childOnlyTracer struct {
	embedded.Tracer
	t trace.Tracer
}

func (t childOnlyTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return t.t.Start(ctx, name, opts...)
}
