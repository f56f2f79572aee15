package server_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"

	"github.com/leasegate/leasegate/internal/gwtest"
	"github.com/leasegate/leasegate/internal/server"
)

const (
	debugToken  = "debug-token-0123456789"
	tenantToken = "tenant-token-0123456789"
	adminToken  = "tenant-admin-token-0123456789"
)

// get fetches url with Host host (the URL's own when "") and token as a
// bearer token (none when ""), and returns the status and body.
func get(t *testing.T, url, host, token string) (int, string) {
	t.Helper()
	return getWith(t, url, host, token, nil)
}

// getWith is get with more request headers.
func getWith(t *testing.T, url, host, token string, header http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// The profiler's index lists the profiles; this line is in it.
const pprofIndex = "Types of profiles available"

func TestDebugListenerOnLoopback(t *testing.T) {
	t.Parallel()
	g := gwtest.Start(t, shared, gwtest.Configure(func(c *server.Config) { c.DebugListen = "127.0.0.1:0" }))
	dbg := "http://" + g.Server.DebugAddr()
	if code, body := get(t, dbg+"/debug/pprof/", "", ""); code != http.StatusOK || !strings.Contains(body, pprofIndex) {
		t.Fatalf("GET /debug/pprof/ on the debug listener = %d %.200q; want 200 and the index", code, body)
	}
	if code, body := get(t, dbg+"/debug/pprof/goroutine?debug=1", "", ""); code != http.StatusOK || !strings.Contains(body, "goroutine profile:") {
		t.Errorf("GET /debug/pprof/goroutine?debug=1 = %d %.200q; want 200 and a goroutine profile", code, body)
	}
	if code, _ := get(t, dbg+"/debug/pprof/cmdline", "", ""); code != http.StatusNotFound {
		t.Errorf("GET /debug/pprof/cmdline = %d; want 404 (the command line may hold secrets)", code)
	}
	// A page whose DNS name rebinds to 127.0.0.1 sends its own Host; a
	// page of another site that fetches the URL sends its Origin, or, for
	// an image or a no-cors fetch, only Sec-Fetch-Site. None of them is
	// the local operator.
	for _, tc := range []struct {
		what   string
		host   string
		header http.Header
	}{
		{"Host rebind.example", "rebind.example:6060", nil},
		{"another site's Origin", "", http.Header{"Origin": {"https://evil.example"}}},
		{"Origin null", "", http.Header{"Origin": {"null"}}},
		{"Sec-Fetch-Site cross-site", "", http.Header{"Sec-Fetch-Site": {"cross-site"}}},
	} {
		if code, body := getWith(t, dbg+"/debug/pprof/", tc.host, "", tc.header); code != http.StatusForbidden || !strings.Contains(body, "local operator") {
			t.Errorf("GET /debug/pprof/ with %s = %d %.200q; want 403 saying it serves the local operator only", tc.what, code, body)
		}
	}
	// The operator's own pages (a loopback origin, same-origin) are served.
	if code, _ := getWith(t, dbg+"/debug/pprof/", "", "", http.Header{"Origin": {"http://127.0.0.1:8080"}, "Sec-Fetch-Site": {"same-origin"}}); code != http.StatusOK {
		t.Errorf("GET /debug/pprof/ from a loopback origin = %d; want 200", code)
	}
	if code, body := get(t, g.URL+"/debug/pprof/", "", ""); code == http.StatusOK || strings.Contains(body, pprofIndex) {
		t.Errorf("GET /debug/pprof/ on the API port = %d %.200q; want no profiler there", code, body)
	}
}

func TestDebugListenerOffByDefault(t *testing.T) {
	t.Parallel()
	g := gwtest.Start(t, shared)
	if a := g.Server.DebugAddr(); a != "" {
		t.Errorf("DebugAddr() = %q without DebugListen; want no debug listener", a)
	}
	if code, body := get(t, g.URL+"/debug/pprof/", "", ""); code == http.StatusOK || strings.Contains(body, pprofIndex) {
		t.Errorf("GET /debug/pprof/ on the API port = %d %.200q; want no profiler there", code, body)
	}
}

func TestDebugListenerRemoteNeedsAuth(t *testing.T) {
	t.Parallel()
	cfg := server.DefaultConfig()
	cfg.Clusters = []server.Cluster{{Name: "main", Endpoints: []string{shared.Endpoint()}}}
	cfg.DebugListen = "0.0.0.0:0"
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "without bearer authentication") || !strings.Contains(err.Error(), "0.0.0.0:0") {
		t.Fatalf("Validate() with a non-loopback debug listener and no auth = %v; want a refusal naming the address and the missing authentication", err)
	}
	// Allowing an unauthenticated API does not open the profiler.
	cfg.AllowInsecureRemote = true
	if err := cfg.Validate(); err == nil {
		t.Error("Validate() with --allow-insecure-remote let a non-loopback debug listener start without auth; want it refused")
	}
	cfg.AllowInsecureRemote = false
	cfg.Listen = "127.0.0.1:0"
	if s, err := server.Start(context.Background(), cfg); err == nil {
		_ = s.Shutdown(context.Background())
		t.Fatal("Start with a non-loopback debug listener and no auth succeeded; want it refused")
	}
	cfg.DebugListen = "nonsense"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `"nonsense"`) {
		t.Errorf("Validate() with debug listen %q = %v; want an error naming it", cfg.DebugListen, err)
	}
}

func TestDebugListenerRemoteTakesTokens(t *testing.T) {
	t.Parallel()
	g := gwtest.Start(t, shared, gwtest.Tokens(debugToken+" ops ops operator", tenantToken+" ops app", adminToken+" acme root admin"),
		gwtest.Configure(func(c *server.Config) { c.DebugListen = "0.0.0.0:0" }))
	_, port, err := net.SplitHostPort(g.Server.DebugAddr())
	if err != nil {
		t.Fatal(err)
	}
	dbg := "http://127.0.0.1:" + port
	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a wrong token", "wrong-token-0123456789", http.StatusUnauthorized},
		{"a tenant's token without a role", tenantToken, http.StatusForbidden},
		{"a tenant admin's token", adminToken, http.StatusForbidden},
		{"the operator's token", debugToken, http.StatusOK},
	} {
		code, body := get(t, dbg+"/debug/pprof/", "", tc.token)
		if code != tc.want || (tc.want == http.StatusOK) != strings.Contains(body, pprofIndex) {
			t.Errorf("GET /debug/pprof/ on a non-loopback debug listener with %s = %d %.200q; want %d", tc.name, code, body, tc.want)
		}
	}
	// A non-loopback listener takes any Host: the operator's token is the
	// check.
	if code, _ := get(t, dbg+"/debug/pprof/", "gateway.example:6060", debugToken); code != http.StatusOK {
		t.Errorf("GET /debug/pprof/ with a valid token and Host gateway.example = %d; want 200", code)
	}
	if code, body := get(t, g.URL+"/debug/pprof/", "", debugToken); code == http.StatusOK || strings.Contains(body, pprofIndex) {
		t.Errorf("GET /debug/pprof/ on the API port with a valid token = %d %.200q; want no profiler there", code, body)
	}
}

// TestProfileSecondsAreCapped: no profiler request runs longer than
// MaxProfileSeconds. Every path that takes ?seconds= — the CPU profile,
// the trace and every named profile (as a delta) — refuses a longer,
// malformed or non-positive value with 400 naming the cap, in the query
// or a form body; a value within the cap is served.
func TestProfileSecondsAreCapped(t *testing.T) {
	t.Parallel()
	g := gwtest.Start(t, shared, gwtest.Configure(func(c *server.Config) { c.DebugListen = "127.0.0.1:0" }))
	dbg := "http://" + g.Server.DebugAddr()
	paths := []string{"/debug/pprof/profile", "/debug/pprof/trace"}
	for _, p := range pprof.Profiles() {
		paths = append(paths, "/debug/pprof/"+p.Name())
	}
	over := strconv.Itoa(server.MaxProfileSeconds + 1)
	capMsg := "at most " + strconv.Itoa(server.MaxProfileSeconds)
	for _, path := range paths {
		for _, v := range []string{over, "3600", "9223372036854775807", "0", "-5", "abc", "", "1e9"} {
			code, body := get(t, dbg+path+"?seconds="+url.QueryEscape(v), "", "")
			if code != http.StatusBadRequest || !strings.Contains(body, capMsg) {
				t.Errorf("GET %s?seconds=%s = %d %.200q; want 400 naming the cap (%s)", path, v, code, body, capMsg)
			}
		}
		req, _ := http.NewRequest(http.MethodPost, dbg+path, strings.NewReader("seconds="+over))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("POST %s with seconds=%s in the form = %d; want 400", path, over, resp.StatusCode)
		}
	}
	if code, body := get(t, dbg+"/debug/pprof/trace?seconds=0.01", "", ""); code != http.StatusOK {
		t.Errorf("GET /debug/pprof/trace?seconds=0.01 = %d %.200q; want 200 (within the cap)", code, body)
	}
	if code, body := get(t, dbg+"/debug/pprof/profile?seconds=1.5", "", ""); code != http.StatusBadRequest || !strings.Contains(body, "whole number") {
		t.Errorf("GET /debug/pprof/profile?seconds=1.5 = %d %.200q; want 400 asking for whole seconds (pprof would run 30 s)", code, body)
	}
}
