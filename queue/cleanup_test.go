package queue

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestTakeBackFinishesWithoutTheCaller: an enqueue that must take its key
// back (another limit, a full queue) removes it even when its caller goes
// away at that very moment, whatever lease the key rides on.
func TestTakeBackFinishesWithoutTheCaller(t *testing.T) {
	for _, tc := range []struct {
		name    string
		session bool
		full    bool
	}{
		{"limit", false, false}, {"limit-session", true, false}, {"full", false, true}, {"full-session", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, cli := newEngine(t)
			holder := semReq("n", 2)
			if tc.full {
				holder = req("n")
			}
			mustAcquire(t, e, holder)
			r := semReq("n", 3)
			if tc.full {
				r, r.MaxKeys = req("n"), 1
			}
			if tc.session {
				s := mustSession(t, e)
				r.Session, r.SessionSecret = s.Lease, s.Secret
			}
			ctx, cancel := context.WithCancel(testCtx(t))
			defer cancel()
			e.hooks = &pointHooks{fn: func(_ context.Context, p string) {
				if p == pointCleanup {
					cancel() // the caller goes as its key is taken back
				}
			}}
			_, err := e.Enqueue(ctx, r)
			if !errors.Is(err, ErrLimitMismatch) && !errors.Is(err, ErrQueueFull) {
				t.Fatalf("Enqueue = %v; want a refusal", err)
			}
			settle(e)
			e.hooks = nil
			if n := keyCount(t, e, cli, "n"); n != 1 {
				t.Fatalf("%d keys after the refusal; want the holder's alone: the taken-back key stayed", n)
			}
		})
	}
}

// TestRefusalAnsweredOnceItsKeyIsGone: a refused enqueue (another limit,
// a full queue) answers only once its key is taken back, so the refused
// caller, and anyone it tells, finds the name as it was: no background
// removal is left to wait for.
func TestRefusalAnsweredOnceItsKeyIsGone(t *testing.T) {
	e, cli := newEngine(t)
	mustAcquire(t, e, semReq("n", 2))
	if _, err := e.Enqueue(testCtx(t), semReq("n", 3)); !errors.Is(err, ErrLimitMismatch) {
		t.Fatalf("Enqueue with another limit = %v; want ErrLimitMismatch", err)
	}
	if n := keyCount(t, e, cli, "n"); n != 1 {
		t.Fatalf("%d keys when the limit refusal is answered; want the holder's alone", n)
	}
	mustAcquire(t, e, req("m"))
	full := req("m")
	full.MaxKeys = 1
	if _, err := e.Enqueue(testCtx(t), full); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("Enqueue on a full queue = %v; want ErrQueueFull", err)
	}
	if n := keyCount(t, e, cli, "m"); n != 1 {
		t.Fatalf("%d keys when the queue-full refusal is answered; want the holder's alone", n)
	}
	mustAcquire(t, e, semReq("s", 2))
	mustAcquire(t, e, semReq("s", 2))
	if res, err := e.TryAcquire(testCtx(t), semReq("s", 2)); err != nil || res.Acquired {
		t.Fatalf("TryAcquire of a full semaphore = %+v, %v; want refused", res, err)
	}
	if n := keyCount(t, e, cli, "s"); n != 2 {
		t.Fatalf("%d keys when a full semaphore's TryAcquire is answered; want the two holders' alone", n)
	}
}

// TestDetachedWaiterGoesWithinAttemptTTL: a waiter detached from its
// attempt (a gateway shutting down) keeps its place for AttemptTTL, for a
// retry elsewhere, and is removed then — on an engine whose attempt lease
// other waiters keep alive too — unless a retry took it over.
func TestDetachedWaiterGoesWithinAttemptTTL(t *testing.T) {
	clk := newFakeClock()
	e, cli := newEngine(t, func(c *Config) { c.Clock = clk })
	mustAcquire(t, e, req("n"))
	s := mustSession(t, e)
	enqueue := func(rid string) (*Waiter, context.CancelCauseFunc, chan error) {
		r := req("n")
		r.RequestID, r.Session, r.SessionSecret = rid, s.Lease, s.Secret
		w, err := e.Enqueue(testCtx(t), r)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancelCause(testCtx(t))
		done := make(chan error, 1)
		go func() {
			_, err := w.Wait(ctx)
			done <- err
		}()
		return w, cancel, done
	}
	dw, detach, detached := enqueue("detached")
	_, stayCancel, stay := enqueue("busy") // keeps the attempt lease in use
	defer stayCancel(nil)
	_, detachRetried, retriedDone := enqueue("retried")
	detach(ErrDetached)
	if err := <-detached; !errors.Is(err, ErrDetached) {
		t.Fatalf("detached wait = %v", err)
	}
	detachRetried(ErrDetached)
	<-retriedDone
	// A retry takes the second detached waiter over, as on another gateway.
	retry := req("n")
	retry.RequestID, retry.Session, retry.SessionSecret = "retried", s.Lease, s.Secret
	rw, err := e.Enqueue(testCtx(t), retry)
	if err != nil || !rw.q.resumed {
		t.Fatalf("retry = %v (resumed %v); want the detached waiter taken over", err, rw != nil && rw.q.resumed)
	}
	rctx, rcancel := context.WithCancel(testCtx(t))
	defer rcancel()
	go func() { _, _ = rw.Wait(rctx) }()
	if n := keyCount(t, e, cli, "n"); n != 4 {
		t.Fatalf("%d keys right after the detach; want the holder and three waiters (the detached keep their places)", n)
	}
	// Both detached waiters' removals are armed on the engine's clock.
	for deadline := time.Now().Add(10 * time.Second); clk.Pending() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the detached waiters' removals were never armed")
		}
	}
	clk.Advance(e.cfg.AttemptTTL)
	awaitDeleted(t, cli, e.keys.waiter("n", dw.q.h.WaiterID), dw.q.h.Revision)
	settle(e)
	if n := keyCount(t, e, cli, "n"); n != 3 {
		t.Fatalf("%d keys AttemptTTL after the detach; want the holder, the waiter that stayed and the one a retry took over", n)
	}
	select {
	case err := <-stay:
		t.Fatalf("the waiter that stayed ended: %v", err)
	default:
	}
}

// TestSessionEnqueueEndingEarlyGivesItsAttemptLeaseBack: a session enqueue
// whose caller goes before its transaction leaves no reference on the
// attempt lease, which would keep it alive as long as the engine runs.
func TestSessionEnqueueEndingEarlyGivesItsAttemptLeaseBack(t *testing.T) {
	e, _ := newEngine(t)
	s := mustSession(t, e)
	e.sessTTLs.Remove(sessionRef{e.keys.prefix, s.Lease}) // met for the first time: its TTL is read
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	e.hooks = &pointHooks{fn: func(_ context.Context, p string) {
		if p == pointSessionRead {
			cancel()
		}
	}}
	r := req("early")
	r.Session, r.SessionSecret = s.Lease, s.Secret
	if _, err := e.Enqueue(ctx, r); !errors.Is(err, context.Canceled) {
		t.Fatalf("Enqueue = %v; want context.Canceled", err)
	}
	e.hooks = nil
	e.att.mu.Lock()
	refs := e.att.refs
	e.att.mu.Unlock()
	if refs != 0 {
		t.Fatalf("%d references on the attempt lease after the caller went; want 0", refs)
	}
}
