package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

type attemptResult struct {
	sent time.Time
	err  error
}

// keeperFixture runs a keeper over a fake renew function: the renewer's
// logic is not about etcd, so it is tested without one.
func keeperFixture(t *testing.T, ttl time.Duration, renew func(ctx context.Context) (confirmation, error)) (*keeper, *fakeClock, chan attemptResult) {
	t.Helper()
	clk := newFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	seen := make(chan attemptResult, 64)
	c, err := New([]string{"http://127.0.0.1:1"}, WithClock(clk), WithOnRenew(func(sent time.Time, err error) {
		seen <- attemptResult{sent, err}
	}))
	if err != nil {
		t.Fatal(err)
	}
	k := c.startKeeper(ttl, clk.Now(), c.deadline(clk.Now(), confirmation{ttl: ttl}), false, func(ctx context.Context, _ leasegatev1connect.LockServiceClient) (confirmation, error) {
		return renew(ctx)
	}, func(cause error) error { return &opError{op: "test lease", kind: ErrLockLost, cause: cause} })
	t.Cleanup(func() { k.stop(ErrReleased) })
	return k, clk, seen
}

func waitFor[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatal("timed out")
	}
	var zero T
	return zero
}

func TestKeeperIntervalJitter(t *testing.T) {
	t.Parallel()
	k, _, _ := keeperFixture(t, 30*time.Second, func(context.Context) (confirmation, error) { return confirmation{ttl: 30 * time.Second}, nil })
	lo, hi := 9*time.Second, 11*time.Second
	for i := 0; i < 1000; i++ {
		if d := k.c.renewInterval(k.ttl); d < lo || d > hi {
			t.Fatalf("renewInterval(%s) = %s; want within [%s, %s] (TTL/3 ± 10%%)", k.ttl, d, lo, hi)
		}
	}
}

func TestKeeperTransientFailuresHoldUntilDeadline(t *testing.T) {
	t.Parallel()
	unavailable := connect.NewError(connect.CodeUnavailable, errors.New("gateway gone"))
	k, clk, seen := keeperFixture(t, 3*time.Second, func(context.Context) (confirmation, error) { return confirmation{}, unavailable })
	deadline := k.Deadline()
	clk.Advance(deadline.Sub(clk.Now()) - time.Nanosecond)
	if r := waitFor(t, seen); !errors.Is(r.err, unavailable) {
		t.Fatalf("attempt error = %v; want the unavailable answer", r.err)
	}
	if k.ctx.Err() != nil {
		t.Fatalf("lease lost before its deadline: %v", context.Cause(k.ctx))
	}
	clk.Advance(time.Nanosecond)
	<-k.ctx.Done()
	err := context.Cause(k.ctx)
	if !errors.Is(err, ErrLockLost) || !errors.Is(err, ErrUnavailable) || !errors.Is(err, unavailable) {
		t.Fatalf("cause = %v; want ErrLockLost, ErrUnavailable and the last answer", err)
	}
	// The clock moves only when the test moves it: the loss came with
	// the clock at the deadline, not before it.
	if now := clk.Now(); !now.Equal(deadline) {
		t.Fatalf("lost with the clock at %s; want the deadline %s", now, deadline)
	}
}

func TestKeeperRefusalLosesAtOnce(t *testing.T) {
	t.Parallel()
	refused := connect.NewError(connect.CodeFailedPrecondition, errors.New("stolen"))
	if d, err := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: ReasonStolen.String(), Domain: v1.ErrorDomain}); err == nil {
		refused.AddDetail(d)
	}
	k, clk, seen := keeperFixture(t, 3*time.Second, func(context.Context) (confirmation, error) { return confirmation{}, refused })
	clk.Advance(1100 * time.Millisecond)
	waitFor(t, seen)
	<-k.ctx.Done()
	err := context.Cause(k.ctx)
	if !errors.Is(err, ErrLockLost) || Reason(err) != ReasonStolen {
		t.Fatalf("cause = %v; want ErrLockLost with reason %s", err, ReasonStolen)
	}
	if now := clk.Now(); !now.Before(k.Deadline()) {
		t.Fatalf("lost with the clock at %s; want at once, before the deadline %s", now, k.Deadline())
	}
}

func TestKeeperAnswerAfterDeadlineDoesNotRevive(t *testing.T) {
	t.Parallel()
	unblock := make(chan struct{})
	started := make(chan struct{}, 1)
	k, clk, _ := keeperFixture(t, 3*time.Second, func(ctx context.Context) (confirmation, error) {
		started <- struct{}{}
		<-unblock
		return confirmation{ttl: 3 * time.Second}, nil
	})
	deadline := k.Deadline()
	clk.Advance(1100 * time.Millisecond)
	waitFor(t, started)
	clk.Advance(deadline.Sub(clk.Now()))
	<-k.ctx.Done()
	close(unblock)
	if err := k.stop(ErrReleased); !errors.Is(err, ErrLockLost) {
		t.Fatalf("stop() = %v; want the earlier loss", err)
	}
	if !k.Deadline().Equal(deadline) || !clk.Now().Equal(deadline) {
		t.Fatalf("deadline %s, lost with the clock at %s; want both %s", k.Deadline(), clk.Now(), deadline)
	}
}

func TestKeeperSuccessMovesDeadline(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second
	k, clk, seen := keeperFixture(t, ttl, func(context.Context) (confirmation, error) { return confirmation{ttl: ttl}, nil })
	margin := k.c.cfg.marginFor(ttl)
	for i := 0; i < 3; i++ {
		clk.Advance(1100 * time.Millisecond)
		r := waitFor(t, seen)
		if r.err != nil {
			t.Fatal(r.err)
		}
		if want := r.sent.Add(ttl - margin); !k.Deadline().Equal(want) {
			t.Fatalf("renewal %d: deadline %s; want %s", i, k.Deadline(), want)
		}
	}
	if k.ctx.Err() != nil {
		t.Fatalf("renewed lease lost: %v", context.Cause(k.ctx))
	}
}

// Hole 6: a gateway can confirm a renewal with a keepalive sent before the
// renewal arrived, and then says so: valid_for_ms is shorter than the TTL.
// The deadline takes the tighter of the two, never the longer.
func TestKeeperDeadlineTakesTheTighterOfTTLAndValid(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second
	for _, tc := range []struct {
		valid, want time.Duration
	}{
		{valid: 2500 * time.Millisecond, want: 2500 * time.Millisecond},
		{valid: 0, want: ttl},               // a gateway that does not say
		{valid: 5 * time.Second, want: ttl}, // longer than the TTL: the TTL holds
	} {
		k, clk, seen := keeperFixture(t, ttl, func(context.Context) (confirmation, error) {
			return confirmation{ttl: ttl, valid: tc.valid}, nil
		})
		clk.Advance(1100 * time.Millisecond)
		r := waitFor(t, seen)
		if r.err != nil {
			t.Fatal(r.err)
		}
		want := r.sent.Add(tc.want - k.c.cfg.marginFor(ttl))
		if got := k.Deadline(); !got.Equal(want) {
			t.Errorf("valid %s: deadline %s after the renewal sent at %s; want %s", tc.valid, got, r.sent, want)
		}
	}
}

// A renewal never changes a lease's TTL, so an answer claiming a longer one
// than the lease was granted with (a broken or hostile gateway) moves the
// deadline by the granted TTL only, and an answer claiming none moves it
// not at all.
func TestKeeperCreditsNoMoreThanTheGrantedTTL(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second
	for _, claimed := range []time.Duration{600 * time.Second, 0} {
		k, clk, seen := keeperFixture(t, ttl, func(context.Context) (confirmation, error) {
			return confirmation{ttl: claimed}, nil
		})
		before := k.Deadline()
		clk.Advance(1100 * time.Millisecond)
		r := waitFor(t, seen)
		if r.err != nil {
			t.Fatal(r.err)
		}
		want := r.sent.Add(ttl - k.c.cfg.marginFor(ttl))
		if claimed == 0 {
			want = before
		}
		if got := k.Deadline(); !got.Equal(want) {
			t.Errorf("a renewal answered with TTL %s: deadline %s after the renewal sent at %s; want %s (granted TTL %s)", claimed, got, r.sent, want, ttl)
		}
	}
}
