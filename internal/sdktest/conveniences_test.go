package sdktest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasegate/leasegate/client"
)

func TestDoCancelsFnWhenTheLockIsLost(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	c, clk, _, renewals := fakeTimeClient(t, []string{g.URL})
	ctx := ctxT(t)
	running := make(chan struct{})
	done := make(chan error, 1)
	var cause error
	go func() {
		done <- c.Do(ctx, "do-lost", func(ctx context.Context) error {
			close(running)
			<-ctx.Done()
			cause = context.Cause(ctx)
			return cause
		}, client.WithTTL(3*time.Second))
	}()
	await(t, running, "fn to run")
	if n := revokeLocks(t, g.Prefix, "do-lost"); n != 1 {
		t.Fatalf("revoked %d leases; want 1", n)
	}
	clk.Advance(renewDue(3 * time.Second))
	if r := await(t, renewals, "renewal"); r.err == nil {
		t.Fatal("renewal of a revoked lease succeeded")
	}
	err := await(t, done, "Do to return")
	if !errors.Is(cause, client.ErrLockLost) || client.Reason(cause) != client.ReasonExpired {
		t.Fatalf("fn's context cause = %v; want ErrLockLost with LOCK_EXPIRED", cause)
	}
	if err != cause {
		t.Fatalf("Do = %v; want fn's error %v", err, cause)
	}
}

func TestDoReturnsFnsErrorAndReleases(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	c := newClient(t, []string{g.URL})
	ctx := ctxT(t)
	boom := errors.New("boom")
	err := c.Do(ctx, "do-err", func(ctx context.Context) error {
		if ctx.Err() != nil {
			t.Errorf("fn's context ended before fn ran: %v", context.Cause(ctx))
		}
		return boom
	})
	if err != boom {
		t.Fatalf("Do = %v; want fn's error", err)
	}
	// Released: the name is free at once.
	l, err := c.TryAcquire(ctx, "do-err")
	if err != nil {
		t.Fatalf("TryAcquire after Do = %v; want the name free", err)
	}
	l.Release(ctx)
	// An acquire that fails is Do's error, and fn never runs.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	err = c.Do(cctx, "do-err", func(context.Context) error {
		t.Error("fn ran without the lock")
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Do with a cancelled context = %v; want context.Canceled", err)
	}
}

func TestManualRenewMovesTheDeadline(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	c, clk, _, renewals := fakeTimeClient(t, []string{g.URL})
	ctx := ctxT(t)
	l, err := c.Acquire(ctx, "manual", client.WithTTL(3*time.Second), client.WithManualRenew())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	ttl, margin := l.TTL(), defaultMargin(l.TTL())
	d0 := l.Expires()

	// Past the point where the SDK would renew on its own: nothing is sent.
	clk.Advance(renewDue(ttl))
	t1 := clk.Now()
	d1, err := l.Renew(ctx)
	if err != nil {
		t.Fatalf("Renew = %v", err)
	}
	if want := t1.Add(ttl - margin); !d1.Equal(want) || !l.Expires().Equal(d1) || !d1.After(d0) {
		t.Fatalf("Renew = %s (Expires %s); want its send time + TTL - margin = %s, after the first deadline %s", d1, l.Expires(), want, d0)
	}
	if r := await(t, renewals, "the manual renewal"); r.err != nil || !r.sent.Equal(t1) {
		t.Fatalf("first renewal seen: sent %s, err %v; want the manual one, sent at %s", r.sent, r.err, t1)
	}

	// Without another Renew the lock ends at exactly its deadline.
	clk.Advance(d1.Sub(clk.Now()) - time.Nanosecond)
	notDone(t, l.Done(), "Done a nanosecond before the deadline")
	clk.Advance(time.Nanosecond)
	await(t, l.Done(), "Done at the deadline") // the clock reads exactly d1
	if err := l.Err(); !errors.Is(err, client.ErrLockLost) || !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Err() = %v; want ErrLockLost and ErrUnavailable (no renewal confirmed it)", err)
	}
	if _, err := l.Renew(ctx); !errors.Is(err, client.ErrLockLost) {
		t.Fatalf("Renew after the deadline = %v; want ErrLockLost", err)
	}
	select {
	case r := <-renewals:
		t.Fatalf("a renewal sent at %s that no one asked for", r.sent)
	default:
	}
}

func TestLockerSerialisesHolders(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	a := client.NewLocker(newClient(t, []string{g.URL}), "locker", client.WithTTL(10*time.Second))
	queued := make(chan int64, 8)
	b := client.NewLocker(newClient(t, []string{g.URL}), "locker", client.WithTTL(10*time.Second),
		client.WithOnQueued(func(pos int64) { queued <- pos }))
	if a.Held() != nil {
		t.Fatal("Held before Lock is not nil")
	}
	a.Lock()
	first := a.Held()
	if first == nil || first.Err() != nil {
		t.Fatalf("Held after Lock = %v", first)
	}
	locked := make(chan struct{})
	go func() {
		b.Lock()
		close(locked)
	}()
	if pos := await(t, queued, "b to queue"); pos != 1 {
		t.Fatalf("b queued at %d; want 1, behind a", pos)
	}
	notDone(t, locked, "b locked while a holds")
	a.Unlock()
	await(t, locked, "b to lock once a unlocked")
	if err := first.Err(); !errors.Is(err, client.ErrReleased) {
		t.Fatalf("a's lock after Unlock: Err %v; want ErrReleased", err)
	}
	if b.Held().Token() <= first.Token() {
		t.Fatalf("b's token %d is not above a's %d", b.Held().Token(), first.Token())
	}
	b.Unlock()
	defer func() {
		if recover() == nil {
			t.Error("Unlock of an unlocked Locker did not panic")
		}
	}()
	b.Unlock()
}

func TestDoReleasesWhenFnPanics(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	c := newClient(t, []string{g.URL})
	ctx := ctxT(t)
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Errorf("Do's panic = %v; want fn's", p)
			}
		}()
		_ = c.Do(ctx, "do-panic", func(context.Context) error { panic("boom") })
	}()
	l, err := c.TryAcquire(ctx, "do-panic")
	if err != nil {
		t.Fatalf("TryAcquire after fn panicked = %v; want the name free", err)
	}
	l.Release(ctx)
}

// Session.Do holds the lock in the session while fn runs, releases it
// after and leaves the session open; closing the session under fn ends
// fn's context.
func TestSessionDo(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	c := newClient(t, []string{g.URL})
	ctx := ctxT(t)
	s, err := c.OpenSession(ctx, client.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	other := newClient(t, []string{g.URL})
	err = s.Do(ctx, "session-do", func(ctx context.Context) error {
		if _, err := other.TryAcquire(ctx, "session-do"); !errors.Is(err, client.ErrNotAcquired) {
			t.Errorf("TryAcquire while Session.Do's fn runs = %v; want ErrNotAcquired", err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Session.Do = %v", err)
	}
	l, err := other.TryAcquire(ctx, "session-do")
	if err != nil {
		t.Fatalf("TryAcquire after Session.Do = %v; want the name free", err)
	}
	l.Release(ctx)
	if s.Err() != nil {
		t.Fatalf("session after Do: %v; want it open", s.Err())
	}
	// Closing the session ends the lock, and so fn's context.
	var cause error
	err = s.Do(ctx, "session-do", func(fctx context.Context) error {
		if err := s.Close(ctx); err != nil {
			return err
		}
		<-fctx.Done()
		cause = context.Cause(fctx)
		return nil
	})
	if !errors.Is(cause, client.ErrReleased) {
		t.Fatalf("fn's context cause after the session closed = %v; want ErrReleased", cause)
	}
	// The holder let go on purpose (it closed the session): not an error.
	if err != nil {
		t.Fatalf("Session.Do with the session closed under fn = %v; want nil", err)
	}
}
