package queue

import (
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestTxnRangeCountIsTheWholePrefix pins the etcd behaviour the enqueue's
// count rests on (enqueue.go, acquireTxn): a range in a writing
// transaction, limited to the first n keys by create revision, answers
// with the count of the whole prefix, the transaction's own put included,
// at the transaction's revision. etcd's executeTxn asks executeRange for
// the total count, and a range sorted by anything but key is read
// without its limit before it is cut to n.
func TestTxnRangeCountIsTheWholePrefix(t *testing.T) {
	e, cli := newEngine(t)
	ctx := testCtx(t)
	prefix := e.Config().Prefix + "/count/"
	// Keys whose key order is not their create order, so that a limit
	// applied before the sort would show.
	for _, k := range []string{"e", "d", "c", "b"} {
		if _, err := cli.Put(ctx, prefix+k, k); err != nil {
			t.Fatal(err)
		}
	}
	keys := int64(4)
	for _, n := range []int{1, 3} {
		keys++ // this round's own key
		own := fmt.Sprintf("%sa%d", prefix, n)
		resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(own), "=", 0)).
			Then(clientv3.OpPut(own, "x"), clientv3.OpGet(prefix, withFirstN(n)...)).Commit()
		if err != nil {
			t.Fatal(err)
		}
		rr := resp.Responses[1].GetResponseRange()
		if want := keys; rr.Count != want || len(rr.Kvs) != n || !rr.More {
			t.Fatalf("limit %d: Count %d, %d keys, More %v; want Count %d (the whole prefix), %d keys, More true", n, rr.Count, len(rr.Kvs), rr.More, want, n)
		}
		if got := string(rr.Kvs[0].Key); got != prefix+"e" {
			t.Fatalf("limit %d: first key %q; want %q, the first created", n, got, prefix+"e")
		}
	}
}
