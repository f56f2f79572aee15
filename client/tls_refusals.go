package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"

	"connectrpc.com/connect"
)

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
