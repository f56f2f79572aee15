package queue

import (
	"fmt"

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
// before limits existed or that cannot be read (a key the engine cannot
// read counts as a different limit, which only ever withholds a grant).
func limitOf(v []byte) int {
	_, m, err := decodeValue(v)
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

// holdsIn reports whether the key created at create holds a semaphore of
// limit n, given kvs: the first keys of its name by create revision, in
// that order, read at one revision (at least up to the key itself).
func holdsIn(kvs []*mvccpb.KeyValue, create int64, n int) bool {
	for i, kv := range kvs {
		if i >= n {
			return false
		}
		if kv.CreateRevision == create {
			return true
		}
		if limitOf(kv.Value) != n {
			return false
		}
	}
	return false
}

// position is what a waiter with ahead keys before it, in a semaphore of
// limit n, reports: 1 when it is next to be granted (the keys ahead are
// the n holders, or fewer that withhold its grant), ahead-n+1 beyond. For
// a lock (n = 1) it is the number of keys ahead.
func position(ahead int64, n int) int64 { return max(ahead-int64(n)+1, 1) }

// limitMismatch is the refusal of a waiter whose limit is not its name's.
func limitMismatch(name string, want, have int) error {
	return fmt.Errorf("%w: %q is held with limit %d, not %d; acquire it with limit %d or wait until it has no holders or waiters", ErrLimitMismatch, name, have, want, have)
}

// storedLimit is what a value records for limit n: nothing for a lock, so
// a lock's value is what it was before semaphores.
func storedLimit(n int) int {
	if n == 1 {
		return 0
	}
	return n
}
