// Package queue is leasegate's lock engine over one etcd cluster.
//
// A lock is a lease with teeth. Each waiter for a name owns one key under
// the name's prefix, attached to an etcd lease:
//
//	<prefix>/locks/<escaped name>/<waiter id>
//
// The waiter whose key has the lowest create revision holds the lock.
// Acquire is one transaction that puts the caller's key if it is absent and
// reads the first-created key in the same round trip, so an uncontested
// acquire costs exactly one transaction on top of the lease. A waiter that
// is not first watches only its immediate predecessor (the key with the
// largest create revision below its own) and re-reads when it goes; nobody
// else wakes. A waiter's own key vanishing (its lease died) takes it out of
// the queue: it is never granted.
//
// The waiter id is derived from the caller's request id, so a retried
// acquire finds its own key and its place. Ownership is proven by a secret of
// 128 random bits: renew and release compare its SHA-256 inside the same
// transaction that acts, so knowing a lock's name and fencing token, which
// protected resources see, is never enough to renew or release it.
//
// The package knows nothing of RPC, HTTP or sharding; the gateway adds those.
package queue
