package sdktest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/client"
	"github.com/leasegate/leasegate/internal/clock"
	"github.com/leasegate/leasegate/internal/gwtest"
	"github.com/leasegate/leasegate/internal/server"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// limitedGateway starts a gateway whose tenant may make one acquire per
// 1/rate seconds, on a gateway clock of its own that moves only when the
// test says.
func limitedGateway(t *testing.T, prefix string, rate float64) (*gateway, *clock.Fake) {
	t.Helper()
	gclk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	g := gwtest.Start(t, shared, gwtest.Prefix(prefix), gwtest.Configure(func(c *server.Config) {
		c.Gateway.Limits.TenantAcquireRate = rate
		c.Gateway.Limits.TenantAcquireBurst = 1
		c.Gateway.Clock = gclk
	}))
	return g, gclk
}

// spend takes g's acquire budget with a call outside the SDK.
func spend(t *testing.T, g *gateway, name string) {
	t.Helper()
	if _, err := g.ConnectClient().TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: name, TtlMs: 30000})); err != nil {
		t.Fatalf("spend the budget: %v", err)
	}
}

// spyClock is a fake client clock that reports the duration of every timer
// made on it.
type spyClock struct {
	fakeClock
	timers chan time.Duration
}

func (s spyClock) NewTimer(d time.Duration) client.Timer {
	select {
	case s.timers <- d:
	default:
	}
	return s.fakeClock.NewTimer(d)
}

func TestRateLimitedCallWaitsTheGatewaysDelayOnTheSameGateway(t *testing.T) {
	t.Parallel()
	g1, gclk := limitedGateway(t, gwtest.NewPrefix(), 1)
	// A second gateway of the fleet with its budget untouched: the SDK
	// must not dodge the first one's refusal by asking it.
	g2, _ := limitedGateway(t, g1.Prefix, 1)
	spend(t, g1, "spent")
	clk := spyClock{newFakeClock(), make(chan time.Duration, 1024)}
	c := newClient(t, []string{g1.URL, g2.URL}, client.WithClock(clk))

	type result struct {
		l   *client.Lock
		err error
	}
	done := make(chan result, 1)
	start := clk.Now()
	go func() {
		l, err := c.TryAcquire(ctxT(t), "limited", client.WithTTL(30*time.Second))
		done <- result{l, err}
	}()
	// The SDK pauses exactly the gateway's delay (its budget refills in
	// 1 s) on the client's clock.
	for d := await(t, clk.timers, "a timer"); d != time.Second; d = await(t, clk.timers, "the rate limit's pause") {
	}
	select {
	case r := <-done:
		t.Fatalf("TryAcquire returned %v, %v before its pause ended", r.l, r.err)
	default:
	}
	gclk.Advance(time.Second)
	clk.Advance(time.Second)
	r := await(t, done, "TryAcquire after the pause")
	if r.err != nil {
		t.Fatalf("TryAcquire after the gateway's delay = %v; want a grant", r.err)
	}
	if waited := clk.Now().Sub(start); waited != time.Second {
		t.Errorf("TryAcquire took %s of client time; want the gateway's 1s delay", waited)
	}
	if err := r.l.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// g2 still has its whole budget: the SDK never asked it.
	spend(t, g2, "untouched")
}

func TestRateLimitBeyondTheDeadlineReturnsAtOnce(t *testing.T) {
	t.Parallel()
	// One acquire per 100 s: the hint outlasts the caller's 20 s deadline.
	g, _ := limitedGateway(t, "", 0.01)
	spend(t, g, "spent")
	c := newClient(t, []string{g.URL})
	ctx, cancel := context.WithTimeout(ctxT(t), 20*time.Second)
	defer cancel()
	_, err := c.TryAcquire(ctx, "limited")
	var rl *client.RateLimitError
	if !errors.Is(err, client.ErrRateLimited) || !errors.As(err, &rl) {
		t.Fatalf("TryAcquire over the rate = %v; want ErrRateLimited as a *RateLimitError", err)
	}
	if rl.Limit != "tenant_acquire_rate" || rl.RetryAfter != 100*time.Second {
		t.Errorf("RateLimitError = %+v; want limit tenant_acquire_rate, RetryAfter 100s", rl)
	}
	if errors.Is(err, client.ErrUnavailable) || ctx.Err() != nil {
		t.Errorf("TryAcquire = %v (context %v); want the refusal at once, not an outage or a wait", err, ctx.Err())
	}
	// The streaming Acquire honours the same hint, bounded by its wait.
	_, err = c.Acquire(ctxT(t), "limited", client.WithWaitTimeout(10*time.Second))
	if !errors.Is(err, client.ErrRateLimited) || errors.Is(err, client.ErrWaitTimeout) {
		t.Fatalf("Acquire over the rate with a 10s wait = %v; want ErrRateLimited at once", err)
	}
}

func TestQuotaExceededIsNotRetried(t *testing.T) {
	t.Parallel()
	g := gwtest.Start(t, shared, gwtest.Configure(func(c *server.Config) {
		c.Gateway.Limits.MaxKeysPerTenant = 1
	}))
	c := newClient(t, []string{g.URL})
	ctx := ctxT(t)
	l, err := c.TryAcquire(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	for _, call := range []struct {
		name string
		do   func() error
	}{
		{"TryAcquire", func() error { _, err := c.TryAcquire(ctx, "second"); return err }},
		{"Acquire", func() error { _, err := c.Acquire(ctx, "second"); return err }},
	} {
		err := call.do()
		var qe *client.QuotaError
		if !errors.Is(err, client.ErrQuotaExceeded) || !errors.As(err, &qe) || qe.Limit != "tenant_keys" {
			t.Fatalf("%s past a key cap of 1 = %v; want ErrQuotaExceeded naming tenant_keys", call.name, err)
		}
		if errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrRateLimited) {
			t.Errorf("%s past the cap = %v; want a quota error only", call.name, err)
		}
	}
}

func TestPermissionDeniedIsNotNotOwner(t *testing.T) {
	t.Parallel()
	g := gwtest.Start(t, shared, gwtest.Configure(func(c *server.Config) {
		// Without authentication every caller is the unnamed tenant "".
		c.Gateway.Policy.NamePrefixes = map[string][]string{"": {"orders/"}}
	}))
	c := newClient(t, []string{g.URL})
	ctx := ctxT(t)
	_, err := c.TryAcquire(ctx, "jobs/1")
	if !errors.Is(err, client.ErrPermissionDenied) || errors.Is(err, client.ErrNotOwner) || client.Reason(err) != client.ReasonPermissionDenied {
		t.Fatalf("TryAcquire of a name the policy refuses = %v; want ErrPermissionDenied, not ErrNotOwner", err)
	}
	l, err := c.TryAcquire(ctx, "orders/1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	_, err = c.RenewByID(ctx, l.ID(), l.Token()+1)
	if !errors.Is(err, client.ErrNotOwner) || errors.Is(err, client.ErrPermissionDenied) || client.Reason(err) != client.ReasonNotOwner {
		t.Fatalf("RenewByID with another token = %v; want ErrNotOwner, not ErrPermissionDenied", err)
	}
	// A Locker cannot return the refusal: its Lock panics with it.
	func() {
		defer func() {
			p := recover()
			if err, ok := p.(error); !ok || !errors.Is(err, client.ErrPermissionDenied) {
				t.Errorf("Locker.Lock of a refused name panicked with %v; want an error wrapping ErrPermissionDenied", p)
			}
		}()
		client.NewLocker(c, "jobs/2").Lock()
	}()
}

func TestRateLimitedRenewalWaitsTheGatewaysDelay(t *testing.T) {
	t.Parallel()
	rateLimitedRenewal(t, "a lock's renewal", func(ctx context.Context, c *client.Client) (time.Duration, func() error, func() error, error) {
		l, err := c.Acquire(ctx, "renew-limited", client.WithTTL(3*time.Second))
		if err != nil {
			return 0, nil, nil, err
		}
		return l.TTL(), l.Err, func() error { return l.Release(ctx) }, nil
	})
}

func TestRateLimitedSessionKeepaliveWaitsTheGatewaysDelay(t *testing.T) {
	t.Parallel()
	rateLimitedRenewal(t, "a session's keepalive", func(ctx context.Context, c *client.Client) (time.Duration, func() error, func() error, error) {
		s, err := c.OpenSession(ctx, client.WithTTL(3*time.Second))
		if err != nil {
			return 0, nil, nil, err
		}
		return s.TTL(), s.Err, func() error { return s.Close(ctx) }, nil
	})
}

// rateLimitedRenewal holds what open opens (its TTL, its loss and its
// release) through a gateway whose renew rate refuses the second renewal
// with a 500ms hint, and checks that the SDK retries after exactly that
// delay, on its own clock, and keeps what it holds.
func rateLimitedRenewal(t *testing.T, what string, open func(context.Context, *client.Client) (time.Duration, func() error, func() error, error)) {
	gclk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	g := gwtest.Start(t, shared, gwtest.Configure(func(c *server.Config) {
		// Two renewals a second, no burst: on a gateway clock that stands
		// still, the second renewal is refused with a 500ms hint.
		c.Gateway.Limits.TenantRenewRate = 2
		c.Gateway.Limits.TenantRenewBurst = 1
		c.Gateway.Clock = gclk
	}))
	c, clk, _, renewals := fakeTimeClient(t, []string{g.URL})
	ctx := ctxT(t)
	ttl, lost, release, err := open(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(renewDue(ttl))
	if r := await(t, renewals, "first renewal"); r.err != nil {
		t.Fatalf("%s: first renewal: %v", what, r.err)
	}
	clk.Advance(renewDue(ttl))
	refused := await(t, renewals, "second renewal")
	if connect.CodeOf(refused.err) != connect.CodeResourceExhausted || client.Reason(refused.err) != client.ReasonRateLimited {
		t.Fatalf("%s: second renewal = %v; want RATE_LIMITED", what, refused.err)
	}
	// The retry waits the gateway's 500ms on the client's clock, not the
	// SDK's shorter backoff (100ms at first).
	gclk.Advance(500 * time.Millisecond)
	clk.Advance(500*time.Millisecond - time.Nanosecond)
	select {
	case r := <-renewals:
		t.Fatalf("%s: renewal sent at %s, before the gateway's delay passed (refused at %s)", what, r.sent, refused.sent)
	default:
	}
	clk.Advance(time.Nanosecond)
	r := await(t, renewals, "the renewal after the delay")
	if r.err != nil || !r.sent.Equal(refused.sent.Add(500*time.Millisecond)) {
		t.Fatalf("%s: renewal after the delay: sent %s, err %v; want sent at %s and confirmed", what, r.sent, r.err, refused.sent.Add(500*time.Millisecond))
	}
	if err := lost(); err != nil {
		t.Fatalf("%s: lost: %v", what, err)
	}
	// Release is charged to the renew rate too: refill it first, or the
	// release would wait for a gateway clock that stands still.
	gclk.Advance(time.Second)
	if err := release(); err != nil {
		t.Fatal(err)
	}
}
