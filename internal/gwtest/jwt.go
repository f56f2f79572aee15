package gwtest

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/leasegate/leasegate/internal/server"
	"github.com/leasegate/leasegate/internal/testpki"
)

// JWT issuer and audience the gateways of JWTAuth expect.
const (
	JWTIssuerName = "https://issuer.gwtest"
	JWTAudience   = "leasegate"
)

// JWTIssuer signs ES256 tokens a gateway started with JWTAuth accepts.
type JWTIssuer struct {
	// KeysFile is the PEM public key file (the gateway's --jwt-keys).
	KeysFile string

	key *ecdsa.PrivateKey
}

// NewJWTIssuer makes a signing key and writes its public key file in tb's
// temporary directory.
func NewJWTIssuer(tb testing.TB) *JWTIssuer {
	tb.Helper()
	k := testpki.NewKey(tb)
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(tb.TempDir(), "jwt.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
	return &JWTIssuer{KeysFile: path, key: k}
}

// Sign returns a token for tenant and subject that expires after ttl.
func (j *JWTIssuer) Sign(tb testing.TB, tenant, subject string, ttl time.Duration) string {
	tb.Helper()
	return j.SignRoles(tb, tenant, subject, ttl, nil)
}

// SignRoles is Sign with a "roles" claim (omitted when roles is nil).
func (j *JWTIssuer) SignRoles(tb testing.TB, tenant, subject string, ttl time.Duration, roles []string) string {
	tb.Helper()
	claims := jwt.MapClaims{"iss": JWTIssuerName, "aud": JWTAudience, "sub": subject, "tenant": tenant, "exp": time.Now().Add(ttl).Unix()}
	if roles != nil {
		claims["roles"] = roles
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodES256, claims).SignedString(j.key)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// JWTAuth authenticates callers with JWTs of j (issuer JWTIssuerName,
// audience JWTAudience, tenant claim "tenant").
func JWTAuth(j *JWTIssuer) Option {
	return Configure(func(cfg *server.Config) {
		cfg.Gateway.Auth.JWTKeysFile = j.KeysFile
		cfg.Gateway.Auth.JWTIssuer = JWTIssuerName
		cfg.Gateway.Auth.JWTAudience = JWTAudience
	})
}
