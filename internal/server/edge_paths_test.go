package server_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/leasegate/leasegate/internal/gwtest"
	"github.com/leasegate/leasegate/internal/server"
	"github.com/leasegate/leasegate/internal/telemetry"
	_ "github.com/leasegate/leasegate/proto/leasegate/v1" // registers the services walked
	"github.com/leasegate/leasegate/ui"
)

// portPaths lists every path a gateway's port serves, each with whether
// it answers without credentials: every method of every service of the
// leasegate.v1 package (read from the registered descriptors, so a new
// one is walked too), gRPC health and reflection, the REST API, /healthz,
// /metrics, the console, and paths nothing serves.
func portPaths(t *testing.T) map[string]bool {
	t.Helper()
	paths := map[string]bool{
		"/healthz": true, "/metrics": true,
		ui.Prefix: true, ui.Prefix + "app.js": true, "/ui": true,
		ui.APIPrefix + "overview": false, ui.APIPrefix + "nope": false,
		"/api/v1/locks/acquire": false, "/api/v1/locks/renew": false, "/api/v1/locks/release": false, "/api/v1/nope": false,
		"/": false, "/nope": false, "/debug/pprof/": false, "/metrics/x": false,
	}
	for _, svc := range []string{grpchealth.HealthV1ServiceName, grpcreflect.ReflectV1ServiceName, grpcreflect.ReflectV1AlphaServiceName} {
		paths["/"+svc+"/"] = true
	}
	n := 0
	protoregistry.GlobalFiles.RangeFilesByPackage("leasegate.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				paths["/"+string(sd.FullName())+"/"+string(sd.Methods().Get(j).Name())] = false
				n++
			}
		}
		return true
	})
	if n < 10 {
		t.Fatalf("found %d leasegate.v1 methods in the registry; want every service's", n)
	}
	return paths
}

// TestEveryPathMeetsTheEdge walks every path of the port — the API, the
// console, /healthz and /metrics alike, by every method, preflights
// included — and checks that each meets the same edge: on a loopback
// listener a Host that is not a loopback name is refused (a page that
// rebinds its DNS name to 127.0.0.1 reaches nothing), another site's
// Origin is refused, and every path that is not public wants credentials.
func TestEveryPathMeetsTheEdge(t *testing.T) {
	t.Parallel()
	p, err := telemetry.New(context.Background(), telemetry.Config{Version: "v0.0.0-test", Metrics: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	const token = "edge-token-0123456789"
	g := gwtest.Start(t, shared, gwtest.Tokens(token+" acme alice"), gwtest.Configure(func(c *server.Config) {
		c.Telemetry = p
		c.Gateway.CORSOrigins = []string{"https://console.example"}
	}))
	_, port, _ := net.SplitHostPort(g.Addr)
	local := "127.0.0.1:" + port
	preflight := http.Header{"Origin": {"https://console.example"}, "Access-Control-Request-Method": {"POST"}}

	// The walk's baseline: the metrics are really served on the port.
	if code, body := (request{http.MethodGet, g.Addr, "/metrics", local, nil, ""}).do(t); code != http.StatusOK || !strings.Contains(body, "leasegate_build_info") {
		t.Fatalf("GET /metrics with a loopback Host = %d %.200q; want 200 and the metrics", code, body)
	}
	for path, public := range portPaths(t) {
		for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodOptions} {
			var hdr http.Header
			if method == http.MethodOptions {
				hdr = preflight
			}
			for _, host := range []string{"rebind.example:" + port, "127.0.0.1.evil.example", "localhost.evil.example:" + port} {
				if code, body := (request{method, g.Addr, path, host, hdr, ""}).do(t); code != http.StatusForbidden || !strings.Contains(body, "loopback") {
					t.Errorf("%s %s with Host %q = %d %.200q; want 403 naming the loopback Host rule", method, path, host, code, body)
				}
			}
			if method == http.MethodOptions {
				continue
			}
			if code, body := (request{method, g.Addr, path, local, http.Header{"Origin": {"https://evil.example"}}, ""}).do(t); code != http.StatusForbidden || !strings.Contains(body, "origin") {
				t.Errorf("%s %s from another site's Origin = %d %.200q; want 403 naming the origin rule", method, path, code, body)
			}
			code, body := (request{method, g.Addr, path, local, nil, ""}).do(t)
			if public == (code == http.StatusUnauthorized) {
				t.Errorf("%s %s without credentials = %d %.200q; want public %v", method, path, code, body, public)
			}
		}
	}
}
