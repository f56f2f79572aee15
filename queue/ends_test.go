package queue

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
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

// historyWatches counts the watches of one key's history (deletionRev's
// reads) made through the client it wraps.
type historyWatches struct {
	clientv3.Watcher
	key string
	n   atomic.Int64
}

func (w *historyWatches) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	if key == w.key {
		w.n.Add(1)
	}
	return w.Watcher.Watch(ctx, key, opts...)
}

// TestEndOfALostLockIsReadOnce: what etcd's history says of a deleted
// key's end never changes, so calls again and again on the same lost lock
// id read that history once; a forged secret on the same key is still
// refused (the proof is checked on every call).
func TestEndOfALostLockIsReadOnce(t *testing.T) {
	e0, _ := newEngine(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: shared.ClientFor(t).Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	e, err := New(cli, e0.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	h := mustAcquire(t, e, req("once"))
	w := &historyWatches{Watcher: cli.Watcher, key: e.keys.waiter("once", h.WaiterID)}
	cli.Watcher = w
	expireNow(t, cli, h)
	for range 5 {
		if _, err := e.Renew(testCtx(t), h.Handle, h.Token()); !errors.Is(err, ErrExpired) {
			t.Fatalf("Renew of a lost lock = %v; want ErrExpired", err)
		}
	}
	if n := w.n.Load(); n != 1 {
		t.Fatalf("5 renewals of one lost lock read its history %d times; want 1", n)
	}
	forged := h.Handle
	forged.Secret[0] ^= 1
	if _, err := e.Renew(testCtx(t), forged, h.Token()); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("Renew with a forged secret of the same key = %v; want ErrNotOwner", err)
	}
}

// TestEndsAfterCompaction: a lock held while etcd compacted its history
// past the key's creation — an operator compacts every few minutes — is
// still told how it ended, evicted or released: the deletion and the
// key's last value are kept by any compaction that came before the
// deletion. A compaction past the deletion itself leaves an eviction told
// by its audit record, and any other end unknown (lost).
func TestEndsAfterCompaction(t *testing.T) {
	e, cli := newEngine(t)
	ctx := testCtx(t)
	compactNow := func() {
		t.Helper()
		// Two writes: a compaction at the key's creation + 1 leaves the
		// history a watch from there needs.
		if _, err := cli.Put(ctx, "/unrelated", "x"); err != nil {
			t.Fatal(err)
		}
		r, err := cli.Put(ctx, "/unrelated", "y")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Compact(ctx, r.Header.Revision); err != nil {
			t.Fatal(err)
		}
	}
	g := mustAcquire(t, e, req("ev-compacted"))
	ends := awaitEnd(t, e, g)
	compactNow()
	if _, err := e.ForceRelease(ctx, ForceReleaseRequest{Name: "ev-compacted", Reason: "stuck job", Actor: "op", Token: g.Token()}); err != nil {
		t.Fatal(err)
	}
	if end := within10s(t, ends, "an eviction after a compaction"); end.Kind != EndEvicted || !errors.Is(end.Err, ErrEvicted) {
		t.Fatalf("end after a compaction before the eviction = %+v; want evicted", end)
	}
	if _, err := e.Renew(ctx, g.Handle, g.Token()); !errors.Is(err, ErrEvicted) {
		t.Fatalf("Renew of a lock evicted after a compaction = %v; want ErrEvicted", err)
	}
	r := mustAcquire(t, e, req("rel-compacted"))
	compactNow()
	mustRelease(t, e, r)
	if _, err := e.Renew(ctx, r.Handle, r.Token()); !errors.Is(err, ErrReleased) {
		t.Fatalf("Renew of a lock released after a compaction = %v; want ErrReleased", err)
	}
	// The deletion of an evicted key compacted away: its audit record
	// still tells it.
	c := mustAcquire(t, e, req("gone-compacted"))
	if _, err := e.ForceRelease(ctx, ForceReleaseRequest{Name: "gone-compacted", Reason: "stuck job", Actor: "op", Token: c.Token()}); err != nil {
		t.Fatal(err)
	}
	compactNow()
	if _, err := e.Renew(ctx, c.Handle, c.Token()); !errors.Is(err, ErrEvicted) {
		t.Fatalf("Renew of an evicted lock whose deletion was compacted away = %v; want ErrEvicted", err)
	}
	// A later lock of the name that expires: the eviction's record names
	// another token and tells nothing of it.
	d := mustAcquire(t, e, req("gone-compacted"))
	if _, err := cli.Revoke(ctx, d.Lease); err != nil {
		t.Fatal(err)
	}
	compactNow()
	// Any other end compacted away is unknown, answered as a loss at once
	// (not after a watch that waits for a deletion long gone).
	began := time.Now()
	_, err := e.Renew(ctx, d.Handle, d.Token())
	if took := time.Since(began); !errors.Is(err, ErrExpired) && !errors.Is(err, ErrStolen) || took >= e.Config().RequestTimeout {
		t.Fatalf("Renew of a lock whose deletion was compacted away = %v after %s; want a loss, before the request timeout %s", err, took, e.Config().RequestTimeout)
	}
}
