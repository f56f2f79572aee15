package gateway

import (
	"cmp"
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"

	"github.com/leasegate/leasegate/internal/reload"
)

const (
	// jwksUnknownKIDEvery bounds the fetches that tokens naming an unknown
	// key id cause: one per period, so callers inventing key ids cannot
	// turn the gateway against the identity provider.
	jwksUnknownKIDEvery = 30 * time.Second
	// jwksFetchTimeout bounds one JWKS fetch, and the wait of a call whose
	// token names an unknown key id for the fetch it causes.
	jwksFetchTimeout = 5 * time.Second
	// jwksMaxRedirects bounds the redirects one fetch follows.
	jwksMaxRedirects = 5
	// jwksURLRule is what JWKSURL and every URL a fetch is redirected to
	// must be: the key set decides who may sign tokens, so it travels
	// authenticated, or stays on this machine.
	jwksURLRule = "want https://host/path (http:// only on a loopback address)"
)

// JWKSMaxBytes bounds a JWKS fetch's answer: an identity provider's key
// set is a few KiB, and the gateway holds the answer in memory while it
// decodes it. A larger answer is refused (the keys fetched before stay).
const JWKSMaxBytes = 1 << 20

// jwksURLAllowed reports whether a key set may be fetched from u: https,
// or http on a loopback address.
func jwksURLAllowed(u *url.URL) bool {
	return u.Host != "" && u.User == nil && (u.Scheme == "https" || u.Scheme == "http" && loopbackHost(u.Host))
}

// jwtVerifier checks signature, issuer, audience and expiry against the
// keys of a keys file, a JWKS, or both.
type jwtVerifier struct {
	files  *reload.Value[[]crypto.PublicKey] // nil without a keys file
	jwks   keyfunc.Keyfunc                   // nil without a JWKS URL
	fetch  *fetchState                       // the JWKS fetches' outcome
	stop   context.CancelFunc                // ends the JWKS refreshes
	parser *jwt.Parser
	claim  string
	roles  string // the roles claim
}

func newJWTVerifier(c AuthConfig, opt reload.Options, log *slog.Logger) (*jwtVerifier, error) {
	v := &jwtVerifier{claim: cmp.Or(c.JWTTenantClaim, DefaultJWTTenantClaim), roles: cmp.Or(c.JWTRolesClaim, DefaultJWTRolesClaim), stop: func() {}, parser: jwt.NewParser(
		jwt.WithValidMethods([]string{"RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"}),
		jwt.WithIssuer(c.JWTIssuer), jwt.WithAudience(c.JWTAudience),
		jwt.WithExpirationRequired(), jwt.WithLeeway(30*time.Second),
	)}
	if c.JWTKeysFile != "" {
		opt.Name = "jwt keys file"
		files, err := reload.New([]string{c.JWTKeysFile}, func() ([]crypto.PublicKey, error) { return loadJWTKeys(c.JWTKeysFile) }, opt)
		if err != nil {
			return nil, err
		}
		v.files = files
	}
	if c.JWKSURL != "" {
		if err := v.startJWKS(c, log); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// startJWKS fetches the key set and starts its refreshes.
func (v *jwtVerifier) startJWKS(c AuthConfig, log *slog.Logger) error {
	every := cmp.Or(c.JWKSRefresh, DefaultJWKSRefresh)
	v.fetch = &fetchState{}
	hc := &http.Client{
		Timeout:       jwksFetchTimeout,
		Transport:     fetchRecorder{next: cmp.Or(c.JWKSTransport, http.DefaultTransport), state: v.fetch},
		CheckRedirect: v.fetch.checkRedirect,
	}
	ctx, cancel := context.WithCancel(context.Background())
	store, err := jwkset.NewStorageFromHTTP(c.JWKSURL, jwkset.HTTPClientStorageOptions{
		Client:                    hc,
		Ctx:                       ctx,
		HTTPTimeout:               jwksFetchTimeout,
		NoErrorReturnFirstHTTPReq: true,
		RefreshInterval:           every,
		RefreshErrorHandler: func(ctx context.Context, err error) {
			log.ErrorContext(ctx, "jwks fetch failed; keeping the keys fetched before", "url", c.JWKSURL, "err", err)
		},
	})
	var client jwkset.Storage
	if err == nil {
		client, err = jwkset.NewHTTPClient(jwkset.HTTPClientOptions{
			HTTPURLs:          map[string]jwkset.Storage{c.JWKSURL: store},
			RateLimitWaitMax:  jwksFetchTimeout,
			RefreshUnknownKID: rate.NewLimiter(rate.Every(jwksUnknownKIDEvery), 1),
		})
	}
	if err == nil {
		v.jwks, err = keyfunc.New(keyfunc.Options{Ctx: ctx, Storage: client})
	}
	if err != nil {
		cancel()
		return fmt.Errorf("jwks url %s: %w", c.JWKSURL, err)
	}
	v.stop = cancel
	return nil
}

func (v *jwtVerifier) close() { v.stop() }

func loadJWTKeys(path string) ([]crypto.PublicKey, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("jwt keys file: %w", err)
	}
	var keys []crypto.PublicKey
	for rest := raw; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		k, err := x509.ParsePKIXPublicKey(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("jwt keys file %s: %w", path, err)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("jwt keys file %s holds no PEM public keys", path)
	}
	return keys, nil
}

func (v *jwtVerifier) verify(ctx context.Context, raw string) (Identity, error) {
	var last error
	try := func(kf jwt.Keyfunc) (Identity, bool) {
		claims := jwt.MapClaims{}
		if _, err := v.parser.ParseWithClaims(raw, claims, kf); err != nil {
			last = err
			return Identity{}, false
		}
		tenant, _ := claims[v.claim].(string)
		if err := ValidateTenant(tenant); err != nil {
			last = fmt.Errorf("claim %q: %v", v.claim, err)
			return Identity{}, false
		}
		sub, _ := claims.GetSubject()
		return Identity{Tenant: tenant, Subject: sub, Method: "jwt", Roles: rolesClaim(claims[v.roles])}, true
	}
	if v.files != nil {
		for _, k := range v.files.Get() {
			if id, ok := try(func(*jwt.Token) (any, error) { return k, nil }); ok {
				return id, nil
			}
		}
	}
	if v.jwks != nil {
		if id, ok := try(v.jwks.KeyfuncCtx(ctx)); ok {
			return id, nil
		}
		if errors.Is(last, jwkset.ErrKeyNotFound) {
			// The parser's chain names library internals; say what failed.
			last = errors.New("the token's signing key (kid) is not in the key set")
			if ferr := v.fetch.err(); ferr != nil {
				last = fmt.Errorf("the token's signing key (kid) is not in the key set, which could not be fetched again (%v)", ferr)
			}
		}
	}
	// The parser's message says what failed (expired, wrong audience…) and
	// never includes the token.
	return Identity{}, fmt.Errorf("%w: jwt: %v", ErrUnauthenticated, last)
}

// fetchState holds the outcome of the last JWKS fetch: nil after a
// success, the reason after a failure.
type fetchState struct {
	last atomic.Pointer[error]
}

func (f *fetchState) err() error {
	if p := f.last.Load(); p != nil {
		return *p
	}
	return nil
}

func (f *fetchState) set(err error) { f.last.Store(&err) }

// checkRedirect holds every hop of a fetch to the rule JWKSURL meets —
// keys fetched in the clear from elsewhere could sign any token — and
// never follows https to http, loopback or not.
func (f *fetchState) checkRedirect(req *http.Request, via []*http.Request) error {
	var err error
	switch prev := via[len(via)-1].URL; {
	case len(via) > jwksMaxRedirects:
		err = fmt.Errorf("the key set server redirected more than %d times", jwksMaxRedirects)
	case !jwksURLAllowed(req.URL):
		err = fmt.Errorf("the key set server redirected to %s, which is refused: %s", req.URL.Redacted(), jwksURLRule)
	case prev.Scheme == "https" && req.URL.Scheme != "https":
		err = fmt.Errorf("the key set server redirected from https to %s, which is refused: a redirect keeps https", req.URL.Redacted())
	}
	if err != nil {
		f.set(err)
	}
	return err
}

// errJWKSTooLarge reports a key set answer beyond JWKSMaxBytes.
var errJWKSTooLarge = fmt.Errorf("the key set server's answer is larger than %d bytes, the most the gateway reads of a key set; it is refused", JWKSMaxBytes)

// fetchRecorder notes each JWKS fetch's outcome in state, for the message
// of a refused token (the storage only reports failures, to a log), and
// bounds the answer's body by JWKSMaxBytes.
type fetchRecorder struct {
	next  http.RoundTripper
	state *fetchState
}

func (f fetchRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := f.next.RoundTrip(req)
	var out error
	switch {
	case err != nil:
		out = errors.New("the key set server did not answer")
	case resp.ContentLength > JWKSMaxBytes:
		resp.Body.Close()
		f.state.set(errJWKSTooLarge)
		return nil, errJWKSTooLarge
	case resp.StatusCode != http.StatusOK:
		out = fmt.Errorf("the key set server answered %d", resp.StatusCode)
	}
	f.state.set(out)
	if err == nil {
		resp.Body = &limitedBody{ReadCloser: resp.Body, left: JWKSMaxBytes, state: f.state}
	}
	return resp, err
}

// limitedBody ends a key set answer with errJWKSTooLarge once it passes
// JWKSMaxBytes, and records that as the fetch's outcome.
type limitedBody struct {
	io.ReadCloser
	left  int64
	state *fetchState
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, errJWKSTooLarge
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.ReadCloser.Read(p)
	if int64(n) > b.left {
		// Only the bytes within the bound reach the decoder, so no value
		// that ends past it decodes.
		n, b.left = int(b.left), -1
		b.state.set(errJWKSTooLarge)
		return n, errJWKSTooLarge
	}
	b.left -= int64(n)
	return n, err
}

// rolesClaim reads a roles claim: an array of strings, or one string of
// space-separated roles (as OAuth's scope). Anything else grants none.
func rolesClaim(v any) []string {
	switch r := v.(type) {
	case string:
		return strings.Fields(r)
	case []any:
		var out []string
		for _, x := range r {
			if s, ok := x.(string); ok && s != "" {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}
