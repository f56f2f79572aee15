package server_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/internal/gwtest"
	"github.com/leasegate/leasegate/internal/server"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/ui"
)

// request is one HTTP request as a web page or a local tool would send it
// to a gateway's port: to addr (host:port), with Host host.
type request struct {
	method, addr, path, host string
	header                   http.Header
	body                     string
}

func (r request) do(t *testing.T) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), r.method, "http://"+r.addr+r.path, strings.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = r.host
	for k, v := range r.header {
		req.Header[k] = v
	}
	if r.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// caller is how a request presents itself: the Host it names (for the
// port it is sent to) and its browser headers.
type caller struct {
	what   string
	host   func(port string) string
	header func(port string) http.Header
	local  bool // the machine's operator, not a web page of another site
}

func loopbackCallers() []caller {
	none := func(string) http.Header { return nil }
	return []caller{
		{"a local tool", func(p string) string { return "127.0.0.1:" + p }, none, true},
		{"a local tool naming localhost", func(p string) string { return "localhost:" + p }, none, true},
		{"the gateway's own page", func(p string) string { return "127.0.0.1:" + p },
			func(p string) http.Header {
				return http.Header{"Origin": {"http://127.0.0.1:" + p}, "Sec-Fetch-Site": {"same-origin"}}
			}, true},
		{"a page served from this machine", func(p string) string { return "localhost:" + p },
			func(string) http.Header {
				return http.Header{"Origin": {"http://localhost:3000"}, "Sec-Fetch-Site": {"same-site"}}
			}, true},
		{"a page whose DNS name rebinds to 127.0.0.1", func(p string) string { return "rebind.example:" + p },
			func(p string) http.Header {
				return http.Header{"Origin": {"http://rebind.example:" + p}, "Sec-Fetch-Site": {"same-origin"}}
			}, false},
		{"a rebound page's image (no Origin)", func(p string) string { return "rebind.example:" + p },
			func(string) http.Header { return http.Header{"Sec-Fetch-Site": {"same-origin"}} }, false},
		{"another site's page", func(p string) string { return "127.0.0.1:" + p },
			func(string) http.Header {
				return http.Header{"Origin": {"https://evil.example"}, "Sec-Fetch-Site": {"cross-site"}}
			}, false},
		{"another site's image (no Origin)", func(p string) string { return "127.0.0.1:" + p },
			func(string) http.Header { return http.Header{"Sec-Fetch-Site": {"cross-site"}} }, false},
		{"a sandboxed frame (Origin null)", func(p string) string { return "localhost:" + p },
			func(string) http.Header { return http.Header{"Origin": {"null"}} }, false},
		{"a page whose origin only starts like a loopback one", func(p string) string { return "127.0.0.1:" + p },
			func(string) http.Header { return http.Header{"Origin": {"http://127.0.0.1.evil.example"}} }, false},
	}
}

// TestLoopbackTrustIsTheLocalOperatorsOnly: without authentication, every
// grant of loopback trust — AdminService (ForceRelease, ListAudit), the
// console's process-wide overview, the loopback debug listener — goes to
// the machine's operator (a loopback peer naming a loopback Host, from no
// other site's page) and to no web page in the operator's browser: not
// through DNS rebinding on a 0.0.0.0 gateway with --allow-insecure-remote,
// not from any origin on a loopback gateway with --cors-origin '*', not by
// an image or no-cors fetch (Sec-Fetch-Site). A refused caller's
// force-release leaves the holder in place.
func TestLoopbackTrustIsTheLocalOperatorsOnly(t *testing.T) {
	t.Parallel()
	for _, gc := range []struct {
		what   string
		adjust func(*server.Config)
	}{
		{"a loopback gateway with --cors-origin '*'", func(c *server.Config) {
			c.Gateway.CORSOrigins = []string{"*"}
			c.DebugListen = "127.0.0.1:0"
		}},
		{"a 0.0.0.0 gateway with --allow-insecure-remote", func(c *server.Config) {
			c.Listen, c.AllowInsecureRemote = "0.0.0.0:0", true
			c.Gateway.CORSOrigins = []string{"http://localhost:3000"} // a local page's
			c.DebugListen = "127.0.0.1:0"
		}},
	} {
		t.Run(gc.what, func(t *testing.T) {
			t.Parallel()
			g := gwtest.Start(t, shared, gwtest.Configure(gc.adjust))
			_, port, _ := net.SplitHostPort(g.Addr)
			api := "127.0.0.1:" + port
			dbg := g.Server.DebugAddr()
			_, dport, _ := net.SplitHostPort(dbg)
			held, err := g.Client.TryAcquire(t.Context(), connect.NewRequest(&v1.TryAcquireRequest{Name: "victim", TtlMs: 60000, ClientId: "holder"}))
			if err != nil || !held.Msg.Acquired {
				t.Fatalf("TryAcquire(victim) = %v, %v", held, err)
			}
			for _, c := range loopbackCallers() {
				hdr := c.header(port)
				code, body := request{http.MethodPost, api, "/leasegate.v1.AdminService/ListAudit", c.host(port), hdr, `{}`}.do(t)
				if c.local && code != http.StatusOK {
					t.Errorf("ListAudit from %s = %d %.300s; want 200 (the local operator is an admin)", c.what, code, body)
				}
				if !c.local && code != http.StatusForbidden {
					t.Errorf("ListAudit from %s = %d %.300s; want 403", c.what, code, body)
				}
				if !c.local {
					code, body = request{http.MethodPost, api, "/leasegate.v1.AdminService/ForceRelease", c.host(port), hdr, `{"name":"victim","reason":"a page asked"}`}.do(t)
					if code != http.StatusForbidden {
						t.Errorf("ForceRelease from %s = %d %.300s; want 403", c.what, code, body)
					}
				}

				code, body = request{http.MethodGet, api, ui.APIPrefix + "overview", c.host(port), hdr, ""}.do(t)
				var o ui.Overview
				switch {
				case c.local && (code != http.StatusOK || json.Unmarshal([]byte(body), &o) != nil || o.Scope != ui.ScopeProcess):
					t.Errorf("overview from %s = %d %.300s; want 200 with scope %q", c.what, code, body, ui.ScopeProcess)
				case !c.local && code == http.StatusOK && (json.Unmarshal([]byte(body), &o) != nil || o.Scope != ui.ScopeTenant):
					t.Errorf("overview from %s = %d %.300s; want a refusal or scope %q", c.what, code, body, ui.ScopeTenant)
				case !c.local && code != http.StatusOK && code != http.StatusForbidden:
					t.Errorf("overview from %s = %d %.300s; want a refusal (403) or scope %q", c.what, code, body, ui.ScopeTenant)
				}

				code, body = request{http.MethodGet, dbg, "/debug/pprof/", c.host(dport), c.header(dport), ""}.do(t)
				if c.local != (code == http.StatusOK) || (!c.local && code != http.StatusForbidden) {
					t.Errorf("debug listener from %s = %d %.200s; want %v", c.what, code, body, map[bool]string{true: "200", false: "403"}[c.local])
				}
			}
			d, err := g.Client.Describe(t.Context(), connect.NewRequest(&v1.DescribeRequest{Name: "victim"}))
			if err != nil || !d.Msg.Held || d.Msg.FencingToken != held.Msg.Granted.FencingToken {
				t.Errorf("after the refused force-releases Describe(victim) = %v, %v; want held by the first holder (token %d)", d, err, held.Msg.Granted.FencingToken)
			}
		})
	}
}

// TestAdminRefusalNamesWhy: a caller refused the loopback admin role is
// told why it is not the local operator.
func TestAdminRefusalNamesWhy(t *testing.T) {
	t.Parallel()
	g := gwtest.Start(t, shared, gwtest.Configure(func(c *server.Config) { c.Gateway.CORSOrigins = []string{"*"} }))
	_, port, _ := net.SplitHostPort(g.Addr)
	for _, tc := range []struct {
		header     http.Header
		want, also string
	}{
		{http.Header{"Origin": {"https://evil.example"}}, "origin", "https://evil.example"},
		{http.Header{"Sec-Fetch-Site": {"cross-site"}}, "Sec-Fetch-Site", "cross-site"},
	} {
		code, body := request{http.MethodPost, g.Addr, "/leasegate.v1.AdminService/ListAudit", "127.0.0.1:" + port, tc.header, `{}`}.do(t)
		if code != http.StatusForbidden || !strings.Contains(body, "local operator") || !strings.Contains(body, tc.want) || !strings.Contains(body, tc.also) {
			t.Errorf("ListAudit with %v = %d %s; want 403 saying it serves the local operator only, naming the %s %s", tc.header, code, body, tc.want, tc.also)
		}
	}
}
