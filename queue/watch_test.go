package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// watchEvents runs WatchLocks in the background and delivers its batches.
func watchEvents(t *testing.T, e *Engine, prefix string, from int64) (<-chan WatchBatch, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(testCtx(t))
	t.Cleanup(cancel)
	ch, errc := make(chan WatchBatch, 64), make(chan error, 1)
	go func() {
		errc <- e.WatchLocks(ctx, prefix, from, func(b WatchBatch) error {
			select {
			case ch <- b:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	return ch, errc
}

func nextBatch(t *testing.T, ch <-chan WatchBatch) WatchBatch {
	t.Helper()
	for {
		select {
		case b := <-ch:
			if len(b.Events) == 0 && !b.Snapshot {
				continue // progress
			}
			return b
		case <-time.After(20 * time.Second):
			t.Fatal("no watch batch")
		}
	}
}

func eventsOf(b WatchBatch) []string {
	var out []string
	for _, ev := range b.Events {
		out = append(out, fmt.Sprintf("%s %s %s@%d", ev.Type, ev.Name, ev.Entry.ClientID, ev.Entry.Position))
	}
	return out
}

// putWaiter writes a waiter key as the engine would, on lease.
func putWaiter(t *testing.T, e *Engine, cli *clientv3.Client, name, client string, lease clientv3.LeaseID) {
	t.Helper()
	var s Secret
	v := encodeValue(s, waiterMeta{ClientID: client, TTL: 10, Enqueued: time.Now().UnixMilli()})
	if _, err := cli.Put(testCtx(t), e.keys.waiter(name, WaiterID(client)), v, clientv3.WithLease(lease)); err != nil {
		t.Fatal(err)
	}
}

// One revision that deletes the holder and the next waiter (a lease they
// share revoked): the holder expired, the waiter left, and the third key
// is the new holder — the second never held.
func TestWatchLocksAppliesARevisionAsAWhole(t *testing.T) {
	e, cli := newEngine(t)
	shared, err := cli.Grant(testCtx(t), 60)
	if err != nil {
		t.Fatal(err)
	}
	own, err := cli.Grant(testCtx(t), 60)
	if err != nil {
		t.Fatal(err)
	}
	putWaiter(t, e, cli, "w/n", "a", shared.ID)
	putWaiter(t, e, cli, "w/n", "b", shared.ID)
	putWaiter(t, e, cli, "w/n", "c", own.ID)
	putWaiter(t, e, cli, "x/other", "z", own.ID)
	ch, _ := watchEvents(t, e, "w/", 0)
	b := nextBatch(t, ch)
	if want := []string{"held w/n a@0", "queued w/n b@1", "queued w/n c@2"}; !b.Snapshot || !b.SnapshotDone || !slices.Equal(eventsOf(b), want) {
		t.Fatalf("snapshot %v (done %v); want %v", eventsOf(b), b.SnapshotDone, want)
	}
	if _, err := cli.Revoke(testCtx(t), shared.ID); err != nil {
		t.Fatal(err)
	}
	b = nextBatch(t, ch)
	if want := []string{"expired w/n a@0", "left w/n b@1", "held w/n c@0"}; !slices.Equal(eventsOf(b), want) {
		t.Fatalf("after the revocation %v; want %v", eventsOf(b), want)
	}
}

func TestWatchLocksFromACompactedRevision(t *testing.T) {
	e, cli := newEngine(t)
	lease, err := cli.Grant(testCtx(t), 60)
	if err != nil {
		t.Fatal(err)
	}
	putWaiter(t, e, cli, "c/n", "a", lease.ID)
	resp, err := cli.Get(testCtx(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	old := resp.Header.Revision
	putWaiter(t, e, cli, "c/n", "b", lease.ID)
	if _, err := etcdtestCompact(cli); err != nil {
		t.Fatal(err)
	}
	err = e.WatchLocks(testCtx(t), "c/", old, func(WatchBatch) error { return nil })
	if !errors.Is(err, ErrCompacted) {
		t.Fatalf("WatchLocks from a compacted revision = %v; want ErrCompacted", err)
	}
	// Resuming at a revision that is kept reports only what came after.
	resp, err = cli.Get(testCtx(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	ch, _ := watchEvents(t, e, "c/", resp.Header.Revision)
	putWaiter(t, e, cli, "c/n", "c", lease.ID)
	if b := nextBatch(t, ch); b.Snapshot || !slices.Equal(eventsOf(b), []string{"queued c/n c@2"}) {
		t.Fatalf("resumed watch %v (snapshot %v); want only c queued", eventsOf(b), b.Snapshot)
	}
}

// Release, force-release and expiry of a holder are told apart.
func TestWatchLocksTellsHowAHolderWent(t *testing.T) {
	e, cli := newEngine(t)
	ch, _ := watchEvents(t, e, "", 0)
	nextBatch(t, ch) // the empty snapshot
	g := mustAcquire(t, e, req("r"))
	nextBatch(t, ch)
	mustRelease(t, e, g)
	if b := nextBatch(t, ch); !slices.Equal(eventsOf(b), []string{"released r c@0"}) || b.Events[0].Entry.Token != g.Token() {
		t.Fatalf("release: %v", eventsOf(b))
	}
	g = mustAcquire(t, e, req("f"))
	nextBatch(t, ch)
	if _, err := e.ForceRelease(testCtx(t), ForceReleaseRequest{Name: "f", Reason: "test", Actor: "t"}); err != nil {
		t.Fatal(err)
	}
	if b := nextBatch(t, ch); !slices.Equal(eventsOf(b), []string{"force_released f c@0"}) || b.Events[0].Entry.Token != g.Token() {
		t.Fatalf("force release: %v", eventsOf(b))
	}
	g = mustAcquire(t, e, req("x"))
	nextBatch(t, ch)
	if _, err := cli.Revoke(testCtx(t), g.Lease); err != nil {
		t.Fatal(err)
	}
	if b := nextBatch(t, ch); !slices.Equal(eventsOf(b), []string{"expired x c@0"}) {
		t.Fatalf("expiry: %v", eventsOf(b))
	}
}

// A revision the cluster has not reached (a restored backup) is treated
// as lost history: the caller starts over from a snapshot.
func TestWatchLocksFromAFutureRevision(t *testing.T) {
	e, cli := newEngine(t)
	resp, err := cli.Get(testCtx(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	err = e.WatchLocks(testCtx(t), "", resp.Header.Revision+1000, func(WatchBatch) error { return nil })
	if !errors.Is(err, ErrCompacted) {
		t.Fatalf("WatchLocks from a future revision = %v; want ErrCompacted", err)
	}
}
