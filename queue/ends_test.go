package queue

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// awaitEnd runs AwaitEnd of g in the background.
func awaitEnd(t *testing.T, e *Engine, g Grant) <-chan End {
	t.Helper()
	out := make(chan End, 1)
	go func() {
		end, err := e.AwaitEnd(testCtx(t), g.Handle, g.Token())
		if err != nil {
			t.Error(err)
		}
		out <- end
	}()
	return out
}

func within10s(t *testing.T, ch <-chan End, what string) End {
	t.Helper()
	select {
	case end := <-ch:
		return end
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: the holder was not told", what)
		return End{}
	}
}

// TestHolderToldOfEviction: a holder awaiting its lock's end on one
// gateway is told of a force-release made on another at once — not at its
// next renewal — with the audit record; its renewal then answers
// ErrEvicted too.
func TestHolderToldOfEviction(t *testing.T) {
	e, cli := newEngine(t)
	other, err := New(cli, e.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	g := mustAcquire(t, e, req("ev"))
	ends := awaitEnd(t, e, g)
	res, err := other.ForceRelease(testCtx(t), ForceReleaseRequest{Name: "ev", Reason: "stuck job", Actor: "op"})
	if err != nil || !res.Released {
		t.Fatalf("ForceRelease = %+v, %v", res, err)
	}
	end := within10s(t, ends, "an eviction")
	if end.Kind != EndEvicted || !errors.Is(end.Err, ErrEvicted) || end.Audit == nil || end.Audit.ID != res.Record.ID {
		t.Fatalf("end = %+v; want evicted with audit record %s", end, res.Record.ID)
	}
	if _, err := e.Renew(testCtx(t), g.Handle, g.Token()); !errors.Is(err, ErrEvicted) {
		t.Fatalf("Renew of an evicted lock = %v; want ErrEvicted", err)
	}
}

// TestHolderToldOfAnEndBeforeTheWatchOpened: the engine's watch of audit
// records starts where etcd confirms it, which can be after an awaiter
// proved its lock held. An eviction in between — after the proof, before
// the watch — is still told: the awaiters prove their locks again once the
// watch is open.
func TestHolderToldOfAnEndBeforeTheWatchOpened(t *testing.T) {
	e, cli := newEngine(t)
	other, err := New(cli, e.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	g := mustAcquire(t, e, req("between"))
	evicted := make(chan struct{})
	var once sync.Once
	e.hooks = &pointHooks{fn: func(ctx context.Context, point string) {
		switch point {
		case pointEndWatch:
			<-evicted // no watch opens before the eviction
		case pointEndProof:
			once.Do(func() {
				if _, err := other.ForceRelease(ctx, ForceReleaseRequest{Name: "between", Reason: "between proof and watch", Actor: "op"}); err != nil {
					t.Error(err)
				}
				close(evicted)
			})
		}
	}}
	end := within10s(t, awaitEnd(t, e, g), "an eviction before the watch opened")
	if end.Kind != EndEvicted || !errors.Is(end.Err, ErrEvicted) {
		t.Fatalf("end = %+v; want evicted", end)
	}
}

// TestHolderToldOfLoss: a holder whose lease etcd ends behind its back is
// told as soon as a gateway sees the loss (here the hub of a waiter the
// loss made first), not at its next renewal.
func TestHolderToldOfLoss(t *testing.T) {
	e, cli := newEngine(t)
	g := mustAcquire(t, e, req("lo"))
	next := waitingFor(t, e, req("lo"))
	ends := awaitEnd(t, e, g)
	expireNow(t, cli, g)
	end := within10s(t, ends, "a loss")
	if end.Kind != EndLost || !errors.Is(end.Err, ErrStolen) && !errors.Is(end.Err, ErrExpired) {
		t.Fatalf("end = %+v; want lost", end)
	}
	_ = next
}

// TestEndsOfGoneLocks: a lock already released, or lost, is answered at
// once; a renewal of a released lock says it was released.
func TestEndsOfGoneLocks(t *testing.T) {
	e, cli := newEngine(t)
	g := mustAcquire(t, e, req("gone"))
	mustRelease(t, e, g)
	end, err := e.AwaitEnd(testCtx(t), g.Handle, g.Token())
	if err != nil || end.Kind != EndReleased || !errors.Is(end.Err, ErrReleased) {
		t.Fatalf("AwaitEnd of a released lock = %+v, %v; want released", end, err)
	}
	if _, err := e.Renew(testCtx(t), g.Handle, g.Token()); !errors.Is(err, ErrReleased) {
		t.Fatalf("Renew of a released lock = %v; want ErrReleased", err)
	}
	l := mustAcquire(t, e, req("lost"))
	expireNow(t, cli, l)
	if end, err := e.AwaitEnd(testCtx(t), l.Handle, l.Token()); err != nil || end.Kind != EndLost {
		t.Fatalf("AwaitEnd of a lost lock = %+v, %v; want lost", end, err)
	}
	forged := g.Handle
	forged.Secret[0] ^= 1
	if _, err := e.AwaitEnd(testCtx(t), forged, g.Token()); err == nil {
		t.Fatal("AwaitEnd with a forged secret answered")
	}
	ctx, cancel := context.WithTimeout(testCtx(t), 100*time.Millisecond)
	defer cancel()
	h := mustAcquire(t, e, req("held"))
	if _, err := e.AwaitEnd(ctx, h.Handle, h.Token()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AwaitEnd of a held lock = %v; want it to wait until its context ends", err)
	}
}
