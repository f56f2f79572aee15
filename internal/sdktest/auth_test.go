package sdktest_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/client"
	"github.com/leasegate/leasegate/internal/gwtest"
)

const (
	tokenAcme  = "token-of-acme-0123456789"
	tokenOther = "token-of-other-0123456789"
)

// startTokenGateway starts a gateway that takes static bearer tokens.
func startTokenGateway(t *testing.T, opts ...gwtest.Option) *gateway {
	t.Helper()
	return gwtest.Start(t, shared, append([]gwtest.Option{gwtest.Tokens(tokenAcme+" acme worker", tokenOther+" other worker")}, opts...)...)
}

// holdAndFree acquires (streaming) and try-acquires name through c and
// releases both, failing the test on any error.
func holdAndFree(t *testing.T, c *client.Client, name string) {
	t.Helper()
	ctx := ctxT(t)
	l, err := c.Acquire(ctx, name, client.WithTTL(5*time.Second))
	if err != nil {
		t.Fatalf("Acquire(%q) = %v", name, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release = %v", err)
	}
	l, err = c.TryAcquire(ctx, name, client.WithTTL(5*time.Second))
	if err != nil {
		t.Fatalf("TryAcquire(%q) = %v", name, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release = %v", err)
	}
}

func TestBearerTokenReachesASecuredGateway(t *testing.T) {
	t.Parallel()
	g := startTokenGateway(t)
	for _, p := range []client.Protocol{client.ProtocolConnect, client.ProtocolGRPC, client.ProtocolGRPCWeb} {
		holdAndFree(t, g.SDK(t, client.WithBearerToken(tokenAcme), client.WithProtocol(p)), "bearer-"+p.String())
	}
	ctx := ctxT(t)
	for name, c := range map[string]*client.Client{
		"no token":    g.SDK(t),
		"wrong token": g.SDK(t, client.WithBearerToken("not-a-token-of-this-gateway")),
	} {
		if _, err := c.TryAcquire(ctx, "x"); connect.CodeOf(err) != connect.CodeUnauthenticated || !errors.Is(err, client.ErrUnauthenticated) {
			t.Errorf("%s: TryAcquire = %v; want unauthenticated (client.ErrUnauthenticated)", name, err)
		}
		if _, err := c.Acquire(ctx, "x", client.WithWaitTimeout(10*time.Second)); connect.CodeOf(err) != connect.CodeUnauthenticated || !errors.Is(err, client.ErrUnauthenticated) {
			t.Errorf("%s: Acquire = %v; want unauthenticated (client.ErrUnauthenticated)", name, err)
		}
	}
	// Tenants stay apart: the same name is free for another tenant.
	held, err := g.SDK(t, client.WithBearerToken(tokenAcme)).TryAcquire(ctx, "shared-name")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	other, err := g.SDK(t, client.WithBearerToken(tokenOther)).TryAcquire(ctx, "shared-name")
	if err != nil {
		t.Fatalf("tenant other's TryAcquire of a name tenant acme holds = %v; want its own grant", err)
	}
	other.Release(ctx)
}

func TestTokenSourceIsAskedPerRequest(t *testing.T) {
	t.Parallel()
	g := startTokenGateway(t)
	// A token file rotated between calls: the source reads it each time.
	file := filepath.Join(t.TempDir(), "token")
	write := func(tok string) {
		if err := os.WriteFile(file, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var calls atomic.Int64
	src := func(context.Context) (string, error) {
		calls.Add(1)
		b, err := os.ReadFile(file)
		return strings.TrimSpace(string(b)), err
	}
	// A clock that never moves: no renewal asks for a token in between.
	c := g.SDK(t, client.WithTokenSource(src), client.WithClock(newFakeClock()))
	ctx := ctxT(t)
	write(tokenAcme)
	l, err := c.TryAcquire(ctx, "rotating", client.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	write(tokenOther) // another tenant's token: the release is refused
	if err := l.Release(ctx); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("Release under the rotated token of another tenant = %v; want permission_denied", err)
	}
	write(tokenAcme)
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release after rotating back = %v", err)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("the token source was called %d times for 3 requests", n)
	}
}

func TestTokenSourceFailureIsNotRetried(t *testing.T) {
	t.Parallel()
	g := startTokenGateway(t)
	boom := errors.New("vault is sealed")
	for name, src := range map[string]client.TokenSource{
		"error": func(context.Context) (string, error) { return "", boom },
		"empty": func(context.Context) (string, error) { return "", nil },
		"space": func(context.Context) (string, error) { return "two words", nil },
	} {
		var calls atomic.Int64
		c := g.SDK(t, client.WithTokenSource(func(ctx context.Context) (string, error) {
			calls.Add(1)
			return src(ctx)
		}))
		ctx := ctxT(t)
		_, errTry := c.TryAcquire(ctx, "x")
		_, errAcq := c.Acquire(ctx, "x") // no wait timeout: a retry would hang
		for op, err := range map[string]error{"TryAcquire": errTry, "Acquire": errAcq} {
			if err == nil || !strings.Contains(err.Error(), "bearer token") {
				t.Errorf("%s: %s = %v; want an error about the bearer token", name, op, err)
			}
			if name == "error" && !errors.Is(err, boom) {
				t.Errorf("%s: %s = %v; want it to wrap the source's error", name, op, err)
			}
		}
		if n := calls.Load(); n != 2 {
			t.Errorf("%s: the token source was called %d times for 2 calls; want no retries", name, n)
		}
	}
}

func TestJWTFromATokenSource(t *testing.T) {
	t.Parallel()
	iss := gwtest.NewJWTIssuer(t)
	g := gwtest.Start(t, shared, gwtest.JWTAuth(iss))
	var minted atomic.Int64
	c := g.SDK(t, client.WithTokenSource(func(context.Context) (string, error) {
		minted.Add(1)
		return iss.Sign(t, "acme", "svc", time.Minute), nil
	}))
	holdAndFree(t, c, "jwt")
	if minted.Load() < 4 {
		t.Errorf("minted %d tokens for 4 calls", minted.Load())
	}
	expired := g.SDK(t, client.WithBearerToken(iss.Sign(t, "acme", "svc", -time.Hour)))
	if _, err := expired.TryAcquire(ctxT(t), "jwt"); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("TryAcquire with an expired JWT = %v; want unauthenticated", err)
	}
}

func TestMutualTLS(t *testing.T) {
	t.Parallel()
	pki := gwtest.NewPKI(t)
	g := gwtest.Start(t, shared, gwtest.TLS(pki, true))
	if !strings.HasPrefix(g.URL, "https://") {
		t.Fatalf("gateway URL %q; want https://", g.URL)
	}
	for _, p := range []client.Protocol{client.ProtocolConnect, client.ProtocolGRPC} {
		c := newClient(t, []string{g.URL}, client.WithTLSConfig(pki.ClientTLS(t, "acme", "worker-1")), client.WithProtocol(p))
		holdAndFree(t, c, "mtls-"+p.String())
	}
	ctx := ctxT(t)
	// Without a certificate, or trusting another CA: refused at once, not
	// retried until the wait ends.
	other := gwtest.NewPKI(t)
	for name, cfg := range map[string]*tls.Config{
		"no client certificate": pki.ClientTLS(t, "", ""),
		"untrusted gateway":     {RootCAs: other.Pool()},
		"foreign client cert":   withRoots(other.ClientTLS(t, "acme", "w"), pki),
	} {
		c := newClient(t, []string{g.URL}, client.WithTLSConfig(cfg))
		if _, err := c.TryAcquire(ctx, "x"); !errors.Is(err, client.ErrUnauthenticated) {
			t.Errorf("%s: TryAcquire = %v; want client.ErrUnauthenticated", name, err)
		}
		if _, err := c.Acquire(ctx, "x"); !errors.Is(err, client.ErrUnauthenticated) {
			t.Errorf("%s: Acquire = %v; want client.ErrUnauthenticated", name, err)
		}
	}
}

func withRoots(cfg *tls.Config, p *gwtest.PKI) *tls.Config {
	cfg.RootCAs = p.Pool()
	return cfg
}

func TestAuthOptionsCompose(t *testing.T) {
	t.Parallel()
	g := startTokenGateway(t)
	// Credentials apply to a caller's own HTTP client too; interceptors
	// run outside them and never see the token.
	var seen, leaked atomic.Int64
	spy := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			seen.Add(1)
			if req.Header().Get("Authorization") != "" {
				leaked.Add(1)
			}
			return next(ctx, req)
		}
	})
	c := newClient(t, []string{g.URL}, client.WithHTTPClient(&http.Client{Transport: h2cTransport()}),
		client.WithBearerToken(tokenAcme), client.WithInterceptors(spy))
	l, err := c.TryAcquire(ctxT(t), "compose")
	if err != nil {
		t.Fatal(err)
	}
	l.Release(ctxT(t))
	if seen.Load() != 2 || leaked.Load() != 0 {
		t.Errorf("the interceptor saw %d calls (want 2), %d with the token (want 0)", seen.Load(), leaked.Load())
	}
	for name, tc := range map[string]struct {
		eps  []string
		opts []client.Option
	}{
		"empty token":          {[]string{g.URL}, []client.Option{client.WithBearerToken("")}},
		"token with a newline": {[]string{g.URL}, []client.Option{client.WithBearerToken(tokenAcme + "\n")}},
		"TLS over http://":     {[]string{g.URL}, []client.Option{client.WithTLSConfig(&tls.Config{})}},
		"TLS and HTTP client":  {[]string{"https://127.0.0.1:1"}, []client.Option{client.WithTLSConfig(&tls.Config{}), client.WithHTTPClient(http.DefaultClient)}},
	} {
		if _, err := client.New(tc.eps, tc.opts...); !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("%s: New = %v; want ErrInvalidArgument", name, err)
		}
	}
}
