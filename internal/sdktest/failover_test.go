package sdktest_test

import (
	"testing"
	"time"

	"github.com/leasegate/leasegate/client"
)

// A gateway stopped while it serves a wait: the SDK resumes the wait on the
// other gateway with the same request id, keeps its place ahead of a later
// waiter, and is granted first.
func TestGatewayRestartDuringWaitKeepsPlace(t *testing.T) {
	t.Parallel()
	g1 := startGateway(t, "")
	g2 := startGateway(t, g1.Prefix)
	ctx := ctxT(t)
	other := newClient(t, []string{g2.URL})
	holder, err := other.TryAcquire(ctx, "resume", client.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}

	// The waiter starts on g1 (the first endpoint) and knows both.
	sdk := newClient(t, []string{g1.URL, g2.URL}, client.WithRetryBackoff(time.Millisecond, 10*time.Millisecond))
	positions := make(chan int64, 16)
	type result struct {
		lock *client.Lock
		err  error
	}
	first := make(chan result, 1)
	go func() {
		l, err := sdk.Acquire(ctx, "resume", client.WithTTL(10*time.Second), client.WithOnQueued(func(p int64) { positions <- p }))
		first <- result{l, err}
	}()
	if p := await(t, positions, "first waiter queued"); p != 1 {
		t.Fatalf("first waiter position = %d; want 1", p)
	}
	laterPos := make(chan int64, 16)
	second := make(chan result, 1)
	go func() {
		l, err := other.Acquire(ctx, "resume", client.WithTTL(10*time.Second), client.WithOnQueued(func(p int64) { laterPos <- p }))
		second <- result{l, err}
	}()
	if p := await(t, laterPos, "second waiter queued"); p != 2 {
		t.Fatalf("second waiter position = %d; want 2", p)
	}

	g1.Stop() // ends the wait with unavailable/SHUTTING_DOWN; the key stays
	if p := await(t, positions, "first waiter resumed"); p != 1 {
		t.Fatalf("first waiter's position after the retry = %d; want 1, its old place", p)
	}

	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r1 := await(t, first, "first waiter's grant")
	if r1.err != nil {
		t.Fatal(r1.err)
	}
	select {
	case r := <-second:
		t.Fatalf("second waiter granted (%v) while the first holds the lock", r.err)
	default:
	}
	if r1.lock.Token() <= holder.Token() {
		t.Fatalf("first waiter's token %d not above the holder's %d", r1.lock.Token(), holder.Token())
	}
	if err := r1.lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r2 := await(t, second, "second waiter's grant")
	if r2.err != nil {
		t.Fatal(r2.err)
	}
	if r2.lock.Token() <= r1.lock.Token() {
		t.Fatalf("tokens %d then %d; want increasing", r1.lock.Token(), r2.lock.Token())
	}
	if err := r2.lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
