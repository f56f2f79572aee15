package main

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/gwtest"
)

const (
	tokenAcme  = "token-of-acme-0123456789"
	tokenAcme2 = "second-token-of-acme-0123456789"
	tokenOther = "token-of-other-0123456789"
)

func startTokenGateway(t *testing.T) *gateway {
	t.Helper()
	return gwtest.Start(t, shared, gwtest.Tokens(tokenAcme+" acme ops", tokenAcme2+" acme ops", tokenOther+" other ops"))
}

// writeFile writes content to a new file in t's directory.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// wantFail runs leasectl and checks its exit status and that stderr
// contains every one of want.
func wantFail(t *testing.T, env []string, code int, want []string, args ...string) {
	t.Helper()
	r := run(t, env, args...)
	if r.code != code {
		t.Errorf("leasectl %v exited %d (stderr %q); want %d", args, r.code, r.stderr, code)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("leasectl %v: stderr %q; want it to say %q", args, r.stderr, w)
		}
	}
	if twice := gwtest.SaidTwice(r.stderr); twice != "" {
		t.Errorf("leasectl %v: stderr %q says %q twice in a row", args, r.stderr, twice)
	}
}

func TestBearerTokenCredentials(t *testing.T) {
	t.Parallel()
	g := startTokenGateway(t)
	ep := []string{"--endpoint", g.URL, "-o", "json"}
	file := writeFile(t, "token", "\n  "+tokenAcme+"  \n")

	for name, tc := range map[string]struct {
		env  []string
		args []string
	}{
		"--token":              {nil, []string{"--token", tokenAcme}},
		"--token-file":         {nil, []string{"--token-file", file}},
		"LEASEGATE_TOKEN":      {[]string{"LEASEGATE_TOKEN=" + tokenAcme}, nil},
		"LEASEGATE_TOKEN_FILE": {[]string{"LEASEGATE_TOKEN_FILE=" + file}, nil},
		"flag over env":        {[]string{"LEASEGATE_TOKEN=not-a-valid-token-here"}, []string{"--token-file", file}},
	} {
		args := append(append(append([]string{}, ep...), tc.args...), "acquire", "bearer-"+strings.ToLower(name), "--ttl", "5s", "-q")
		r := run(t, tc.env, args...)
		if r.code != 0 {
			t.Errorf("%s: acquire exited %d: %s", name, r.code, r.stderr)
			continue
		}
		got := decode(t, r.stdout)
		rel := run(t, tc.env, append(append(append([]string{}, ep...), tc.args...), "release", got["lockId"].(string), fmtToken(got["fencingToken"]))...)
		if rel.code != 0 || decode(t, rel.stdout)["released"] != true {
			t.Errorf("%s: release exited %d, printed %q: %s", name, rel.code, rel.stdout, rel.stderr)
		}
	}

	wantFail(t, nil, exitError, []string{"the gateway requires authentication: pass --token, --token-file or LEASEGATE_TOKEN"},
		append(ep, "try", "x")...)
	wantFail(t, nil, exitError, []string{"the gateway requires authentication"}, append(ep, "acquire", "x", "--wait", "30s")...)
	wantFail(t, nil, exitError, []string{"refused the bearer token from --token"}, append(ep, "--token", "not-a-valid-token-here", "try", "x")...)
	wantFail(t, nil, exitUsage, []string{"--token and --token-file"}, append(ep, "--token", tokenAcme, "--token-file", file, "try", "x")...)
	wantFail(t, nil, exitUsage, []string{"is empty"}, append(ep, "--token-file", writeFile(t, "empty", " \n"), "try", "x")...)
	wantFail(t, nil, exitUsage, []string{"--token-file", "no such file"}, append(ep, "--token-file", file+".missing", "try", "x")...)
	r := run(t, nil, append(ep, "--token", "not-a-valid-token-here", "try", "x")...)
	if strings.Contains(r.stderr, "not-a-valid-token-here") {
		t.Errorf("the error echoes the token: %q", r.stderr)
	}

	// Another tenant's token may not release acme's lock: explained.
	got := decode(t, runOK(t, append(ep, "--token", tokenAcme, "try", "denied")...))
	wantFail(t, nil, exitRefused, []string{"permission denied:", "belong to the tenant"},
		append(ep, "--token", tokenOther, "release", got["lockId"].(string), fmtToken(got["fencingToken"]))...)
}

// TestTokenFileIsReadForEveryCall rotates the token file while leasectl
// run holds the lock: the release at the end is sent with the file's new
// content.
func TestTokenFileIsReadForEveryCall(t *testing.T) {
	t.Parallel()
	g := startTokenGateway(t)
	file := writeFile(t, "token", tokenAcme+"\n")
	ep := []string{"--endpoint", g.URL, "--token-file", file}
	for _, tc := range []struct {
		next, want string
	}{
		{tokenAcme2, ""},                     // the same tenant: released
		{tokenOther, "belong to the tenant"}, // another tenant: refused, explained
	} {
		if err := os.WriteFile(file, []byte(tokenAcme+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		r := run(t, []string{"NEXT=" + tc.next, "FILE=" + file},
			append(ep, "run", "--lock", "rotate", "-q", "--", "sh", "-c", `printf '%s\n' "$NEXT" > "$FILE"`)...)
		if r.code != 0 {
			t.Fatalf("run exited %d: %s", r.code, r.stderr)
		}
		if tc.want == "" && r.stderr != "" {
			t.Errorf("rotation to a token of the same tenant: stderr %q; want the release to succeed quietly", r.stderr)
		}
		if tc.want != "" && !(strings.Contains(r.stderr, "release lock") && strings.Contains(r.stderr, tc.want)) {
			t.Errorf("rotation to another tenant's token: stderr %q; want the release refused with %q", r.stderr, tc.want)
		}
	}
}

func TestJWTCredentials(t *testing.T) {
	t.Parallel()
	iss := gwtest.NewJWTIssuer(t)
	g := gwtest.Start(t, shared, gwtest.JWTAuth(iss))
	ep := []string{"--endpoint", g.URL, "-o", "json"}
	file := writeFile(t, "jwt", iss.Sign(t, "acme", "svc", time.Hour)+"\n")
	got := decode(t, runOK(t, append(ep, "--token-file", file, "try", "jwt")...))
	runOK(t, append(ep, "--token-file", file, "release", got["lockId"].(string), fmtToken(got["fencingToken"]))...)
	expired := iss.Sign(t, "acme", "svc", -time.Hour)
	wantFail(t, []string{"LEASEGATE_TOKEN=" + expired}, exitError, []string{"refused the bearer token from --token (or LEASEGATE_TOKEN)", "jwt"}, append(ep, "try", "jwt")...)
}

func TestMutualTLSCredentials(t *testing.T) {
	t.Parallel()
	pki := gwtest.NewPKI(t)
	g := gwtest.Start(t, shared, gwtest.TLS(pki, true))
	cert, key := pki.ClientCert(t, "acme", "ops")
	ep := []string{"--endpoint", g.URL, "-o", "json"}
	tlsFlags := []string{"--cacert", pki.CAFile, "--cert", cert, "--key", key}
	for _, proto := range []string{"connect", "grpc"} {
		got := decode(t, runOK(t, append(append(ep, tlsFlags...), "--protocol", proto, "acquire", "mtls-"+proto, "-q")...))
		runOK(t, append(append(ep, tlsFlags...), "release", got["lockId"].(string), fmtToken(got["fencingToken"]))...)
	}
	env := []string{"LEASEGATE_CACERT=" + pki.CAFile, "LEASEGATE_CERT=" + cert, "LEASEGATE_KEY=" + key, "LEASEGATE_ENDPOINT=" + g.URL}
	if r := run(t, env, "try", "mtls-env"); r.code != 0 {
		t.Errorf("try with LEASEGATE_CACERT, LEASEGATE_CERT and LEASEGATE_KEY exited %d: %s", r.code, r.stderr)
	}

	other := gwtest.NewPKI(t)
	foreignCert, foreignKey := other.ClientCert(t, "acme", "ops")
	wantFail(t, nil, exitError, []string{"requires a client certificate: --cert and --key"}, append(ep, "--cacert", pki.CAFile, "try", "x")...)
	wantFail(t, nil, exitError, []string{"requires a client certificate"}, append(ep, "--cacert", pki.CAFile, "acquire", "x")...)
	wantFail(t, nil, exitError, []string{"pass --cacert"}, append(ep, "--cert", cert, "--key", key, "try", "x")...)
	wantFail(t, nil, exitError, []string{"refused the client certificate " + foreignCert}, append(ep, "--cacert", pki.CAFile, "--cert", foreignCert, "--key", foreignKey, "try", "x")...)
	wantFail(t, nil, exitUsage, []string{"--cert and --key"}, append(ep, "--cacert", pki.CAFile, "--cert", cert, "try", "x")...)
	wantFail(t, nil, exitUsage, []string{"need https:// endpoints"}, "--endpoint", "http://127.0.0.1:7070", "--cacert", pki.CAFile, "try", "x")
	wantFail(t, nil, exitUsage, []string{"holds no PEM certificates"}, append(ep, "--cacert", key, "try", "x")...)
}

// fmtToken prints a fencing token decoded from JSON as leasectl takes it.
func fmtToken(v any) string {
	f, _ := v.(float64)
	return strconv.FormatInt(int64(f), 10)
}

// TestCertificateAskedThenDropped covers a gateway that requires a client
// certificate and closes the connection before its alert reaches
// leasectl (TLS 1.3 finishes the client's handshake first): the call
// fails as a broken connection, and the hint still names --cert and --key.
func TestCertificateAskedThenDropped(t *testing.T) {
	t.Parallel()
	pki := gwtest.NewPKI(t)
	pair, err := tls.LoadX509KeyPair(pki.ServerCert, pki.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	url := dropAfterHandshake(t, &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS13})
	wantFail(t, nil, exitError, []string{"asked for a client certificate", "requires a client certificate: --cert and --key"},
		"--endpoint", url, "--cacert", pki.CAFile, "try", "x")

	// A gateway that never asks for a certificate and drops the connection
	// gets no such hint: the evidence is the request, not the failure.
	plain := dropAfterHandshake(t, &tls.Config{Certificates: []tls.Certificate{pair}})
	r := run(t, nil, "--endpoint", plain, "--cacert", pki.CAFile, "try", "x")
	if r.code == 0 || strings.Contains(r.stderr, "client certificate") {
		t.Errorf("leasectl against a gateway that drops connections without asking for a certificate: exit %d, stderr %q; want a failure that does not blame a missing certificate", r.code, r.stderr)
	}
}

// dropAfterHandshake serves TLS with cfg on loopback: each connection
// completes its handshake and is then reset, without an alert. It
// returns the listener's https URL.
func dropAfterHandshake(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			raw := c.(*tls.Conn).NetConn()
			raw.(*net.TCPConn).SetLinger(0)
			raw.Close()
		}
	}()
	return "https://" + ln.Addr().String()
}
