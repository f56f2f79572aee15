package sdktest_test

import (
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/client"
	"github.com/leasegate/leasegate/internal/clock"
	"github.com/leasegate/leasegate/internal/gwtest"
	"github.com/leasegate/leasegate/internal/server"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

// holdProxy is a loopback proxy in front of a real gateway. It counts the
// WatchHold calls that pass through it, and answers those that answer picks
// itself, with the HTTP status it returns: 404 as a gateway older than the
// watch does (the client reads unimplemented), 503 as one that is down
// (unavailable). Every other call goes through untouched.
type holdProxy struct {
	URL    string
	answer func(n int) int // the status for the n-th WatchHold (from 1); 0 passes it on

	mu    sync.Mutex
	calls []time.Time // when each WatchHold arrived
	done  chan int    // each WatchHold's number once it is answered
}

func startHoldProxy(t *testing.T, g *gateway, answer func(n int) int) *holdProxy {
	t.Helper()
	target, err := url.Parse(g.URL)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	upstream := h2cTransport()
	t.Cleanup(upstream.CloseIdleConnections)
	rp.Transport, rp.FlushInterval = upstream, -1
	p := &holdProxy{answer: answer, done: make(chan int, 1024)}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != leasegatev1connect.LockServiceWatchHoldProcedure {
			rp.ServeHTTP(w, r)
			return
		}
		p.mu.Lock()
		p.calls = append(p.calls, time.Now())
		n := len(p.calls)
		p.mu.Unlock()
		defer func() { p.done <- n }()
		if code := p.answer(n); code != 0 {
			http.Error(w, "answered by the test's proxy", code)
			return
		}
		rp.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: h, Protocols: &protos}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	p.URL = "http://" + ln.Addr().String()
	return p
}

// arrivals returns when each WatchHold so far arrived.
func (p *holdProxy) arrivals() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.calls...)
}

// TestHoldWatchNotServedIsGivenUpQuietly: a lock whose watch a gateway
// will not serve — refused at the tenant's cap on open streams
// (QUOTA_EXCEEDED), or unknown to a gateway older than the watch
// (unimplemented) — is held as well without it: the SDK asks for the
// watch once, and the lock renews and releases as any other, with no
// error. (The retry backoff here is a millisecond: an SDK that asked again
// after such an answer would ask many times while the lock renews.)
func TestHoldWatchNotServedIsGivenUpQuietly(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		answer func(int) int
		capped bool
	}{
		{name: "refused at the cap", answer: func(int) int { return 0 }, capped: true},
		{name: "an older gateway", answer: func(int) int { return http.StatusNotFound }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t)
			g := gwtest.Start(t, shared, gwtest.Configure(func(c *server.Config) {
				c.Gateway.Limits.MaxWaitersPerTenant = 1
			}))
			if tc.capped {
				// The tenant's one place, for the whole test.
				ws, err := g.Client.Watch(ctx, connect.NewRequest(&v1.WatchRequest{Prefix: "elsewhere/"}))
				if err != nil || !ws.Receive() {
					t.Fatalf("Watch: %v, %v", err, ws.Err())
				}
				t.Cleanup(func() { ws.Close() })
			}
			p := startHoldProxy(t, g, tc.answer)
			c, clk, _, renewals := fakeTimeClient(t, []string{p.URL}, client.WithHoldWatch(0),
				client.WithRetryBackoff(time.Millisecond, time.Millisecond))
			l, err := c.TryAcquire(ctx, "held-unwatched", client.WithTTL(3*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			await(t, p.done, "the first WatchHold")
			if tc.capped {
				// What the SDK was answered.
				s, err := g.Client.WatchHold(ctx, connect.NewRequest(&v1.WatchHoldRequest{LockId: l.ID(), FencingToken: l.Token()}))
				if err == nil {
					for s.Receive() {
						t.Fatalf("a WatchHold at the cap got %v", s.Msg())
					}
					err = s.Err()
				}
				if client.Reason(err) != client.ReasonQuotaExceeded {
					t.Fatalf("a WatchHold at the cap: %v; want QUOTA_EXCEEDED", err)
				}
			}
			for i := range 5 {
				clk.Advance(renewDue(l.TTL()))
				if r := await(t, renewals, "a renewal"); r.err != nil {
					t.Fatalf("renewal %d: %v", i, r.err)
				}
			}
			notDone(t, l.Done(), "the held lock's Done")
			if err := l.Err(); err != nil {
				t.Fatalf("Err of the held lock = %v; want nil", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("Release = %v", err)
			}
			if n := len(p.arrivals()); n != 1 {
				t.Fatalf("the SDK asked for the watch %d times over 5 renewals; want once: the answer does not change", n)
			}
		})
	}
}

// TestHoldWatchRetriesTransientFailures: a watch that fails for a while
// (its gateway answers unavailable) is asked for again after a growing
// backoff, not at once, and once it opens it tells the holder of an
// eviction at once: the fake clock never moves here, so no renewal could.
func TestHoldWatchRetriesTransientFailures(t *testing.T) {
	t.Parallel()
	const down = 3 // failed watches before one passes
	g := startGateway(t, "")
	p := startHoldProxy(t, g, func(n int) int {
		if n <= down {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	const initial = 20 * time.Millisecond
	c, _, _, _ := fakeTimeClient(t, []string{p.URL}, client.WithHoldWatch(0), client.WithRetryBackoff(initial, 2*initial))
	ctx := ctxT(t)
	l, err := c.TryAcquire(ctx, "watched-through", client.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for range down {
		await(t, p.done, "a failed WatchHold")
	}
	admin := newClient(t, []string{g.URL})
	if _, err := admin.ForceRelease(ctx, "watched-through", "told through the watch", l.Token()); err != nil {
		t.Fatal(err)
	}
	await(t, l.Done(), "the evicted lock's end")
	if err := l.Err(); !errors.Is(err, client.ErrEvicted) {
		t.Fatalf("Err = %v; want ErrEvicted", err)
	}
	at := p.arrivals()
	if len(at) != down+1 {
		t.Fatalf("%d WatchHold calls; want %d failed and one that told", len(at), down)
	}
	// Each pause is at least half its nominal backoff: initial, then
	// doubled up to its maximum.
	for i, min := range []time.Duration{initial / 2, initial, initial} {
		if gap := at[i+1].Sub(at[i]); gap < min {
			t.Errorf("WatchHold %d came %s after the failed one before it; want a backoff of at least %s", i+2, gap, min)
		}
	}
}

// TestRateLimitedHoldWatchStaysOnItsGateway: a watch the gateway refuses at
// the tenant's renew rate is asked for again on the same gateway after
// the delay the gateway gave, never at once on the next gateway: a rate
// limit is the tenant's budget, not the gateway failing, and moving would
// send the lock's renewals along with it.
func TestRateLimitedHoldWatchStaysOnItsGateway(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	gclk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	limited := gwtest.Start(t, shared, gwtest.Configure(func(c *server.Config) {
		// Five renewals a second, a burst of one; on a gateway clock that
		// stands still every renewal after the first is refused with a
		// 200ms hint.
		c.Gateway.Limits.TenantRenewRate = 5
		c.Gateway.Limits.TenantRenewBurst = 1
		c.Gateway.Clock = gclk
	}))
	other := startGateway(t, "")
	pa := startHoldProxy(t, limited, func(int) int { return 0 })
	pb := startHoldProxy(t, other, func(int) int { return 0 })
	c := newClient(t, []string{pa.URL, pb.URL}, client.WithHoldWatch(0), client.WithRetryBackoff(time.Millisecond, 2*time.Millisecond))

	// Spend the one renewal of the burst: a release is charged to it.
	spent, err := limited.Client.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: "spend-the-burst", TtlMs: 30000}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := limited.Client.Release(ctx, connect.NewRequest(&v1.ReleaseRequest{LockId: spent.Msg.Granted.LockId, FencingToken: spent.Msg.Granted.FencingToken})); err != nil {
		t.Fatal(err)
	}
	l, err := c.TryAcquire(ctx, "rate-limited-watch", client.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	await(t, pa.done, "the refused WatchHold")
	refusedAt := pa.arrivals()[0]
	select {
	case <-pa.done:
		if gap := pa.arrivals()[1].Sub(refusedAt); gap < 200*time.Millisecond {
			t.Fatalf("the watch was asked for again %s after the rate limit's refusal; want the gateway's 200ms delay first", gap)
		}
	case <-pb.done:
		t.Fatal("after a rate limit's refusal the watch was asked for on the next gateway; want the same gateway, after its delay")
	case <-time.After(10 * time.Second):
		t.Fatal("the watch was not asked for again within 10s of a refusal with a 200ms delay")
	}
	gclk.Advance(time.Hour) // the budget refills for the release
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
