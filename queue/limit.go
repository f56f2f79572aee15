package queue

import (
	"fmt"
	"slices"

	leasegatev1 "github.com/leasegate/leasegate/proto/leasegate/v1"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Semaphores.
//
// A lock is a semaphore of limit 1: a name acquired with limit N is held
// by the first N keys by create revision, each with a lock id and fencing
// token of its own; the keys behind them wait in FIFO order. Every key
// records its limit in its value (waiterMeta.Limit), and a waiter holds
// when, at a revision R of a view of the name:
//
//  1. fewer than N keys with a lower create revision exist, and
//  2. every one of them records limit N.
//
// See doc.go, "Semaphores", for why this never grants an (N+1)th holder,
// whatever limits the keys of a name were enqueued with.

// MaxLimit is the largest semaphore limit an acquire may ask for (the
// API's). The enqueue reads the first N keys of the name in its
// transaction, so N is bounded by what one etcd range read should return:
// a thousand values of a few hundred bytes each.
const MaxLimit = leasegatev1.MaxSemaphoreLimit

// limitOf is the limit a waiter value records; 1 for a value written
// before limits existed, 0 for one the engine cannot read (a different
// limit, which only ever withholds a grant).
func limitOf(v []byte) int {
	m, err := decodeValue(v)
	if err != nil {
		return 0
	}
	return max(m.Limit, 1)
}

// effectiveLimit is r's limit with the default applied.
func (r *AcquireRequest) effectiveLimit() int { return max(r.Limit, 1) }

func validateLimit(n int) error {
	if n < 0 || n > MaxLimit {
		return fmt.Errorf("%w: limit %d is outside 0 to %d (0 means 1: a lock)", ErrInvalidArgument, n, MaxLimit)
	}
	return nil
}

// withFirstN reads the first n keys of a prefix by create revision.
func withFirstN(n int) []clientv3.OpOption {
	return []clientv3.OpOption{clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(int64(n))}
}

// holders is the grant rule above applied to a whole name: of its count
// keys in create order, where limit(i) is the limit key i records, the
// first holders(count, limit) hold and no others. Every judgement of who
// holds — the hub's grant, the enqueue's and takeover's, the views'
// (ListLocks, DescribeQueue, Describe, CheckFence, WatchLocks) and
// force-release's choice of a holder — is this function.
//
// Key i holds when fewer than its own limit N keys are ahead of it and
// every one of them records N. Key 0 always does (none is ahead); a key
// behind it holds only if it and every key between record key 0's limit
// N0, and it is among the first N0. So the holders are the leading run of
// keys of limit N0, at most N0 of them: a key of another limit ends the
// run (a refused acquire whose key lives a moment before it is taken back
// holds nothing, and withholds every key behind it). It reads at most N0
// limits, however long the queue.
func holders(count int, limit func(i int) int) int {
	if count == 0 {
		return 0
	}
	n := limit(0)
	k := 1
	for k < count && k < n && limit(k) == n {
		k++
	}
	return k
}

// holdsIn reports whether the key created at create, of limit n, holds,
// given kvs: the first keys of its name by create revision, in that order,
// read at one revision (at least up to the key itself).
func holdsIn(kvs []*mvccpb.KeyValue, create int64, n int) bool {
	i := slices.IndexFunc(kvs, func(kv *mvccpb.KeyValue) bool { return kv.CreateRevision == create })
	return i >= 0 && i < holders(len(kvs), func(j int) int {
		if j == i {
			return n
		}
		return limitOf(kvs[j].Value)
	})
}

// heldKVs is the prefix of kvs (a name's first keys by create revision,
// read at one revision) that holds.
func heldKVs(kvs []*mvccpb.KeyValue) []*mvccpb.KeyValue {
	return kvs[:holders(len(kvs), func(i int) int { return limitOf(kvs[i].Value) })]
}

// position is what a waiter with ahead keys before it, in a semaphore of
// limit n, reports: 1 when it is next to be granted (the keys ahead are
// the n holders, or fewer that withhold its grant), ahead-n+1 beyond. For
// a lock (n = 1) it is the number of keys ahead. It is the one numbering
// of a queue: the Acquire stream's Queued position, and every view's
// (ListLocks, DescribeQueue, WatchLocks), which number a holder 0.
func position(ahead int64, n int) int64 { return max(ahead-int64(n)+1, 1) }

// limitMismatch is the refusal of a waiter whose limit is not its name's.
func limitMismatch(name string, want, have int) error {
	return fmt.Errorf("%w: %q is held with limit %d, not %d; acquire it with limit %d or wait until it has no holders or waiters", ErrLimitMismatch, name, have, want, have)
}

// storedLimit is what a value records for limit n: nothing for a lock, so
// a lock's value carries no limit field (waiterMeta.Limit 0 reads as 1).
func storedLimit(n int) int {
	if n == 1 {
		return 0
	}
	return n
}
