package gateway_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/leasegate/leasegate/internal/clock"
	"github.com/leasegate/leasegate/internal/gwtest"
	"github.com/leasegate/leasegate/internal/server"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

const (
	tokenA = "token-of-tenant-a-0123456789"
	tokenB = "token-of-tenant-b-0123456789"
)

// startSecureGateway starts a gateway with static tokens for tenants a and
// b, then applies adjust.
func startSecureGateway(t *testing.T, adjust func(*server.Config)) *gw {
	t.Helper()
	return gwtest.Start(t, shared, gwtest.Tokens("# test tokens", tokenA+" a worker-a", tokenB+" b worker-b"), gwtest.Configure(adjust))
}

// as is a client of g that authenticates with token.
func as(g *gw, token string) leasegatev1connect.LockServiceClient {
	return g.ConnectClient(gwtest.Bearer(token))
}

func TestCrossTenantCallsAreDenied(t *testing.T) {
	t.Parallel()
	g := startSecureGateway(t, nil)
	a, b := as(g, tokenA), as(g, tokenB)
	ctx := ctxT(t)
	held, err := a.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: "orders/42", TtlMs: 10000, ClientId: "a1"}))
	if err != nil || !held.Msg.Acquired {
		t.Fatalf("tenant a TryAcquire = %v, %v", held, err)
	}
	lock := held.Msg.Granted
	sess, err := a.OpenSession(ctx, connect.NewRequest(&v1.OpenSessionRequest{ClientId: "a1", TtlMs: 10000}))
	if err != nil {
		t.Fatal(err)
	}
	// A waiter of tenant a with a known request id.
	stream, err := a.Acquire(ctx, connect.NewRequest(&v1.AcquireRequest{Name: "orders/42", TtlMs: 10000, RequestId: "a-waiter"}))
	if err != nil || !stream.Receive() || stream.Msg().GetQueued().GetPosition() != 1 {
		t.Fatalf("tenant a waiter: %v %v", stream.Msg(), err)
	}
	denied := func(what string, err error) {
		t.Helper()
		if connect.CodeOf(err) != connect.CodePermissionDenied || reasonOf(err) != v1.ErrorReason_NOT_OWNER.String() {
			t.Errorf("tenant b %s with tenant a's id = %v; want permission_denied, NOT_OWNER", what, err)
		}
	}
	_, err = b.Renew(ctx, connect.NewRequest(&v1.RenewRequest{LockId: lock.LockId, FencingToken: lock.FencingToken}))
	denied("Renew", err)
	_, err = b.Release(ctx, connect.NewRequest(&v1.ReleaseRequest{LockId: lock.LockId, FencingToken: lock.FencingToken}))
	denied("Release", err)
	_, err = b.KeepAliveSession(ctx, connect.NewRequest(&v1.KeepAliveSessionRequest{SessionId: sess.Msg.SessionId}))
	denied("KeepAliveSession", err)
	_, err = b.CloseSession(ctx, connect.NewRequest(&v1.CloseSessionRequest{SessionId: sess.Msg.SessionId}))
	denied("CloseSession", err)
	_, err = b.ExtendSession(ctx, connect.NewRequest(&v1.ExtendSessionRequest{SessionId: sess.Msg.SessionId, Shards: []string{"main"}, Replace: true}))
	denied("ExtendSession", err)
	_, err = b.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: "x", SessionId: sess.Msg.SessionId}))
	denied("TryAcquire on a's session", err)
	if hold, err := b.WatchHold(ctx, connect.NewRequest(&v1.WatchHoldRequest{LockId: lock.LockId, FencingToken: lock.FencingToken})); err == nil {
		for hold.Receive() {
		}
		denied("WatchHold", hold.Err())
	} else {
		denied("WatchHold", err)
	}
	// A leader id is a lock id: another tenant proclaims and resigns
	// nothing with it.
	ea, eb := electionClient(g, gwtest.Bearer(tokenA)), electionClient(g, gwtest.Bearer(tokenB))
	el := campaign(t, ea, &v1.CampaignRequest{Name: "leader", Value: []byte("a"), TtlMs: 10000, ClientId: "a1"})
	_, err = eb.Proclaim(ctx, connect.NewRequest(&v1.ProclaimRequest{LeaderId: el.LeaderId, Value: []byte("b")}))
	denied("Proclaim", err)
	_, err = eb.Resign(ctx, connect.NewRequest(&v1.ResignRequest{LeaderId: el.LeaderId}))
	denied("Resign", err)
	if _, err := eb.Leader(ctx, connect.NewRequest(&v1.LeaderRequest{Name: "leader"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("tenant b Leader of a's election = %v; want not_found: nobody leads in b", err)
	}
	for _, path := range []string{"/api/v1/locks/renew", "/api/v1/locks/release"} {
		body := fmt.Sprintf(`{"lockId":%q,"fencingToken":%d}`, lock.LockId, lock.FencingToken)
		req, _ := http.NewRequest(http.MethodPost, g.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tokenB)
		resp, err := g.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("REST %s by tenant b = %d; want 403", path, resp.StatusCode)
		}
	}
	// Tenant b sees nothing of tenant a: the same name is free in its own
	// namespace, a's token is not live for it, and a's request id gives it
	// a place of its own, not a's.
	d, err := b.Describe(ctx, connect.NewRequest(&v1.DescribeRequest{Name: "orders/42"}))
	if err != nil || d.Msg.Held || d.Msg.Waiters != 0 {
		t.Errorf("tenant b Describe = %v, %v; want nothing held", d, err)
	}
	cf, err := b.CheckFence(ctx, connect.NewRequest(&v1.CheckFenceRequest{Name: "orders/42", FencingToken: lock.FencingToken}))
	if err != nil || cf.Msg.Live || cf.Msg.CurrentToken != 0 {
		t.Errorf("tenant b CheckFence = %v, %v; want not live", cf, err)
	}
	if ll, err := b.ListLocks(ctx, connect.NewRequest(&v1.ListLocksRequest{})); err != nil || len(ll.Msg.Locks) != 0 {
		t.Errorf("tenant b ListLocks = %v, %v; want none of a's", ll, err)
	}
	bs, err := b.Acquire(ctx, connect.NewRequest(&v1.AcquireRequest{Name: "orders/42", TtlMs: 10000, RequestId: "a-waiter"}))
	if err != nil {
		t.Fatal(err)
	}
	var bGrant *v1.Granted
	for bs.Receive() {
		bGrant = bs.Msg().GetGranted()
	}
	if bGrant == nil {
		t.Fatalf("tenant b's acquire with a's request id = %v; want its own grant", bs.Err())
	}
	// Nothing of tenant a was disturbed.
	if _, err := a.Renew(ctx, connect.NewRequest(&v1.RenewRequest{LockId: lock.LockId, FencingToken: lock.FencingToken})); err != nil {
		t.Errorf("tenant a Renew after the attempts = %v", err)
	}
	da, err := a.Describe(ctx, connect.NewRequest(&v1.DescribeRequest{Name: "orders/42"}))
	if err != nil || da.Msg.FencingToken != lock.FencingToken || da.Msg.Waiters != 1 {
		t.Errorf("tenant a Describe = %v, %v; want its holder and its waiter", da, err)
	}
	if _, err := a.KeepAliveSession(ctx, connect.NewRequest(&v1.KeepAliveSessionRequest{SessionId: sess.Msg.SessionId})); err != nil {
		t.Errorf("tenant a KeepAliveSession = %v", err)
	}
	if lr, err := ea.Leader(ctx, connect.NewRequest(&v1.LeaderRequest{Name: "leader"})); err != nil || string(lr.Msg.Leader.GetValue()) != "a" || lr.Msg.Leader.GetFencingToken() != el.FencingToken {
		t.Errorf("tenant a Leader after the attempts = %v, %v; want its leader, value a", lr, err)
	}
	stream.Close()
}

func TestUnauthenticatedCallsAreRefused(t *testing.T) {
	t.Parallel()
	g := startSecureGateway(t, nil)
	ctx := ctxT(t)
	for name, c := range map[string]leasegatev1connect.LockServiceClient{"none": g.Client, "wrong": as(g, "not-a-valid-token-at-all")} {
		_, err := c.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: "x", TtlMs: 5000}))
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("%s credentials: TryAcquire = %v; want unauthenticated", name, err)
		}
		s, _ := c.Acquire(ctx, connect.NewRequest(&v1.AcquireRequest{Name: "x", TtlMs: 5000}))
		for s.Receive() {
		}
		if connect.CodeOf(s.Err()) != connect.CodeUnauthenticated {
			t.Errorf("%s credentials: Acquire = %v; want unauthenticated", name, s.Err())
		}
	}
	status, body := postJSON(t, g, "/api/v1/locks/acquire", `{"name":"x","ttlMs":5000}`)
	if status != http.StatusUnauthorized || body["error"] == nil {
		t.Errorf("REST acquire without credentials = %d %v; want 401", status, body)
	}
	hr, err := g.HTTP.Get(g.URL + "/healthz")
	if err != nil || hr.StatusCode != http.StatusOK {
		t.Errorf("/healthz needs no credentials: %v %v", hr, err)
	}
}

func TestTenantNamePolicy(t *testing.T) {
	t.Parallel()
	g := startSecureGateway(t, func(c *server.Config) {
		c.Gateway.Policy.NamePrefixes = map[string][]string{"a": {"orders/"}}
	})
	ctx := ctxT(t)
	_, err := as(g, tokenA).TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: "jobs/1", TtlMs: 5000}))
	if connect.CodeOf(err) != connect.CodePermissionDenied || reasonOf(err) != v1.ErrorReason_PERMISSION_DENIED.String() {
		t.Errorf("tenant a locking jobs/1 = %v; want permission_denied, PERMISSION_DENIED", err)
	}
	if r, err := as(g, tokenA).TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: "orders/1", TtlMs: 5000})); err != nil || !r.Msg.Acquired {
		t.Errorf("tenant a locking orders/1 = %v, %v", r, err)
	}
	if r, err := as(g, tokenB).TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: "jobs/1", TtlMs: 5000})); err != nil || !r.Msg.Acquired {
		t.Errorf("tenant b (no policy) locking jobs/1 = %v, %v", r, err)
	}
}

func TestRateLimitAndQueueCap(t *testing.T) {
	t.Parallel()
	g := startSecureGateway(t, func(c *server.Config) {
		c.Gateway.Limits.TenantAcquireRate = 1
		c.Gateway.Limits.TenantAcquireBurst = 3
		c.Gateway.Limits.MaxWaitersPerName = 2
		c.Gateway.Limits.ClientRenewRate = 1
		c.Gateway.Limits.ClientRenewBurst = 2
		// On a clock that stands still no budget refills between calls.
		c.Gateway.Clock = clock.NewFake(time.Now())
	})
	ctx := ctxT(t)
	a := as(g, tokenA)
	var last error
	for i := 0; i < 4; i++ {
		_, last = a.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: fmt.Sprintf("r%d", i), TtlMs: 5000}))
	}
	if connect.CodeOf(last) != connect.CodeResourceExhausted {
		t.Fatalf("4th acquire in a burst of 3 = %v; want resource_exhausted", last)
	}
	var ce *connect.Error
	errors.As(last, &ce)
	hint := false
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if ri, ok := v.(*errdetails.RetryInfo); ok && ri.RetryDelay.AsDuration() > 0 {
				hint = true
			}
		}
	}
	if !hint {
		t.Errorf("refusal %v carries no RetryInfo", last)
	}
	if reasonOf(last) != v1.ErrorReason_RATE_LIMITED.String() || limitOf(last) != "tenant_acquire_rate" {
		t.Errorf("refusal %v: reason %q, limit %q; want RATE_LIMITED, tenant_acquire_rate", last, reasonOf(last), limitOf(last))
	}
	req, _ := http.NewRequest(http.MethodPost, g.URL+"/api/v1/locks/acquire", strings.NewReader(`{"name":"r9","ttlMs":5000}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tokenA)
	resp, err := g.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("REST over the rate = %d, Retry-After %q; want 429 with a hint", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// Tenant b has its own budget; the name cap allows a holder and one waiter.
	b := as(g, tokenB)
	capped, err := b.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: "capped", TtlMs: 10000}))
	if err != nil {
		t.Fatal(err)
	}
	// Renewals have a per-client budget too: a burst of 2, then refused.
	renew := &v1.RenewRequest{LockId: capped.Msg.Granted.LockId, FencingToken: capped.Msg.Granted.FencingToken}
	for i := 0; i < 2; i++ {
		if _, err := b.Renew(ctx, connect.NewRequest(renew)); err != nil {
			t.Fatalf("renew %d within the burst: %v", i+1, err)
		}
	}
	if _, err := b.Renew(ctx, connect.NewRequest(renew)); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("third renew in a burst of 2 = %v; want resource_exhausted", err)
	}
	w1, _ := b.Acquire(ctx, connect.NewRequest(&v1.AcquireRequest{Name: "capped", TtlMs: 10000}))
	if !w1.Receive() {
		t.Fatalf("first waiter: %v", w1.Err())
	}
	w2, _ := b.Acquire(ctx, connect.NewRequest(&v1.AcquireRequest{Name: "capped", TtlMs: 10000}))
	for w2.Receive() {
	}
	if connect.CodeOf(w2.Err()) != connect.CodeResourceExhausted || reasonOf(w2.Err()) != v1.ErrorReason_QUOTA_EXCEEDED.String() || limitOf(w2.Err()) != "name_waiters" {
		t.Errorf("third key on a name capped at 2 = %v (reason %q, limit %q); want resource_exhausted, QUOTA_EXCEEDED, name_waiters",
			w2.Err(), reasonOf(w2.Err()), limitOf(w2.Err()))
	}
	// (Read etcd itself: Describe is charged to tenant b's acquire rate,
	// spent by now.)
	if n := keysOf(t, etcdClient(t), g.Prefix+"/t/b", "capped"); n != 2 {
		t.Errorf("after the refusal %d keys; want 2 (the holder and the first waiter), the refused waiter gone", n)
	}
	w1.Close()
}

func TestNonLoopbackWithoutAuthRefusesToStart(t *testing.T) {
	t.Parallel()
	cfg := server.DefaultConfig()
	cfg.Listen = "0.0.0.0:0"
	cfg.Clusters = []server.Cluster{{Name: "main", Endpoints: []string{shared.Endpoint()}}}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "without authentication") {
		t.Fatalf("Validate(0.0.0.0 without auth) = %v; want a refusal", err)
	}
	cfg.AllowInsecureRemote = true
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate with AllowInsecureRemote = %v", err)
	}
}

func TestJWTAuthentication(t *testing.T) {
	t.Parallel()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	keys := filepath.Join(t.TempDir(), "jwt.pem")
	os.WriteFile(keys, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600)
	g := startSecureGateway(t, func(c *server.Config) {
		c.Gateway.Auth.JWTKeysFile = keys
		c.Gateway.Auth.JWTIssuer = "https://issuer.test"
		c.Gateway.Auth.JWTAudience = "leasegate"
	})
	sign := func(k *ecdsa.PrivateKey, claims jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodES256, claims).SignedString(k)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	good := jwt.MapClaims{"iss": "https://issuer.test", "aud": "leasegate", "sub": "svc", "tenant": "c", "exp": time.Now().Add(time.Hour).Unix()}
	cases := map[string]struct {
		token string
		ok    bool
	}{
		"valid":        {sign(key, good), true},
		"expired":      {sign(key, with(good, "exp", time.Now().Add(-time.Hour).Unix())), false},
		"wrong aud":    {sign(key, with(good, "aud", "someone-else")), false},
		"wrong issuer": {sign(key, with(good, "iss", "https://evil.test")), false},
		"other key":    {sign(other, good), false},
		"no tenant":    {sign(key, with(good, "tenant", "")), false},
	}
	for name, tc := range cases {
		_, err := as(g, tc.token).TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: "jwt-" + name, TtlMs: 5000}))
		if tc.ok && err != nil {
			t.Errorf("%s JWT: %v; want accepted", name, err)
		}
		if !tc.ok && connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("%s JWT: %v; want unauthenticated", name, err)
		}
		if err != nil && strings.Contains(err.Error(), tc.token) {
			t.Errorf("%s JWT: the error echoes the token", name)
		}
	}
}

func with(c jwt.MapClaims, k string, v any) jwt.MapClaims {
	out := jwt.MapClaims{}
	for a, b := range c {
		out[a] = b
	}
	out[k] = v
	return out
}

func TestMutualTLSIdentity(t *testing.T) {
	t.Parallel()
	pki := gwtest.NewPKI(t)
	g := startSecureGateway(t, func(c *server.Config) {
		c.Gateway.Auth.TokensFile = ""
		c.TLSCert, c.TLSKey, c.TLSClientCA = pki.ServerCert, pki.ServerKey, pki.CAFile
	})
	tlsClient := func(cfg *tls.Config) *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}}
	}
	c := leasegatev1connect.NewLockServiceClient(tlsClient(pki.ClientTLS(t, "acme", "worker-1")), g.URL, connect.WithGRPC())
	r, err := c.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: "mtls", TtlMs: 5000}))
	if err != nil || !r.Msg.Acquired {
		t.Fatalf("TryAcquire with a client certificate = %v, %v", r, err)
	}
	// The lock lives in tenant acme's namespace.
	id := r.Msg.Granted.LockId
	if _, err := c.Release(ctxT(t), connect.NewRequest(&v1.ReleaseRequest{LockId: id, FencingToken: r.Msg.Granted.FencingToken})); err != nil {
		t.Fatal(err)
	}
	without := leasegatev1connect.NewLockServiceClient(tlsClient(pki.ClientTLS(t, "", "")), g.URL)
	if _, err := without.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: "mtls", TtlMs: 5000})); err == nil {
		t.Fatal("TryAcquire without a client certificate succeeded")
	}
}

func TestSecretsStayOutOfLogsAndErrors(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	g := startSecureGateway(t, func(c *server.Config) {
		c.Log = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	a := as(g, tokenA)
	ctx := ctxT(t)
	r, err := a.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: "secret", TtlMs: 5000}))
	if err != nil {
		t.Fatal(err)
	}
	id := r.Msg.Granted.LockId
	tampered := id[:len(id)-4] + "AAAA"
	var errs []string
	for _, lid := range []string{tampered, id + "x", "garbage"} {
		_, err := a.Renew(ctx, connect.NewRequest(&v1.RenewRequest{LockId: lid, FencingToken: r.Msg.Granted.FencingToken}))
		if err == nil {
			t.Fatalf("Renew with a tampered lock id succeeded")
		}
		errs = append(errs, err.Error())
	}
	_, err = as(g, tokenB).Release(ctx, connect.NewRequest(&v1.ReleaseRequest{LockId: id, FencingToken: r.Msg.Granted.FencingToken}))
	errs = append(errs, err.Error())
	all := logs.String() + strings.Join(errs, "\n")
	for _, secret := range []string{id, tampered, tokenA, tokenB, id[len(id)-22:]} {
		if strings.Contains(all, secret) {
			t.Errorf("a secret (%d chars) appears in logs or errors", len(secret))
		}
	}
}
