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
// # Identities, not existence
//
// A key's identity is its create revision; an attempt's identity is what it
// wrote last (the key's mod revision, made unique by a nonce in the value).
// Existence proves nothing, because a key can be deleted and created again
// under the same name in between. So a waiter waits behind its
// predecessor's create revision, not its name; a retry with the same
// request id takes the waiter's key over by writing it again, and from
// then on the replaced attempt's cleanup, grant and give-up compare a mod
// revision that is no longer theirs and touch nothing; and release deletes
// by create revision, lease and secret and revokes only the lease it reads
// back from the deleted key, and only when the key's own value says the
// lease is the lock's.
//
// # Claims
//
// The waiter id is derived from the caller's request id, so a retried
// acquire finds its own key and its place — but only the caller that
// enqueued it: the value records an owner binding (Owner, ClientID,
// Session) and a resume by anyone else is refused with ErrNotOwner.
// Ownership of a held lock is proven by a secret of 128 random bits: renew
// and release compare its SHA-256 inside the same transaction that acts,
// so knowing a lock's name and fencing token, which protected resources
// see, is never enough to renew or release it.
//
// # Every waiter dies without its attempt
//
// A lock with a lease of its own is renewed only by the attempt that waits
// and then by its holder: without them it lapses within its TTL. A session
// waiter's key rides on the engine's attempt lease until it is granted
// (attempt.go), so it lapses within AttemptTTL once no live attempt serves
// it, whatever the session does.
//
// # Observers and administrators
//
// ListLocks, DescribeQueue and WatchLocks (list.go, watch.go) only read.
// A watcher tells a release from an expiry by the release mark the release
// transaction writes beside its delete (handoff.go): an unconditional put
// of one key per prefix, which adds no compare and no round trip.
// ForceRelease (force.go) deletes the first key only if its create
// revision is still the one it read — a key that left or was re-created
// in between is never deleted — and writes the audit record in the same
// transaction; the explorer's evictor breaks when that compare is gone.
//
// docs/safety.md takes every transaction in turn: what it compares, and
// what a forged, stale, replayed or racing input can make it do. The
// interleaving explorer (explore_test.go) runs actors against a real etcd
// in orders it chooses at the points named in hooks.go and checks those
// arguments after every step.
//
// The package knows nothing of RPC, HTTP or sharding; the gateway adds
// those. Of the API it takes only the byte limits on names and ids
// (leasegate.v1's MaxNameBytes and MaxIDBytes), which it enforces too.
package queue
