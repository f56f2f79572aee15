package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"connectrpc.com/otelconnect"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TokenSource returns the bearer token for one call. It is called before
// every request, unary and streaming, with the call's context, so it can
// return a rotated token; it should be fast (cache what is costly) and safe
// for concurrent use.
type TokenSource func(ctx context.Context) (string, error)

// WithBearerToken sends "Authorization: Bearer token" with every call
// (static bearer tokens and JWTs; see docs/security.md). The token must be
// non-empty and contain no whitespace or control characters. It replaces an
// earlier WithBearerToken or WithTokenSource. Default: no credentials.
func WithBearerToken(token string) Option {
	return optionFunc(func(c *config) {
		c.tokens, c.staticToken = func(context.Context) (string, error) { return token, nil }, token
		c.hasStatic = true
	})
}

// WithTokenSource sends the token src returns with every call, calling it
// once per request (each renewal and each retry too), so rotated tokens and
// refreshed JWTs take effect without a new Client. When src fails, or
// returns an empty or malformed token, the call is not sent and fails at
// once with an error that says so and wraps src's error (errors.Is finds
// it); a lock's renewals retry until its deadline. It replaces an earlier
// WithBearerToken or WithTokenSource. A nil src means no credentials.
// Default: none.
func WithTokenSource(src TokenSource) Option {
	return optionFunc(func(c *config) { c.tokens, c.staticToken, c.hasStatic = src, "", false })
}

// WithTLSConfig makes the default HTTP client use cfg (cloned) for https://
// endpoints: RootCAs to trust a private CA, Certificates for a client
// certificate (mTLS), ServerName to override the name checked. The client
// still speaks HTTP/2, as gRPC and streaming need. Every endpoint must be
// https://. It cannot be combined with WithHTTPClient, which would ignore
// it: configure TLS in that client's transport instead. Default: the
// system's roots and no client certificate.
func WithTLSConfig(cfg *tls.Config) Option {
	return optionFunc(func(c *config) { c.tlsConfig = cfg })
}

// WithInterceptors adds Connect interceptors to every call, unary and
// streaming, in order (the first is outermost). They run inside the
// tracing of WithTracing and outside the credentials of WithBearerToken or
// WithTokenSource, so they never see the Authorization header (with
// either of those, do not set it in an interceptor). Repeated options
// append. Default: none.
func WithInterceptors(interceptors ...connect.Interceptor) Option {
	return optionFunc(func(c *config) { c.interceptors = append(c.interceptors, interceptors...) })
}

// validateAuth checks the credential and TLS options against the
// endpoints.
func (c *config) validateAuth(endpoints []string) error {
	if c.hasStatic {
		if err := checkToken(c.staticToken); err != nil {
			return fmt.Errorf("WithBearerToken: %w", err)
		}
	}
	if c.tlsConfig == nil {
		return nil
	}
	if c.httpClient != nil {
		return errors.New("WithTLSConfig and WithHTTPClient: the HTTP client's transport decides TLS; configure it there, or drop WithHTTPClient")
	}
	for _, ep := range endpoints {
		if !strings.HasPrefix(ep, "https://") {
			return fmt.Errorf("WithTLSConfig: endpoint %q is not https://; TLS needs https:// endpoints", ep)
		}
	}
	return nil
}

// checkToken refuses tokens that cannot travel in an Authorization header.
func checkToken(tok string) error {
	if tok == "" {
		return errors.New("the token is empty")
	}
	for _, r := range tok {
		if r <= ' ' || r == 0x7f {
			return errors.New("the token contains whitespace or a control character; want the bare token")
		}
	}
	return nil
}

// tlsHTTPClient is the default HTTP client with cfg for TLS.
func tlsHTTPClient(cfg *tls.Config) *http.Client {
	hc := defaultHTTPClient()
	hc.Transport.(*http.Transport).TLSClientConfig = cfg.Clone()
	return hc
}

// interceptorOptions are the Connect options of WithInterceptors, the
// credentials and the classification of TLS refusals, innermost last.
func (c *config) interceptorOptions() []connect.ClientOption {
	ics := append([]connect.Interceptor(nil), c.interceptors...)
	if c.tokens != nil {
		ics = append(ics, bearerAuth(c.tokens))
	}
	ics = append(ics, tlsRefusals{})
	return []connect.ClientOption{connect.WithInterceptors(ics...)}
}

// bearerAuth is the Authorization header of every request, from a
// TokenSource.
func bearerAuth(src TokenSource) setHeader {
	return setHeader{"Authorization", func(ctx context.Context) (string, error) {
		tok, err := src(ctx)
		if err != nil {
			return "", fmt.Errorf("bearer token: the token source failed: %w", err)
		}
		if err := checkToken(tok); err != nil {
			return "", fmt.Errorf("bearer token: the token source's answer: %w", err)
		}
		return "Bearer " + tok, nil
	}}
}

// setHeader sets the header key on every request the client sends, to what
// value answers for the request's context; a call whose value fails is
// not sent.
type setHeader struct {
	key   string
	value func(context.Context) (string, error)
}

func (s setHeader) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		v, err := s.value(ctx)
		if err != nil {
			return nil, err
		}
		req.Header().Set(s.key, v)
		return next(ctx, req)
	}
}

func (s setHeader) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		// Ask first: a stream is not even prepared without its header.
		v, err := s.value(ctx)
		if err != nil {
			return failedConn{spec: spec, err: err}
		}
		conn := next(ctx, spec)
		conn.RequestHeader().Set(s.key, v)
		return conn
	}
}

func (setHeader) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// failedConn is a stream that was never opened: sending and receiving fail
// with err.
type failedConn struct {
	spec connect.Spec
	err  error
}

func (f failedConn) Spec() connect.Spec           { return f.spec }
func (f failedConn) Peer() connect.Peer           { return connect.Peer{} }
func (f failedConn) Send(any) error               { return f.err }
func (f failedConn) RequestHeader() http.Header   { return http.Header{} }
func (f failedConn) CloseRequest() error          { return nil }
func (f failedConn) Receive(any) error            { return f.err }
func (f failedConn) ResponseHeader() http.Header  { return http.Header{} }
func (f failedConn) ResponseTrailer() http.Header { return http.Header{} }
func (f failedConn) CloseResponse() error         { return nil }

// tlsRefusals turns a TLS handshake that failed on a certificate — the
// gateway's, untrusted here, or ours, refused or missing there — into an
// unauthenticated error. Connect reports it as unavailable, which the SDK
// retries, and an Acquire would retry it until its wait ends: no retry
// can fix a certificate.
type tlsRefusals struct{}

func (tlsRefusals) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		return resp, classifyTLS(err)
	}
}

func (tlsRefusals) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		return tlsConn{next(ctx, spec)}
	}
}

func (tlsRefusals) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

type tlsConn struct{ connect.StreamingClientConn }

func (c tlsConn) Send(m any) error    { return classifyTLS(c.StreamingClientConn.Send(m)) }
func (c tlsConn) Receive(m any) error { return classifyTLS(c.StreamingClientConn.Receive(m)) }

// classifyTLS returns err, as an unauthenticated *connect.Error (still
// wrapping it) when it is a certificate failure.
func classifyTLS(err error) error {
	if err == nil || connect.CodeOf(err) != connect.CodeUnavailable {
		return err
	}
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var op *net.OpError
	switch {
	case errors.As(err, &verify), errors.As(err, &unknown), errors.As(err, &host), errors.As(err, &invalid):
	case errors.As(err, &op) && op.Op == "remote error" && strings.HasPrefix(op.Err.Error(), "tls: "):
		// An alert from the gateway: our certificate is missing
		// ("certificate required"), or refused ("bad certificate",
		// "unknown certificate authority").
	default:
		return err
	}
	var ce *connect.Error
	if errors.As(err, &ce) && ce.Unwrap() != nil {
		err = ce.Unwrap()
	}
	return connect.NewError(connect.CodeUnauthenticated, err)
}

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
	return optionFunc(func(c *config) { c.tracing, c.tracerProvider = true, tp })
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
	sdkMark := setHeader{sdkHeader, func(context.Context) (string, error) { return "go", nil }}
	return []connect.ClientOption{connect.WithInterceptors(sdkMark, ic)}, nil
}
