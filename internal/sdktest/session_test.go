package sdktest_test

import (
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/client"
)

func TestSessionEndToEnd(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	c := newClient(t, []string{g.URL}, client.WithClientID("session-owner"))
	other := newClient(t, []string{g.URL})
	ctx := ctxT(t)

	s, err := c.OpenSession(ctx, client.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if s.TTL() != 3*time.Second || s.Err() != nil {
		t.Fatalf("session TTL %s, Err %v; want 3s, nil", s.TTL(), s.Err())
	}
	a, err := s.Acquire(ctx, "sess/a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.TryAcquire(ctx, "sess/b")
	if err != nil {
		t.Fatal(err)
	}
	if a.Session() != s || a.TTL() != s.TTL() || !a.Expires().Equal(s.Expires()) {
		t.Fatalf("session lock: session %p TTL %s expires %s; want %p, %s, %s", a.Session(), a.TTL(), a.Expires(), s, s.TTL(), s.Expires())
	}
	// One lease for the session and both locks.
	leases := map[clientv3.LeaseID]bool{}
	for _, id := range append(leasesUnder(t, g.Prefix, "locks"), leasesUnder(t, g.Prefix, "sessions")...) {
		leases[id] = true
	}
	if len(leases) != 1 {
		t.Fatalf("session and its locks use %d leases; want 1", len(leases))
	}

	if _, err := other.TryAcquire(ctx, "sess/a"); !errors.Is(err, client.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a session lock by another client = %v; want ErrNotAcquired", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(a.Err(), client.ErrReleased) || s.Err() != nil {
		t.Fatalf("after releasing one lock: lock Err %v, session Err %v; want ErrReleased, nil", a.Err(), s.Err())
	}
	a2, err := other.TryAcquire(ctx, "sess/a")
	if err != nil {
		t.Fatalf("released session lock is not free: %v", err)
	}
	a2.Release(ctx)

	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	await(t, b.Done(), "a session lock's Done after Close")
	if !errors.Is(b.Err(), client.ErrReleased) || !errors.Is(s.Err(), client.ErrClosed) {
		t.Fatalf("after Close: lock Err %v, session Err %v; want ErrReleased, ErrClosed", b.Err(), s.Err())
	}
	b2, err := other.TryAcquire(ctx, "sess/b")
	if err != nil {
		t.Fatalf("closing the session did not free its lock: %v", err)
	}
	b2.Release(ctx)
	if err := b.Release(ctx); err != nil {
		t.Fatalf("Release after the session closed = %v; want nil", err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("second Close = %v; want nil", err)
	}
	if _, err := s.Acquire(ctx, "sess/c"); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Acquire on a closed session = %v; want ErrClosed", err)
	}
}

func TestSessionLossCancelsItsLocks(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	c, clk, _, renewals := fakeTimeClient(t, []string{g.URL})
	ctx := ctxT(t)
	s, err := c.OpenSession(ctx, client.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var locks []*client.Lock
	for _, name := range []string{"lost/a", "lost/b"} {
		l, err := s.Acquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	cli := shared.ClientFor(t)
	for _, id := range leasesUnder(t, g.Prefix, "sessions") {
		if _, err := cli.Revoke(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(renewDue(s.TTL()))
	if r := await(t, renewals, "keepalive"); r.err == nil {
		t.Fatal("keepalive of a revoked session succeeded")
	}
	await(t, s.Done(), "session Done")
	if err := s.Err(); !errors.Is(err, client.ErrSessionLost) || client.Reason(err) != client.ReasonSessionLost {
		t.Fatalf("session Err = %v; want ErrSessionLost with reason SESSION_LOST", err)
	}
	for _, l := range locks {
		await(t, l.Done(), "lock Done")
		if err := l.Err(); !errors.Is(err, client.ErrLockLost) || !errors.Is(err, client.ErrSessionLost) {
			t.Fatalf("lock %s Err = %v; want ErrLockLost and ErrSessionLost", l.Name(), err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release after the session's loss = %v; want nil", err)
		}
	}
	if _, err := s.TryAcquire(ctx, "lost/c"); !errors.Is(err, client.ErrSessionLost) {
		t.Fatalf("TryAcquire on a lost session = %v; want ErrSessionLost", err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close of a lost session = %v; want nil", err)
	}
}
