package ui_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/leasegate/leasegate/internal/gwtest"
	"github.com/leasegate/leasegate/ui"
)

const token = "console-test-token-0123456789"

func get(t *testing.T, g *gwtest.Gateway, path string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodGet, g.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := g.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// The front end is public and cached only with revalidation; the JSON
// needs the API's credentials.
func TestStaticAndAPIAuth(t *testing.T) {
	g := gwtest.Start(t, shared, gwtest.Tokens(token+" acme ops"))

	resp, body := get(t, g, ui.Prefix, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `<script type="module" src="app.js">`) {
		t.Fatalf("GET %s = %d %.80q; want 200 and the page", ui.Prefix, resp.StatusCode, body)
	}
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy = %q; want it to contain %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe") {
		t.Errorf("Content-Security-Policy = %q allows something unsafe", csp)
	}
	if got := resp.Header.Get("Cache-Control"); got != "no-cache" {
		t.Errorf("Cache-Control = %q; want no-cache", got)
	}
	etag := resp.Header.Get("ETag")
	if etag == "" {
		t.Fatal("no ETag on the page")
	}
	if resp, _ := get(t, g, ui.Prefix, map[string]string{"If-None-Match": etag}); resp.StatusCode != http.StatusNotModified {
		t.Errorf("GET with If-None-Match = %d; want 304", resp.StatusCode)
	}
	if resp, _ := get(t, g, ui.Prefix+"app.js", nil); resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/javascript") {
		t.Errorf("GET app.js = %d %q; want 200 text/javascript", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	noRedirect := *g.HTTP
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if resp, err := noRedirect.Get(g.URL + "/ui"); err != nil || (resp.StatusCode != http.StatusMovedPermanently && resp.StatusCode != http.StatusTemporaryRedirect) || resp.Header.Get("Location") != ui.Prefix {
		t.Errorf("GET /ui = %v %v; want a redirect to %s without credentials", resp, err, ui.Prefix)
	} else {
		resp.Body.Close()
	}
	if resp, _ := get(t, g, ui.Prefix+"nope.js", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET nope.js = %d; want 404", resp.StatusCode)
	}

	if resp, _ := get(t, g, ui.APIPrefix+"overview", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET overview without a token = %d; want 401", resp.StatusCode)
	}
	resp, body = get(t, g, ui.APIPrefix+"overview", map[string]string{"Authorization": "Bearer " + token})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET overview with a token = %d %s; want 200", resp.StatusCode, body)
	}
	if got := resp.Header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("overview Cache-Control = %q; want no-store", got)
	}
	var o ui.Overview
	if err := json.Unmarshal([]byte(body), &o); err != nil {
		t.Fatal(err)
	}
	if id := o.Identity; id.Tenant != "acme" || id.Subject != "ops" || id.Method != "token" || len(id.Roles) != 0 || len(o.Shards) != 1 || o.Shards[0].Name != "main" || o.Metrics {
		t.Errorf("overview = %+v; want identity acme/ops/token, the one shard main, no metrics", o)
	}
	if o.Shards[0].Health != "ok" || o.Shards[0].Breaker != "closed" || o.Shards[0].Held == nil || *o.Shards[0].Held != 0 {
		t.Errorf("shard = %+v; want ok, closed, 0 held", o.Shards[0])
	}
}
