package queue

import (
	"context"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/internal/clock"
)

// awaitDeleted blocks until key's deletion (from rev on) and returns when
// this process saw it.
func awaitDeleted(t *testing.T, cli *clientv3.Client, key string, rev int64) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for wr := range cli.Watch(ctx, key, clientv3.WithRev(rev)) {
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				return time.Now()
			}
		}
	}
	t.Fatalf("no deletion of %s seen", key)
	return time.Time{}
}

// TestLockDelayAfterExpiry: a holder with a 2 s lock-delay whose lease
// expires keeps the name from its waiter until 2 s after the expiry, and
// from a later acquirer that was not waiting when it expired (its record
// is in etcd, not in a gateway's memory).
func TestLockDelayAfterExpiry(t *testing.T) {
	e, cli := newEngine(t)
	const delay = 2 * time.Second
	holder := req("d")
	holder.TTL, holder.LockDelay = time.Second, delay
	g := mustAcquire(t, e, holder)
	key := e.keys.waiter("d", g.WaiterID)

	granted := make(chan time.Time, 1)
	w := req("d")
	go func() {
		g2, err := acquire(testCtx(t), e, w)
		if err != nil {
			t.Error(err)
			granted <- time.Time{}
			return
		}
		granted <- time.Now()
		mustRelease(t, e, g2)
	}()
	// Nobody renews the holder: its lease expires.
	gone := awaitDeleted(t, cli, key, g.Revision)
	at := <-granted
	if waited := at.Sub(gone); waited < delay-100*time.Millisecond {
		t.Fatalf("the waiter was granted %s after the holder expired; want at least the lock-delay %s", waited, delay)
	}

	// The same with nobody waiting when the holder expires.
	holder = req("d2")
	holder.TTL, holder.LockDelay = time.Second, delay
	g = mustAcquire(t, e, holder)
	awaitDeleted(t, cli, e.keys.waiter("d2", g.WaiterID), g.Revision)
	began := time.Now()
	g3 := mustAcquire(t, e, req("d2"))
	if waited := time.Since(began); waited < delay-100*time.Millisecond {
		t.Fatalf("a later acquirer was granted %s after it asked, its holder expired just before; want at least %s", waited, delay)
	}
	mustRelease(t, e, g3)
	if n := countKeys(t, cli, e.keys.delayPrefix("d2")); n != 0 {
		t.Fatalf("%d lock-delay records left after the delay was waited out; want 0", n)
	}
}

// TestLockDelayCleanRelease: a clean release of a holder with a long
// lock-delay frees the name at once and leaves no record.
func TestLockDelayCleanRelease(t *testing.T) {
	e, cli := newEngine(t)
	holder := req("c")
	holder.LockDelay = MaxLockDelay
	g := mustAcquire(t, e, holder)
	if n := countKeys(t, cli, e.keys.delayPrefix("c")); n != 1 {
		t.Fatalf("%d lock-delay records while held; want 1", n)
	}
	done := make(chan Grant, 1)
	go func() { done <- mustAcquire(t, e, req("c")) }()
	mustRelease(t, e, g)
	select {
	case g2 := <-done:
		mustRelease(t, e, g2)
	case <-time.After(MaxLockDelay / 2):
		t.Fatal("the waiter was not granted after a clean release")
	}
	if n := countKeys(t, cli, e.keys.delayPrefix("c")); n != 0 {
		t.Fatalf("%d lock-delay records after a clean release; want 0", n)
	}
	bad := req("c")
	bad.LockDelay = MaxLockDelay + time.Millisecond
	if _, err := acquire(testCtx(t), e, bad); err == nil {
		t.Fatal("a lock-delay over the maximum was accepted")
	}
}

func countKeys(t *testing.T, cli *clientv3.Client, prefix string) int64 {
	t.Helper()
	resp, err := cli.Get(testCtx(t), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// TestLockDelayOnTheEngineClock: the wait is measured on the engine's
// clock from when the waiter saw the expiry: with a fake clock, the waiter
// is granted only once the clock has moved the whole delay, not a
// millisecond sooner. etcd's lease expiry is real time; the engine's own
// timing is the fake clock's.
func TestLockDelayOnTheEngineClock(t *testing.T) {
	clk := newFakeClock()
	e, cli := newEngine(t, func(c *Config) { c.Clock = clk })
	const delay = 2 * time.Second
	holder := req("f")
	holder.TTL, holder.LockDelay = time.Second, delay
	g := mustAcquire(t, e, holder)

	w := req("f")
	w.TTL = time.Minute // its renewals wait on the fake clock: its lease must outlive the test
	granted := make(chan Grant, 1)
	go func() {
		g2, err := acquire(testCtx(t), e, w)
		if err != nil {
			t.Error(err)
		}
		granted <- g2
	}()
	awaitDeleted(t, cli, e.keys.waiter("f", g.WaiterID), g.Revision)
	// The waiter's renewal timer, then its lock-delay timer.
	deadline := time.Now().Add(30 * time.Second)
	for clk.Pending() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the waiter never waited on the lock-delay (%d timers pending)", clk.Pending())
		}
		time.Sleep(5 * time.Millisecond) // polling the fake clock's timers: there is no event to await
	}
	clk.Advance(delay - time.Millisecond)
	if clk.Pending() < 2 {
		t.Fatalf("the lock-delay's timer fired %s early", time.Millisecond)
	}
	select {
	case <-granted:
		t.Fatal("granted before the lock-delay passed on the engine's clock")
	default:
	}
	clk.Advance(time.Millisecond)
	g2 := <-granted
	if g2.Token() <= g.Token() {
		t.Fatalf("the waiter's token %d is not above the expired holder's %d", g2.Token(), g.Token())
	}
	mustRelease(t, e, g2)
}

// delayedHolder acquires name on e with a lock-delay d and returns its
// grant and the key's lock-delay record key.
func delayedHolder(t *testing.T, e *Engine, name string, d time.Duration) (Grant, string) {
	t.Helper()
	r := req(name)
	r.LockDelay = d
	g := mustAcquire(t, e, r)
	return g, e.keys.delay(name, g.WaiterID)
}

// awaitStamped blocks until the lock-delay record at key, or the holder
// record beside it (key + ".h", loss.go), is stamped, from revision rev
// on, and returns the stamp.
func awaitStamped(t *testing.T, cli *clientv3.Client, key string, rev int64) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for wr := range cli.Watch(ctx, key, clientv3.WithRev(rev), clientv3.WithPrefix()) {
		for _, ev := range wr.Events {
			if rec, ok := parseDelay(ev.Kv); ev.Type == mvccpb.PUT && ok && !rec.expired.IsZero() {
				return rec.expired
			}
		}
	}
	t.Fatalf("the lock-delay record %s was never stamped", key)
	return time.Time{}
}

// expireNow revokes g's lease, as an expiry would end it, and returns the
// revision after it.
func expireNow(t *testing.T, cli *clientv3.Client, g Grant) int64 {
	t.Helper()
	resp, err := cli.Revoke(testCtx(t), g.Lease)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// tryUntilGranted polls TryAcquire every step of fake time from the clock's
// now, and returns when it was first granted; every refusal must say how
// long the delay lasts.
func tryUntilGranted(t *testing.T, e *Engine, clk *clock.Fake, name string, step time.Duration, limit int) time.Time {
	t.Helper()
	for range limit {
		res, err := e.TryAcquire(testCtx(t), req(name))
		if err != nil {
			t.Fatal(err)
		}
		if res.Acquired {
			mustRelease(t, e, res.Grant)
			return clk.Now()
		}
		if res.DelayedUntil.IsZero() || res.Holder != nil {
			t.Fatalf("TryAcquire during a lock-delay = %+v; want refused with its end and no holder", res)
		}
		settle(e) // the refused poll's key goes in the background
		clk.Advance(step)
	}
	t.Fatalf("TryAcquire polled every %s was never granted in %d tries: the lock-delay never ended", step, limit)
	return time.Time{}
}

// TestLockDelayEndsForPollers: after a delayed holder expires, a caller
// that polls with TryAcquire is refused until the delay, counted from the
// expiry, has passed — every poll the same answer, not a fresh delay — and
// then granted.
func TestLockDelayEndsForPollers(t *testing.T) {
	clk := newFakeClock()
	e, cli := newEngine(t, func(c *Config) { c.Clock, c.LossWait = clk, false })
	const d = 5 * time.Second
	g, rec := delayedHolder(t, e, "p", d)
	rev := expireNow(t, cli, g)
	stamp := awaitStamped(t, cli, rec, rev)
	if !stamp.Equal(clk.Now().Truncate(time.Millisecond)) {
		t.Fatalf("the expiry was stamped at %s; want the moment the granting engine saw it, %s", stamp, clk.Now())
	}
	at := tryUntilGranted(t, e, clk, "p", time.Second, 20)
	if at.Before(stamp.Add(d)) || at.After(stamp.Add(d+time.Second)) {
		t.Fatalf("polled every second, granted %s after the expiry; want %s (the lock-delay) to %s", at.Sub(stamp), d, d+time.Second)
	}
}

// TestLockDelayCountsFromTheExpiry: a name nobody looked at for longer than
// the delay after its holder expired is granted at the first look.
func TestLockDelayCountsFromTheExpiry(t *testing.T) {
	clk := newFakeClock()
	e, cli := newEngine(t, func(c *Config) { c.Clock, c.LossWait = clk, false })
	g, rec := delayedHolder(t, e, "q", 5*time.Second)
	awaitStamped(t, cli, rec, expireNow(t, cli, g))
	clk.Advance(6 * time.Second)
	res, err := e.TryAcquire(testCtx(t), req("q"))
	if err != nil || !res.Acquired {
		t.Fatalf("TryAcquire 6 s after an expiry with a 5 s lock-delay = %+v, %v; want acquired", res, err)
	}
	mustRelease(t, e, res.Grant)
	if d, err := e.Describe(testCtx(t), "q"); err != nil || !d.DelayUntil.IsZero() {
		t.Fatalf("Describe after the delay = %+v, %v; want no lock-delay pending", d, err)
	}
}

// TestLockDelayFirstSightingElsewhere: when the gateway that granted the
// delayed holder is gone, the first gateway to look stamps the expiry, and
// the delay ends a delay's length after that look for every caller: a
// poller and a waiter alike, and Describe says when.
func TestLockDelayFirstSightingElsewhere(t *testing.T) {
	clk := newFakeClock()
	granting, cli := newEngine(t, func(c *Config) { c.Clock, c.LossWait = clk, false })
	const d = 4 * time.Second
	g, rec := delayedHolder(t, granting, "s", d)
	granting.Close() // it no longer watches its holder
	other, err := New(cli, granting.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	expireNow(t, cli, g)
	seen := clk.Now()
	res, err := other.TryAcquire(testCtx(t), req("s"))
	if err != nil || res.Acquired || !res.DelayedUntil.Equal(seen.Truncate(time.Millisecond).Add(d)) {
		t.Fatalf("first look = %+v, %v; want refused until %s", res, err, seen.Add(d))
	}
	if desc, err := other.Describe(testCtx(t), "s"); err != nil || !desc.DelayUntil.Equal(res.DelayedUntil) {
		t.Fatalf("Describe = %+v, %v; want the same end %s", desc, err, res.DelayedUntil)
	}
	clk.Advance(d / 2)
	type grant struct {
		g  Grant
		at time.Time
	}
	granted := make(chan grant, 1)
	go func() {
		g, err := acquire(testCtx(t), other, req("s"))
		if err != nil {
			t.Error(err)
		}
		granted <- grant{g, clk.Now()}
	}()
	// The waiter waits on the fake clock: time passes only here.
	for {
		select {
		case got := <-granted:
			if got.at.Before(seen.Add(d)) {
				t.Fatalf("the waiter was granted at %s, before the delay's end %s", got.at, seen.Add(d))
			}
			mustRelease(t, other, got.g)
			if n := keyCount(t, other, cli, "s"); n != 0 {
				t.Fatalf("%d keys left", n)
			}
			if resp, err := cli.Get(testCtx(t), rec); err != nil || len(resp.Kvs) != 0 {
				t.Fatalf("the waited-out lock-delay record is still there: %v", err)
			}
			return
		case <-time.After(10 * time.Millisecond):
			clk.Advance(100 * time.Millisecond)
		}
	}
}

// TestLockDelayOfATakeover: a retry that takes a waiter over asking for a
// lock-delay the first attempt did not ask for is the lock's delay
// everywhere: the key says so, so a waiter already watching when the
// holder's lease ends is held back for the delay too.
func TestLockDelayOfATakeover(t *testing.T) {
	clk := newFakeClock()
	e, cli := newEngine(t, func(c *Config) { c.Clock, c.LossWait = clk, false })
	h := mustAcquire(t, e, req("t"))
	first := req("t")
	w1, err := e.Enqueue(testCtx(t), first)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = w1.Wait(testCtx(t)) }() // superseded by the retry
	const d = 5 * time.Second
	retry := first
	retry.LockDelay = d
	w, err := e.Enqueue(testCtx(t), retry)
	if err != nil || !w.q.resumed {
		t.Fatalf("retry = %v; want the waiter taken over", err)
	}
	held := make(chan Grant, 1)
	go func() {
		g, err := w.Wait(testCtx(t))
		if err != nil {
			t.Error(err)
		}
		held <- g
	}()
	mustRelease(t, e, h)
	g := <-held
	next := make(chan Grant, 1)
	nw, err := e.Enqueue(testCtx(t), req("t"))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		g, err := nw.Wait(testCtx(t))
		if err != nil {
			t.Error(err)
		}
		next <- g
	}()
	stamp := awaitStamped(t, cli, e.keys.delay("t", g.WaiterID), expireNow(t, cli, g))
	select {
	case <-next:
		t.Fatal("the waiter was granted as the delayed holder expired: the takeover's lock-delay was not the lock's")
	case <-time.After(100 * time.Millisecond):
	}
	clk.Advance(d)
	ng := <-next
	if now := clk.Now(); now.Before(stamp.Add(d)) {
		t.Fatalf("granted at %s, before the delay's end %s", now, stamp.Add(d))
	}
	mustRelease(t, e, ng)
}
