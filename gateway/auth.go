package gateway

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/leasegate/leasegate/internal/clock"
	"github.com/leasegate/leasegate/internal/reload"
	"github.com/leasegate/leasegate/locks"
	"github.com/leasegate/leasegate/queue"
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
	// Roles the credentials grant (RoleAdmin, RoleOperator). Without
	// authentication configured, only the local operator has them (localOperator).
	Roles []string

	// notLocal says why an unauthenticated caller is not the local
	// operator; nil for the operator and for authenticated callers.
	notLocal error
}

// Roles a caller's credentials may grant: a tokens-file line's ROLES, a
// JWT's roles claim, a client certificate's Organizational Units.
const (
	// RoleAdmin lets a caller use AdminService within its tenant.
	RoleAdmin = "admin"
	// RoleOperator makes a caller the process's operator, whatever its
	// tenant: it sees the figures of every tenant the process serves (the
	// console's overview) and may profile the process (the debug
	// listener). It grants nothing within a tenant: a tenant's admin is
	// not an operator, nor an operator a tenant's admin.
	RoleOperator = "operator"
)

// HasRole reports whether the identity's credentials grant role.
func (id Identity) HasRole(role string) bool { return slices.Contains(id.Roles, role) }

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

// Authenticator establishes identities from requests. Its tokens file and
// JWT keys file are read again when they change (see internal/reload); its
// JWKS is refreshed in the background until Close.
type Authenticator struct {
	tokens   *reload.Value[map[[32]byte]Identity] // by SHA-256 of the token; nil without a tokens file
	jwt      *jwtVerifier
	mtls     bool
	required bool
}

// AuthConfig configures authentication. With nothing configured every call
// is the single tenant "" (allowed only on loopback; see Config).
type AuthConfig struct {
	// TokensFile holds static bearer tokens, one per line: "TOKEN TENANT
	// [SUBJECT [ROLES]]", ROLES a comma-separated list (e.g. "admin"); blank
	// lines and lines starting with # are ignored. It is read again when it
	// changes; a file that does not parse leaves the tokens in force.
	TokensFile string
	// JWTKeysFile holds PEM public keys (RSA, ECDSA or Ed25519) that may
	// sign bearer JWTs. Setting it enables JWT authentication. It is read
	// again when it changes, like TokensFile.
	JWTKeysFile string
	// JWKSURL is a JSON Web Key Set (RFC 7517) of keys that may sign bearer
	// JWTs, fetched at start, every JWKSRefresh, and when a token names a key
	// id the set lacks (at most once per 30 s). Setting it enables JWT
	// authentication, alone or beside JWTKeysFile. It and every URL a fetch is
	// redirected to must be https://, or http:// on a loopback address (a
	// redirect never leaves https for http); a key set larger than JWKSMaxBytes
	// is refused.
	JWKSURL string
	// JWKSTransport carries the JWKS fetches: for a proxy, or a private CA's
	// TLS configuration. Nil is http.DefaultTransport. JWKSURL's URL,
	// redirect and size rules hold whatever it is.
	JWKSTransport http.RoundTripper
	// JWKSRefresh is how often the JWKS is fetched again, so removed keys
	// stop being accepted. 0 means 15 minutes; 10 s to 24 h.
	JWKSRefresh time.Duration
	// JWTIssuer and JWTAudience must match the token's iss and aud.
	JWTIssuer, JWTAudience string
	// JWTTenantClaim names the claim that carries the tenant. Default "tenant".
	JWTTenantClaim string
	// JWTRolesClaim names the claim that carries the caller's roles: an array
	// of strings, or one string of space-separated roles. Default "roles".
	JWTRolesClaim string
	// MTLS takes identities from verified client certificates: tenant from
	// the subject's first Organization (O), subject from its Common Name,
	// roles from its Organizational Units (OU).
	MTLS bool
	// ReloadInterval is the least time between two looks at the tokens and
	// JWT keys files for a change. 0 means reload.DefaultInterval (1 s).
	ReloadInterval time.Duration
}

// The defaults of AuthConfig's JWKSRefresh, JWTTenantClaim and
// JWTRolesClaim, taken when the field is zero.
const (
	DefaultJWKSRefresh    = 15 * time.Minute
	DefaultJWTTenantClaim = "tenant"
	DefaultJWTRolesClaim  = "roles"
)

// Enabled reports whether any authentication is configured.
func (c AuthConfig) Enabled() bool {
	return c.TokensFile != "" || c.JWTKeysFile != "" || c.JWKSURL != "" || c.MTLS
}

// JWT reports whether bearer JWTs are accepted.
func (c AuthConfig) JWT() bool { return c.JWTKeysFile != "" || c.JWKSURL != "" }

func (c AuthConfig) validate() error {
	if c.JWKSRefresh != 0 && (c.JWKSRefresh < 10*time.Second || c.JWKSRefresh > 24*time.Hour) {
		return fmt.Errorf("gateway: JWKS refresh %s is outside 10s to 24h", c.JWKSRefresh)
	}
	if c.ReloadInterval < 0 {
		return fmt.Errorf("gateway: auth reload interval %s must not be negative", c.ReloadInterval)
	}
	if c.JWKSURL != "" {
		if u, err := url.Parse(c.JWKSURL); err != nil || !jwksURLAllowed(u) {
			return fmt.Errorf("gateway: JWKS URL %q: %s", c.JWKSURL, jwksURLRule)
		}
	}
	if c.JWT() && (c.JWTIssuer == "" || c.JWTAudience == "") {
		return errors.New("gateway: JWT authentication needs both an issuer and an audience (--jwt-issuer, --jwt-audience)")
	}
	return nil
}

// NewAuthenticator loads the configured credentials and, with a JWKS URL,
// fetches the key set (a failed first fetch is logged, not fatal: tokens
// the set would verify are refused until a fetch succeeds). It does not
// block beyond that fetch. Close stops the JWKS refreshes.
func NewAuthenticator(c AuthConfig, log *slog.Logger, clk clock.Clock) (*Authenticator, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	log = cmp.Or(log, slog.New(slog.DiscardHandler))
	a := &Authenticator{mtls: c.MTLS, required: c.Enabled()}
	opt := reload.Options{Interval: c.ReloadInterval, Clock: clk, Log: log}
	var err error
	if c.TokensFile != "" {
		opt.Name = "auth tokens file"
		if a.tokens, err = reload.New([]string{c.TokensFile}, func() (map[[32]byte]Identity, error) { return loadTokens(c.TokensFile) }, opt); err != nil {
			return nil, err
		}
	}
	if c.JWT() {
		if a.jwt, err = newJWTVerifier(c, opt, log); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Reload looks at the tokens and JWT keys files now and loads those that
// changed, whatever ReloadInterval: the hook for a signal or a test. A file
// that does not load leaves its credentials in force; the error says why.
func (a *Authenticator) Reload() error {
	var errs []error
	if a.tokens != nil {
		errs = append(errs, a.tokens.Check())
	}
	if a.jwt != nil && a.jwt.files != nil {
		errs = append(errs, a.jwt.files.Check())
	}
	return errors.Join(errs...)
}

// Close stops the JWKS refreshes. It does not block.
func (a *Authenticator) Close() {
	if a.jwt != nil {
		a.jwt.close()
	}
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
		if len(f) < 2 || len(f) > 4 {
			return nil, fmt.Errorf("auth tokens file %s line %d: want TOKEN TENANT [SUBJECT [ROLES]]", path, i+1)
		}
		if len(f[0]) < 16 {
			return nil, fmt.Errorf("auth tokens file %s line %d: token is shorter than 16 characters", path, i+1)
		}
		if err := ValidateTenant(f[1]); err != nil {
			return nil, fmt.Errorf("auth tokens file %s line %d: %w", path, i+1, err)
		}
		id := Identity{Tenant: f[1], Subject: f[1], Method: "token"}
		if len(f) >= 3 {
			id.Subject = f[2]
		}
		if len(f) == 4 {
			for _, r := range strings.Split(f[3], ",") {
				if r == "" {
					return nil, fmt.Errorf("auth tokens file %s line %d: empty role in %q", path, i+1, f[3])
				}
				id.Roles = append(id.Roles, r)
			}
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
			for k, id := range a.tokens.Get() {
				if subtle.ConstantTimeCompare(k[:], sum[:]) == 1 {
					return id, nil
				}
			}
		}
		if a.jwt != nil && strings.Count(cred, ".") == 2 {
			return a.jwt.verify(r.Context(), cred)
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
		return Identity{Tenant: t, Subject: cert.Subject.CommonName, Method: "mtls", Roles: slices.Clone(cert.Subject.OrganizationalUnit)}, nil
	}
	return Identity{}, fmt.Errorf("%w: send a bearer token or a client certificate", ErrUnauthenticated)
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

// caller returns the authenticated identity of the call.
func (s *Service) caller(ctx context.Context) (Identity, error) {
	id, err := IdentityFrom(ctx)
	if err != nil && !s.auth.required && errors.Is(err, ErrUnauthenticated) {
		// The service used without the authentication middleware, with no
		// authentication configured: the single unnamed tenant.
		return Identity{Method: "none"}, nil
	}
	return id, err
}

// admit authenticates the caller and charges the call to its acquire rates.
func (s *Service) admit(ctx context.Context) (Identity, error) {
	id, err := s.caller(ctx)
	if err != nil {
		return id, err
	}
	return id, s.lim.acquire(id)
}

// sessionFor decodes a session id and checks it belongs to the caller.
func (s *Service) sessionFor(ctx context.Context, sessionID string) (Identity, SessionID, error) {
	who, err := s.caller(ctx)
	if err != nil {
		return who, SessionID{}, err
	}
	id, err := DecodeSessionID(s.keys, sessionID)
	if err != nil {
		return who, id, fieldOf("session_id", err)
	}
	if id.Tenant != who.Tenant {
		return who, id, fmt.Errorf("%w: the session belongs to another tenant", queue.ErrNotOwner)
	}
	return who, id, nil
}

// ErrUnknownShard reports an id naming a shard this gateway does not know.
var ErrUnknownShard = locks.ErrUnknownShard

// allow checks that the caller's tenant's policy allows name (an
// election's own name for an election), before a call routes it.
func (s *Service) allow(id Identity, name string) error {
	return s.cfg.Policy.allows(id.Tenant, name)
}
