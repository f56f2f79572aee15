package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Regression tests for hostile and racing clients. Each names the hole it
// keeps closed.

// actorKey tags a context with the actor a test hook acts on.
type actorKey struct{}

func withActor(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, actorKey{}, name)
}

func actorOf(ctx context.Context) string {
	s, _ := ctx.Value(actorKey{}).(string)
	return s
}

// pointHooks calls fn at every interleaving point, and onPark whenever an
// actor parks; both may block.
type pointHooks struct {
	fn     func(ctx context.Context, point string)
	onPark func(ctx context.Context, p parked)
	// onLease, when set, receives the engine's lease events.
	onLease func(ctx context.Context, event string, id clientv3.LeaseID, rev int64)
}

func (h *pointHooks) at(ctx context.Context, point string) {
	if h.fn != nil {
		h.fn(ctx, point)
	}
}
func (h *pointHooks) spawn(ctx context.Context, _ string) context.Context { return ctx }
func (h *pointHooks) end(context.Context)                                 {}
func (h *pointHooks) park(ctx context.Context, p parked) {
	if h.onPark != nil {
		h.onPark(ctx, p)
	}
}
func (h *pointHooks) unpark(context.Context)                       {}
func (h *pointHooks) granted(context.Context, Grant, int64, int64) {}
func (h *pointHooks) lease(ctx context.Context, event string, id clientv3.LeaseID, rev int64) {
	if h.onLease != nil {
		h.onLease(ctx, event, id, rev)
	}
}

// gate blocks the first arrival of actor at point until opened, and
// reports the arrival.
type gate struct {
	actor, point string
	once         sync.Once
	arrived      chan struct{}
	open         chan struct{}
}

func newGate(actor, point string) *gate {
	return &gate{actor: actor, point: point, arrived: make(chan struct{}), open: make(chan struct{})}
}

func (g *gate) hook(ctx context.Context, point string) {
	if point != g.point || actorOf(ctx) != g.actor {
		return
	}
	first := false
	g.once.Do(func() { first = true })
	if first {
		close(g.arrived)
		<-g.open
	}
}

// within fails the test unless ch delivers before a generous bound; the
// bound only turns a hang into a failure.
func within[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("timed out after %s waiting for %s", d, what)
	}
	var zero T
	return zero
}

// peer returns a second engine over the same keys: another gateway.
func peer(t *testing.T, e *Engine, cli *clientv3.Client) *Engine {
	t.Helper()
	p, err := New(cli, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// Hole 1: a Release that trusted a lock id's lease field would revoke that
// lease after deleting the caller's own key. It revokes only the lease it
// reads back from the key it deleted.
func TestForgedLeaseInHandleRevokesNothing(t *testing.T) {
	e, cli := newEngine(t)
	ctx := testCtx(t)
	victim := mustAcquire(t, e, req("victim"))
	sess, err := e.OpenSession(ctx, "other-tenant", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sr := req("session-lock")
	sr.Session, sr.SessionSecret = sess.Lease, sess.Secret
	sessLock := mustAcquire(t, e, sr)
	mine := mustAcquire(t, e, req("mine"))

	for _, target := range []clientv3.LeaseID{victim.Lease, sess.Lease} {
		forged := mine.Handle
		forged.Lease = target
		if ok, err := e.Release(ctx, forged, mine.Token()); ok || !errors.Is(err, ErrNotOwner) {
			t.Fatalf("Release(own lock, lease of another) = %v, %v; want false, ErrNotOwner", ok, err)
		}
		if _, err := e.Renew(ctx, forged, mine.Token()); !errors.Is(err, ErrNotOwner) {
			t.Fatalf("Renew(own lock, lease of another) = %v; want ErrNotOwner", err)
		}
		// A session flag flipped on a per-lock id proves nothing either.
		flipped := mine.Handle
		flipped.Session = !flipped.Session
		if _, err := e.Renew(ctx, flipped, mine.Token()); err != nil {
			t.Fatalf("Renew with a flipped session flag = %v; the flag is not trusted, the key is", err)
		}
	}
	// Nothing of anyone else's was touched, and the caller's own lock holds.
	for _, g := range []Grant{victim, sessLock, mine} {
		if _, err := e.Renew(ctx, g.Handle, g.Token()); err != nil {
			t.Fatalf("Renew(%q) after forged releases = %v; want held", g.Name, err)
		}
	}
	for _, l := range []clientv3.LeaseID{victim.Lease, sess.Lease, mine.Lease} {
		if ttl, err := cli.TimeToLive(ctx, l); err != nil || ttl.TTL <= 0 {
			t.Fatalf("lease %x after forged releases: ttl %v, %v; want alive", int64(l), ttl, err)
		}
	}
	// The real release still works, and revokes only the lock's own lease.
	mustRelease(t, e, mine)
	if ttl, err := cli.TimeToLive(ctx, sess.Lease); err != nil || ttl.TTL <= 0 {
		t.Fatalf("session lease after an honest release of another lock: %v, %v", ttl, err)
	}
	// Releasing a session lock never revokes the session's lease.
	if ok, err := e.Release(ctx, sessLock.Handle, sessLock.Token()); !ok || err != nil {
		t.Fatalf("Release(session lock) = %v, %v", ok, err)
	}
	if ttl, err := cli.TimeToLive(ctx, sess.Lease); err != nil || ttl.TTL <= 0 {
		t.Fatalf("session lease after releasing one of its locks: %v, %v; want alive", ttl, err)
	}
}

// Hole 2: a waiter that checked only that its predecessor still exists
// would wait on a predecessor released and enqueued again under the same
// request id — a new key behind the waiter — and the two would deadlock.
// The hub's view keys identity by create revision: here the deletion and
// the new key reach the view while the hub is held before applying the
// deletion.
func TestPredecessorReenqueuedUnderSameRequestIDIsNotWaitedOn(t *testing.T) {
	g := newGate("W", pointHubEvent)
	e, _ := newEngine(t, func(c *Config) {})
	hubReady := make(chan struct{})
	var ready sync.Once
	e.hooks = &pointHooks{fn: g.hook, onPark: func(_ context.Context, p parked) {
		if p.hub {
			ready.Do(func() { close(hubReady) })
		}
	}}
	ctx := testCtx(t)
	pr := AcquireRequest{Name: "aba", TTL: 10 * time.Second, ClientID: "p", RequestID: "stable-p"}
	p := mustAcquire(t, e, pr)

	wr := req("aba")
	onQ, pos := queuedSignal()
	wr.OnQueued = onQ
	granted := make(chan error, 1)
	go func() {
		g, err := acquireWithin(withActor(ctx, "W"), e, wr, 5*time.Second)
		if err == nil {
			_, err = e.Release(ctx, g.Handle, g.Token())
		}
		granted <- err
	}()
	<-pos // enqueued behind P
	within(t, hubReady, 10*time.Second, "the hub's view")
	// P lets go and enqueues again with the same request id: same key
	// name, new identity, behind W. The hub holds the deletion at its
	// first event until both are in etcd.
	mustRelease(t, e, p)
	within(t, g.arrived, 10*time.Second, "the hub at its first event")
	p2, err := e.Enqueue(ctx, pr)
	if err != nil {
		t.Fatal(err)
	}
	close(g.open)
	if err := within(t, granted, 10*time.Second, "the waiter's grant"); err != nil {
		t.Fatalf("waiter behind a re-enqueued predecessor: %v; want granted", err)
	}
	if _, err := p2.Wait(ctx); err != nil {
		t.Fatalf("re-enqueued P after W released: %v", err)
	}
}

// Hole 2, statistically: clients with stable request ids and no hold time.
func TestStableRequestIDsNeverStall(t *testing.T) {
	e, _ := newEngine(t)
	var mu sync.Mutex
	var stalls, grants int
	var wg sync.WaitGroup
	for a := 0; a < 4; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := AcquireRequest{Name: "aba", TTL: 10 * time.Second, ClientID: "c", RequestID: fmt.Sprintf("stable-%d", a)}
			for i := 0; i < 60; i++ {
				g, err := acquireWithin(testCtx(t), e, r, 2*time.Second)
				mu.Lock()
				if errors.Is(err, ErrWaitTimeout) {
					stalls++
				} else if err == nil {
					grants++
				} else {
					t.Errorf("Acquire: %v", err)
				}
				mu.Unlock()
				if err == nil {
					if _, err := e.Release(testCtx(t), g.Handle, g.Token()); err != nil {
						t.Errorf("Release: %v", err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if stalls > 0 {
		t.Fatalf("%d of %d acquires stalled until their wait timeout; want none", stalls, stalls+grants)
	}
}

// Hole 3: a dead attempt's cleanup that compared only the key's create
// revision would delete the key of a retry with the same request id that
// resumed it on another gateway and was granted, and the next waiter would
// be granted beside it. The cleanup compares its attempt's mod revision.
func TestZombieCleanupCannotDeleteResumedHolder(t *testing.T) {
	cleanup := newGate("A", pointCleanup)
	var cleaned sync.Once
	done := make(chan struct{})
	e1, cli := newEngine(t)
	e1.hooks = &pointHooks{fn: func(ctx context.Context, point string) {
		cleanup.hook(ctx, point)
		if point == pointCleaned && actorOf(ctx) == "A" {
			cleaned.Do(func() { close(done) })
		}
	}}
	e2 := peer(t, e1, cli)
	ctx := testCtx(t)
	holder := mustAcquire(t, e2, req("x"))

	r := req("x")
	actx, streamDied := context.WithCancel(withActor(ctx, "A"))
	w1, err := e1.Enqueue(actx, r)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { _, err := w1.Wait(actx); waited <- err }()
	streamDied()
	if err := within(t, waited, 10*time.Second, "A's wait to end"); !errors.Is(err, context.Canceled) {
		t.Fatalf("A's wait = %v; want canceled", err)
	}
	within(t, cleanup.arrived, 10*time.Second, "A's cleanup")

	// The client retries on the other gateway and is granted there.
	w2, err := e2.Enqueue(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if !w2.q.resumed {
		t.Fatal("the retry did not resume the waiter")
	}
	mustRelease(t, e2, holder)
	g2, err := w2.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	third := req("x")
	thirdDone := make(chan error, 1)
	go func() { _, err := acquireWithin(ctx, e2, third, 3*time.Second); thirdDone <- err }()

	close(cleanup.open) // the first gateway's cleanup lands now
	within(t, done, 10*time.Second, "A's cleanup to finish")
	if _, err := e2.Renew(ctx, g2.Handle, g2.Token()); err != nil {
		t.Fatalf("the resumed holder after the zombie cleanup: %v; want still held", err)
	}
	if err := <-thirdDone; !errors.Is(err, ErrWaitTimeout) {
		t.Fatalf("a third waiter while the resumed holder holds: %v; want it kept waiting (ErrWaitTimeout)", err)
	}
	mustRelease(t, e2, g2)
}

// detachedSessionWaiter enqueues a session waiter on e behind a holder on
// e2 and detaches it, as a gateway shutdown does; its client never comes
// back. It returns the holder.
func detachedSessionWaiter(t *testing.T, e, e2 *Engine) Grant {
	t.Helper()
	ctx := testCtx(t)
	sess, stop := keptSession(t, e2)
	t.Cleanup(stop)
	holder := mustAcquire(t, e2, req("x"))
	r := req("x")
	r.Session, r.SessionSecret = sess.Lease, sess.Secret
	w, err := e.Enqueue(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	wctx, detach := context.WithCancelCause(ctx)
	waited := make(chan error, 1)
	go func() { _, err := w.Wait(wctx); waited <- err }()
	detach(ErrDetached)
	<-waited
	return holder
}

// Hole 4: a session waiter detached at gateway shutdown that rode on the
// session lease, which its client keeps alive, would become the holder with
// nobody to resume it and block the name for as long as the session lives.
// It rides on the attempt lease until it is granted.
func TestDetachedSessionWaiterLapsesWithItsGateway(t *testing.T) {
	e, cli := newEngine(t, func(c *Config) { c.AttemptTTL = 2 * time.Second })
	e2 := peer(t, e, cli)
	holder := detachedSessionWaiter(t, e, e2)
	e.Close() // the gateway is gone
	mustRelease(t, e2, holder)
	other := req("x")
	start := time.Now()
	g, err := acquireWithin(testCtx(t), e2, other, 3*e.cfg.AttemptTTL+2*time.Second)
	if err != nil {
		t.Fatalf("the name after the detached session waiter's gateway stopped: %v; want granted within about AttemptTTL", err)
	}
	t.Logf("granted %s after the release, AttemptTTL %s", time.Since(start).Round(time.Millisecond), e.cfg.AttemptTTL)
	mustRelease(t, e2, g)
}

// Hole 4, gateway alive: a session waiter whose attempt ended without a
// cleanup (detached) dies with the attempt lease once no attempt uses it.
func TestAbandonedSessionWaiterLapsesWhileGatewayLives(t *testing.T) {
	e, cli := newEngine(t, func(c *Config) { c.AttemptTTL = 2 * time.Second })
	e2 := peer(t, e, cli)
	holder := detachedSessionWaiter(t, e, e2)
	mustRelease(t, e2, holder)
	other := req("x")
	g, err := acquireWithin(testCtx(t), e2, other, 4*e.cfg.AttemptTTL+2*time.Second)
	if err != nil {
		t.Fatalf("the name behind an abandoned session waiter: %v; want granted once the attempt lease went idle", err)
	}
	mustRelease(t, e2, g)
}

// Hole 4, undelivered grant: a grant that cannot be delivered is given up.
func TestUndeliveredSessionGrantIsGivenUp(t *testing.T) {
	e, cli := newEngine(t)
	var armed atomic.Bool
	done := make(chan struct{})
	e.hooks = &pointHooks{fn: func(_ context.Context, p string) {
		if p == pointCleaned && armed.CompareAndSwap(true, false) {
			close(done)
		}
	}}
	ctx := testCtx(t)
	sess, stop := keptSession(t, e)
	defer stop()
	holder := mustAcquire(t, e, req("x"))
	r := req("x")
	r.Session, r.SessionSecret = sess.Lease, sess.Secret
	w, err := e.Enqueue(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan Grant, 1)
	go func() { g, _ := w.Wait(ctx); got <- g }()
	mustRelease(t, e, holder)
	g := within(t, got, 10*time.Second, "the session waiter's grant")
	if g.Revision == 0 {
		t.Fatal("no grant")
	}
	e.Abandon(ctx, g) // the stream broke before the grant was sent
	other := req("x")
	g2, err := acquireWithin(ctx, e, other, 5*time.Second)
	if err != nil {
		t.Fatalf("the name after an undelivered grant was given up: %v", err)
	}
	mustRelease(t, e, g2)

	// A grant taken over by a retry (which may have delivered it) is kept.
	holder = mustAcquire(t, e, req("y"))
	r = req("y")
	r.Session, r.SessionSecret = sess.Lease, sess.Secret
	w, err = e.Enqueue(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	go func() { g, _ := w.Wait(ctx); got <- g }()
	mustRelease(t, e, holder)
	g = within(t, got, 10*time.Second, "the session waiter's grant")
	retry, err := peer(t, e, cli).TryAcquire(ctx, r)
	if err != nil || !retry.Acquired || retry.Grant.Token() != g.Token() {
		t.Fatalf("retry of a granted request id = %+v, %v; want the same grant", retry, err)
	}
	armed.Store(true)
	e.Abandon(ctx, g)
	within(t, done, 10*time.Second, "the give-up to finish")
	if _, err := e.Renew(ctx, retry.Grant.Handle, retry.Grant.Token()); err != nil {
		t.Fatalf("the retried grant after the first attempt gave up: %v; want held", err)
	}
}

// Hole 5: a Resume that handed the handle, secret included, to anyone in
// the tenant who presents the name and request id would give them the
// lock. A resume by anyone but the caller that enqueued is refused.
func TestRequestIDDoesNotHandOutOwnership(t *testing.T) {
	e, _ := newEngine(t)
	ctx := testCtx(t)
	sess, stop := keptSession(t, e)
	defer stop()
	other, stop2 := keptSession(t, e)
	defer stop2()

	held := req("x")
	held.Owner, held.ClientID = "alice", "worker-1"
	g := mustAcquire(t, e, held)
	waiting := req("x")
	waiting.Owner, waiting.ClientID = "alice", "worker-1"
	waiting.Session, waiting.SessionSecret = sess.Lease, sess.Secret
	w, err := e.Enqueue(ctx, waiting)
	if err != nil {
		t.Fatal(err)
	}

	for _, base := range []AcquireRequest{held, waiting} {
		thieves := map[string]AcquireRequest{}
		r := base
		r.Owner = "mallory"
		thieves["another subject"] = r
		r = base
		r.ClientID = "worker-2"
		thieves["another client id"] = r
		r = base
		r.Session, r.SessionSecret = other.Lease, other.Secret
		if base.Session == 0 {
			r.TTL = 0
		}
		thieves["another session"] = r
		for what, r := range thieves {
			if _, err := e.Enqueue(ctx, r); !errors.Is(err, ErrNotOwner) {
				t.Errorf("Enqueue by %s with the same request id = %v; want ErrNotOwner", what, err)
			}
			if _, err := e.TryAcquire(ctx, r); !errors.Is(err, ErrNotOwner) {
				t.Errorf("TryAcquire by %s with the same request id = %v; want ErrNotOwner", what, err)
			}
			if _, err := e.Resume(ctx, r); !errors.Is(err, ErrNotOwner) {
				t.Errorf("Resume by %s with the same request id = %v; want ErrNotOwner", what, err)
			}
		}
	}
	// The owner itself resumes both.
	again, err := e.Enqueue(ctx, held)
	if err != nil || again.q.h.Secret != g.Secret {
		t.Fatalf("the owner's retry = %v; want the same waiter", err)
	}
	againW, err := e.Enqueue(ctx, waiting)
	if err != nil || againW.q.h.Secret != w.q.h.Secret {
		t.Fatalf("the owner's retry of the waiter = %v; want the same waiter", err)
	}
	mustRelease(t, e, g)
	if _, err := againW.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// keptSession opens a session and keeps it alive until stop.
func keptSession(t *testing.T, e *Engine) (Session, func()) {
	t.Helper()
	s, err := e.OpenSession(testCtx(t), "c", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tk := time.NewTicker(500 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-done:
				return
			case <-tk.C:
				_, _ = e.KeepAliveSession(context.Background(), s.Lease, s.Secret)
			}
		}
	}()
	return s, func() { close(done); <-stopped }
}

// A session waiter's grant moves its key onto the session lease only while
// its attempt owns the key: an attempt taken over by a retry (on another
// gateway) must not move it, or its give-up would delete what the retry
// delivers.
func TestSupersededSessionWaiterCannotGrant(t *testing.T) {
	g := newGate("Z", pointGrant)
	e, cli := newEngine(t)
	e.hooks = &pointHooks{fn: g.hook}
	e2 := peer(t, e, cli)
	ctx := testCtx(t)
	sess, stop := keptSession(t, e)
	defer stop()
	holder := mustAcquire(t, e2, req("x"))
	r := req("x")
	r.Session, r.SessionSecret = sess.Lease, sess.Secret
	z, err := e.Enqueue(withActor(ctx, "Z"), r)
	if err != nil {
		t.Fatal(err)
	}
	zDone := make(chan error, 1)
	go func() { _, err := z.Wait(withActor(ctx, "Z")); zDone <- err }()
	mustRelease(t, e2, holder)
	within(t, g.arrived, 10*time.Second, "Z at its grant")
	retry, err := e2.Enqueue(ctx, r) // the client retried elsewhere
	if err != nil || !retry.q.resumed {
		t.Fatalf("retry = %v (resumed %v)", err, retry != nil && retry.q.resumed)
	}
	close(g.open)
	if err := within(t, zDone, 10*time.Second, "Z's end"); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("the superseded attempt's grant = %v; want ErrSuperseded", err)
	}
	rg, err := retry.Wait(ctx)
	if err != nil {
		t.Fatalf("the retry: %v", err)
	}
	if _, err := e2.Renew(ctx, rg.Handle, rg.Token()); err != nil {
		t.Fatalf("the retry's grant: %v", err)
	}
}
