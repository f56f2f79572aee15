package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"

	"connectrpc.com/connect"
	"github.com/spf13/pflag"

	"github.com/leasegate/leasegate/client"
)

// credentials are the flags that authenticate leasectl to a gateway, each
// with an environment variable; a flag on the command line wins over the
// environment.
type credentials struct {
	token, tokenFile string
	caCert           string
	cert, key        string

	// certAsked records that a gateway asked for a client certificate
	// in a handshake that had none to give: with TLS 1.3 a gateway that
	// requires one may close the connection before its alert is read,
	// so the call fails as a broken connection and this is the evidence.
	certAsked atomic.Bool
}

// credentialVar is a credential flag with its value and environment
// variable.
type credentialVar struct {
	val              *string
	flag, env, usage string
}

func (cr *credentials) vars() []credentialVar {
	return []credentialVar{
		{&cr.token, "token", "LEASEGATE_TOKEN", "bearer token (static token or JWT); visible to other local users in the process list: prefer --token-file or the environment variable"},
		{&cr.tokenFile, "token-file", "LEASEGATE_TOKEN_FILE", "file holding the bearer token, re-read for every call so it can be rotated"},
		{&cr.caCert, "cacert", "LEASEGATE_CACERT", "PEM file of the CA certificates that sign the gateways' TLS certificates (default: the environment variable, else the system's roots)"},
		{&cr.cert, "cert", "LEASEGATE_CERT", "PEM client certificate for mTLS, with --key"},
		{&cr.key, "key", "LEASEGATE_KEY", "PEM private key of --cert"},
	}
}

func (cr *credentials) register(f *pflag.FlagSet) {
	for _, v := range cr.vars() {
		f.StringVar(v.val, v.flag, "", v.usage)
		bindEnv(f, v.flag, v.env)
	}
}

// fromEnv fills the credentials given by neither flag from the
// environment. A token flag (either one) overrides both token variables,
// so a command line never combines with a token from the environment.
func (cr *credentials) fromEnv(fs *pflag.FlagSet) {
	tokenFlag := fs.Changed("token") || fs.Changed("token-file")
	for _, v := range cr.vars() {
		if !fs.Changed(v.flag) && !(tokenFlag && strings.HasPrefix(v.flag, "token")) {
			*v.val = os.Getenv(v.env)
		}
	}
}

// options checks the credentials against the endpoints and returns the
// SDK options they make.
func (cr *credentials) options(endpoints []string) ([]client.Option, error) {
	var opts []client.Option
	switch {
	case cr.token != "" && cr.tokenFile != "":
		return nil, usagef("--token and --token-file (or LEASEGATE_TOKEN and LEASEGATE_TOKEN_FILE) are both set; pass one")
	case cr.token != "":
		opts = append(opts, client.WithBearerToken(strings.TrimSpace(cr.token)))
	case cr.tokenFile != "":
		if _, err := readToken(cr.tokenFile); err != nil {
			return nil, usageError{err}
		}
		path := cr.tokenFile
		opts = append(opts, client.WithTokenSource(func(context.Context) (string, error) { return readToken(path) }))
	}
	if (cr.cert == "") != (cr.key == "") {
		return nil, usagef("--cert and --key (or LEASEGATE_CERT and LEASEGATE_KEY) go together; got only one")
	}
	if cr.caCert == "" && cr.cert == "" {
		return opts, nil
	}
	for _, ep := range endpoints {
		if !strings.HasPrefix(ep, "https://") {
			return nil, usagef("--cacert, --cert and --key need https:// endpoints; %q is not", ep)
		}
	}
	cfg := &tls.Config{}
	if cr.caCert != "" {
		pem, err := os.ReadFile(cr.caCert)
		if err != nil {
			return nil, usagef("--cacert: %v", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, usagef("--cacert %s holds no PEM certificates", cr.caCert)
		}
	}
	if cr.cert != "" {
		pair, err := tls.LoadX509KeyPair(cr.cert, cr.key)
		if err != nil {
			return nil, usagef("--cert %s / --key %s: %v", cr.cert, cr.key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	} else {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cr.certAsked.Store(true)
			return &tls.Certificate{}, nil
		}
	}
	return append(opts, client.WithTLSConfig(cfg)), nil
}

// readToken reads a token file, trimmed of surrounding whitespace.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("--token-file %s is empty; want the bearer token", path)
	}
	return tok, nil
}

// explained is an error with a message for the operator in place of the
// SDK's; it still wraps the original for the exit status.
type explained struct {
	msg string
	err error
}

func (e explained) Error() string { return e.msg }
func (e explained) Unwrap() error { return e.err }

// explain says what to do about a gateway's refusal of leasectl's
// credentials; other errors pass unchanged.
func (cr *credentials) explain(err error) error {
	var st exitStatus
	if errors.As(err, &st) && st.err != nil {
		st.err = cr.explain(st.err)
		return st
	}
	if cr.cert == "" && cr.certAsked.Load() && unanswered(err) {
		return explained{fmt.Sprintf("the gateway asked for a client certificate and closed the connection (%v): it requires a client certificate: --cert and --key (or LEASEGATE_CERT and LEASEGATE_KEY)", err), err}
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err
	}
	switch ce.Code() {
	case connect.CodeUnauthenticated:
		return explained{cr.unauthenticated(err, ce), err}
	case connect.CodePermissionDenied:
		msg := ce.Message()
		if !strings.HasPrefix(msg, "permission denied") {
			msg = "permission denied: " + msg // said once, whatever the gateway's words
		}
		return explained{fmt.Sprintf("%s (the credentials were accepted, but their tenant or caller may not do this: "+
			"locks, lock ids and request ids belong to the tenant and caller that made them, and a tenant policy may limit names)", msg), err}
	}
	return err
}

// unanswered reports whether err is a call no gateway answered: the
// connection broke, closed or never came up, so the error is leasectl's
// side's account, not a gateway's.
func unanswered(err error) bool {
	if !errors.Is(err, client.ErrUnavailable) {
		return false
	}
	var ce *connect.Error
	return !errors.As(err, &ce) || !connect.IsWireError(ce)
}

func (cr *credentials) unauthenticated(err error, ce *connect.Error) string {
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var op *net.OpError
	switch {
	case errors.As(err, &unknown), errors.As(err, &verify) && errors.As(verify.Err, &unknown):
		return "the gateway's TLS certificate is signed by an unknown authority: pass --cacert (or LEASEGATE_CACERT) with the CA certificate that signed it"
	case errors.As(err, &host):
		return fmt.Sprintf("the gateway's TLS certificate is not for this address (%v): use an endpoint URL with a name the certificate lists", host)
	case errors.As(err, &verify):
		return fmt.Sprintf("the gateway's TLS certificate is not valid: %v", verify.Err)
	case errors.As(err, &op) && op.Op == "remote error":
		if cr.cert == "" {
			return fmt.Sprintf("the gateway refused the TLS connection (%v): it requires a client certificate: --cert and --key (or LEASEGATE_CERT and LEASEGATE_KEY)", op.Err)
		}
		return fmt.Sprintf("the gateway refused the client certificate %s (%v): it must be signed by a CA the gateway trusts (its --tls-client-ca) and not be expired", cr.cert, op.Err)
	case cr.token == "" && cr.tokenFile == "" && cr.cert == "":
		return "the gateway requires authentication: pass --token, --token-file or LEASEGATE_TOKEN, or a client certificate: --cert and --key"
	case cr.token == "" && cr.tokenFile == "":
		return fmt.Sprintf("the gateway did not accept the client certificate %s: %s", cr.cert, ce.Message())
	}
	from := "--token (or LEASEGATE_TOKEN)"
	if cr.tokenFile != "" {
		from = "--token-file " + cr.tokenFile
	}
	return fmt.Sprintf("the gateway refused the bearer token from %s: %s (an unknown static token, or a JWT that is expired or for another issuer, audience or tenant claim)", from, ce.Message())
}
