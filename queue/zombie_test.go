package queue

import (
	"context"
	"testing"
)

// TestZombieAttemptKeepsADeliveredGrant: the SDK retries an acquire
// whose first attempt looked lost, through another gateway, and is granted
// and told. The first attempt was only slow: it lands afterwards, takes
// the key over, and cannot deliver its grant. It must not give the key
// up: the retry may have delivered it, and the client believes it holds.
// The name stays held until the client releases it.
func TestZombieAttemptKeepsADeliveredGrant(t *testing.T) {
	e, cli := newEngine(t)
	slow, err := New(cli, e.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(slow.Close)
	r := req("zb")
	held := mustAcquire(t, e, r) // the retry, delivered
	late, err := acquire(testCtx(t), slow, r)
	if err != nil {
		t.Fatalf("the first attempt, landing late: %v", err)
	}
	slow.Abandon(context.Background(), late) // its caller is gone: undeliverable
	settle(slow)
	if _, err := e.Renew(testCtx(t), held.Handle, held.Token()); err != nil {
		t.Errorf("the delivered holder's renewal after a zombie attempt gave its own grant up: %v", err)
	}
	if free(t, e, "zb") {
		t.Fatalf("another caller took %q while the client told it holds (token %d) believes it does", "zb", held.Token())
	}
}

// TestZombieReentrantAttemptKeepsADeliveredHold: the same for a hold of a
// re-entered lock: a slow first attempt of a re-entrant acquire that lands
// after its retry was granted and told keeps the retry's hold; releasing
// the outer hold leaves the lock held by the inner one.
func TestZombieReentrantAttemptKeepsADeliveredHold(t *testing.T) {
	e, cli := newEngine(t)
	slow, err := New(cli, e.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(slow.Close)
	s := mustSession(t, e)
	outer := mustAcquire(t, e, reentrant("zr", "outer", s))
	inner := mustAcquire(t, e, reentrant("zr", "inner", s)) // the retry, delivered
	late, err := acquire(testCtx(t), slow, reentrant("zr", "inner", s))
	if err != nil {
		t.Fatalf("the first attempt, landing late: %v", err)
	}
	slow.Abandon(context.Background(), late)
	settle(slow)
	if !release(t, e, outer) {
		t.Fatal("release of the outer hold: released = false")
	}
	if free(t, e, "zr") {
		t.Fatalf("another caller took %q while the caller still holds hold %q (token %d)", "zr", inner.HoldID, inner.Token())
	}
}

// TestReleasedHoldNoLongerRenews: releasing a hold of a re-entered lock
// answers released, and so does everything after it on that hold's lock
// id — a renew, a WatchHold — while the lock's other holds keep the key.
func TestReleasedHoldNoLongerRenews(t *testing.T) {
	e, _ := newEngine(t)
	s := mustSession(t, e)
	outer := mustAcquire(t, e, reentrant("rr", "outer", s))
	inner := mustAcquire(t, e, reentrant("rr", "inner", s))
	if !release(t, e, inner) {
		t.Fatal("release of the inner hold: released = false")
	}
	if _, err := e.Renew(testCtx(t), inner.Handle, inner.Token()); err == nil {
		t.Errorf("Renew of a hold released a moment ago succeeded; want ErrReleased")
	}
	mustRelease(t, e, outer)
}
