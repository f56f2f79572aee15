package sdktest_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/client"
	"github.com/leasegate/leasegate/internal/gwtest"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// renewal is one renewal attempt seen by the renew hook.
type renewal struct {
	sent time.Time
	err  error
}

// fakeTimeClient returns a client on a fake clock whose renewals are
// reported on the returned channel.
func fakeTimeClient(t *testing.T, endpoints []string, opts ...client.Option) (*client.Client, fakeClock, *slowTransport, chan renewal) {
	clk := newFakeClock()
	tr := &slowTransport{base: h2cTransport(), clk: clk}
	t.Cleanup(tr.base.(*http.Transport).CloseIdleConnections)
	renewals := make(chan renewal, 64)
	opts = append([]client.Option{
		client.WithClock(clk),
		client.WithHTTPClient(&http.Client{Transport: tr}),
		client.WithOnRenew(func(sent time.Time, err error) { renewals <- renewal{sent, err} }),
	}, opts...)
	return newClient(t, endpoints, opts...), clk, tr, renewals
}

// defaultMargin is the safety margin the SDK subtracts from a lease of ttl
// by default, as client.WithSafetyMargin documents it: TTL/100 + 100 ms,
// at most TTL/3.
func defaultMargin(ttl time.Duration) time.Duration {
	return min(ttl/100+100*time.Millisecond, ttl/3)
}

// renewDue is the latest a renewal can be due after a confirmation sent at
// a time: TTL/3 + 10% jitter.
func renewDue(ttl time.Duration) time.Duration { return ttl * 11 / 30 }

func TestRenewalExtendsDeadlineFromSendTime(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	c, clk, tr, renewals := fakeTimeClient(t, []string{g.URL})
	ctx := ctxT(t)
	t0 := clk.Now()
	l, err := c.Acquire(ctx, "renewed", client.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ttl := l.TTL()
	margin := defaultMargin(ttl)
	if want := t0.Add(ttl - margin); !l.Expires().Equal(want) {
		t.Fatalf("Expires after the grant = %s; want acquire send time + TTL - margin = %s", l.Expires(), want)
	}

	// From now on every request takes 400ms of fake time in flight: the
	// deadline must count from when the renewal was sent, not answered.
	tr.delay.Store(int64(400 * time.Millisecond))
	clk.Advance(renewDue(ttl))
	t1 := clk.Now()
	r := await(t, renewals, "renewal")
	if r.err != nil {
		t.Fatalf("renewal failed: %v", r.err)
	}
	if !r.sent.Equal(t1) {
		t.Fatalf("renewal sent at %s; want %s, when it fell due", r.sent, t1)
	}
	if want := t1.Add(ttl - margin); !l.Expires().Equal(want) {
		t.Fatalf("Expires after a renewal = %s; want its send time + TTL - margin = %s (the answer arrived at %s)", l.Expires(), want, clk.Now())
	}
	if l.Err() != nil {
		t.Fatalf("renewed lock has Err %v", l.Err())
	}
	tr.delay.Store(0)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestLostSignalWhenRenewalRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		steal  bool
		reason v1.ErrorReason
	}{
		{"expired", false, client.ReasonExpired},
		{"stolen", true, client.ReasonStolen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := gwtest.Start(t, shared, gwtest.NoLossWait()) // the name is taken again at once
			c, clk, _, renewals := fakeTimeClient(t, []string{g.URL})
			ctx := ctxT(t)
			l, err := c.Acquire(ctx, "refused", client.WithTTL(3*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if n := revokeLocks(t, g.Prefix, "refused"); n != 1 {
				t.Fatalf("revoked %d leases; want 1", n)
			}
			other := newClient(t, []string{g.URL})
			if tc.steal {
				thief, err := other.TryAcquire(ctx, "refused", client.WithTTL(10*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				defer thief.Release(ctx)
			}
			notDone(t, l.Done(), "Done before the next renewal")

			clk.Advance(renewDue(l.TTL()))
			at := clk.Now()
			r := await(t, renewals, "renewal")
			if r.err == nil {
				t.Fatal("renewal of a revoked lease succeeded")
			}
			// The clock stays at the refused renewal, before the deadline:
			// Done closing now is the loss at the refusal.
			if !at.Before(l.Expires()) {
				t.Fatalf("refused renewal at %s, not before the deadline %s", at, l.Expires())
			}
			await(t, l.Done(), "Done after a refused renewal, before the deadline")
			err = l.Err()
			var ce *connect.Error
			if !errors.Is(err, client.ErrLockLost) || !errors.As(err, &ce) || ce.Code() != connect.CodeFailedPrecondition || client.Reason(err) != tc.reason {
				t.Fatalf("Err() = %v (reason %q); want ErrLockLost wrapping failed_precondition/%s", err, client.Reason(err), tc.reason)
			}
			if cause := context.Cause(l.Context()); cause != err {
				t.Fatalf("context.Cause(Context()) = %v; want Err() = %v", cause, err)
			}

			// Release after loss is harmless and keeps the loss's cause.
			for i := 0; i < 2; i++ {
				if err := l.Release(ctx); err != nil {
					t.Fatalf("Release #%d after loss = %v; want nil", i+1, err)
				}
			}
			if !errors.Is(l.Err(), client.ErrLockLost) {
				t.Fatalf("Err() after Release of a lost lock = %v; want still ErrLockLost", l.Err())
			}
			if !tc.steal {
				l2, err := other.TryAcquire(ctx, "refused")
				if err != nil {
					t.Fatalf("the expired name is not free: %v", err)
				}
				l2.Release(ctx)
			}
		})
	}
}

func TestDeadlineWhenGatewaysUnreachable(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	c, clk, _, renewals := fakeTimeClient(t, []string{g.URL})
	ctx := ctxT(t)
	t0 := clk.Now()
	l, err := c.Acquire(ctx, "cut-off", client.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	deadline := l.Expires()
	if want := t0.Add(l.TTL() - defaultMargin(l.TTL())); !deadline.Equal(want) {
		t.Fatalf("deadline = %s; want %s", deadline, want)
	}
	g.Stop()

	// Up to a nanosecond before the deadline: renewals fail, the lock holds.
	clk.Advance(deadline.Sub(clk.Now()) - time.Nanosecond)
	if r := await(t, renewals, "renewal"); r.err == nil {
		t.Fatal("renewal through a stopped gateway succeeded")
	}
	notDone(t, l.Done(), "Done a nanosecond before the deadline")
	if !l.Expires().Equal(deadline) {
		t.Fatalf("a failed renewal moved the deadline to %s", l.Expires())
	}

	clk.Advance(time.Nanosecond)
	await(t, l.Done(), "Done at the deadline") // the clock reads exactly the deadline
	if err := l.Err(); !errors.Is(err, client.ErrLockLost) || !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Err() = %v; want ErrLockLost and ErrUnavailable", err)
	}

	// With every gateway down, Release still returns at once and clean.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := l.Release(cctx); err != nil {
		t.Fatalf("Release after a loss by deadline = %v; want nil", err)
	}
}

// A grant that took longer than a renew interval to arrive is renewed
// before Acquire returns, so the lock starts with a fresh deadline.
func TestLongWaitRenewsBeforeReturning(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	other := newClient(t, []string{g.URL})
	ctx := ctxT(t)
	holder, err := other.TryAcquire(ctx, "long-wait", client.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c, clk, _, _ := fakeTimeClient(t, []string{g.URL})
	queued := make(chan int64, 4)
	type result struct {
		l   *client.Lock
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := c.Acquire(ctx, "long-wait", client.WithTTL(3*time.Second), client.WithOnQueued(func(p int64) { queued <- p }))
		done <- result{l, err}
	}()
	await(t, queued, "queued")
	clk.Advance(2 * time.Second)
	renewedAt := clk.Now()
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := await(t, done, "grant")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if want := renewedAt.Add(r.l.TTL() - defaultMargin(r.l.TTL())); !r.l.Expires().Equal(want) {
		t.Fatalf("Expires after a long wait = %s; want a deadline from a renewal at grant time, %s", r.l.Expires(), want)
	}
	if err := r.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestEvictionEndsTheLockAtOnce: an administrator's force-release ends the
// holder's lock at once — long before its next renewal — through the
// watch the SDK keeps on a lock it holds, and Err says it was evicted
// (ErrEvicted, which is ErrLockLost too); without the watch it is learnt
// at the next renewal.
func TestEvictionEndsTheLockAtOnce(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	ctx := ctxT(t)
	for _, watch := range []bool{true, false} {
		after := time.Duration(0)
		if !watch {
			after = -1
		}
		c := newClient(t, []string{g.URL}, client.WithHoldWatch(after), client.WithRenewFraction(0.5))
		name := fmt.Sprintf("evicted-%v", watch)
		l, err := c.Acquire(ctx, name, client.WithTTL(4*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		// The watch opens at once (WithHoldWatch(0)); one that opens after
		// the eviction finds the lock gone and says so as promptly.
		admin := newClient(t, []string{g.URL})
		evicted := time.Now()
		if _, err := admin.ForceRelease(ctx, name, "stuck", l.Token()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("watch %v: the evicted lock was never ended", watch)
		}
		took := time.Since(evicted)
		if err := l.Err(); !errors.Is(err, client.ErrEvicted) || !errors.Is(err, client.ErrLockLost) {
			t.Fatalf("watch %v: Err = %v; want ErrEvicted (and ErrLockLost)", watch, err)
		}
		if watch && took > time.Second {
			t.Errorf("with the watch, the eviction ended the lock %s after it; want at once (its next renewal is 2 s away)", took)
		}
		_ = l.Release(ctx)
	}
}
