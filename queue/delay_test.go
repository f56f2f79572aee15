package queue

import (
	"context"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
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
		g2, err := e.Acquire(testCtx(t), w)
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
	if _, err := e.Acquire(testCtx(t), bad); err == nil {
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
		g2, err := e.Acquire(testCtx(t), w)
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
