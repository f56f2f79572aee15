// Package shard knows how lock names map to etcd clusters, how that map
// changes without granting a name twice, and how the gateway survives one
// cluster failing.
//
// Its parts, one per file:
//
//   - [Ring] (ring.go): rendezvous hashing of a lock name onto one of the
//     clusters of a shard map.
//   - [Breaker] (breaker.go): a per-cluster circuit breaker that fails a dead
//     cluster's calls fast with [ErrShardUnavailable] and probes it back.
//   - [Reach] (reach.go): follows a cluster's client connection, so a call
//     on a cluster without one, or with a silent one, fails with
//     [ErrShardUnavailable] within about a second instead of its timeout.
//   - [Map] and [Store] (map.go, store.go): the shard map (clusters, epoch,
//     pending and draining state) kept in the home etcd cluster and watched
//     by every gateway.
//   - the epoch fence (epoch.go): the per-cluster <prefix>/meta/epoch key that
//     every enqueue txn compares against the epoch the gateway routes by.
//   - [Resharder] (reshard.go, bump.go): the numbered protocol that moves
//     the map to new clusters or a new epoch.
//
// shard never talks about locks, leases or waiters, and does not import
// the lock engine (package queue). Package locks owns the engines and
// routes names to them by this package's map and ring; the resharder's
// sweep, the one step that must see lock names, gets them through a
// [NameLister] that locks provides.
package shard

import "errors"

// Sentinel errors. Every error this package returns that callers may need to
// tell apart wraps one of these; test with [errors.Is].
var (
	// ErrShardUnavailable: a cluster's circuit breaker is open (or half-open
	// and already probing, or its probe failed), or a Reach found the
	// cluster without a connection or silent. Retryable; maps to Connect
	// code unavailable.
	ErrShardUnavailable = errors.New("shard unavailable")

	// ErrInvalidMap: a shard map failed Validate; the message names the bad value.
	ErrInvalidMap = errors.New("invalid shard map")

	// ErrNoMap: the home cluster holds no shard map yet.
	ErrNoMap = errors.New("no shard map stored")

	// ErrLayout: the home cluster's layout record names a key layout this
	// build does not read (KeyLayout); nothing is read or written under it.
	ErrLayout = errors.New("unsupported etcd key layout")

	// ErrMapConflict: CompareAndSwap lost a race, the stored map is not the
	// one the caller read.
	ErrMapConflict = errors.New("shard map changed concurrently")

	// ErrEpochConflict: a cluster's epoch is not where it should be:
	// BumpEpoch found it at neither the expected old value nor the target,
	// or a change found a cluster past the stored map's epoch.
	ErrEpochConflict = errors.New("cluster epoch changed concurrently")

	// ErrInvalidEpoch: an epoch outside [MinEpoch, MaxEpoch], or a stored
	// epoch value that is not in the fixed-width format.
	ErrInvalidEpoch = errors.New("invalid epoch")

	// ErrEpochLimit: a map change would take the epoch past the limit in
	// force (Resharder.EpochLimit, MaxJSONSafeEpoch unless raised). Nothing
	// was written.
	ErrEpochLimit = errors.New("epoch limit reached")
)
