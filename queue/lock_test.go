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

	"github.com/leasegate/leasegate/internal/timingtest"
)

func TestUncontestedAcquireRelease(t *testing.T) {
	e, cli := newEngine(t)
	g := mustAcquire(t, e, req("job"))
	if g.Token() <= 0 || g.TTL != 10*time.Second || g.Resumed {
		t.Fatalf("grant = %+v; want positive token, 10s TTL, not resumed", g)
	}
	if n := keyCount(t, e, cli, "job"); n != 1 {
		t.Fatalf("keys while held = %d; want 1", n)
	}
	mustRelease(t, e, g)
	if n := keyCount(t, e, cli, "job"); n != 0 {
		t.Fatalf("keys after release = %d; want 0", n)
	}
	// Idempotent: a second release reports nothing released, no error.
	ok, err := e.Release(testCtx(t), g.Handle, g.Token())
	if ok || err != nil {
		t.Fatalf("second Release = %v, %v; want false, nil", ok, err)
	}
}

func TestRaceExactlyOneTryAcquireWins(t *testing.T) {
	e, _ := newEngine(t)
	const n = 50
	var wins atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := e.TryAcquire(testCtx(t), req("contested"))
			if err != nil {
				t.Errorf("TryAcquire: %v", err)
				return
			}
			if res.Acquired {
				wins.Add(1)
			} else if res.Holder == nil || res.Holder.Token <= 0 {
				t.Errorf("TryAcquire lost without a holder: %+v", res)
			}
		}()
	}
	close(start)
	wg.Wait()
	if got := wins.Load(); got != 1 {
		t.Fatalf("winners = %d; want exactly 1 of %d", got, n)
	}
}

func TestRaceAcquireMutualExclusion(t *testing.T) {
	e, _ := newEngine(t)
	const n = 50
	var inside, maxInside, grants atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	tokens := make(chan int64, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			g, err := acquire(testCtx(t), e, req("mutex"))
			if err != nil {
				t.Errorf("Acquire: %v", err)
				return
			}
			if v := inside.Add(1); v > maxInside.Load() {
				maxInside.Store(v)
			}
			grants.Add(1)
			tokens <- g.Token()
			inside.Add(-1)
			if ok, err := e.Release(testCtx(t), g.Handle, g.Token()); err != nil || !ok {
				t.Errorf("Release = %v, %v", ok, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(tokens)
	if maxInside.Load() != 1 || grants.Load() != n {
		t.Fatalf("max holders at once = %d, grants = %d; want 1 and %d", maxInside.Load(), grants.Load(), n)
	}
	var prev int64
	for tok := range tokens {
		if tok <= prev {
			t.Fatalf("token %d after %d: not strictly increasing", tok, prev)
		}
		prev = tok
	}
}

func TestFIFOOrderWithManyWaiters(t *testing.T) {
	e, _ := newEngine(t)
	holder := mustAcquire(t, e, req("fifo"))
	const n = 24
	granted := make(chan int, n)
	var wg sync.WaitGroup
	allPositions := make([]chan int64, n)
	for i := 0; i < n; i++ {
		r := req("fifo")
		onQ, positions := queuedSignal()
		allPositions[i] = positions
		r.OnQueued = onQ
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			g, err := acquire(testCtx(t), e, r)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			granted <- i
			mustRelease(t, e, g)
		}(i)
		// Enqueue order is fixed by waiting for each waiter's first
		// position report before starting the next.
		if p := <-positions; p != int64(i+1) {
			t.Fatalf("waiter %d first position = %d; want %d", i, p, i+1)
		}
	}
	mustRelease(t, e, holder)
	wg.Wait()
	close(granted)
	want := 0
	for got := range granted {
		if got != want {
			t.Fatalf("grant %d went to waiter %d; want FIFO order", want, got)
		}
		want++
	}
	// Positions fall as the queue drains,
	// though each waiter watches only its predecessor.
	for i, ch := range allPositions {
		close(ch)
		last := int64(i + 1)
		for p := range ch {
			if p >= last {
				t.Fatalf("waiter %d position went from %d to %d; want decreasing", i, last, p)
			}
			last = p
		}
	}
}

func TestTokensStrictlyIncreasingOver100Cycles(t *testing.T) {
	e, cli := newEngine(t)
	var prev int64
	for i := 0; i < 100; i++ {
		g := mustAcquire(t, e, req("cycles"))
		if g.Token() <= prev {
			t.Fatalf("cycle %d token %d not above %d", i, g.Token(), prev)
		}
		prev = g.Token()
		// Unrelated writes between cycles must not matter.
		if _, err := cli.Put(testCtx(t), e.cfg.Prefix+"/noise", "x"); err != nil {
			t.Fatal(err)
		}
		mustRelease(t, e, g)
	}
}

func TestPrefixNamesAreIndependent(t *testing.T) {
	e, _ := newEngine(t)
	names := []string{"a", "a/b", "a-b", "a%2Fb", "a/", "ab", "a b", "ä"}
	var grants []Grant
	for _, n := range names {
		res, err := e.TryAcquire(testCtx(t), req(n))
		if err != nil || !res.Acquired {
			t.Fatalf("TryAcquire(%q) = %+v, %v; want acquired (names must not collide)", n, res, err)
		}
		grants = append(grants, res.Grant)
	}
	for i, n := range names {
		d, err := e.Describe(testCtx(t), n)
		if err != nil {
			t.Fatal(err)
		}
		if d.Holder == nil || d.Holder.Token != grants[i].Token() || d.Waiters != 0 {
			t.Fatalf("Describe(%q) = %+v; want holder token %d and no waiters", n, d, grants[i].Token())
		}
	}
}

func TestCancelledWaiterLeavesAndQueueAdvances(t *testing.T) {
	e, cli := newEngine(t)
	holder := mustAcquire(t, e, req("cancel"))
	ctx, cancel := context.WithCancel(testCtx(t))
	r1 := req("cancel")
	onQ, pos := queuedSignal()
	r1.OnQueued = onQ
	done := make(chan error, 1)
	go func() { _, err := acquire(ctx, e, r1); done <- err }()
	<-pos
	r2 := req("cancel")
	onQ2, pos2 := queuedSignal()
	r2.OnQueued = onQ2
	got2 := make(chan Grant, 1)
	go func() { got2 <- mustAcquire(t, e, r2) }()
	if p := <-pos2; p != 2 {
		t.Fatalf("second waiter position = %d; want 2", p)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire = %v; want context.Canceled", err)
	}
	e.tasks.Wait() // the key's removal runs in the background
	if n := keyCount(t, e, cli, "cancel"); n != 2 {
		t.Fatalf("keys after cancel = %d; want 2 (holder and second waiter)", n)
	}
	mustRelease(t, e, holder)
	g2 := <-got2
	if g2.Token() <= holder.Token() {
		t.Fatalf("second waiter token %d not above holder's %d", g2.Token(), holder.Token())
	}
}

// A wait its caller's timeout ends (the gateway cancels the wait's context
// with ErrWaitTimeout) answers with that cause and leaves no key.
func TestTimedOutWaiterLeavesNoKey(t *testing.T) {
	e, cli := newEngine(t)
	holder := mustAcquire(t, e, req("timeout"))
	r := req("timeout")
	onQ, pos := queuedSignal()
	r.OnQueued = onQ
	ctx, timeOut := context.WithCancelCause(testCtx(t))
	done := make(chan error, 1)
	go func() { _, err := acquire(ctx, e, r); done <- err }()
	<-pos
	select {
	case err := <-done:
		t.Fatalf("Acquire ended before its wait timeout: %v", err)
	default:
	}
	timeOut(ErrWaitTimeout)
	if err := <-done; !errors.Is(err, ErrWaitTimeout) {
		t.Fatalf("Acquire = %v; want ErrWaitTimeout", err)
	}
	e.tasks.Wait() // the key's removal runs in the background
	if n := keyCount(t, e, cli, "timeout"); n != 1 {
		t.Fatalf("keys after timeout = %d; want only the holder's", n)
	}
	mustRelease(t, e, holder)
}

func TestWaiterWhoseLeaseDiesIsNeverGranted(t *testing.T) {
	e, cli := newEngine(t)
	holder := mustAcquire(t, e, req("lease-dies"))
	var waiterLease clientv3.LeaseID
	r := req("lease-dies")
	onQ, pos := queuedSignal()
	r.OnQueued = onQ
	done := make(chan error, 1)
	go func() { _, err := acquire(testCtx(t), e, r); done <- err }()
	<-pos
	resp, err := cli.Get(testCtx(t), e.keys.waiter("lease-dies", WaiterID(r.RequestID)))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("waiter key: %v, %v", resp, err)
	}
	waiterLease = clientv3.LeaseID(resp.Kvs[0].Lease)
	if _, err := cli.Revoke(testCtx(t), waiterLease); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Acquire after its lease was revoked = %v; want ErrLeaseLost", err)
	}
	mustRelease(t, e, holder)
}

// A holder that never renews is replaced once its TTL has passed, and not
// before. The waiter is granted within a second of the deadline (etcd's
// lease expiry plus the engine's catch-up); that bound is a timing
// judgement, checked only with LEASEGATE_TIMING=1 (internal/timingtest).
// Without it the bound is five TTLs, which only a replacement that waits
// on something other than the lease's expiry exceeds.
func TestDeadHolderFreedWithinTTLAndNotBefore(t *testing.T) {
	e, _ := newEngine(t)
	r := req("dead")
	r.TTL = 2 * time.Second
	dead := mustAcquire(t, e, r) // never renewed: its holder "dies"
	w := req("dead")
	g := mustAcquire(t, e, w)
	at := time.Now()
	if at.Before(dead.Deadline) {
		t.Fatalf("waiter granted at %s, before the dead holder's deadline %s", at.Format(time.StampMilli), dead.Deadline.Format(time.StampMilli))
	}
	bound := 5 * r.TTL
	if timingtest.Enabled() {
		bound = time.Second
	}
	if late := at.Sub(dead.Deadline); late > bound {
		t.Fatalf("waiter granted %s after the dead holder's TTL; want ≤ %s", late, bound)
	}
	if g.Token() <= dead.Token() {
		t.Fatalf("new token %d not above dead holder's %d", g.Token(), dead.Token())
	}
	// The dead holder, waking up, cannot renew and learns it was replaced.
	if _, err := e.Renew(testCtx(t), dead.Handle, dead.Token()); !errors.Is(err, ErrStolen) {
		t.Fatalf("Renew by dead holder = %v; want ErrStolen", err)
	}
	mustRelease(t, e, g)
}

func TestStaleReleaseLeavesNewHolder(t *testing.T) {
	e, cli := newEngine(t)
	old := mustAcquire(t, e, req("stale"))
	if _, err := cli.Revoke(testCtx(t), old.Lease); err != nil { // old holder's lease lapses
		t.Fatal(err)
	}
	cur := mustAcquire(t, e, req("stale"))
	ok, err := e.Release(testCtx(t), old.Handle, old.Token())
	if ok || err != nil {
		t.Fatalf("stale Release = %v, %v; want false, nil", ok, err)
	}
	d, err := e.Describe(testCtx(t), "stale")
	if err != nil || d.Holder == nil || d.Holder.Token != cur.Token() {
		t.Fatalf("after stale release Describe = %+v, %v; want holder %d", d, err, cur.Token())
	}
	mustRelease(t, e, cur)
}

func TestRetriedReleaseOfReusedRequestIDKeepsNewKey(t *testing.T) {
	// A request id reused after release lands on the same key path; a late
	// retry of the first release must not delete the second incarnation.
	e, _ := newEngine(t)
	r := req("reuse")
	first := mustAcquire(t, e, r)
	mustRelease(t, e, first)
	second := mustAcquire(t, e, r)
	if second.Revision == first.Revision {
		t.Fatal("second incarnation has the same revision")
	}
	if ok, err := e.Release(testCtx(t), first.Handle, first.Token()); ok || err != nil {
		t.Fatalf("late release = %v, %v; want false, nil", ok, err)
	}
	if _, err := e.Renew(testCtx(t), second.Handle, second.Token()); err != nil {
		t.Fatalf("Renew of second incarnation = %v; want nil", err)
	}
	mustRelease(t, e, second)
}

func TestRenewAnswersExpiredVsStolen(t *testing.T) {
	e, cli := newEngine(t)
	g := mustAcquire(t, e, req("renew"))
	rn, err := e.Renew(testCtx(t), g.Handle, g.Token())
	if err != nil || rn.TTL != 10*time.Second || rn.Deadline.Before(g.Deadline) {
		t.Fatalf("Renew = %+v, %v; want 10s TTL and a later deadline", rn, err)
	}
	if _, err := cli.Revoke(testCtx(t), g.Lease); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Renew(testCtx(t), g.Handle, g.Token()); !errors.Is(err, ErrExpired) {
		t.Fatalf("Renew after lapse with the name free = %v; want ErrExpired", err)
	}
	g2 := mustAcquire(t, e, req("renew"))
	if _, err := cli.Revoke(testCtx(t), g2.Lease); err != nil {
		t.Fatal(err)
	}
	g3 := mustAcquire(t, e, req("renew"))
	if _, err := e.Renew(testCtx(t), g2.Handle, g2.Token()); !errors.Is(err, ErrStolen) {
		t.Fatalf("Renew after lapse with a new holder = %v; want ErrStolen", err)
	}
	mustRelease(t, e, g3)
}

func TestOwnershipNeedsSecretAndToken(t *testing.T) {
	e, _ := newEngine(t)
	g := mustAcquire(t, e, req("owner"))
	forged := g.Handle
	forged.Secret[0] ^= 1
	if _, err := e.Renew(testCtx(t), forged, g.Token()); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("Renew with a forged secret = %v; want ErrNotOwner", err)
	}
	if ok, err := e.Release(testCtx(t), forged, g.Token()); ok || !errors.Is(err, ErrNotOwner) {
		t.Fatalf("Release with a forged secret = %v, %v; want false, ErrNotOwner", ok, err)
	}
	if _, err := e.Renew(testCtx(t), g.Handle, g.Token()+1); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("Renew with a wrong token = %v; want ErrNotOwner", err)
	}
	if ok, err := e.Release(testCtx(t), g.Handle, g.Token()-1); ok || !errors.Is(err, ErrNotOwner) {
		t.Fatalf("Release with a wrong token = %v, %v; want false, ErrNotOwner", ok, err)
	}
	mustRelease(t, e, g) // still held by its owner
}

func TestRetriedAcquireKeepsItsPlace(t *testing.T) {
	e, cli := newEngine(t)
	holder := mustAcquire(t, e, req("retry"))
	r1 := req("retry")
	onQ, pos := queuedSignal()
	r1.OnQueued = onQ
	ctx1, detach := context.WithCancelCause(testCtx(t))
	done1 := make(chan error, 1)
	go func() { _, err := acquire(ctx1, e, r1); done1 <- err }()
	<-pos
	r2 := req("retry")
	onQ2, pos2 := queuedSignal()
	r2.OnQueued = onQ2
	order := make(chan string, 2)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		g := mustAcquire(t, e, r2)
		order <- "second"
		mustRelease(t, e, g)
	}()
	<-pos2
	// The first waiter's gateway goes away without cleaning up.
	detach(ErrDetached)
	if err := <-done1; !errors.Is(err, ErrDetached) {
		t.Fatalf("detached Acquire = %v; want ErrDetached", err)
	}
	if n := keyCount(t, e, cli, "retry"); n != 3 {
		t.Fatalf("keys after detach = %d; want 3", n)
	}
	// The retry with the same request id resumes the same place.
	onQ3, pos3 := queuedSignal()
	r1.OnQueued = onQ3
	wg.Add(1)
	var resumed Grant
	go func() {
		defer wg.Done()
		resumed = mustAcquire(t, e, r1)
		order <- "first"
		mustRelease(t, e, resumed)
	}()
	if p := <-pos3; p != 1 {
		t.Fatalf("resumed position = %d; want 1", p)
	}
	if n := keyCount(t, e, cli, "retry"); n != 3 {
		t.Fatalf("keys after retry = %d; want 3 (no duplicate waiter)", n)
	}
	mustRelease(t, e, holder)
	wg.Wait()
	if a, b := <-order, <-order; a != "first" || b != "second" {
		t.Fatalf("grant order %s, %s; want first, second", a, b)
	}
	if !resumed.Resumed {
		t.Fatal("resumed grant not marked Resumed")
	}
}

func TestCompactionDuringWait(t *testing.T) {
	e, cli := newEngine(t)
	holder := mustAcquire(t, e, req("compact"))
	feedWatches := make(chan struct{}, 16)
	var compacted atomic.Bool
	e.hooks = &pointHooks{fn: func(_ context.Context, point string) {
		if point != pointHubRead {
			return
		}
		// The hub's first read of its view is at a revision compaction
		// removes (a write moves the revision on first), so it fails with
		// ErrCompacted and the hub must start over with a new watch.
		if compacted.CompareAndSwap(false, true) {
			if _, err := cli.Put(context.Background(), e.cfg.Prefix+"/bump", "x"); err != nil {
				t.Errorf("put: %v", err)
			}
			if _, err := etcdtestCompact(cli); err != nil {
				t.Errorf("compact: %v", err)
			}
		}
		feedWatches <- struct{}{}
	}}
	var cancels []context.CancelFunc
	var positions []chan int64
	got := make(chan Grant, 3)
	for i := 0; i < 3; i++ {
		ctx, cancel := context.WithCancel(testCtx(t))
		r := req("compact")
		onQ, pos := queuedSignal()
		r.OnQueued = onQ
		go func() {
			if g, err := acquire(ctx, e, r); err == nil {
				got <- g
			}
		}()
		if p := <-pos; p != int64(i+1) {
			t.Fatalf("waiter %d position = %d; want %d", i, p, i+1)
		}
		cancels, positions = append(cancels, cancel), append(positions, pos)
	}
	<-feedWatches // failed on the compacted revision
	<-feedWatches // started over
	if _, err := cli.Delete(testCtx(t), e.cfg.Prefix+"/bump"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := etcdtestCompact(cli); err != nil { // more compaction while they wait
			t.Fatal(err)
		}
	}
	// The first waiter leaves; it is not the last one's predecessor, so only
	// the hub's view can tell the last waiter its new position.
	cancels[0]()
	if p := <-positions[2]; p != 2 {
		t.Fatalf("last waiter position after the first left = %d; want 2", p)
	}
	mustRelease(t, e, holder)
	g := <-got
	if g.Token() <= holder.Token() {
		t.Fatalf("token %d not above %d", g.Token(), holder.Token())
	}
	mustRelease(t, e, g)
	g = <-got
	mustRelease(t, e, g)
	for _, c := range cancels {
		c()
	}
}

func TestSessionLocksShareOneLease(t *testing.T) {
	e, cli := newEngine(t)
	s, err := e.OpenSession(testCtx(t), "worker-7", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var grants []Grant
	for i := 0; i < 5; i++ {
		r := req(fmt.Sprintf("sess-%d", i))
		r.Session, r.SessionSecret = s.Lease, s.Secret
		g := mustAcquire(t, e, r)
		if g.Lease != s.Lease || !g.Session {
			t.Fatalf("grant lease %x session %v; want session lease %x", g.Lease, g.Session, s.Lease)
		}
		grants = append(grants, g)
	}
	if _, err := e.KeepAliveSession(testCtx(t), s.Lease, s.Secret); err != nil {
		t.Fatal(err)
	}
	// Releasing one lock leaves the session and the other locks alone.
	mustRelease(t, e, grants[0])
	if _, err := e.Renew(testCtx(t), grants[1].Handle, grants[1].Token()); err != nil {
		t.Fatalf("Renew of another session lock: %v", err)
	}
	// A wrong session secret neither attaches nor renews.
	bad := req("sess-bad")
	bad.Session, bad.SessionSecret = s.Lease, Secret{}
	if _, err := acquire(testCtx(t), e, bad); !errors.Is(err, ErrSessionLost) {
		t.Fatalf("Acquire with a wrong session secret = %v; want ErrSessionLost", err)
	}
	if _, err := e.KeepAliveSession(testCtx(t), s.Lease, Secret{}); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("KeepAliveSession with a wrong secret = %v; want ErrNotOwner", err)
	}
	// Closing the session frees every lock on it.
	if err := e.CloseSession(testCtx(t), s.Lease, s.Secret); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 5; i++ {
		if n := keyCount(t, e, cli, fmt.Sprintf("sess-%d", i)); n != 0 {
			t.Fatalf("sess-%d keys after CloseSession = %d; want 0", i, n)
		}
	}
}

func TestSessionWaiterLosesPlaceWhenSessionDies(t *testing.T) {
	e, _ := newEngine(t)
	holder := mustAcquire(t, e, req("sess-wait"))
	s, err := e.OpenSession(testCtx(t), "w", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r := req("sess-wait")
	r.Session, r.SessionSecret = s.Lease, s.Secret
	onQ, pos := queuedSignal()
	r.OnQueued = onQ
	done := make(chan error, 1)
	go func() { _, err := acquire(testCtx(t), e, r); done <- err }()
	<-pos
	if err := e.CloseSession(testCtx(t), s.Lease, s.Secret); err != nil {
		t.Fatal(err)
	}
	// The holder still holds: the waiter is told at once, not when it
	// reaches the head.
	if err := <-done; !errors.Is(err, ErrSessionLost) {
		t.Fatalf("waiter after its session closed = %v; want ErrSessionLost", err)
	}
	mustRelease(t, e, holder)
}

func TestGrantDeadlineMeasuredFromSend(t *testing.T) {
	fake := newFakeClock()
	e, _ := newEngine(t, func(c *Config) { c.Clock = fake })
	sent := fake.Now()
	g := mustAcquire(t, e, req("deadline"))
	if want := sent.Add(10 * time.Second); !g.Deadline.Equal(want) {
		t.Fatalf("Deadline = %s; want send time + TTL = %s", g.Deadline, want)
	}
	fake.Advance(4 * time.Second)
	rn, err := e.Renew(testCtx(t), g.Handle, g.Token())
	if err != nil {
		t.Fatal(err)
	}
	if want := sent.Add(14 * time.Second); !rn.Deadline.Equal(want) {
		t.Fatalf("renewed Deadline = %s; want %s", rn.Deadline, want)
	}
	mustRelease(t, e, g)
}

func TestTTLRoundedUpAndBounded(t *testing.T) {
	e, _ := newEngine(t)
	r := req("round")
	r.TTL = 2500 * time.Millisecond
	g := mustAcquire(t, e, r)
	if g.TTL != 3*time.Second {
		t.Fatalf("TTL for 2.5s = %s; want 3s", g.TTL)
	}
	mustRelease(t, e, g)
	for _, ttl := range []time.Duration{0, 999 * time.Millisecond, 25 * time.Hour} {
		r := req("round")
		r.TTL = ttl
		if _, err := acquire(testCtx(t), e, r); !errors.Is(err, ErrInvalidTTL) {
			t.Errorf("Acquire(ttl=%s) = %v; want ErrInvalidTTL", ttl, err)
		}
	}
}

func TestCheckFenceAndDescribe(t *testing.T) {
	e, _ := newEngine(t)
	g := mustAcquire(t, e, req("fence"))
	if live, cur, err := e.CheckFence(testCtx(t), "fence", g.Token()); !live || cur != g.Token() || err != nil {
		t.Fatalf("CheckFence(holder) = %v, %d, %v", live, cur, err)
	}
	w := req("fence")
	onQ, pos := queuedSignal()
	w.OnQueued = onQ
	got := make(chan Grant, 1)
	go func() { got <- mustAcquire(t, e, w) }()
	<-pos
	d, err := e.Describe(testCtx(t), "fence")
	if err != nil || d.Holder == nil || d.Holder.ClientID != "c" || d.Waiters != 1 || d.Holder.TTL != 10*time.Second {
		t.Fatalf("Describe = %+v, %v", d, err)
	}
	mustRelease(t, e, g)
	g2 := <-got
	if live, _, _ := e.CheckFence(testCtx(t), "fence", g.Token()); live {
		t.Fatal("CheckFence(old token) = live after a newer grant")
	}
	mustRelease(t, e, g2)
	if live, cur, _ := e.CheckFence(testCtx(t), "fence", g2.Token()); live || cur != 0 {
		t.Fatalf("CheckFence after release = %v, %d; want false, 0", live, cur)
	}
}

func TestPositionsFollowWaitersLeavingAhead(t *testing.T) {
	// The last waiter watches only its predecessor, yet its reported
	// position follows every waiter ahead that leaves.
	e, _ := newEngine(t)
	holder := mustAcquire(t, e, req("positions"))
	var cancels []context.CancelFunc
	var dones []chan error
	third := make(chan Grant, 1)
	for i := 0; i < 3; i++ {
		ctx, cancel := context.WithCancel(testCtx(t))
		r := req("positions")
		onQ, pos := queuedSignal()
		r.OnQueued = onQ
		done := make(chan error, 1)
		go func() {
			g, err := acquire(ctx, e, r)
			if err == nil {
				third <- g
			}
			done <- err
		}()
		<-pos
		cancels, dones = append(cancels, cancel), append(dones, done)
	}
	last := req("positions")
	onQ, pos := queuedSignal()
	last.OnQueued = onQ
	got := make(chan Grant, 1)
	go func() { got <- mustAcquire(t, e, last) }()
	if p := <-pos; p != 4 {
		t.Fatalf("last waiter position = %d; want 4", p)
	}
	// The first two waiters leave; neither is the last waiter's predecessor.
	for i, want := range []int64{3, 2} {
		cancels[i]()
		<-dones[i]
		if p := <-pos; p != want {
			t.Fatalf("after %d waiters left, position = %d; want %d", i+1, p, want)
		}
	}
	mustRelease(t, e, holder)
	if p := <-pos; p != 1 {
		t.Fatalf("after the holder left, position = %d; want 1", p)
	}
	mustRelease(t, e, <-third)
	<-dones[2]
	mustRelease(t, e, <-got)
	cancels[2]()
}

func TestDeadlineOfAWaitedGrantIsFresh(t *testing.T) {
	fake := newFakeClock()
	e, _ := newEngine(t, func(c *Config) { c.Clock = fake })
	holder := mustAcquire(t, e, req("fresh"))
	w := req("fresh")
	onQ, pos := queuedSignal()
	w.OnQueued = onQ
	got := make(chan Grant, 1)
	go func() { got <- mustAcquire(t, e, w) }()
	<-pos
	fake.Advance(25 * time.Second) // a long wait, longer than the TTL
	released := fake.Now()
	mustRelease(t, e, holder)
	g := <-got
	if want := released.Add(10 * time.Second); g.Deadline.Before(want) {
		t.Fatalf("waited grant Deadline = %s; want at least release time + TTL = %s", g.Deadline, want)
	}
	mustRelease(t, e, g)
}
