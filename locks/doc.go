// Package locks is leasegate's fleet: the shard map, the lock engines of
// its clusters — one etcd client, one [queue.Engine] (which serves every
// tenant, each in its own key space) and one circuit breaker per cluster —
// and the calls that span them. It offers the engine's verbs over the
// whole map in its own vocabulary (a tenant, a lock name, a held lock's
// shard, a session's leases): [Router.Acquire] and [Router.TryAcquire],
// the reads of one name (Describe, DescribeQueue, CheckFence, Leader,
// Observe), a held lock's calls ([Held]), the fan-out over every shard
// (ListLocks, ListAudit, Watch, the session calls, Ping) and the admin's
// ForceRelease.
//
// Each of its jobs is done once, here:
//
//   - routing: a name goes to the cluster the xxhash ring of the map in
//     force names (Route); the call notes the shard in the context's
//     [Note] and traces the route (a leasegate.route span);
//   - the resharding handover (handover, in acquire.go): a name that
//     drains from its previous cluster is served there first, and a
//     cluster that refuses an enqueue because the map moved on makes the
//     call wait for the newer map and route again;
//   - the breaker: every bounded call goes through its cluster's breaker
//     and Reach, and a cluster's failure reads as
//     [shard.ErrShardUnavailable] naming the shard (Backend.call);
//   - the fan-out and merge over shards (fanout.go).
//
// Dependencies point down:
//
//	gateway ──▶ locks ──▶ queue  (the lock engine over one etcd cluster)
//	                 └──▶ shard  (ring, map, store, epoch, breaker, resharder)
//
// queue knows nothing of sharding and shard nothing of locks; locks joins
// them, and never sees a wire type.
//
// The resharder's sweep (package shard, step 4) lists the names a
// draining cluster still holds through [Names], since the key layout is
// the engine's.
package locks
