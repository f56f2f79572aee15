package queue

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// tallyBatch is how many values one transaction of HeldCounts reads,
// below etcd's limit of operations per transaction.
const tallyBatch = 100

// HeldCounts judges, by the grant rule (holders), how many keys of each
// name hold: names[i] are the waiter keys of one name as a keys-only read
// at revision rev returned them, in any order (their create revisions
// order them; HeldCounts sorts each slice so). It reads at rev only the
// values the rule needs — none for a name with one key, the first key's
// for a lock's queue however long it is, and for a semaphore of limit N
// the first N keys' — in transactions of at most tallyBatch reads. A key
// whose value is gone or unreadable counts as a different limit, which
// only ever withholds a grant, as it does for the engine.
//
// It is for counts over many names at once (the console's overview); a
// view of one name's queue reads its values anyway (ListLocks,
// DescribeQueue).
func HeldCounts(ctx context.Context, kv clientv3.KV, rev int64, names [][]*mvccpb.KeyValue) ([]int, error) {
	for _, keys := range names {
		slices.SortFunc(keys, func(a, b *mvccpb.KeyValue) int { return cmp.Compare(a.CreateRevision, b.CreateRevision) })
	}
	limits := make([]map[int]int, len(names)) // of name i, by key index: the limits read
	read := func(want func(i int) []int) error {
		type at struct{ name, key int }
		var ops []clientv3.Op
		var of []at
		flush := func() error {
			if len(ops) == 0 {
				return nil
			}
			resp, err := kv.Txn(ctx).Then(ops...).Commit()
			if err != nil {
				return fmt.Errorf("queue: read limits: %w", err)
			}
			for j, r := range resp.Responses {
				var v []byte
				if got := firstKV(r); got != nil && got.CreateRevision == names[of[j].name][of[j].key].CreateRevision {
					v = got.Value
				}
				if limits[of[j].name] == nil {
					limits[of[j].name] = map[int]int{}
				}
				limits[of[j].name][of[j].key] = limitOf(v)
			}
			ops, of = ops[:0], of[:0]
			return nil
		}
		for i, keys := range names {
			for _, k := range want(i) {
				ops = append(ops, clientv3.OpGet(string(keys[k].Key), clientv3.WithRev(rev)))
				of = append(of, at{i, k})
				if len(ops) == tallyBatch {
					if err := flush(); err != nil {
						return err
					}
				}
			}
		}
		return flush()
	}
	// The first key's limit says how many keys the rule may read.
	if err := read(func(i int) []int {
		if len(names[i]) < 2 {
			return nil
		}
		return []int{0}
	}); err != nil {
		return nil, err
	}
	if err := read(func(i int) []int {
		if len(names[i]) < 2 {
			return nil
		}
		var ks []int
		for k := 1; k < min(len(names[i]), limits[i][0]); k++ {
			ks = append(ks, k)
		}
		return ks
	}); err != nil {
		return nil, err
	}
	out := make([]int, len(names))
	for i, keys := range names {
		out[i] = holders(len(keys), func(k int) int { return limits[i][k] })
	}
	return out, nil
}
