package queue

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func semReq(name string, n int) AcquireRequest {
	r := req(name)
	r.Limit = n
	return r
}

// TestSemaphoreHoldsNAndQueuesFIFO: the first N acquires hold at once with
// tokens of their own; the (N+1)th waits with position 1, the next with 2,
// and each release lets exactly the oldest waiter in.
func TestSemaphoreHoldsNAndQueuesFIFO(t *testing.T) {
	e, _ := newEngine(t)
	const n = 3
	var held []Grant
	for i := 0; i < n; i++ {
		held = append(held, mustAcquire(t, e, semReq("pool", n)))
	}
	for i := 1; i < n; i++ {
		if held[i].Token() <= held[i-1].Token() {
			t.Fatalf("holder %d token %d not above holder %d's %d", i, held[i].Token(), i-1, held[i-1].Token())
		}
	}
	type result struct {
		i int
		g Grant
	}
	granted := make(chan result, 2)
	var positions [2]chan int64
	for i := 0; i < 2; i++ {
		r := semReq("pool", n)
		var onQueued func(int64)
		onQueued, positions[i] = queuedSignal()
		r.OnQueued = onQueued
		w, err := e.Enqueue(testCtx(t), r)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			g, err := w.Wait(testCtx(t))
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			granted <- result{i, g}
		}()
		if got := <-positions[i]; got != int64(i+1) {
			t.Fatalf("waiter %d first position = %d; want %d", i, got, i+1)
		}
	}
	d, err := e.Describe(testCtx(t), "pool")
	if err != nil {
		t.Fatal(err)
	}
	if d.Limit != n || len(d.Holders) != n || d.Waiters != 2 || d.Holder.Token != held[0].Token() {
		t.Fatalf("Describe = limit %d, %d holders, %d waiters, first token %d; want %d, %d, 2, %d",
			d.Limit, len(d.Holders), d.Waiters, d.Holder.Token, n, n, held[0].Token())
	}
	for i, h := range d.Holders {
		if h.Token != held[i].Token() {
			t.Fatalf("Describe holder %d token = %d; want %d", i, h.Token, held[i].Token())
		}
	}
	select {
	case r := <-granted:
		t.Fatalf("waiter %d granted while %d held", r.i, n)
	default:
	}
	mustRelease(t, e, held[1])
	r := <-granted
	if r.i != 0 {
		t.Fatalf("after one release waiter %d was granted; want the oldest (0)", r.i)
	}
	if live, _, err := e.CheckFence(testCtx(t), "pool", r.g.Token()); err != nil || !live {
		t.Fatalf("CheckFence(new holder) = %v, %v; want live", live, err)
	}
	if live, _, err := e.CheckFence(testCtx(t), "pool", held[1].Token()); err != nil || live {
		t.Fatalf("CheckFence(released holder) = %v, %v; want not live", live, err)
	}
	select {
	case r := <-granted:
		t.Fatalf("waiter %d granted with %d held", r.i, n)
	case p := <-positions[1]:
		if p != 1 {
			t.Fatalf("second waiter's position after one grant = %d; want 1", p)
		}
	}
	mustRelease(t, e, held[0])
	if r := <-granted; r.i != 1 {
		t.Fatalf("waiter %d granted; want 1", r.i)
	}
}

// TestSemaphoreNeverMoreThanN: many acquirers over two engines (two
// gateways) never hold more than N at once, and all are served.
func TestSemaphoreNeverMoreThanN(t *testing.T) {
	e1, _ := newEngine(t)
	e2, err := New(shared.ClientFor(t), e1.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e2.Close)
	const n, workers = 2, 16
	var inside, most, grants atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := e1
			if i%2 == 1 {
				e = e2
			}
			g, err := acquire(testCtx(t), e, semReq("pair", n))
			if err != nil {
				t.Errorf("Acquire: %v", err)
				return
			}
			v := inside.Add(1)
			for {
				m := most.Load()
				if v <= m || most.CompareAndSwap(m, v) {
					break
				}
			}
			// Hold across a read of etcd, so holders overlap when allowed.
			if _, err := e.Describe(testCtx(t), "pair"); err != nil {
				t.Error(err)
			}
			grants.Add(1)
			inside.Add(-1)
			if ok, err := e.Release(testCtx(t), g.Handle, g.Token()); err != nil || !ok {
				t.Errorf("Release = %v, %v", ok, err)
			}
		}()
	}
	wg.Wait()
	if grants.Load() != workers {
		t.Fatalf("grants = %d; want %d", grants.Load(), workers)
	}
	if m := most.Load(); m > n {
		t.Fatalf("%d holders at once; the limit is %d", m, n)
	}
}

// TestSemaphoreLimitMismatchRefused: while a name has keys, an acquire or
// TryAcquire with another limit is refused and leaves no key behind; once
// the name is empty, any limit goes.
func TestSemaphoreLimitMismatchRefused(t *testing.T) {
	e, cli := newEngine(t)
	g := mustAcquire(t, e, semReq("m", 2))
	for _, n := range []int{0, 1, 3} {
		_, err := acquire(testCtx(t), e, semReq("m", n))
		if !errors.Is(err, ErrLimitMismatch) {
			t.Fatalf("Acquire(limit %d) on a name of limit 2 = %v; want ErrLimitMismatch", n, err)
		}
		if _, err := e.TryAcquire(testCtx(t), semReq("m", n)); !errors.Is(err, ErrLimitMismatch) {
			t.Fatalf("TryAcquire(limit %d) on a name of limit 2 = %v; want ErrLimitMismatch", n, err)
		}
	}
	settle(e) // refused keys go in the background
	if k := keyCount(t, e, cli, "m"); k != 1 {
		t.Fatalf("keys after refusals = %d; want 1 (the holder)", k)
	}
	mustRelease(t, e, g)
	mustRelease(t, e, mustAcquire(t, e, semReq("m", 1)))
	if _, err := acquire(testCtx(t), e, semReq("m", MaxLimit+1)); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Acquire(limit %d) = %v; want ErrInvalidArgument", MaxLimit+1, err)
	}
}

// TestSemaphoreTryAcquire takes free slots and is refused, leaving no key,
// when all are held.
func TestSemaphoreTryAcquire(t *testing.T) {
	e, cli := newEngine(t)
	for i := 0; i < 2; i++ {
		res, err := e.TryAcquire(testCtx(t), semReq("t", 2))
		if err != nil || !res.Acquired {
			t.Fatalf("TryAcquire %d = %+v, %v; want acquired", i, res, err)
		}
	}
	res, err := e.TryAcquire(testCtx(t), semReq("t", 2))
	if err != nil || res.Acquired || res.Holder == nil {
		t.Fatalf("TryAcquire with both slots held = %+v, %v; want refused with a holder", res, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for keyCount(t, e, cli, "t") != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the refused TryAcquire left its key: %d keys", keyCount(t, e, cli, "t"))
		}
		time.Sleep(10 * time.Millisecond) // polling etcd: the removal is asynchronous
	}
}

// TestReentrantSessionAcquire: a re-entrant acquire through the session
// that holds returns the same lock (its token) with a hold of its own;
// each release drops its hold and the last frees the name for the next
// waiter; another session, or an acquire that is not re-entrant, waits as
// usual; without a session it is refused.
func TestReentrantSessionAcquire(t *testing.T) {
	e, cli := newEngine(t)
	s, err := e.OpenSession(testCtx(t), "c", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r := func() AcquireRequest {
		q := req("re")
		q.Session, q.SessionSecret, q.Reentrant = s.Lease, s.Secret, true
		return q
	}
	g1 := mustAcquire(t, e, r())
	g2 := mustAcquire(t, e, r())
	res, err := e.TryAcquire(testCtx(t), r())
	if err != nil || !res.Acquired {
		t.Fatalf("re-entrant TryAcquire = %+v, %v; want acquired", res, err)
	}
	g3 := res.Grant
	if g2.Revision != g1.Revision || g3.Revision != g1.Revision || g2.Token() != g1.Token() || g3.Token() != g1.Token() || g2.Holds != 2 || g3.Holds != 3 {
		t.Fatalf("re-entered grants: holds %d, %d; tokens %d, %d; want the first lock's token %d with holds 2 and 3",
			g2.Holds, g3.Holds, g2.Token(), g3.Token(), g1.Token())
	}
	if g2.HoldID == "" || g3.HoldID == "" || g2.HoldID == g3.HoldID || g1.HoldID != "" {
		t.Fatalf("hold ids %q, %q, %q; want the lock's own hold empty and one id of its own per re-entry", g1.HoldID, g2.HoldID, g3.HoldID)
	}
	// Another session waits behind the re-entered lock.
	s2, err := e.OpenSession(testCtx(t), "c", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	other := req("re")
	other.Session, other.SessionSecret, other.Reentrant = s2.Lease, s2.Secret, true
	w, err := e.Enqueue(testCtx(t), other)
	if err != nil {
		t.Fatal(err)
	}
	granted := make(chan Grant, 1)
	go func() {
		g, err := w.Wait(testCtx(t))
		if err != nil {
			t.Error(err)
		}
		granted <- g
	}()
	for i, g := range []Grant{g2, g1} {
		mustRelease(t, e, g)
		if k := keyCount(t, e, cli, "re"); k != 2 {
			t.Fatalf("after release %d of 3 holds: %d keys; want the holder and the waiter", i+1, k)
		}
		select {
		case <-granted:
			t.Fatalf("the other session was granted after %d of 3 releases", i+1)
		default:
		}
	}
	mustRelease(t, e, g3)
	if g := <-granted; g.Revision == g1.Revision {
		t.Fatal("the waiter was handed the released lock")
	}
	// Without a session: refused.
	bad := req("re2")
	bad.Reentrant = true
	if _, err := acquire(testCtx(t), e, bad); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("re-entrant Acquire without a session = %v; want ErrInvalidArgument", err)
	}
}
