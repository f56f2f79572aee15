package gateway_test

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/client"
	"github.com/leasegate/leasegate/internal/gwtest"
	"github.com/leasegate/leasegate/internal/server"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// errMessage is the message of a REST or Connect JSON error answer.
func errMessage(out map[string]any) string {
	if e, ok := out["error"].(map[string]any); ok {
		m, _ := e["message"].(string)
		return m
	}
	m, _ := out["message"].(string)
	return m
}

// A renew says what became of the lock: released by its holder (whether
// the name is free or another holder has it since, and after a retried
// release), or expired — over Connect and REST alike. A release is never
// reported as an expiry, nor an expiry as a release.
func TestRenewSaysReleasedAfterARelease(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 1)
	g := f.gateway(t, nil, 0)
	cli := f.etcds[0].ClientFor(t)
	ctx := ctxT(t)
	take := func(name string) *v1.Granted {
		t.Helper()
		r, err := g.Client.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: name, TtlMs: 30000}))
		if err != nil || !r.Msg.Acquired {
			t.Fatalf("TryAcquire(%q) = %v, %v", name, r, err)
		}
		return r.Msg.Granted
	}
	release := func(gr *v1.Granted) {
		t.Helper()
		if _, err := g.Client.Release(ctx, connect.NewRequest(&v1.ReleaseRequest{LockId: gr.LockId, FencingToken: gr.FencingToken})); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		end    func(name string, gr *v1.Granted)
		reason string // Connect
		rest   string
		words  string
	}{
		{"released, name free", func(_ string, gr *v1.Granted) { release(gr) }, "LOCK_RELEASED", "released", "the name is free"},
		{"released twice", func(_ string, gr *v1.Granted) { release(gr); release(gr) }, "LOCK_RELEASED", "released", "released"},
		{"released, then taken", func(n string, gr *v1.Granted) { release(gr); take(n) }, "LOCK_RELEASED", "released", "another holder"},
		// A lease that ended without a release is still an expiry.
		{"expired", func(n string, _ *v1.Granted) { revokeHolder(t, g, cli, n) }, "LOCK_EXPIRED", "expired", "expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "renew-" + strings.ReplaceAll(tc.name, " ", "-")
			name = strings.ReplaceAll(name, ",", "")
			gr := take(name)
			tc.end(name, gr)
			_, err := g.Client.Renew(ctx, connect.NewRequest(&v1.RenewRequest{LockId: gr.LockId, FencingToken: gr.FencingToken}))
			if codeOf(err) != connect.CodeFailedPrecondition || reasonOf(err) != tc.reason || !strings.Contains(err.Error(), tc.words) {
				t.Fatalf("Renew (Connect) = %v (reason %q); want failed_precondition, %s, saying %q", err, reasonOf(err), tc.reason, tc.words)
			}
			status, out := postJSON(t, g, "/api/v1/locks/renew", fmt.Sprintf(`{"lockId":%q,"fencingToken":%d,"ttlMs":30000}`, gr.LockId, gr.FencingToken))
			if status != http.StatusConflict || out["reason"] != tc.rest || out["renewed"] != false {
				t.Fatalf("REST renew = %d %v; want 409 {\"renewed\":false,\"reason\":%q}", status, out, tc.rest)
			}
		})
	}
	// The SDK reads a release as ErrReleased, not as a loss.
	sdk := g.SDK(t)
	gr := take("renew-sdk")
	release(gr)
	if _, err := sdk.RenewByID(ctx, gr.LockId, gr.FencingToken); !errors.Is(err, client.ErrReleased) || errors.Is(err, client.ErrLockLost) {
		t.Fatalf("SDK RenewByID after a release = %v; want ErrReleased, not ErrLockLost", err)
	}
}

// Every refusal of a TTL field states the same allowed values, and the
// values it states as allowed are accepted: the REST acquire's ttlMs has
// no default (0 is refused, and no message offers it), the Connect
// fields take 0 as the default (and every message says so).
func TestTTLRefusalsAgree(t *testing.T) {
	t.Parallel()
	g := gwtest.Start(t, shared)
	ctx := ctxT(t)
	const restWant = "want 1000 to 86400000"
	for _, ms := range []int64{-1, 0, 5, 999, 86400001} {
		status, out := postJSON(t, g, "/api/v1/locks/acquire", fmt.Sprintf(`{"name":"ttl-rest","ttlMs":%d}`, ms))
		if msg := errMessage(out); status != http.StatusBadRequest || !strings.HasSuffix(msg, restWant) || strings.Contains(msg, "default") {
			t.Errorf("REST acquire ttlMs %d = %d %q; want 400 ending %q, offering no default", ms, status, msg, restWant)
		}
	}
	if status, out := postJSON(t, g, "/api/v1/locks/acquire", `{"name":"ttl-rest","ttlMs":1000}`); status != http.StatusOK || out["acquired"] != true {
		t.Errorf("REST acquire ttlMs 1000, the allowed minimum = %d %v", status, out)
	}
	const connectWant = "want 0 (default 30s) or 1000 to 86400000"
	for _, ms := range []int64{-1, 5, 999, 86400001} {
		_, err := g.Client.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: "ttl-connect", TtlMs: ms}))
		if codeOf(err) != connect.CodeInvalidArgument || !strings.HasSuffix(err.Error(), connectWant) {
			t.Errorf("TryAcquire ttl_ms %d = %v; want invalid_argument ending %q", ms, err, connectWant)
		}
		_, err = g.Client.OpenSession(ctx, connect.NewRequest(&v1.OpenSessionRequest{TtlMs: ms}))
		if codeOf(err) != connect.CodeInvalidArgument || !strings.HasSuffix(err.Error(), connectWant) {
			t.Errorf("OpenSession ttl_ms %d = %v; want invalid_argument ending %q", ms, err, connectWant)
		}
	}
	if r, err := g.Client.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: "ttl-connect", TtlMs: 0})); err != nil || !r.Msg.Acquired || r.Msg.Granted.TtlMs != 30000 {
		t.Errorf("TryAcquire ttl_ms 0, the default = %v, %v; want a grant with the default 30 s", r, err)
	}
}

// goType matches what a Go type name looks like in a message: a package
// and a type (gateway.restAcquire, *leasegatev1.TryAcquireRequest) or a
// sized Go kind (int64, uint32, float64, []string, map[string]…). A
// protobuf field's declared type ("int64 field ttlMs") is the API's own
// word, from the .proto files.
var goType = regexp.MustCompile(`\*?\b(gateway|leasegatev1|queue|main|server|locks|shard)\.[A-Za-z]|\bu?int(8|16|32|64)\b( [^f]|$)|\bfloat(32|64)\b|\bmap\[|\[\][a-z]`)

// A body that does not decode is refused in the API's words: the field
// and what JSON it takes, or the body and what it must be — never a Go
// type, over REST and over Connect's JSON.
func TestBadBodiesNameNoGoTypes(t *testing.T) {
	t.Parallel()
	g := gwtest.Start(t, shared)
	bodies := []string{`[1]`, `"x"`, `5`, `true`, `null`, `[]`,
		`{"name":5,"ttlMs":1000}`, `{"name":"a","ttlMs":"1000"}`, `{"name":"a","ttlMs":1e40}`, `{"name":"a","ttlMs":1000,"limit":"2"}`,
		`{"name":"a","ttlMs":1000,"clientId":[1]}`, `{"lockId":5,"fencingToken":1}`, `{"lockId":"x","fencingToken":"1"}`, `{"lockId":"x","fencingToken":1.5}`,
		`{"name":"a","ttlMs":{}}`, `{`}
	for _, path := range []string{"/api/v1/locks/acquire", "/api/v1/locks/renew", "/api/v1/locks/release",
		"/leasegate.v1.LockService/TryAcquire", "/leasegate.v1.LockService/Renew", "/leasegate.v1.LockService/OpenSession"} {
		for _, body := range bodies {
			status, out := postJSON(t, g, path, body)
			msg := errMessage(out)
			if status/100 != 4 {
				continue // a body that decodes as something valid here
			}
			if msg == "" || goType.MatchString(msg) {
				t.Errorf("POST %s %s = %d %q; want a message without Go type names", path, body, status, msg)
			}
			if twice := gwtest.SaidTwice(msg); twice != "" {
				t.Errorf("POST %s %s = %q: says %q twice", path, body, msg, twice)
			}
		}
	}
}

// The SDK's errors say each part once: a refusal's kind is not repeated
// by the gateway's message, nor spelled again as its code.
func TestSDKErrorsSayEachPartOnce(t *testing.T) {
	t.Parallel()
	g := gwtest.Start(t, shared, gwtest.Configure(func(c *server.Config) {
		c.Gateway.Policy.NamePrefixes = map[string][]string{"": {"orders/"}}
	}))
	sdk := g.SDK(t)
	ctx := ctxT(t)
	l, err := sdk.TryAcquire(ctx, "orders/1")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{
		"a name the policy refuses": second(sdk.TryAcquire(ctx, "jobs/1")),
		"a malformed lock id":       second(sdk.RenewByID(ctx, "not-an-id", 1)),
		"another lock's token":      second(sdk.RenewByID(ctx, l.ID(), l.Token()+1)),
		"a released lock":           second(sdk.RenewByID(ctx, l.ID(), l.Token())),
		"a name out of form":        second(sdk.TryAcquire(ctx, "")),
	} {
		if err == nil {
			t.Errorf("%s: no error", what)
			continue
		}
		if twice := gwtest.SaidTwice(err.Error()); twice != "" {
			t.Errorf("%s: %q says %q twice", what, err, twice)
		}
		if goType.MatchString(err.Error()) {
			t.Errorf("%s: %q names a Go type", what, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }

// TestExistingOnlyRefusals: an election's TryAcquire without existing_only,
// and existing_only without a request id, are refused naming the field;
// existing_only finds nothing it did not grant, and takes nothing.
func TestExistingOnlyRefusals(t *testing.T) {
	f := startFleet(t, 1)
	g := f.gateway(t, nil, 0)
	ctx := ctxT(t)
	for _, tc := range []struct {
		req   *v1.TryAcquireRequest
		field string
	}{
		{&v1.TryAcquireRequest{Name: "x", TtlMs: 30000, Election: true}, "election"},
		{&v1.TryAcquireRequest{Name: "x", TtlMs: 30000, ExistingOnly: true}, "request_id"},
	} {
		_, err := g.Client.TryAcquire(ctx, connect.NewRequest(tc.req))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tc.field) {
			t.Fatalf("TryAcquire(%v) = %v; want invalid_argument naming %s", tc.req, err, tc.field)
		}
	}
	r, err := g.Client.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: "x", TtlMs: 30000, RequestId: "never-used", ExistingOnly: true}))
	if err != nil || r.Msg.Acquired {
		t.Fatalf("existing_only for a request id nobody used = %v, %v; want not acquired", r, err)
	}
	free, err := g.Client.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: "x", TtlMs: 30000}))
	if err != nil || !free.Msg.Acquired {
		t.Fatalf("TryAcquire after existing_only = %v, %v; want the name free", free, err)
	}
}
