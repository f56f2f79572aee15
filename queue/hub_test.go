package queue

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// A grant after a short wait reports the deadline of the enqueue's lease
// grant and renews nothing; one whose lease has less than half its TTL
// confirmed renews first.
func TestWaitedGrantRenewsOnlyAStaleLease(t *testing.T) {
	fake := newFakeClock()
	e, _ := newEngine(t, func(c *Config) { c.Clock = fake })
	ctx := testCtx(t)
	holder := mustAcquire(t, e, req("fresh-enough"))
	sent := fake.Now()
	w, err := e.Enqueue(ctx, req("fresh-enough"))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan Grant, 1)
	go func() {
		g, err := w.Wait(ctx)
		if err != nil {
			t.Errorf("Wait: %v", err)
		}
		got <- g
	}()
	fake.Advance(time.Second) // before the wait's first renewal (TTL/3)
	mustRelease(t, e, holder)
	g := <-got
	if want := sent.Add(10 * time.Second); !g.Deadline.Equal(want) {
		t.Fatalf("Deadline after a 1s wait = %s; want the enqueue's, %s (no renewal)", g.Deadline, want)
	}
	if want := g.Deadline.Sub(sent); g.Valid != want {
		t.Fatalf("Valid = %s; want %s", g.Valid, want)
	}

	// The next waiter's lease was last confirmed 6s ago (as if its renewals
	// had failed): less than half its TTL is left, so the grant renews.
	w2, err := e.Enqueue(ctx, req("fresh-enough"))
	if err != nil {
		t.Fatal(err)
	}
	w2.q.deadline = fake.Now().Add(4 * time.Second)
	go func() {
		g, err := w2.Wait(ctx)
		if err != nil {
			t.Errorf("Wait: %v", err)
		}
		got <- g
	}()
	renewed := fake.Now()
	mustRelease(t, e, g)
	g2 := <-got
	if want := renewed.Add(10 * time.Second); !g2.Deadline.Equal(want) {
		t.Fatalf("Deadline of a stale lease's grant = %s; want renewed, %s", g2.Deadline, want)
	}
	mustRelease(t, e, g2)
}

// A long queue draining fast does not send a report per grant ahead to
// every waiter: the last one's reports are paced, and the move to 1 is
// reported.
func TestPositionReportsArePaced(t *testing.T) {
	e, _ := newEngine(t)
	ctx := testCtx(t)
	const n = 60
	holder := mustAcquire(t, e, req("paced"))
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		w, err := e.Enqueue(ctx, req("paced"))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if g, err := w.Wait(ctx); err == nil {
				_, _ = e.Release(context.Background(), g.Handle, g.Token())
			}
		}()
	}
	type report struct {
		pos int64
		at  time.Time
	}
	var mu sync.Mutex
	var reports []report
	last := req("paced")
	first := make(chan struct{})
	var once sync.Once
	last.OnQueued = func(p int64) {
		mu.Lock()
		reports = append(reports, report{p, time.Now()})
		mu.Unlock()
		once.Do(func() { close(first) })
	}
	done := make(chan Grant, 1)
	go func() { done <- mustAcquire(t, e, last) }()
	<-first
	began := time.Now()
	mustRelease(t, e, holder)
	g := <-done
	elapsed := time.Since(began)
	wg.Wait()
	mustRelease(t, e, g)
	mu.Lock()
	defer mu.Unlock()
	if reports[0].pos != n+1 || reports[len(reports)-1].pos != 1 {
		t.Fatalf("reports %v; want %d first and 1 last", reports, n+1)
	}
	// At most one report per positionEvery, besides the first and the 1.
	for i := 1; i < len(reports)-1; i++ {
		if gap := reports[i].at.Sub(reports[i-1].at); gap < positionEvery {
			t.Fatalf("reports %d and %d (%d, %d) %s apart; want at least %s", i-1, i, reports[i-1].pos, reports[i].pos, gap, positionEvery)
		}
	}
	if max := 3 + int(elapsed/positionEvery); len(reports) > max {
		t.Fatalf("%d reports in %s for %d grants ahead; want at most %d", len(reports), elapsed, n+1, max)
	}
	t.Logf("%d grants ahead drained in %s: %d reports", n+1, elapsed, len(reports))
}

// A session that ends after its waiter enqueued but before the waiter
// registers with the engine's session watch, which has already delivered
// the end, is not missed: the waiter learns it at once, not when it
// reaches the head.
func TestSessionEndBeforeRegistrationIsNotMissed(t *testing.T) {
	g := newGate("B", pointRegister)
	e, _ := newEngine(t)
	e.hooks = &pointHooks{fn: g.hook}
	ctx := testCtx(t)
	holder := mustAcquire(t, e, req("sess-late"))
	s, err := e.OpenSession(ctx, "b", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// A, on a session of its own, keeps the session watch running.
	other, err := e.OpenSession(ctx, "a", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	a := req("sess-late")
	a.Session, a.SessionSecret = other.Lease, other.Secret
	onA, posA := queuedSignal()
	a.OnQueued = onA
	aCtx, stopA := context.WithCancel(ctx)
	defer stopA()
	go func() { _, _ = acquire(aCtx, e, a) }()
	<-posA
	r := req("sess-late")
	r.Session, r.SessionSecret = s.Lease, s.Secret
	// C, on B's session, registers before B and learns the end first.
	onQ, pos := queuedSignal()
	c := r
	c.RequestID, c.OnQueued = "c-"+r.RequestID, onQ
	cDone := make(chan error, 1)
	go func() { _, err := acquire(ctx, e, c); cDone <- err }()
	<-pos
	b, err := e.Enqueue(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	bDone := make(chan error, 1)
	go func() { _, err := b.Wait(withActor(ctx, "B")); bDone <- err }()
	within(t, g.arrived, 10*time.Second, "B before it registers")
	if err := e.CloseSession(ctx, s.Lease, s.Secret); err != nil {
		t.Fatal(err)
	}
	if err := within(t, cDone, 10*time.Second, "C's end"); !errors.Is(err, ErrSessionLost) {
		t.Fatalf("C after its session closed = %v; want ErrSessionLost", err)
	}
	close(g.open) // the watch delivered the end before B registered
	if err := within(t, bDone, 10*time.Second, "B's end"); !errors.Is(err, ErrSessionLost) {
		t.Fatalf("B after its session closed = %v; want ErrSessionLost", err)
	}
	stopA()
	mustRelease(t, e, holder)
}

// Close ends a wait in progress with ErrClosed, at once: the name's watch
// stops with the engine.
func TestCloseEndsAWaitInProgress(t *testing.T) {
	e, cli := newEngine(t)
	other := peer(t, e, cli)
	holder := mustAcquire(t, other, req("closing"))
	r := req("closing")
	onQ, pos := queuedSignal()
	r.OnQueued = onQ
	done := make(chan error, 1)
	go func() { _, err := acquire(testCtx(t), e, r); done <- err }()
	<-pos
	e.Close()
	if err := within(t, done, 10*time.Second, "the wait's end"); !errors.Is(err, ErrClosed) {
		t.Fatalf("a wait when its engine closed = %v; want ErrClosed", err)
	}
	mustRelease(t, other, holder)
}
