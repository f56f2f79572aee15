package gateway_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/gateway"
	"github.com/leasegate/leasegate/internal/clock"
	"github.com/leasegate/leasegate/internal/gwtest"
	"github.com/leasegate/leasegate/internal/server"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

// wait_timeout_ms is checked in its own unit before any conversion: a huge
// value converted first would overflow and pass the range check, one of
// them becoming "wait forever".
func TestWaitTimeoutOutOfRangeIsRefused(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	holder := tryAcquire(t, g, "x")
	for _, ms := range []int64{9223372036854776, 288230376151711744, 1 << 62, 3600_001} {
		st, err := g.Client.Acquire(ctxT(t), connect.NewRequest(&v1.AcquireRequest{Name: "x", TtlMs: 10000, WaitTimeoutMs: ms}))
		if err == nil {
			for st.Receive() {
				if st.Msg().GetQueued() != nil {
					err = nil
					break
				}
			}
			if err == nil {
				err = st.Err()
			}
			st.Close()
		}
		if codeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("Acquire with wait_timeout_ms %d = %v; want invalid_argument", ms, err)
		}
	}
	release(t, g, holder)
}

// edgeRequest sends one HTTP request to g and returns its status.
func edgeRequest(t *testing.T, g *gw, method, path string, header http.Header, body string) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctxT(t), method, g.URL+path, strings.NewReader(body))
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := g.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// Browsers send text/plain and form bodies across origins without a
// preflight: the REST API takes application/json only. A page from another
// origin is refused outright, and on a loopback listener so is a Host that
// a page could have rebound to 127.0.0.1.
func TestWebPagesCannotDriveALoopbackGateway(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	body := `{"name":"from-a-page","ttlMs":5000}`
	for _, tc := range []struct {
		what   string
		header http.Header
		want   int
	}{
		{"text/plain", http.Header{"Content-Type": {"text/plain"}}, http.StatusUnsupportedMediaType},
		{"a form", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, http.StatusUnsupportedMediaType},
		{"no content type", http.Header{}, http.StatusUnsupportedMediaType},
		{"another origin", http.Header{"Content-Type": {"application/json"}, "Origin": {"https://evil.example"}}, http.StatusForbidden},
		{"a rebound Host", http.Header{"Content-Type": {"application/json"}, "Host": {"evil.example:7070"}}, http.StatusForbidden},
	} {
		req, _ := http.NewRequestWithContext(ctxT(t), http.MethodPost, g.URL+"/api/v1/locks/acquire", strings.NewReader(body))
		for k, v := range tc.header {
			if k == "Host" {
				req.Host = v[0]
				continue
			}
			req.Header[k] = v
		}
		resp, err := g.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("REST acquire with %s = %d; want %d", tc.what, resp.StatusCode, tc.want)
		}
	}
	// Connect calls from another origin are refused too.
	if got := edgeRequest(t, g, http.MethodPost, "/leasegate.v1.LockService/TryAcquire",
		http.Header{"Content-Type": {"application/json"}, "Origin": {"https://evil.example"}}, `{"name":"from-a-page"}`); got != http.StatusForbidden {
		t.Errorf("Connect TryAcquire from another origin = %d; want 403", got)
	}
	if d, err := g.Client.Describe(ctxT(t), connect.NewRequest(&v1.DescribeRequest{Name: "from-a-page"})); err != nil || d.Msg.Held {
		t.Fatalf("after the refused calls: %v, %v; want nothing held", d, err)
	}
}

// An origin named in --cors-origin gets CORS answers, preflights included.
func TestAllowedOriginGetsCORS(t *testing.T) {
	t.Parallel()
	g := startGatewayWith(t, func(c *server.Config) { c.Gateway.CORSOrigins = []string{"https://console.example"} })
	req, _ := http.NewRequestWithContext(ctxT(t), http.MethodOptions, g.URL+"/leasegate.v1.LockService/Describe", nil)
	req.Header.Set("Origin", "https://console.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "connect-protocol-version,content-type")
	resp, err := g.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Access-Control-Allow-Origin") != "https://console.example" {
		t.Fatalf("preflight from an allowed origin: status %d, headers %v", resp.StatusCode, resp.Header)
	}
	if got := edgeRequest(t, g, http.MethodPost, "/leasegate.v1.LockService/Describe",
		http.Header{"Content-Type": {"application/json"}, "Origin": {"https://console.example"}}, `{"name":"x"}`); got != http.StatusOK {
		t.Errorf("Describe from the allowed origin = %d; want 200", got)
	}
}

// A compression the gateway does not speak is bad input (4xx), not a
// missing feature (Connect answers 501).
func TestUnknownCompressionIsBadInput(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	for _, h := range []http.Header{
		{"Content-Type": {"application/json"}, "Content-Encoding": {"br"}},
		{"Content-Type": {"application/proto"}, "Content-Encoding": {"zstd"}},
	} {
		if got := edgeRequest(t, g, http.MethodPost, "/leasegate.v1.LockService/Describe", h, "x"); got != http.StatusBadRequest {
			t.Errorf("Describe with %v = %d; want 400", h, got)
		}
	}
	if got := edgeRequest(t, g, http.MethodPost, "/api/v1/locks/acquire",
		http.Header{"Content-Type": {"application/json"}, "Content-Encoding": {"gzip"}}, "x"); got != http.StatusBadRequest {
		t.Errorf("REST acquire with a gzip body = %d; want 400", got)
	}
}

// slowBody sends its first chunk and then nothing until released.
type slowBody struct {
	first   []byte
	release chan struct{}
}

func (b *slowBody) Read(p []byte) (int, error) {
	if len(b.first) > 0 {
		n := copy(p, b.first)
		b.first = b.first[n:]
		return n, nil
	}
	<-b.release
	return 0, io.EOF
}

// A caller without credentials is refused from its headers: its body —
// here one that never finishes, or a compressed one — is never read, and
// the refusal comes at once.
func TestUnauthenticatedCallsAreRefusedBeforeTheirBody(t *testing.T) {
	t.Parallel()
	g := startSecureGateway(t, nil)
	for _, path := range []string{"/leasegate.v1.LockService/TryAcquire", "/api/v1/locks/acquire"} {
		body := &slowBody{first: bytes.Repeat([]byte{'{'}, 60<<10), release: make(chan struct{})}
		req, _ := http.NewRequestWithContext(ctxT(t), http.MethodPost, g.URL+path, body)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Content-Encoding", "gzip")
		req.ContentLength = -1
		got := make(chan int, 1)
		go func() {
			resp, err := g.HTTP.Do(req)
			if err != nil {
				got <- 0
				return
			}
			// (Closing the answer waits for the request body to finish.)
			got <- resp.StatusCode
			resp.Body.Close()
		}()
		select {
		case code := <-got:
			if code != http.StatusUnauthorized {
				t.Errorf("%s without credentials = %d; want 401", path, code)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s without credentials got no answer while its body was unfinished", path)
		}
		close(body.release)
	}
	// Several Authorization headers are refused: a proxy in front could
	// read another one than the gateway.
	if got := edgeRequest(t, g, http.MethodPost, "/leasegate.v1.LockService/Describe",
		http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer " + tokenA, "Bearer " + tokenB}}, `{"name":"x"}`); got != http.StatusUnauthorized {
		t.Errorf("a call with two Authorization headers = %d; want 401", got)
	}
}

// A forged session id naming another caller's session lease never keeps
// that lease alive: the call is refused (here even with an id re-signed
// with the fleet's own key, as with a stolen key) and nothing renews the
// lease before its ownership is proven — so the victim's session lapses
// on schedule.
func TestForgedSessionIDKeepsNoLeaseAlive(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	ctx := ctxT(t)
	victim, err := g.Client.OpenSession(ctx, connect.NewRequest(&v1.OpenSessionRequest{ClientId: "victim", TtlMs: 3000}))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := etcdClient(t).Get(ctx, server.IDKeysKey(g.Prefix))
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("read the id keys: %v", err)
	}
	keys, err := gateway.ParseIDKeys(resp.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	sid, err := gateway.DecodeSessionID(keys, victim.Msg.SessionId)
	if err != nil {
		t.Fatal(err)
	}
	forged := sid
	forged.Secret[0] ^= 0xff // the attacker knows the lease number, not the secret
	forgedID := gateway.EncodeSessionID(keys, forged)
	lease := clientv3.LeaseID(sid.Leases[0].Lease)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		_, err := g.Client.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: "forged", SessionId: forgedID}))
		if connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Fatalf("TryAcquire on a forged session = %v; want failed_precondition (session lost)", err)
		}
		ttl, err := etcdClient(t).TimeToLive(ctx, lease)
		if err != nil {
			t.Fatal(err)
		}
		if ttl.TTL <= 0 {
			return // the victim's lease lapsed on schedule: nothing kept it alive
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatal("the victim's session lease, renewed by no one but the forger's calls, is still alive after 10s (TTL 3s)")
}

// Every stored thing a tenant can create is capped, and every call that
// touches etcd is charged: sessions count against the key cap, lookups
// against the acquire budget, releases and closes against the renew
// budget; a per-client budget cannot be dodged by rotating client ids.
func TestCapsLeaveNoHoles(t *testing.T) {
	t.Parallel()
	t.Run("sessions count against the key cap", func(t *testing.T) {
		g := startSecureGateway(t, func(c *server.Config) { c.Gateway.Limits.MaxKeysPerTenant = 3 })
		a := as(g, tokenA)
		var err error
		opened := 0
		for i := 0; i < 10 && err == nil; i++ {
			_, err = a.OpenSession(ctxT(t), connect.NewRequest(&v1.OpenSessionRequest{ClientId: "s", TtlMs: 60000}))
			if err == nil {
				opened++
			}
		}
		if connect.CodeOf(err) != connect.CodeResourceExhausted || opened != 3 {
			t.Fatalf("opened %d sessions under a key cap of 3, then %v; want 3 (a session is one key), then resource_exhausted", opened, err)
		}
		if msg := connect.CodeOf(err).String() + ": " + err.Error(); !strings.Contains(msg, `on shard "main"`) || strings.Contains(msg, "@") {
			t.Fatalf("key cap refusal %q; want it to name the tenant and the shard \"main\" apart", msg)
		}
	})
	t.Run("lookups, releases and closes are charged", func(t *testing.T) {
		g := startSecureGateway(t, func(c *server.Config) {
			c.Gateway.Limits.TenantAcquireRate, c.Gateway.Limits.TenantAcquireBurst = 0.001, 1
			c.Gateway.Limits.TenantRenewRate, c.Gateway.Limits.TenantRenewBurst = 0.001, 1
		})
		a := as(g, tokenA)
		ctx := ctxT(t)
		held, err := a.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: "x", TtlMs: 60000}))
		if err != nil {
			t.Fatal(err)
		}
		for what, call := range map[string]func() error{
			"Describe": func() error {
				_, err := a.Describe(ctx, connect.NewRequest(&v1.DescribeRequest{Name: "x"}))
				return err
			},
			"CheckFence": func() error {
				_, err := a.CheckFence(ctx, connect.NewRequest(&v1.CheckFenceRequest{Name: "x", FencingToken: 1}))
				return err
			},
			"ListLocks": func() error {
				_, err := a.ListLocks(ctx, connect.NewRequest(&v1.ListLocksRequest{}))
				return err
			},
			"DescribeQueue": func() error {
				_, err := a.DescribeQueue(ctx, connect.NewRequest(&v1.DescribeQueueRequest{Name: "x"}))
				return err
			},
			"Watch": func() error {
				s, err := a.Watch(ctx, connect.NewRequest(&v1.WatchRequest{}))
				if err != nil {
					return err
				}
				defer s.Close()
				s.Receive()
				return s.Err()
			},
		} {
			if err := call(); connect.CodeOf(err) != connect.CodeResourceExhausted {
				t.Errorf("%s with the acquire budget spent = %v; want resource_exhausted", what, err)
			}
		}
		rel := &v1.ReleaseRequest{LockId: held.Msg.Granted.LockId, FencingToken: held.Msg.Granted.FencingToken}
		if _, err := a.Release(ctx, connect.NewRequest(rel)); err != nil {
			t.Fatalf("first release within the renew burst: %v", err)
		}
		if _, err := a.Release(ctx, connect.NewRequest(rel)); connect.CodeOf(err) != connect.CodeResourceExhausted {
			t.Errorf("Release with the renew budget spent = %v; want resource_exhausted", err)
		}
	})
	t.Run("admin calls are charged", func(t *testing.T) {
		const admin = "token-of-tenant-a-admin-0123456789"
		g := gwtest.Start(t, shared, gwtest.Tokens(admin+" a ops admin"), gwtest.Configure(func(c *server.Config) {
			c.Gateway.Limits.TenantAcquireRate, c.Gateway.Limits.TenantAcquireBurst = 0.001, 1
		}))
		ac := leasegatev1connect.NewAdminServiceClient(g.HTTP, g.URL, gwtest.Bearer(admin))
		ctx := ctxT(t)
		if _, err := ac.ListAudit(ctx, connect.NewRequest(&v1.ListAuditRequest{})); err != nil {
			t.Fatalf("the first admin call within the burst: %v", err)
		}
		if _, err := ac.ListAudit(ctx, connect.NewRequest(&v1.ListAuditRequest{})); connect.CodeOf(err) != connect.CodeResourceExhausted {
			t.Errorf("ListAudit with the acquire budget spent = %v; want resource_exhausted", err)
		}
		if _, err := ac.ForceRelease(ctx, connect.NewRequest(&v1.ForceReleaseRequest{Name: "x", Reason: "test"})); connect.CodeOf(err) != connect.CodeResourceExhausted {
			t.Errorf("ForceRelease with the acquire budget spent = %v; want resource_exhausted", err)
		}
	})
	t.Run("client ids do not multiply a client's budget", func(t *testing.T) {
		// On a clock that stands still no budget refills: the burst is
		// all there is.
		g := startSecureGateway(t, func(c *server.Config) {
			c.Gateway.Limits.ClientAcquireRate, c.Gateway.Limits.ClientAcquireBurst = 1, 2
			c.Gateway.Clock = clock.NewFake(time.Now())
		})
		a := as(g, tokenA)
		granted := 0
		for i := 0; i < 20; i++ {
			_, err := a.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: fmt.Sprintf("rot-%d", i), TtlMs: 60000, ClientId: fmt.Sprintf("id-%d", i)}))
			if err == nil {
				granted++
			}
		}
		if granted != 2 {
			t.Fatalf("%d of 20 acquires granted with rotating client ids under a client budget of 1/s, burst 2; want 2", granted)
		}
	})
}

// An authenticated caller's body must arrive within the body read timeout:
// a body that stops half-way is not waited for.
func TestStalledBodyIsNotWaitedFor(t *testing.T) {
	t.Parallel()
	g := startGatewayWith(t, func(c *server.Config) { c.Gateway.BodyReadTimeout = time.Second })
	for _, path := range []string{"/leasegate.v1.LockService/TryAcquire", "/api/v1/locks/acquire"} {
		body := &slowBody{first: []byte(`{"name":"stalled-body`), release: make(chan struct{})}
		req, _ := http.NewRequestWithContext(ctxT(t), http.MethodPost, g.URL+path, body)
		req.Header.Set("Content-Type", "application/json")
		req.ContentLength = -1
		got := make(chan int, 1)
		go func() {
			resp, err := g.HTTP.Do(req)
			if err != nil {
				got <- 0 // the stream was reset: also an answer
				return
			}
			got <- resp.StatusCode
			resp.Body.Close()
		}()
		select {
		case code := <-got:
			if code == http.StatusOK {
				t.Errorf("%s with a stalled body = 200", path)
			}
		case <-time.After(3 * time.Second):
			// Well under the 10 s default, so a gateway that ignored the
			// configured 1 s timeout would not pass.
			t.Errorf("%s with a body stalled half-way got no answer in 3s (read timeout 1s)", path)
		}
		close(body.release)
	}
}
