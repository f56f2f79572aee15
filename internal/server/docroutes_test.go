package server_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/leasegate/leasegate/internal/telemetry"
)

// docPath finds the HTTP paths the documentation names: a method and a
// path ("GET /healthz", "POST /api/v1/locks/acquire"), a REST path alone
// ("/api/v1/locks/renew"), and a Connect procedure
// ("leasegate.v1.LockService/TryAcquire").
var docPath = regexp.MustCompile("(?:\\b(GET|POST|PUT|DELETE) )?(/api/v1/[A-Za-z0-9_{}./-]*|/(?:healthz|metrics|ui/[A-Za-z0-9_{}./-]*)|/?leasegate\\.v1\\.[A-Za-z]+Service/[A-Za-z]+)")

// Every HTTP path the repository's documentation names is one the gateway
// serves: a request to it with the documented method (POST for the REST
// API and Connect, GET otherwise) is never a 404. A placeholder
// ({name}) stands for any value, and a path ending in "/" or "*" for the
// paths under it, one of which must be served.
func TestEveryDocumentedPathIsARoute(t *testing.T) {
	t.Parallel()
	p, err := telemetry.New(context.Background(), telemetry.Config{Version: "v0.0.0-test", Metrics: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	srv := startGateway(t, p, nil)

	files, _ := filepath.Glob("../../docs/*.md")
	files = append(files, "../../README.md")
	found := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range docPath.FindAllStringSubmatch(string(raw), -1) {
			method, path := m[1], strings.TrimRight(m[2], ".,:;)")
			if !strings.HasPrefix(path, "/") {
				path = "/" + path
			}
			if strings.HasSuffix(path, "/") || path == "/api/v1" {
				continue // a prefix, as in "the REST API under /api/v1/"
			}
			if method == "" {
				method = http.MethodGet
				if strings.HasPrefix(path, "/api/v1/") || strings.Contains(path, ".v1.") {
					method = http.MethodPost
				}
			}
			path = regexp.MustCompile(`\{[^}]*\}`).ReplaceAllString(path, "x")
			found++
			req, _ := http.NewRequest(method, srv.URL()+path, bytes.NewReader([]byte("{}")))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s %s (named in %s): %v", method, path, filepath.Base(f), err)
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
				t.Errorf("%s names %s %s; the gateway answers %d: it is not a route", filepath.Base(f), method, path, resp.StatusCode)
			}
		}
	}
	if found < 10 {
		t.Fatalf("found %d documented paths; the pattern no longer matches the documentation", found)
	}
}
