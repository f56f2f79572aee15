package client

import (
	"context"
	"testing"
	"time"
)

// enterAsync starts g.enter for a lease of deadline and reports its
// release function once admitted.
func enterAsync(t *testing.T, ctx context.Context, g *renewGate, deadline time.Time) <-chan func() {
	t.Helper()
	ch := make(chan func(), 1)
	go func() {
		release, err := g.enter(ctx, deadline)
		if err != nil {
			close(ch)
			return
		}
		ch <- release
	}()
	return ch
}

// awaitWaiting waits until n renewals wait in g: enter parks them without
// any event to await from outside, so the count is polled.
func awaitWaiting(t *testing.T, g *renewGate, n int) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); g.waitingCount() != n; {
		if time.Now().After(end) {
			t.Fatalf("%d renewals waiting; want %d", g.waitingCount(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestRenewGateAdmitsMostUrgentFirst(t *testing.T) {
	g := newRenewGate(2)
	ctx := context.Background()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r1, err := g.enter(ctx, t0.Add(9*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := g.enter(ctx, t0.Add(9*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Full: these wait, queued in an order unlike their deadlines'.
	late := enterAsync(t, ctx, g, t0.Add(8*time.Second))
	awaitWaiting(t, g, 1)
	soon := enterAsync(t, ctx, g, t0.Add(2*time.Second))
	awaitWaiting(t, g, 2)
	tie1 := enterAsync(t, ctx, g, t0.Add(5*time.Second))
	awaitWaiting(t, g, 3)
	tie2 := enterAsync(t, ctx, g, t0.Add(5*time.Second))
	awaitWaiting(t, g, 4)

	notAdmitted := func(chs ...<-chan func()) {
		t.Helper()
		for _, ch := range chs {
			select {
			case <-ch:
				t.Fatal("a renewal was admitted while the gate was full")
			default:
			}
		}
	}
	notAdmitted(late, soon, tie1, tie2)

	admitted := func(ch <-chan func(), what string) func() {
		t.Helper()
		select {
		case r, ok := <-ch:
			if !ok {
				t.Fatalf("%s failed to enter", what)
			}
			return r
		case <-time.After(10 * time.Second):
			t.Fatalf("%s not admitted", what)
			return nil
		}
	}
	r1()
	rs := admitted(soon, "the renewal closest to its deadline")
	notAdmitted(late, tie1, tie2)
	r2()
	rt1 := admitted(tie1, "the first of two equal deadlines")
	notAdmitted(late, tie2)
	rs()
	rt2 := admitted(tie2, "the second of two equal deadlines")
	notAdmitted(late)
	rt1()
	rl := admitted(late, "the renewal furthest from its deadline")
	rt2()
	rl()
	if g.busy != 0 || g.waitingCount() != 0 {
		t.Fatalf("after every release: busy %d, waiting %d; want 0, 0", g.busy, g.waitingCount())
	}
	// Free again: admitted at once.
	r, err := g.enter(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	r()
}

func TestRenewGateWithdrawsCancelledWaiters(t *testing.T) {
	g := newRenewGate(1)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r1, err := g.enter(context.Background(), t0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	gone := enterAsync(t, ctx, g, t0) // most urgent, then withdrawn
	awaitWaiting(t, g, 1)
	next := enterAsync(t, context.Background(), g, t0.Add(time.Second))
	awaitWaiting(t, g, 2)
	cancel()
	if _, ok := <-gone; ok {
		t.Fatal("a cancelled renewal was admitted")
	}
	awaitWaiting(t, g, 1)
	r1()
	select {
	case r := <-next:
		r()
	case <-time.After(10 * time.Second):
		t.Fatal("the turn of a withdrawn renewal was not passed on")
	}
	if g.busy != 0 || g.waitingCount() != 0 {
		t.Fatalf("busy %d, waiting %d; want 0, 0", g.busy, g.waitingCount())
	}
}
