package sdktest_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leasegate/leasegate/client"
)

// TestSemaphoreWithLimit: WithLimit(2) lets two callers hold at once, each
// with a lock of its own; a third waits until one releases; another limit
// fails with ErrLimitMismatch and is not retried; Describe lists both.
func TestSemaphoreWithLimit(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	c := newClient(t, []string{g.URL}, client.WithClientID("pool"))
	ctx := ctxT(t)
	opts := []client.AcquireOption{client.WithLimit(2), client.WithTTL(5 * time.Second)}
	a, err := c.Acquire(ctx, "pool", opts...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Acquire(ctx, "pool", opts...)
	if err != nil {
		t.Fatal(err)
	}
	if a.ID() == b.ID() || b.Token() <= a.Token() {
		t.Fatalf("two holders: ids %q %q, tokens %d %d; want distinct ids and growing tokens", a.ID(), b.ID(), a.Token(), b.Token())
	}
	if _, err := c.TryAcquire(ctx, "pool", opts...); !errors.Is(err, client.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a full semaphore = %v; want ErrNotAcquired", err)
	}
	if _, err := c.Acquire(ctx, "pool", client.WithLimit(3)); !errors.Is(err, client.ErrLimitMismatch) {
		t.Fatalf("Acquire with another limit = %v; want ErrLimitMismatch", err)
	}
	if _, err := c.Acquire(ctx, "pool", client.WithLimit(1001)); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("Acquire with limit 1001 = %v; want ErrInvalidArgument", err)
	}
	d, err := c.Describe(ctx, "pool")
	if err != nil || d.Limit != 2 || len(d.Holders) != 2 || d.Holders[0].Token != a.Token() || d.Holders[1].Token != b.Token() || d.Token != a.Token() {
		t.Fatalf("Describe = %+v, %v; want limit 2, holders %d and %d", d, err, a.Token(), b.Token())
	}
	positions := make(chan int64, 16)
	third := make(chan *client.Lock, 1)
	go func() {
		l, err := c.Acquire(ctx, "pool", append(opts, client.WithOnQueued(func(p int64) { positions <- p }))...)
		if err != nil {
			t.Error(err)
		}
		third <- l
	}()
	if p := <-positions; p != 1 {
		t.Fatalf("third caller's position = %d; want 1", p)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-third
	if l == nil || l.Token() <= b.Token() {
		t.Fatalf("third caller's lock = %v; want granted after one release", l)
	}
	_ = b.Release(ctx)
	_ = l.Release(ctx)
}

// TestReentrantSessionLock: WithReentrant through a session returns a hold
// of the same lock (its token, an ID of its own) with HoldCount 2; the
// first Release leaves the name held, the second frees it; without a
// session it is ErrInvalidArgument.
func TestReentrantSessionLock(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	c := newClient(t, []string{g.URL}, client.WithClientID("re"))
	ctx := ctxT(t)
	s, err := c.OpenSession(ctx, client.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	outer, err := s.Acquire(ctx, "re", client.WithReentrant())
	if err != nil {
		t.Fatal(err)
	}
	inner, err := s.Acquire(ctx, "re", client.WithReentrant())
	if err != nil {
		t.Fatal(err)
	}
	if inner.ID() == outer.ID() || inner.Token() != outer.Token() || outer.HoldCount() != 1 || inner.HoldCount() != 2 {
		t.Fatalf("re-entered: same id %v, tokens %d %d, hold counts %d %d; want a hold of its own of the same lock, 1 and 2",
			inner.ID() == outer.ID(), outer.Token(), inner.Token(), outer.HoldCount(), inner.HoldCount())
	}
	if err := inner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if d, err := c.Describe(ctx, "re"); err != nil || !d.Held || d.Token != outer.Token() {
		t.Fatalf("Describe after the inner release = %+v, %v; want still held by the outer hold", d, err)
	}
	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if d, err := c.Describe(ctx, "re"); err != nil || d.Held {
		t.Fatalf("Describe after the last release = %+v, %v; want free", d, err)
	}
	if _, err := c.Acquire(ctx, "re", client.WithReentrant()); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("Client.Acquire WithReentrant = %v; want ErrInvalidArgument", err)
	}
}

// TestLockDelayOption: WithLockDelay is bounded, and a clean release of a
// holder with a long lock-delay frees the name at once.
func TestLockDelayOption(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	c := newClient(t, []string{g.URL}, client.WithClientID("ld"))
	ctx := ctxT(t)
	if _, err := c.Acquire(ctx, "ld", client.WithLockDelay(61*time.Second)); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("Acquire WithLockDelay(61s) = %v; want ErrInvalidArgument", err)
	}
	l, err := c.Acquire(ctx, "ld", client.WithLockDelay(time.Minute), client.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := c.TryAcquire(ctx, "ld")
	if err != nil {
		t.Fatalf("TryAcquire after a clean release of a lock-delay holder = %v; want acquired at once", err)
	}
	if d, err := c.Describe(ctx, "ld"); err != nil || !d.DelayUntil.IsZero() {
		t.Fatalf("Describe = %+v, %v; want no pending delay", d, err)
	}
	_ = next.Release(ctx)
}
