package queue

import (
	"context"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestHeldCountsJudgeByTheGrantRule: counted from a keys-only read,
// every name's holders are the ones the engine's own view of its queue
// (DescribeQueue, by the grant rule) marks as holders — min(keys, N) for
// a semaphore of limit N — for every limit and queue length, and across
// the reads' transaction batches (more names than one batch reads).
func TestHeldCountsJudgeByTheGrantRule(t *testing.T) {
	t.Parallel()
	e, cli := newEngine(t)
	type shape struct{ limit, keys int }
	var shapes []shape
	for _, limit := range []int{1, 2, 3, 5} {
		for keys := 1; keys <= 7; keys++ {
			shapes = append(shapes, shape{limit, keys})
		}
	}
	for range tallyBatch + 10 {
		shapes = append(shapes, shape{1, 2})
	}
	for i, s := range shapes {
		name := fmt.Sprintf("n%03d", i)
		for k := range s.keys {
			r := req(name)
			r.Limit = s.limit
			w, err := e.Enqueue(testCtx(t), r)
			if err != nil {
				t.Fatalf("Enqueue(%q) key %d: %v", name, k, err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				_, _ = w.Wait(ctx)
			})
		}
	}
	resp, err := cli.Get(testCtx(t), LocksPrefix(e.cfg.Prefix), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var keys [][]*mvccpb.KeyValue
	for _, kv := range resp.Kvs {
		name, _, ok := SplitWaiterKey(e.cfg.Prefix, string(kv.Key))
		if !ok {
			t.Fatalf("SplitWaiterKey(%q) is not a waiter key", kv.Key)
		}
		if len(names) == 0 || names[len(names)-1] != name {
			names, keys = append(names, name), append(keys, nil)
		}
		keys[len(keys)-1] = append(keys[len(keys)-1], kv)
	}
	if len(names) != len(shapes) {
		t.Fatalf("the read found %d names; want %d", len(names), len(shapes))
	}
	held, err := HeldCounts(testCtx(t), cli, resp.Header.Revision, keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range names {
		info, err := e.DescribeQueue(testCtx(t), name)
		if err != nil {
			t.Fatal(err)
		}
		view := 0
		for _, en := range info.Entries {
			if en.Holder() {
				view++
			}
		}
		s := shapes[i]
		if held[i] != view || held[i] != min(s.keys, s.limit) {
			t.Errorf("%s (limit %d, %d keys): HeldCounts says %d hold, DescribeQueue %d; want both %d", name, s.limit, s.keys, held[i], view, min(s.keys, s.limit))
		}
	}
}

// TestSplitWaiterKeyReadsTheLayoutFromTheRoot: only a key the engine at
// prefix laid out as a waiter's parses, whatever "/locks/" the prefix,
// a nested engine's prefix or a record's name contains.
func TestSplitWaiterKeyReadsTheLayoutFromTheRoot(t *testing.T) {
	t.Parallel()
	const p = "/c/locks"
	wid := WaiterID("r")
	for _, tc := range []struct {
		key, name string
		ok        bool
	}{
		{NamePrefix(p, "a") + wid, "a", true},
		{NamePrefix(p, "a/locks/b") + wid, "a/locks/b", true},
		{NamePrefix(p, ElectionName("e")) + wid, ElectionName("e"), true},
		{p + "/sessions/00000000000000ab", "", false},
		{p + "/holds/a/" + wid + "/7", "", false},
		{p + "/handoff/" + wid, "", false},
		{p + "/t/locks/locks/a/" + wid, "", false}, // a nested engine's
		{"/c/locks/a/" + wid, "", false},           // "/c"'s waiter, not "/c/locks"'s
		{LocksPrefix(p) + "a/" + wid + "/x", "", false},
		{LocksPrefix(p) + "a/", "", false},
		{LocksPrefix(p) + "/" + wid, "", false},
		{LocksPrefix(p) + "a%2f/" + wid, "", false}, // not escapeName's spelling
		{LocksPrefix(p) + "a%2/" + wid, "", false},
	} {
		name, id, ok := SplitWaiterKey(p, tc.key)
		if ok != tc.ok || name != tc.name || ok && id != wid {
			t.Errorf("SplitWaiterKey(%q, %q) = %q, %q, %v; want %q, %q, %v", p, tc.key, name, id, ok, tc.name, wid, tc.ok)
		}
	}
}
