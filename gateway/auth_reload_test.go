package gateway_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/golang-jwt/jwt/v5"

	"github.com/leasegate/leasegate/internal/gwtest"
	"github.com/leasegate/leasegate/internal/server"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// replaceFile writes content to path through a rename, as deploy tooling
// and Kubernetes do, so no reader sees half a file.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond until it holds or 10 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling an observable effect; nothing to await
	}
}

// tryAs makes one TryAcquire with bearer token and returns its error.
func tryAs(t *testing.T, g *gw, token, name string) error {
	t.Helper()
	_, err := g.ConnectClient(gwtest.Bearer(token)).TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: name, TtlMs: 5000}))
	return err
}

// TestTokensFileReloads rotates a token in the tokens file of a running
// gateway: the new token is accepted and the removed one refused without a
// restart, and a file that does not parse leaves the tokens in force.
func TestTokensFileReloads(t *testing.T) {
	t.Parallel()
	const reloadEvery = 10 * time.Millisecond
	const (
		oldTok = "old-token-of-tenant-r-0123"
		newTok = "new-token-of-tenant-r-0123"
	)
	path := filepath.Join(t.TempDir(), "tokens")
	replaceFile(t, path, oldTok+" r\n")
	g := gwtest.Start(t, shared, gwtest.Configure(func(c *server.Config) {
		c.Gateway.Auth.TokensFile = path
		c.Gateway.Auth.ReloadInterval = reloadEvery
	}))
	if err := tryAs(t, g, oldTok, "reload/1"); err != nil {
		t.Fatalf("old token before rotation: %v", err)
	}
	if err := tryAs(t, g, newTok, "reload/2"); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("new token before rotation: %v; want unauthenticated", err)
	}

	replaceFile(t, path, "# rotated\n"+newTok+" r\n")
	eventually(t, "new token accepted", func() bool { return tryAs(t, g, newTok, "reload/3") == nil })
	if err := tryAs(t, g, oldTok, "reload/4"); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("removed token after rotation: %v; want unauthenticated", err)
	}

	// A broken file (a token too short) is refused as a whole: the tokens
	// in force stay, and nothing is dropped.
	replaceFile(t, path, "short r\n")
	if err := g.Server.ReloadFiles(); err == nil {
		t.Error("ReloadFiles with a broken tokens file succeeded; want its error")
	}
	if err := tryAs(t, g, newTok, "reload/5"); err != nil {
		t.Errorf("token in force after a bad file replaced the tokens file: %v", err)
	}
}

// jwksServer serves a JSON Web Key Set that a test swaps.
type jwksServer struct {
	mu   sync.Mutex
	keys map[string]*ecdsa.PrivateKey // by kid
	*httptest.Server
}

func newJWKSServer(t *testing.T) *jwksServer {
	s := &jwksServer{keys: map[string]*ecdsa.PrivateKey{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		var set struct {
			Keys []map[string]string `json:"keys"`
		}
		for kid, k := range s.keys {
			pt, err := k.PublicKey.Bytes() // 0x04 || X || Y
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			enc := base64.RawURLEncoding.EncodeToString
			set.Keys = append(set.Keys, map[string]string{"kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": kid,
				"x": enc(pt[1:33]), "y": enc(pt[33:])})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(set)
	}))
	t.Cleanup(s.Close)
	return s
}

// publish makes the set hold exactly keys.
func (s *jwksServer) publish(keys map[string]*ecdsa.PrivateKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = keys
}

func newECKey(t *testing.T) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// signKID signs a valid token for tenant c with k, naming kid.
func signKID(t *testing.T, k *ecdsa.PrivateKey, kid string) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{
		"iss": "https://issuer.test", "aud": "leasegate", "sub": "svc", "tenant": "c", "exp": time.Now().Add(time.Hour).Unix()})
	tok.Header["kid"] = kid
	s, err := tok.SignedString(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func startJWKSGateway(t *testing.T, url string) *gw {
	return startSecureGateway(t, func(c *server.Config) {
		c.Gateway.Auth.JWKSURL = url
		c.Gateway.Auth.JWTIssuer = "https://issuer.test"
		c.Gateway.Auth.JWTAudience = "leasegate"
	})
}

// TestJWKSKeyRotation: the identity provider rotates its signing key; a
// token signed by the new key is accepted without a restart, the retired
// key and a key id nobody published are refused.
func TestJWKSKeyRotation(t *testing.T) {
	t.Parallel()
	k1, k2 := newECKey(t), newECKey(t)
	idp := newJWKSServer(t)
	idp.publish(map[string]*ecdsa.PrivateKey{"k1": k1})
	g := startJWKSGateway(t, idp.URL)
	if err := tryAs(t, g, signKID(t, k1, "k1"), "jwks/1"); err != nil {
		t.Fatalf("token of the published key: %v", err)
	}
	idp.publish(map[string]*ecdsa.PrivateKey{"k2": k2})
	// k2 is an unknown kid: the gateway fetches the set again at once.
	if err := tryAs(t, g, signKID(t, k2, "k2"), "jwks/2"); err != nil {
		t.Fatalf("token of the rotated-in key: %v", err)
	}
	for name, tok := range map[string]string{
		"retired key":    signKID(t, k1, "k1"),
		"unknown kid":    signKID(t, k2, "k9"),
		"k2's kid by k1": signKID(t, k1, "k2"),
	} {
		err := tryAs(t, g, tok, "jwks/3")
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("%s: %v; want unauthenticated", name, err)
		}
	}
}

// TestJWKSServerDown: with the key set's server gone, tokens of keys
// fetched before are still accepted, and a token of a key the gateway does
// not know is refused as unauthenticated — over REST too, with 401 and no
// 5xx — saying the set could not be fetched.
func TestJWKSServerDown(t *testing.T) {
	t.Parallel()
	k1, k2 := newECKey(t), newECKey(t)
	idp := newJWKSServer(t)
	idp.publish(map[string]*ecdsa.PrivateKey{"k1": k1})
	g := startJWKSGateway(t, idp.URL)
	idp.Close()
	if err := tryAs(t, g, signKID(t, k1, "k1"), "down/1"); err != nil {
		t.Fatalf("token of a key fetched before the server went down: %v", err)
	}
	err := tryAs(t, g, signKID(t, k2, "k2"), "down/2")
	if connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), "could not be fetched") {
		t.Fatalf("token of an unknown key with the set's server down: %v; want unauthenticated, saying the set could not be fetched", err)
	}
	req, _ := http.NewRequest(http.MethodPost, g.URL+"/api/v1/locks/acquire", strings.NewReader(`{"name":"down/3","ttlMs":5000}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+signKID(t, k2, "k2"))
	resp, err := g.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("REST call with an unverifiable JWT = %d; want 401", resp.StatusCode)
	}
}

// TestJWTKeysFileReloads replaces the JWT keys file of a running gateway:
// tokens of the new key are accepted, of the removed key refused.
func TestJWTKeysFileReloads(t *testing.T) {
	t.Parallel()
	k1, k2 := newECKey(t), newECKey(t)
	pemOf := func(k *ecdsa.PrivateKey) string {
		der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
		if err != nil {
			t.Fatal(err)
		}
		return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	}
	path := filepath.Join(t.TempDir(), "jwt.pem")
	replaceFile(t, path, pemOf(k1))
	g := startSecureGateway(t, func(c *server.Config) {
		c.Gateway.Auth.JWTKeysFile = path
		c.Gateway.Auth.JWTIssuer = "https://issuer.test"
		c.Gateway.Auth.JWTAudience = "leasegate"
		c.Gateway.Auth.ReloadInterval = 10 * time.Millisecond
	})
	if err := tryAs(t, g, signKID(t, k1, "any"), "keys/1"); err != nil {
		t.Fatalf("token of the key in the file: %v", err)
	}
	replaceFile(t, path, pemOf(k2))
	eventually(t, "token of the new key accepted", func() bool { return tryAs(t, g, signKID(t, k2, "any"), "keys/2") == nil })
	if err := tryAs(t, g, signKID(t, k1, "any"), "keys/3"); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("token of the removed key: %v; want unauthenticated", err)
	}
}
