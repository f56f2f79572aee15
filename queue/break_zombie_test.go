package queue

import (
	"context"
	"testing"
)

// TestBreakZombieAttemptGivesUpADeliveredGrant: the SDK retries an acquire
// whose first attempt looked lost, through another gateway, and is
// granted and told. The first attempt was only slow: it lands afterwards,
// finds the key of its request id, takes it over (a retry's takeover: same
// caller, same request id), is granted, and cannot deliver the grant (its
// caller has moved on), so its gateway gives it up (Abandon). The give-up
// compares the mod revision the zombie wrote — its own — and deletes the
// key with a give-up mark, a clean end: the next caller is granted at once
// while the client, told by the retry that it holds, still believes it
// does (its renewals worked until a moment ago).
func TestBreakZombieAttemptGivesUpADeliveredGrant(t *testing.T) {
	e, cli := newEngine(t)
	slow, err := New(cli, e.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(slow.Close)
	r := req("zb")
	held := mustAcquire(t, e, r) // the retry, delivered
	late, err := slow.Acquire(testCtx(t), r)
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

// TestBreakZombieReentrantAttemptDropsADeliveredHold: the same for a hold of
// a re-entered lock. The retry of a re-entrant acquire is granted and told
// (hold h); the slow first attempt lands later, re-takes the hold's entry
// with a nonce of its own (addHold, "retried"), and its gateway gives the
// undeliverable grant up, which drops the entry because the nonce is the
// zombie's. The caller still believes in hold h; when it releases the
// outer hold, the lock is freed and another caller is granted inside h's
// critical section.
func TestBreakZombieReentrantAttemptDropsADeliveredHold(t *testing.T) {
	e, cli := newEngine(t)
	slow, err := New(cli, e.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(slow.Close)
	s := mustSession(t, e)
	outer := mustAcquire(t, e, reentrant("zr", "outer", s))
	inner := mustAcquire(t, e, reentrant("zr", "inner", s)) // the retry, delivered
	late, err := slow.Acquire(testCtx(t), reentrant("zr", "inner", s))
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

// TestBreakReleasedHoldStillRenews: releasing a hold of a re-entered lock
// answers released, and a repeated release is a no-op (reenter.go) — but
// the released hold's lock id still renews, and its WatchHold would go on
// waiting, as long as the lock's other holds keep the key: a caller told
// "released" is told "held" by the next call on the same lock id.
func TestBreakReleasedHoldStillRenews(t *testing.T) {
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
