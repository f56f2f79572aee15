package queue

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// reentrant returns a re-entrant session request for name with request id
// rid.
func reentrant(name, rid string, s Session) AcquireRequest {
	return AcquireRequest{Name: name, ClientID: "c", RequestID: rid, Session: s.Lease, SessionSecret: s.Secret, Reentrant: true}
}

func mustSession(t *testing.T, e *Engine) Session {
	t.Helper()
	s, err := e.OpenSession(testCtx(t), "c", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// free reports whether another caller can take name at once.
func free(t *testing.T, e *Engine, name string) bool {
	t.Helper()
	res, err := e.TryAcquire(testCtx(t), req(name))
	if err != nil {
		t.Fatalf("TryAcquire(%q): %v", name, err)
	}
	if res.Acquired {
		mustRelease(t, e, res.Grant)
	}
	return res.Acquired
}

func release(t *testing.T, e *Engine, g Grant) bool {
	t.Helper()
	ok, err := e.Release(testCtx(t), g.Handle, g.Token())
	if err != nil {
		t.Fatalf("Release(%q hold %q): %v", g.Name, g.HoldID, err)
	}
	return ok
}

// holdsRecords counts the holds records left for name.
func holdsRecords(t *testing.T, e *Engine, cli *clientv3.Client, name string) int64 {
	t.Helper()
	resp, err := cli.Get(testCtx(t), e.keys.prefix+"/holds/"+escapeName(name)+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// TestReentrantHoldReleasedOnce: each hold of a re-entered lock is released
// by its own lock id exactly once. A release retried after a lost answer —
// the same hold again, in any order of the holds — drops nothing more, so
// the name stays held while any hold the caller still believes in lives,
// and is free once every hold was released.
func TestReentrantHoldReleasedOnce(t *testing.T) {
	for _, order := range [][]int{{0, 1, 2}, {1, 0, 2}, {2, 1, 0}, {0, 2, 1}} {
		t.Run(fmt.Sprint(order), func(t *testing.T) {
			e, cli := newEngine(t)
			s := mustSession(t, e)
			var gs []Grant
			for i := range 3 {
				gs = append(gs, mustAcquire(t, e, reentrant("re", fmt.Sprintf("hold-%d", i), s)))
			}
			for n, i := range order {
				if !release(t, e, gs[i]) {
					t.Fatalf("release of hold %d: released = false; want true", i)
				}
				for retry := range 2 {
					if release(t, e, gs[i]) {
						t.Fatalf("release of hold %d repeated (%d): released = true; want false, nothing more dropped", i, retry+1)
					}
				}
				left := len(order) - n - 1
				if got := free(t, e, "re"); got != (left == 0) {
					t.Fatalf("after %d of %d holds released (and each release repeated): free = %v", n+1, len(order), got)
				}
			}
			if n := holdsRecords(t, e, cli, "re"); n != 0 {
				t.Fatalf("%d holds records left after the last release; want none", n)
			}
		})
	}
}

// TestReentrantRetryIsTheSameHold: a re-entrant acquire retried with the
// same request id is the hold it already took, not another; the lock's own
// acquire retried re-entrant adds no hold either. One release per hold the
// caller believes in frees the name.
func TestReentrantRetryIsTheSameHold(t *testing.T) {
	e, _ := newEngine(t)
	s := mustSession(t, e)
	outer := mustAcquire(t, e, reentrant("re", "outer", s))
	inner := mustAcquire(t, e, reentrant("re", "inner", s))
	again := mustAcquire(t, e, reentrant("re", "inner", s))
	if again.HoldID != inner.HoldID || again.Holds != 2 || !again.Resumed {
		t.Fatalf("retried re-entry: hold %q (first %q), holds %d, resumed %v; want the same hold, 2 holds, resumed",
			again.HoldID, inner.HoldID, again.Holds, again.Resumed)
	}
	outerAgain := mustAcquire(t, e, reentrant("re", "outer", s))
	if outerAgain.Revision != outer.Revision || outerAgain.HoldID != "" {
		t.Fatalf("retried outer acquire: revision %d hold %q; want the lock's own hold of revision %d", outerAgain.Revision, outerAgain.HoldID, outer.Revision)
	}
	if !release(t, e, again) {
		t.Fatal("release of the inner hold: released = false")
	}
	if free(t, e, "re") {
		t.Fatal("free after one of two holds was released")
	}
	if !release(t, e, outerAgain) {
		t.Fatal("release of the outer hold: released = false")
	}
	if !free(t, e, "re") {
		t.Fatal("still held after both holds were released: a retry added a hold")
	}
}

// TestReentrantZombieGiveUpKeepsRetriedHold: an attempt whose re-entry was
// retried (its client moved on) gives its undelivered grant up; the retry
// took the hold over, so the give-up drops nothing and the hold the caller
// believes in still keeps the name.
func TestReentrantZombieGiveUpKeepsRetriedHold(t *testing.T) {
	e, _ := newEngine(t)
	s := mustSession(t, e)
	outer := mustAcquire(t, e, reentrant("re", "outer", s))
	zombie := mustAcquire(t, e, reentrant("re", "inner", s))
	retry := mustAcquire(t, e, reentrant("re", "inner", s))
	e.Abandon(testCtx(t), zombie)
	settle(e)
	if !release(t, e, outer) {
		t.Fatal("release of the outer hold: released = false")
	}
	if free(t, e, "re") {
		t.Fatal("the zombie's give-up dropped the hold its retry delivered: the name is free while the caller holds it")
	}
	if !release(t, e, retry) || !free(t, e, "re") {
		t.Fatal("the retried hold did not free the name")
	}
	// An undelivered hold nobody retried is given up.
	outer = mustAcquire(t, e, reentrant("re", "outer2", s))
	lost := mustAcquire(t, e, reentrant("re", "inner2", s))
	e.Abandon(testCtx(t), lost)
	settle(e)
	if !release(t, e, outer) || !free(t, e, "re") {
		t.Fatal("an undelivered hold kept the name after the only delivered hold was released")
	}
}

// TestForceReleaseEndsHolds: a force-release of a re-entered lock takes its
// holds with it; a later lock under the same waiter id inherits none: one
// release frees it, and its cleanups can remove it.
func TestForceReleaseEndsHolds(t *testing.T) {
	e, cli := newEngine(t)
	s := mustSession(t, e)
	mustAcquire(t, e, reentrant("re", "outer", s))
	mustAcquire(t, e, reentrant("re", "inner", s))
	if _, err := e.ForceRelease(testCtx(t), ForceReleaseRequest{Name: "re", Reason: "stuck", Actor: "op"}); err != nil {
		t.Fatal(err)
	}
	if n := holdsRecords(t, e, cli, "re"); n != 0 {
		t.Fatalf("%d holds records left after the force-release; want none", n)
	}
	// The same request id again: the same waiter id, a new key.
	g := mustAcquire(t, e, reentrant("re", "outer", s))
	if g.Holds > 1 {
		t.Fatalf("new lock under the evicted waiter id has %d holds; want its own only", g.Holds)
	}
	if !release(t, e, g) || !free(t, e, "re") {
		t.Fatal("one release did not free a lock acquired once after a force-release")
	}
	// Its undelivered grant is given up like any other.
	g = mustAcquire(t, e, reentrant("re", "outer", s))
	e.Abandon(testCtx(t), g)
	settle(e)
	if !free(t, e, "re") {
		t.Fatal("the give-up of an undelivered grant under the evicted waiter id left the key")
	}
}

// TestReentrantConcurrentReleases: holds released at the same moment from
// different callers never leave the lock held by no hold, nor free it while
// a hold lives.
func TestReentrantConcurrentReleases(t *testing.T) {
	e, cli := newEngine(t)
	s := mustSession(t, e)
	for round := range 5 {
		var gs []Grant
		for i := range 4 {
			gs = append(gs, mustAcquire(t, e, reentrant("re", fmt.Sprintf("r%d-%d", round, i), s)))
		}
		var wg sync.WaitGroup
		errs := make(chan error, len(gs))
		for _, g := range gs[1:] {
			wg.Go(func() {
				if ok, err := e.Release(testCtx(t), g.Handle, g.Token()); err != nil || !ok {
					errs <- fmt.Errorf("release hold %q = %v, %v", g.HoldID, ok, err)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if free(t, e, "re") {
			t.Fatalf("round %d: free while the first hold lives", round)
		}
		if !release(t, e, gs[0]) {
			t.Fatalf("round %d: the last hold's release = false", round)
		}
		if !free(t, e, "re") {
			t.Fatalf("round %d: held after every hold was released", round)
		}
		if n := holdsRecords(t, e, cli, "re"); n != 0 {
			t.Fatalf("round %d: %d holds records left", round, n)
		}
	}
}

// TestReentrantHoldsBounded: a re-entered lock takes at most MaxHolds
// holds; the next is refused with ErrTooManyHolds and the lock keeps those
// it has.
func TestReentrantHoldsBounded(t *testing.T) {
	e, _ := newEngine(t)
	s := mustSession(t, e)
	var gs []Grant
	for i := range MaxHolds {
		gs = append(gs, mustAcquire(t, e, reentrant("re", fmt.Sprintf("h%d", i), s)))
	}
	if _, err := acquire(testCtx(t), e, reentrant("re", "one-too-many", s)); !errors.Is(err, ErrTooManyHolds) {
		t.Fatalf("hold %d: %v; want ErrTooManyHolds", MaxHolds+1, err)
	}
	for _, g := range gs {
		release(t, e, g)
	}
	if !free(t, e, "re") {
		t.Fatal("held after every hold was released")
	}
}

// TestAReleasedOwnHoldIsNotHandedOutAgain: a re-entered lock whose key's
// own hold was released lives on for its other holds. An acquire under the
// key's request id is then no retry of a live hold: re-entrant, it adds a
// hold of its own (which keeps the name held after the others go, and
// which a late copy of the first release does not drop); not re-entrant, it
// is refused. Handing it the released hold would leave the name free
// while its caller believes it holds.
func TestAReleasedOwnHoldIsNotHandedOutAgain(t *testing.T) {
	e, _ := newEngine(t)
	ctx := testCtx(t)
	s := mustSession(t, e)
	outer := reentrant("oh", "lock", s)
	g := mustAcquire(t, e, outer)
	inner := mustAcquire(t, e, reentrant("oh", "hold", s))
	mustRelease(t, e, g)
	plain := outer
	plain.Reentrant = false
	if _, err := acquire(ctx, e, plain); !errors.Is(err, ErrReleased) {
		t.Fatalf("a plain acquire under the released own hold's request id = %v; want ErrReleased", err)
	}
	again := mustAcquire(t, e, outer)
	if again.HoldID == "" || again.HoldID == inner.HoldID || again.Holds != 2 {
		t.Fatalf("acquire again under the released own hold's request id: hold %q with %d holds; want a hold of its own, 2 holds", again.HoldID, again.Holds)
	}
	if ok, err := e.Release(ctx, g.Handle, g.Token()); ok || err != nil {
		t.Fatalf("a late copy of the own hold's release = %v, %v; want false, nil", ok, err)
	}
	mustRelease(t, e, inner)
	if free(t, e, "oh") {
		t.Fatal("the name is free while the hold acquired again is held")
	}
	mustRelease(t, e, again)
	if !free(t, e, "oh") {
		t.Fatal("the name is held after its last hold was released")
	}
}
