package client

import (
	"context"

	"connectrpc.com/connect"
	"connectrpc.com/otelconnect"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// sdkHeader marks the SDK's calls, for proxies and logs. It carries no
// trust: the gateway continues every caller's trace, or, behind
// --trace-public-endpoint, none.
const sdkHeader = "Leasegate-Client"

// WithTracing makes every call a client span of tp (OpenTelemetry, via
// connectrpc.com/otelconnect) and sends its W3C trace context and baggage
// to the gateway, whose server span, lock engine spans and etcd spans then
// continue the caller's trace (a gateway run with --trace-public-endpoint
// starts a new trace linked to it instead). A nil tp uses the global TracerProvider.
// Default: no spans and no trace headers.
func WithTracing(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) {
		c.tracing, c.tracerProvider = true, tp
	})
}

// tracingOptions are the Connect client options WithTracing adds.
func (c *config) tracingOptions() ([]connect.ClientOption, error) {
	if !c.tracing {
		return nil, nil
	}
	opts := []otelconnect.Option{
		otelconnect.WithPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})),
		otelconnect.WithoutMetrics(),
	}
	if c.tracerProvider != nil {
		opts = append(opts, otelconnect.WithTracerProvider(c.tracerProvider))
	}
	ic, err := otelconnect.NewInterceptor(opts...)
	if err != nil {
		return nil, err
	}
	return []connect.ClientOption{connect.WithInterceptors(sdkMark{}, ic)}, nil
}

// sdkMark sets sdkHeader on every request.
type sdkMark struct{}

func (sdkMark) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			req.Header().Set(sdkHeader, "go")
		}
		return next(ctx, req)
	}
}

func (sdkMark) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set(sdkHeader, "go")
		return conn
	}
}

func (sdkMark) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
