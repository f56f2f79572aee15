package queue

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestExistingFindsOnlyWhatHoldsAndWritesNothing: Existing answers the
// grant made under a request id while it holds — a lock, a re-entered hold
// — for its caller alone, and never writes: a waiting key, a released lock
// and a request id nobody used are not found, and etcd's revision does not
// move.
func TestExistingFindsOnlyWhatHoldsAndWritesNothing(t *testing.T) {
	e, cli := newEngine(t)
	ctx := testCtx(t)
	s := mustSession(t, e)
	inSession := func(r AcquireRequest) AcquireRequest {
		r.Session, r.SessionSecret = s.Lease, s.Secret
		return r
	}
	holder := inSession(req("ex"))
	holder.Reentrant = true
	g := mustAcquire(t, e, holder)
	hold := inSession(req("ex"))
	hold.Reentrant = true
	hg := mustAcquire(t, e, hold)
	waiting := req("ex")
	w, err := e.Enqueue(ctx, waiting)
	if err != nil {
		t.Fatal(err)
	}
	defer e.removeWaiter(ctx, w.q)
	before, err := cli.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what  string
		r     AcquireRequest
		found *Grant
	}{
		{"the lock", holder, &g},
		{"the re-entered hold", hold, &hg},
		{"a waiting key", waiting, nil},
		{"a request id nobody used", inSession(req("ex")), nil},
	} {
		got, found, err := e.Existing(ctx, tc.r)
		if err != nil {
			t.Fatalf("Existing(%s) = %v", tc.what, err)
		}
		switch {
		case tc.found == nil && found:
			t.Fatalf("Existing(%s) found %+v; want nothing", tc.what, got.Handle)
		case tc.found != nil && (!found || got.Handle != tc.found.Handle || got.Token() != tc.found.Token()):
			t.Fatalf("Existing(%s) = %+v, %v; want %+v", tc.what, got.Handle, found, tc.found.Handle)
		}
	}
	other := holder
	other.ClientID = "someone else"
	if _, _, err := e.Existing(ctx, other); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("Existing by another caller = %v; want ErrNotOwner", err)
	}
	after, err := cli.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	if after.Header.Revision != before.Header.Revision {
		t.Fatalf("etcd's revision moved from %d to %d: Existing wrote", before.Header.Revision, after.Header.Revision)
	}
	mustRelease(t, e, hg)
	if _, found, err := e.Existing(ctx, hold); err != nil || found {
		t.Fatalf("Existing of a released hold = %v, %v; want not found", found, err)
	}
}

// TestExistingAnswersNoPlaceInsideALockDelay: a key first in its name
// whose grant still waits out an expired holder's lock-delay is a place,
// not a grant: Existing does not answer it, so that nobody acts inside the
// delay by asking instead of acquiring. The holder itself is answered
// while it lives.
func TestExistingAnswersNoPlaceInsideALockDelay(t *testing.T) {
	e, cli := newEngine(t)
	ctx := testCtx(t)
	holder := req("exd")
	holder.LockDelay = time.Minute
	g := mustAcquire(t, e, holder)
	if got, found, err := e.Existing(ctx, holder); err != nil || !found || got.Handle != g.Handle {
		t.Fatalf("Existing(the live holder) = %+v, %v, %v; want its grant", got.Handle, found, err)
	}
	waiting := req("exd")
	w, err := e.Enqueue(ctx, waiting)
	if err != nil {
		t.Fatal(err)
	}
	defer e.removeWaiter(context.Background(), w.q)
	// The revocation stands for the holder's expiry: the waiter's key is
	// first from the revocation's revision on, and its grant must wait a
	// minute.
	if _, err := cli.Revoke(ctx, g.Lease); err != nil {
		t.Fatal(err)
	}
	first, err := cli.Get(ctx, e.keys.namePrefix("exd"), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
	if err != nil || len(first.Kvs) != 1 || first.Kvs[0].CreateRevision != w.q.h.Revision {
		t.Fatalf("first key after the holder's expiry = %v, %v; want the waiter's", first.Kvs, err)
	}
	if got, found, err := e.Existing(ctx, waiting); err != nil || found {
		t.Fatalf("Existing(a waiter first inside a lock-delay) = %+v, %v, %v; want not found", got.Handle, found, err)
	}
}

// TestExistingAnswersAHolderWhateverWentAfterIt: a semaphore holder stays
// answered when another holder behind it is lost: that holder's pending
// lock-delay began after the first was granted and withholds nothing from
// it.
func TestExistingAnswersAHolderWhateverWentAfterIt(t *testing.T) {
	e, cli := newEngine(t)
	ctx := testCtx(t)
	first := req("exs")
	first.Limit = 2
	g := mustAcquire(t, e, first)
	second := req("exs")
	second.Limit, second.LockDelay = 2, time.Minute
	g2 := mustAcquire(t, e, second)
	if _, err := cli.Revoke(ctx, g2.Lease); err != nil {
		t.Fatal(err)
	}
	if got, found, err := e.Existing(ctx, first); err != nil || !found || got.Handle != g.Handle {
		t.Fatalf("Existing(the first holder, after the second was lost) = %+v, %v, %v; want its grant", got.Handle, found, err)
	}
}

// TestExistingAnswersNoWaitingKey: a key behind the holder is a place
// whatever the name's records say — with losses not waited for, a waiting
// key on a lease of its own has none to tell it from a grant.
func TestExistingAnswersNoWaitingKey(t *testing.T) {
	e, _ := newEngine(t, func(c *Config) { c.LossWait = false })
	ctx := testCtx(t)
	mustAcquire(t, e, req("wk"))
	waiting := req("wk")
	w, err := e.Enqueue(ctx, waiting)
	if err != nil {
		t.Fatal(err)
	}
	defer e.removeWaiter(ctx, w.q)
	if g, found, err := e.Existing(ctx, waiting); err != nil || found {
		t.Fatalf("Existing(a waiting key) = %+v, %v, %v; want not found", g.Handle, found, err)
	}
}

// TestALateReleaseOfASettledHoldLeavesItsHoldTakenAgain: a session's
// settlement asks for the hold a lost re-entrant acquire was granted and
// releases it; the call that took the settlement over acquires under the
// same request id and is granted the hold anew. A copy of the settlement's
// release that lands only then (its first try's answer was lost) must not
// drop the new hold: it names the hold that was released, not this one.
func TestALateReleaseOfASettledHoldLeavesItsHoldTakenAgain(t *testing.T) {
	e, _ := newEngine(t)
	ctx := testCtx(t)
	s := mustSession(t, e)
	mustAcquire(t, e, reentrant("lh", "lock", s))
	hold := reentrant("lh", "hold", s)
	mustAcquire(t, e, hold)
	lost, found, err := e.Existing(ctx, hold) // the settlement's ask
	if err != nil || !found {
		t.Fatalf("Existing(the hold) = %v, %v; want it", found, err)
	}
	mustRelease(t, e, lost) // the settlement's release, answered
	again := mustAcquire(t, e, hold)
	// A copy of the release that lands late.
	if _, err := e.Release(ctx, lost.Handle, lost.Token()); err != nil {
		t.Fatal(err)
	}
	if g, found, err := e.Existing(ctx, hold); err != nil || !found || g.Handle != again.Handle {
		t.Fatalf("the hold taken again after its release = %+v, %v, %v; a late copy of the earlier hold's release dropped it", g.Handle, found, err)
	}
}

// TestExistingAnswersNoSessionPlaceInsideALockDelay: a session's waiter
// first in its name while an expired holder's lock-delay is pending rides
// on its attempt lease until the delay is waited out: Existing does not
// answer it, re-entrant or not.
func TestExistingAnswersNoSessionPlaceInsideALockDelay(t *testing.T) {
	e, cli := newEngine(t)
	ctx := testCtx(t)
	holder := req("exsd")
	holder.LockDelay = time.Minute
	g := mustAcquire(t, e, holder)
	s := mustSession(t, e)
	for _, waiting := range []AcquireRequest{reentrant("exsd", "plain", s), reentrant("exsd", "reentrant", s)} {
		if waiting.RequestID == "plain" {
			waiting.Reentrant = false
		}
		w, err := e.Enqueue(ctx, waiting)
		if err != nil {
			t.Fatal(err)
		}
		defer e.removeWaiter(context.Background(), w.q)
	}
	if _, err := cli.Revoke(ctx, g.Lease); err != nil {
		t.Fatal(err)
	}
	for _, r := range []AcquireRequest{reentrant("exsd", "plain", s), reentrant("exsd", "reentrant", s)} {
		if r.RequestID == "plain" {
			r.Reentrant = false
		}
		if got, found, err := e.Existing(ctx, r); err != nil || found {
			t.Fatalf("Existing(session waiter %q first inside a lock-delay) = %+v, %v, %v; want not found", r.RequestID, got.Handle, found, err)
		}
	}
}
