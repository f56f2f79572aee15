package gateway_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/gateway"
	"github.com/leasegate/leasegate/internal/server"
)

// keySet is the JSON Web Key Set publishing k as kid, with pad bytes of
// padding after the keys (a member the set's readers ignore).
func keySet(t *testing.T, kid string, k *ecdsa.PrivateKey, pad int) []byte {
	t.Helper()
	pt, err := k.PublicKey.Bytes() // 0x04 || X || Y
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	b, err := json.Marshal(map[string]any{
		"keys": []map[string]string{{"kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": kid, "x": enc(pt[1:33]), "y": enc(pt[33:])}},
		"pad":  strings.Repeat("x", pad),
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// offMachine is a dialer for the JWKS fetches that lets them reach
// loopback addresses only. A name in standIns is a host off this machine
// that the test stands up on loopback: a dial to it fails the test (the
// fetch would have sent traffic elsewhere) and is routed to the stand-in,
// so what following it would do shows too. Any other name fails the test
// and is not dialled.
type offMachine struct {
	t        *testing.T
	standIns map[string]string // host → loopback host:port
	mu       sync.Mutex
	dialled  []string
}

func (d *offMachine) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		d.mu.Lock()
		d.dialled = append(d.dialled, addr)
		d.mu.Unlock()
		d.t.Errorf("the JWKS fetch dialled %s, off this machine", addr)
		stand, ok := d.standIns[host]
		if !ok {
			return nil, fmt.Errorf("test dialer: %s is not on loopback", addr)
		}
		addr = stand
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

// transport is an HTTP transport that trusts roots and dials through d.
func (d *offMachine) transport(roots *x509.CertPool) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = d.dial
	tr.Proxy = nil
	if roots != nil {
		tr.TLSClientConfig.RootCAs = roots
	}
	return tr
}

// jwksGatewayVia starts a gateway whose JWKS is url, fetched through tr.
func jwksGatewayVia(t *testing.T, url string, tr http.RoundTripper) *gw {
	t.Helper()
	return startSecureGateway(t, func(c *server.Config) {
		c.Gateway.Auth.JWKSURL = url
		c.Gateway.Auth.JWKSTransport = tr
		c.Gateway.Auth.JWTIssuer = "https://issuer.test"
		c.Gateway.Auth.JWTAudience = "leasegate"
	})
}

// TestJWKSRedirectsKeepTheRule: every hop of a JWKS fetch must meet the
// rule the configured URL meets — https, or http on loopback — and a
// redirect never leaves https for http. A key set reached by any
// redirect that breaks the rule is never fetched, so its keys sign
// nothing, and the refusal names the redirect; redirects that keep the
// rule are followed. The fetches never dial off this machine: a host
// "elsewhere" is a stand-in on loopback that the dialer reports.
func TestJWKSRedirectsKeepTheRule(t *testing.T) {
	t.Parallel()
	good, evil := newECKey(t), newECKey(t)
	// The key set served in the clear "elsewhere": the attacker's key.
	clear := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(keySet(t, "k1", evil, 0))
	}))
	t.Cleanup(clear.Close)
	// The identity provider: /jwks redirects to ?to=, /set serves the
	// good key, /loop redirects to itself.
	idpHandler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/set":
			_, _ = w.Write(keySet(t, "k1", good, 0))
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		default:
			http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
		}
	})
	tlsIdP := httptest.NewTLSServer(idpHandler)
	t.Cleanup(tlsIdP.Close)
	plainIdP := httptest.NewServer(idpHandler)
	t.Cleanup(plainIdP.Close)
	roots := x509.NewCertPool()
	roots.AddCert(tlsIdP.Certificate())
	elsewhere := "keys.example.invalid"
	redirect := func(base, to string) string { return base + "/jwks?to=" + to }

	for _, tc := range []struct {
		what, url string
		accepted  bool   // the good key signs
		refusal   string // in the refusal of the attacker's token
	}{
		{"https to http elsewhere", redirect(tlsIdP.URL, "http://"+elsewhere+"/jwks"), false, "redirected to http://" + elsewhere},
		{"http on loopback to http elsewhere", redirect(plainIdP.URL, "http://"+elsewhere+"/jwks"), false, "redirected to http://" + elsewhere},
		{"https to http on loopback", redirect(tlsIdP.URL, clear.URL+"/jwks"), false, "from https"},
		{"a chain that breaks the rule at its second hop", redirect(tlsIdP.URL, "/jwks?to=http://"+elsewhere+"/jwks"), false, "redirected to http://" + elsewhere},
		{"an endless loop", tlsIdP.URL + "/loop", false, "more than"},
		{"https to https", redirect(tlsIdP.URL, "/set"), true, ""},
		{"http on loopback to https", redirect(plainIdP.URL, tlsIdP.URL+"/set"), true, ""},
	} {
		t.Run(tc.what, func(t *testing.T) {
			t.Parallel()
			d := &offMachine{t: t, standIns: map[string]string{elsewhere: clear.Listener.Addr().String()}}
			g := jwksGatewayVia(t, tc.url, d.transport(roots))
			err := tryAs(t, g, signKID(t, evil, "k1"), "redirect/evil")
			if connect.CodeOf(err) != connect.CodeUnauthenticated {
				t.Errorf("a token of the key set served in the clear: %v; want unauthenticated", err)
			} else if tc.refusal != "" && !strings.Contains(err.Error(), tc.refusal) {
				t.Errorf("the refusal %q does not say why the set was not fetched (%q)", err, tc.refusal)
			}
			err = tryAs(t, g, signKID(t, good, "k1"), "redirect/good")
			if tc.accepted && err != nil {
				t.Errorf("a token of the identity provider's key, reached by a redirect that keeps the rule: %v; want accepted", err)
			}
			if !tc.accepted && connect.CodeOf(err) != connect.CodeUnauthenticated {
				t.Errorf("a token with no key set fetched: %v; want unauthenticated", err)
			}
		})
	}
}

// TestJWKSAnswerIsBounded: a key set answer larger than JWKSMaxBytes is
// refused whether it says its length or not, its keys sign nothing, and
// the refusal says the set was too large; one within the bound is used.
func TestJWKSAnswerIsBounded(t *testing.T) {
	t.Parallel()
	k := newECKey(t)
	base := len(keySet(t, "k1", k, 0))
	for _, tc := range []struct {
		what      string
		size      int
		chunked   bool
		accepted  bool
		wantInErr string
	}{
		{"a set just within the bound", gateway.JWKSMaxBytes, false, true, ""},
		{"a set with its length, past the bound", gateway.JWKSMaxBytes + 1, false, false, "larger than " + strconv.Itoa(gateway.JWKSMaxBytes)},
		{"a chunked set, one byte past the bound", gateway.JWKSMaxBytes + 1, true, false, "larger than " + strconv.Itoa(gateway.JWKSMaxBytes)},
		{"a chunked set of 8 MiB", 8 << 20, true, false, "larger than " + strconv.Itoa(gateway.JWKSMaxBytes)},
	} {
		t.Run(tc.what, func(t *testing.T) {
			t.Parallel()
			body := keySet(t, "k1", k, tc.size-base)
			if len(body) != tc.size {
				t.Fatalf("the key set is %d bytes; want %d", len(body), tc.size)
			}
			idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if !tc.chunked {
					w.Header().Set("Content-Length", strconv.Itoa(len(body)))
					_, _ = w.Write(body)
					return
				}
				for b := body; len(b) > 0; {
					n := min(len(b), 64<<10)
					if _, err := w.Write(b[:n]); err != nil {
						return
					}
					w.(http.Flusher).Flush()
					b = b[n:]
				}
			}))
			t.Cleanup(idp.Close)
			d := &offMachine{t: t}
			g := jwksGatewayVia(t, idp.URL, d.transport(nil))
			err := tryAs(t, g, signKID(t, k, "k1"), "bounded/1")
			switch {
			case tc.accepted && err != nil:
				t.Errorf("a token of a key in a set of %d bytes: %v; want accepted", tc.size, err)
			case !tc.accepted && (connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), tc.wantInErr)):
				t.Errorf("a token of a key in a set of %d bytes: %v; want unauthenticated, saying the set is %s", tc.size, err, tc.wantInErr)
			}
		})
	}
}
