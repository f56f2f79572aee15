package queue

import (
	"errors"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// putSemWaiter writes a semaphore waiter key of limit n, as the engine would.
func putSemWaiter(t *testing.T, e *Engine, cli *clientv3.Client, name, client string, n int, lease clientv3.LeaseID) {
	t.Helper()
	var s Secret
	v := encodeValue(s, waiterMeta{ClientID: client, TTL: 10, Limit: n, Enqueued: time.Now().UnixMilli()})
	if _, err := cli.Put(testCtx(t), e.keys.waiter(name, WaiterID(client)), v, clientv3.WithLease(lease)); err != nil {
		t.Fatal(err)
	}
}

// A semaphore of limit 2 has two holders: ListLocks, DescribeQueue's
// entries and the watch all say so, numbering both holders 0 and the
// waiter 1 (as its Acquire stream does), and the release of one holder
// makes the first waiter a holder, not the second key.
func TestListAndWatchCountEverySemaphoreHolder(t *testing.T) {
	e, cli := newEngine(t)
	lease, err := cli.Grant(testCtx(t), 60)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"a", "b", "c"} {
		putSemWaiter(t, e, cli, "s/n", c, 2, lease.ID)
	}
	page, err := e.ListLocks(testCtx(t), "s/", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Locks) != 1 {
		t.Fatalf("listed %d names, want 1", len(page.Locks))
	}
	l := page.Locks[0]
	var holders []string
	for _, en := range l.Entries {
		if en.Holder() {
			holders = append(holders, en.ClientID)
		}
	}
	if l.Limit() != 2 || l.Waiters() != 1 || !slices.Equal(holders, []string{"a", "b"}) {
		t.Fatalf("limit %d, waiters %d, holders %v; want 2, 1, [a b]", l.Limit(), l.Waiters(), holders)
	}

	ch, _ := watchEvents(t, e, "s/", 0)
	snap := nextBatch(t, ch)
	if got, want := eventsOf(snap), []string{"held s/n a@0", "held s/n b@0", "queued s/n c@1"}; !slices.Equal(got, want) {
		t.Fatalf("snapshot %v, want %v", got, want)
	}
	if _, err := cli.Delete(testCtx(t), e.keys.waiter("s/n", WaiterID("a"))); err != nil {
		t.Fatal(err)
	}
	b := nextBatch(t, ch)
	if got, want := eventsOf(b), []string{"expired s/n a@0", "held s/n c@0"}; !slices.Equal(got, want) {
		t.Fatalf("after a's delete: %v, want %v", got, want)
	}
}

// A force-release given a token evicts that holder of a semaphore — the
// second, here — and refuses a waiter's token: a waiter holds nothing.
func TestForceReleasePicksASemaphoreHolderByToken(t *testing.T) {
	e, cli := newEngine(t)
	ctx := testCtx(t)
	var gs []Grant
	for range 2 {
		r := req("s/force")
		r.Limit = 2
		gs = append(gs, mustAcquire(t, e, r))
	}
	r := req("s/force")
	r.Limit = 2
	w, err := e.Enqueue(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	waiterToken := w.q.h.Token()
	if _, err := e.ForceRelease(ctx, ForceReleaseRequest{Name: "s/force", Reason: "test", Actor: "t", Token: waiterToken}); !errors.Is(err, ErrHolderChanged) {
		t.Fatalf("force-release of the waiter's token: %v; want ErrHolderChanged", err)
	}
	res, err := e.ForceRelease(ctx, ForceReleaseRequest{Name: "s/force", Reason: "test", Actor: "t", Token: gs[1].Token()})
	if err != nil || !res.Released {
		t.Fatalf("force-release of the second holder: %+v, %v", res, err)
	}
	for i, g := range gs {
		resp, err := cli.Get(ctx, e.keys.waiter(g.Name, g.WaiterID))
		if err != nil {
			t.Fatal(err)
		}
		if gone := len(resp.Kvs) == 0; gone != (i == 1) {
			t.Errorf("holder %d: key gone %v; want only the second holder's gone", i, gone)
		}
	}
}

// An acquire refused for its limit after its key went onto a pooled lease
// has that key removed and the lease revoked with it; the lease must not
// also go back to the pool, or the next lock to take it would lose its key
// to that revocation (two holders: it believes it holds while its key is
// gone).
func TestLimitRefusalNeverGivesItsLeaseBackToThePool(t *testing.T) {
	e, _ := newEngine(t)
	ctx := testCtx(t)
	const ttlSec = 10
	if err := e.pool.prefill(ctx, ttlSec); err != nil {
		t.Fatal(err)
	}
	r := req("s/refused")
	r.Limit = 2
	mustAcquire(t, e, r)
	free0, _ := e.pool.count(ttlSec)
	bad := req("s/refused")
	bad.Limit = 3
	if _, err := acquire(ctx, e, bad); !errors.Is(err, ErrLimitMismatch) {
		t.Fatalf("acquire with another limit: %v; want ErrLimitMismatch", err)
	}
	if free1, _ := e.pool.count(ttlSec); free1 != free0-1 {
		t.Fatalf("free pooled leases: %d before the refused acquire, %d after; want one fewer (its lease is revoked, not given back)", free0, free1)
	}
}
