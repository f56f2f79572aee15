package queue

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// putMany writes n waiter keys, one name each, under names "<prefix><i>",
// in transactions of etcd's most operations.
func putMany(t *testing.T, e *Engine, cli *clientv3.Client, prefix string, n int, lease clientv3.LeaseID) {
	t.Helper()
	var s Secret
	for i := 0; i < n; {
		var ops []clientv3.Op
		for ; i < n && len(ops) < 128; i++ {
			v := encodeValue(s, waiterMeta{ClientID: fmt.Sprintf("client-%d", i), TTL: 30, Enqueued: time.Now().UnixMilli()})
			ops = append(ops, clientv3.OpPut(e.keys.waiter(fmt.Sprintf("%s%d", prefix, i), WaiterID(fmt.Sprint(i))), v, clientv3.WithLease(lease)))
		}
		if _, err := cli.Txn(testCtx(t)).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

// openWatcher starts a watcher of prefix that drops what it is told and
// returns once its snapshot is complete; it ends with the test.
func openWatcher(t *testing.T, e *Engine, prefix string) {
	t.Helper()
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- e.WatchLocks(ctx, prefix, 0, func(b WatchBatch) error {
			if b.SnapshotDone {
				close(done)
			}
			return nil
		})
	}()
	t.Cleanup(func() { cancel(); <-errc })
	select {
	case <-done:
	case err := <-errc:
		t.Fatalf("watch of %q: %v", prefix, err)
	case <-time.After(30 * time.Second):
		t.Fatal("no snapshot")
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Watchers of one prefix share one view of it: the heap a tenant's
// queues take in a gateway grows once per prefix watched, not once per
// watch stream. With 20,000 locks, each watcher beyond the first costs a
// few KiB (its subscription), where a copy of every queue per stream
// would be about 10 MiB; the first costs the view, about 175 bytes a
// key (docs/security.md states both).
func TestWatchersOfAPrefixShareOneView(t *testing.T) {
	e, cli := newEngine(t)
	lease, err := cli.Grant(testCtx(t), 300)
	if err != nil {
		t.Fatal(err)
	}
	const keys, more = 20_000, 8
	putMany(t, e, cli, "m/", keys, lease.ID)
	base := heapInUse()
	openWatcher(t, e, "")
	first := int64(heapInUse()) - int64(base)
	for range more {
		openWatcher(t, e, "")
	}
	each := (int64(heapInUse()) - int64(base) - first) / more
	t.Logf("%d keys: the first watcher took %d KiB (%d bytes a key), each further one %d KiB", keys, first>>10, first/keys, each>>10)
	if each > 256<<10 {
		t.Errorf("each further watcher of the same prefix took %d KiB; want it to share the first one's view (< 256 KiB)", each>>10)
	}
	if perKey := first / keys; perKey > 250 {
		t.Errorf("the view took %d bytes a key; docs/security.md says about 175", perKey)
	}
	if n := e.watches.held(e.keys.prefix); n != keys {
		t.Errorf("the budget counts %d keys for one view of %d", n, keys)
	}
}

// The engine's views together hold at most MaxWatchKeys keys: a prefix
// whose keys would pass it is refused before it is read, whatever other
// prefixes hold; watchers of a prefix already followed share its keys;
// and a view that grows past the bound ends with ErrWatchBudget. Ended
// views give their keys back.
func TestWatchBudgetBoundsWhatViewsHold(t *testing.T) {
	e, cli := newEngine(t, func(c *Config) { c.MaxWatchKeys = 10 })
	ctx := testCtx(t)
	lease, err := cli.Grant(ctx, 300)
	if err != nil {
		t.Fatal(err)
	}
	putMany(t, e, cli, "a/", 6, lease.ID)
	putMany(t, e, cli, "b/", 6, lease.ID)
	openWatcher(t, e, "a/")
	openWatcher(t, e, "a/") // shares the view: no more keys
	err = e.WatchLocks(ctx, "b/", 0, func(WatchBatch) error { return nil })
	if !errors.Is(err, ErrWatchBudget) {
		t.Fatalf("a second prefix past the budget: %v; want ErrWatchBudget", err)
	}
	if n := e.watches.held(e.keys.prefix); n != 6 {
		t.Fatalf("the budget counts %d keys; want the 6 of a/'s view", n)
	}
	ch, errc := watchEvents(t, e, "c/", 0)
	nextBatch(t, ch)
	putMany(t, e, cli, "c/", 5, lease.ID) // 6 + 5 > 10
	select {
	case err := <-errc:
		if !errors.Is(err, ErrWatchBudget) {
			t.Fatalf("a view grown past the budget ended with %v; want ErrWatchBudget", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a view grown past the budget goes on")
	}
	waitFor(t, func() bool { return e.watches.held(e.keys.prefix) == 6 }, "the ended view's keys given back")
}

// held is the keys the views of space hold.
func (s *watchSet) held(space string) int64 {
	s.bmu.Lock()
	defer s.bmu.Unlock()
	return s.budget[space]
}

// waitFor polls cond until it holds.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A watcher resumed from any revision gets exactly the events after it,
// as a watcher that was there all along saw them — whether it joins the
// shared view through its ring, catches up on a view of its own first
// (a revision from before the shared view was loaded, or behind its
// ring), or the shared view is gone and its own view becomes it.
func TestResumedWatchersSeeExactlyWhatCameAfter(t *testing.T) {
	old := watchRingEvents
	watchRingEvents = 3 // the ring keeps few events: most resumes catch up
	t.Cleanup(func() { watchRingEvents = old })
	e, cli := newEngine(t)
	ctx := testCtx(t)
	lease, err := cli.Grant(ctx, 300)
	if err != nil {
		t.Fatal(err)
	}
	rev := func() int64 {
		resp, err := cli.Get(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	start := rev()
	step := func(i int) {
		switch i % 3 {
		case 0:
			putSemWaiter(t, e, cli, "r/n", fmt.Sprint("w", i), 1, lease.ID)
		case 1:
			putSemWaiter(t, e, cli, fmt.Sprint("r/m", i), "x", 2, lease.ID)
		case 2:
			if _, err := cli.Delete(ctx, e.keys.waiter("r/n", WaiterID(fmt.Sprint("w", i-2)))); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 6 {
		step(i)
	}
	// The watcher that sees everything, from the start, and one that
	// keeps the shared view alive from now on.
	all, _ := watchEvents(t, e, "r/", start)
	openWatcher(t, e, "r/")
	for i := 6; i < 15; i++ {
		step(i)
	}
	end := rev()
	collect := func(ch <-chan WatchBatch) []string {
		var out []string
		for {
			b := nextBatchOrProgress(t, ch)
			for _, ev := range b.Events {
				out = append(out, fmt.Sprintf("%d %s", ev.Revision, eventsOf(WatchBatch{Events: []WatchEvent{ev}})[0]))
			}
			if b.Revision >= end {
				return out
			}
		}
	}
	history := collect(all)
	if len(history) < 10 {
		t.Fatalf("the full history has %d events: %v", len(history), history)
	}
	for from := start; from < end; from++ {
		ch, _ := watchEvents(t, e, "r/", from)
		got := collect(ch)
		var want []string
		for _, h := range history {
			var r int64
			fmt.Sscan(h, &r)
			if r > from {
				want = append(want, h)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("resumed from %d: %v; want %v", from, got, want)
		}
	}
}

// nextBatchOrProgress is nextBatch that also returns progress reports.
func nextBatchOrProgress(t *testing.T, ch <-chan WatchBatch) WatchBatch {
	t.Helper()
	select {
	case b := <-ch:
		return b
	case <-time.After(20 * time.Second):
		t.Fatal("no watch batch")
	}
	return WatchBatch{}
}

// A watcher that stops taking its batches is dropped once it has more
// than watchSubEvents waiting, its queue freed, and the others go on.
func TestASlowWatcherIsDroppedAlone(t *testing.T) {
	old := watchSubEvents
	watchSubEvents = 2
	t.Cleanup(func() { watchSubEvents = old })
	e, cli := newEngine(t)
	ctx := testCtx(t)
	lease, err := cli.Grant(ctx, 300)
	if err != nil {
		t.Fatal(err)
	}
	fast, _ := watchEvents(t, e, "s/", 0)
	nextBatch(t, fast)
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	slowErr := make(chan error, 1)
	snapped := make(chan struct{})
	go func() {
		slowErr <- e.WatchLocks(ctx, "s/", 0, func(b WatchBatch) error {
			if b.SnapshotDone {
				close(snapped)
				return nil
			}
			<-stuck // never takes another batch
			return nil
		})
	}()
	<-snapped
	for i := range 6 {
		putSemWaiter(t, e, cli, fmt.Sprint("s/", i), "c", 1, lease.ID)
		if got := eventsOf(nextBatch(t, fast)); len(got) != 1 {
			t.Fatalf("the fast watcher got %v", got)
		}
	}
	// The slow one is blocked in emit; its subscription is gone from the
	// view, and so is what it did not take.
	waitFor(t, func() bool {
		e.watches.mu.Lock()
		v := e.watches.m[viewID{e.keys.prefix, "s/"}]
		e.watches.mu.Unlock()
		v.mu.Lock()
		defer v.mu.Unlock()
		return len(v.subs) == 1
	}, "the slow watcher dropped")
}

// A view's only watcher is never dropped for being slow: the view waits
// for it, and it gets every event in order — a watch resumed far behind
// replays history at its own pace.
func TestAnOnlyWatcherSetsThePace(t *testing.T) {
	old := watchSubEvents
	watchSubEvents = 2
	t.Cleanup(func() { watchSubEvents = old })
	e, cli := newEngine(t)
	ctx := testCtx(t)
	lease, err := cli.Grant(ctx, 300)
	if err != nil {
		t.Fatal(err)
	}
	gate, snapped := make(chan struct{}), make(chan struct{})
	got := make(chan string, 64)
	errc := make(chan error, 1)
	go func() {
		errc <- e.WatchLocks(ctx, "p/", 0, func(b WatchBatch) error {
			if b.Snapshot {
				close(snapped)
				return nil
			}
			<-gate // slow: one batch at a time, when the test says
			for _, ev := range b.Events {
				got <- ev.Name
			}
			return nil
		})
	}()
	<-snapped
	const n = 10
	for i := range n {
		putSemWaiter(t, e, cli, fmt.Sprint("p/", i), "c", 1, lease.ID)
	}
	close(gate)
	for i := range n {
		select {
		case name := <-got:
			if want := fmt.Sprint("p/", i); name != want {
				t.Fatalf("event %d is about %s; want %s", i, name, want)
			}
		case err := <-errc:
			t.Fatalf("the only watcher ended: %v", err)
		case <-time.After(20 * time.Second):
			t.Fatalf("got %d of %d events", i, n)
		}
	}
}
