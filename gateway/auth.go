package gateway

import (
	"context"
	"crypto"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Identity is who a call comes from, as established by authentication.
type Identity struct {
	// Tenant owns the caller's locks; each tenant's keys live under their
	// own etcd prefix. "" is the single tenant of an unauthenticated server.
	Tenant string
	// Subject names the caller within its tenant (certificate CN, token or
	// JWT subject); rate limits per client key on it.
	Subject string
	// Method says how the caller proved it: "mtls", "token", "jwt" or "none".
	Method string
}

// Authentication errors; the gateway answers unauthenticated (401) for them.
var (
	// ErrUnauthenticated reports a call without valid credentials.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrForbidden reports a call whose identity may not touch the lock.
	ErrForbidden = errors.New("permission denied")
)

// owner is what binds a waiter to its caller within the tenant: how the
// caller proved itself and as whom.
func (id Identity) owner() string { return id.Method + "/" + id.Subject }

type identityKey struct{}

// WithIdentity returns ctx carrying id.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// IdentityFrom returns the caller's identity, or an authentication error
// when the call carries none.
func IdentityFrom(ctx context.Context) (Identity, error) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	if !ok {
		return Identity{}, fmt.Errorf("%w: no credentials", ErrUnauthenticated)
	}
	return id, nil
}

// Authenticator establishes identities from requests.
type Authenticator struct {
	tokens   map[[32]byte]Identity // by SHA-256 of the token
	jwt      *jwtVerifier
	mtls     bool
	required bool
}

// AuthConfig configures authentication. With nothing configured every call
// is the single tenant "" (allowed only on loopback; see Config).
type AuthConfig struct {
	// TokensFile holds static bearer tokens, one per line: "TOKEN TENANT
	// [SUBJECT]"; blank lines and lines starting with # are ignored.
	TokensFile string
	// JWTKeysFile holds PEM public keys (RSA, ECDSA or Ed25519) that may
	// sign bearer JWTs. Setting it enables JWT authentication.
	JWTKeysFile string
	// JWTIssuer and JWTAudience must match the token's iss and aud.
	JWTIssuer, JWTAudience string
	// JWTTenantClaim names the claim that carries the tenant. Default "tenant".
	JWTTenantClaim string
	// MTLS takes identities from verified client certificates: tenant from
	// the subject's first Organization (O), subject from its Common Name.
	MTLS bool
}

// Enabled reports whether any authentication is configured.
func (c AuthConfig) Enabled() bool {
	return c.TokensFile != "" || c.JWTKeysFile != "" || c.MTLS
}

// NewAuthenticator loads the configured credentials.
func NewAuthenticator(c AuthConfig) (*Authenticator, error) {
	a := &Authenticator{mtls: c.MTLS, required: c.Enabled()}
	if c.TokensFile != "" {
		toks, err := loadTokens(c.TokensFile)
		if err != nil {
			return nil, err
		}
		a.tokens = toks
	}
	if c.JWTKeysFile != "" {
		v, err := newJWTVerifier(c)
		if err != nil {
			return nil, err
		}
		a.jwt = v
	}
	return a, nil
}

func loadTokens(path string) (map[[32]byte]Identity, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth tokens file: %w", err)
	}
	out := map[[32]byte]Identity{}
	for i, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 || len(f) > 3 {
			return nil, fmt.Errorf("auth tokens file %s line %d: want TOKEN TENANT [SUBJECT]", path, i+1)
		}
		if len(f[0]) < 16 {
			return nil, fmt.Errorf("auth tokens file %s line %d: token is shorter than 16 characters", path, i+1)
		}
		if err := ValidateTenant(f[1]); err != nil {
			return nil, fmt.Errorf("auth tokens file %s line %d: %w", path, i+1, err)
		}
		id := Identity{Tenant: f[1], Subject: f[1], Method: "token"}
		if len(f) == 3 {
			id.Subject = f[2]
		}
		out[sha256.Sum256([]byte(f[0]))] = id
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("auth tokens file %s holds no tokens", path)
	}
	return out, nil
}

// ValidateTenant checks a tenant name: 1 to 64 of [a-z0-9-_.].
func ValidateTenant(t string) error {
	if t == "" || len(t) > 64 {
		return fmt.Errorf("tenant %q: want 1 to 64 characters", t)
	}
	for _, c := range t {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("tenant %q: allowed characters are a-z, 0-9, '-', '_' and '.'", t)
		}
	}
	return nil
}

func (a *Authenticator) authenticate(r *http.Request) (Identity, error) {
	if !a.required {
		return Identity{Method: "none"}, nil
	}
	if len(r.Header.Values("Authorization")) > 1 {
		// A proxy in front may read another one than this gateway would.
		return Identity{}, fmt.Errorf("%w: the request has several Authorization headers; send one", ErrUnauthenticated)
	}
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, cred, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || cred == "" {
			return Identity{}, fmt.Errorf("%w: the Authorization header must be \"Bearer <token>\"", ErrUnauthenticated)
		}
		if a.tokens != nil {
			sum := sha256.Sum256([]byte(cred))
			for k, id := range a.tokens {
				if subtle.ConstantTimeCompare(k[:], sum[:]) == 1 {
					return id, nil
				}
			}
		}
		if a.jwt != nil && strings.Count(cred, ".") == 2 {
			return a.jwt.verify(cred)
		}
		return Identity{}, fmt.Errorf("%w: the bearer token is not valid", ErrUnauthenticated)
	}
	if a.mtls && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		cert := r.TLS.VerifiedChains[0][0]
		if len(cert.Subject.Organization) == 0 {
			return Identity{}, fmt.Errorf("%w: the client certificate has no Organization (O) naming its tenant", ErrUnauthenticated)
		}
		t := cert.Subject.Organization[0]
		if err := ValidateTenant(t); err != nil {
			return Identity{}, fmt.Errorf("%w: client certificate: %v", ErrUnauthenticated, err)
		}
		return Identity{Tenant: t, Subject: cert.Subject.CommonName, Method: "mtls"}, nil
	}
	return Identity{}, fmt.Errorf("%w: send a bearer token or a client certificate", ErrUnauthenticated)
}

// jwtVerifier checks signature, issuer, audience and expiry.
type jwtVerifier struct {
	keys   []crypto.PublicKey
	parser *jwt.Parser
	claim  string
}

func newJWTVerifier(c AuthConfig) (*jwtVerifier, error) {
	raw, err := os.ReadFile(c.JWTKeysFile)
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
			return nil, fmt.Errorf("jwt keys file %s: %w", c.JWTKeysFile, err)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("jwt keys file %s holds no PEM public keys", c.JWTKeysFile)
	}
	if c.JWTIssuer == "" || c.JWTAudience == "" {
		return nil, errors.New("jwt: both issuer and audience must be configured")
	}
	claim := c.JWTTenantClaim
	if claim == "" {
		claim = "tenant"
	}
	p := jwt.NewParser(
		jwt.WithValidMethods([]string{"RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"}),
		jwt.WithIssuer(c.JWTIssuer), jwt.WithAudience(c.JWTAudience),
		jwt.WithExpirationRequired(), jwt.WithLeeway(30*time.Second),
	)
	return &jwtVerifier{keys: keys, parser: p, claim: claim}, nil
}

func (v *jwtVerifier) verify(raw string) (Identity, error) {
	var last error
	for _, k := range v.keys {
		claims := jwt.MapClaims{}
		_, err := v.parser.ParseWithClaims(raw, claims, func(*jwt.Token) (any, error) { return k, nil })
		if err != nil {
			last = err
			continue
		}
		tenant, _ := claims[v.claim].(string)
		if err := ValidateTenant(tenant); err != nil {
			return Identity{}, fmt.Errorf("%w: jwt claim %q: %v", ErrUnauthenticated, v.claim, err)
		}
		sub, _ := claims.GetSubject()
		return Identity{Tenant: tenant, Subject: sub, Method: "jwt"}, nil
	}
	// The parser's message says what failed (expired, wrong audience…) and
	// never includes the token.
	return Identity{}, fmt.Errorf("%w: jwt: %v", ErrUnauthenticated, last)
}

// Policy restricts what tenants may lock.
type Policy struct {
	// NamePrefixes, by tenant, limit the names a tenant may use; a tenant
	// with no entry may use any name.
	NamePrefixes map[string][]string
}

// allows reports whether tenant may use name.
func (p Policy) allows(tenant, name string) error {
	prefixes, ok := p.NamePrefixes[tenant]
	if !ok {
		return nil
	}
	if slices.ContainsFunc(prefixes, func(pre string) bool { return strings.HasPrefix(name, pre) }) {
		return nil
	}
	return fmt.Errorf("%w: tenant %q may only lock names starting with %q", ErrForbidden, tenant, prefixes)
}
