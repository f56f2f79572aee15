// Package locks owns leasegate's lock engines: one etcd client, one
// [queue.Engine] (which serves every tenant, each in its own key space)
// and one circuit breaker per cluster of the shard map, and the [Router]
// that sends a lock name to them.
//
// It is the one place where sharding meets locking. Dependencies point
// down:
//
//	gateway ──▶ locks ──▶ queue  (the lock engine over one etcd cluster)
//	                 └──▶ shard  (ring, map, store, epoch, breaker, resharder)
//
// queue knows nothing of sharding and shard nothing of locks; locks joins
// them. A [Router] follows the shard map stored in the home cluster, dials
// the clusters it names, and answers [Router.Route] with a [Target]: the
// engine of the cluster that owns the name, acting in the caller's
// tenant's key space, the
// epoch and guard new waiters enqueue under, and the cluster the name
// drains from while a resharding moves it. A call routes its name once
// and passes the Target down.
//
// The resharder's sweep (package shard, step 4) lists the names a
// draining cluster still holds through [Names], since the key layout is
// the engine's.
package locks
