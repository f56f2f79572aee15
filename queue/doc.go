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
// is not first waits on its name's hub (below): one watch per name and
// engine, however many local waiters it serves. A waiter's own key
// vanishing (its lease died) takes it out of the queue: it is never
// granted.
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
// # The name hub
//
// Each engine watches each name that has local waiters once (hub.go) and
// keeps an ordered view of its queue that is exactly etcd's state of the
// name's prefix at a known revision R: a read at R0 and then every event
// of the watch, which etcd delivers gaplessly and in revision order from
// R0+1 (a failed watch — compaction, cancellation, a lost leader — is
// replaced and the view read afresh, never patched). A waiter is granted,
// with no read of its own, when at some R of the view:
//
//  1. its key exists with its create revision (its identity),
//  2. its key carries its attempt's mod revision (its ownership), and
//  3. no key with a lower create revision exists.
//
// Then it is first at R, and stays first at every later revision until its
// own key is deleted or written again: a key created after R has a create
// revision above R, above the waiter's own, so nothing can appear ahead of
// it later. That monotony is the whole argument; it is why the view
// compares create revisions and never key names (a name deleted and
// created again is a new key, behind), and why the test is "no key
// created earlier" and never "the key ahead went". A grant after R is
// therefore as safe as one after a read at R, which is what the
// per-waiter read of earlier versions was: between that read and the
// grant the own key could also be written by a retry, and the per-lock
// grant did not compare then either. What a stale own key can do is
// unchanged: a superseded attempt's give-up and Abandon compare its mod
// revision and touch nothing, and a session waiter's grant moves its key
// in a transaction comparing both revisions and the session's secret.
//
// Conditions 1 and 2 also end the wait: the key written by another attempt
// is ErrSuperseded, the key gone or created anew ErrLeaseLost, judged from
// the view as the re-read judged them before. A session waiter also needs
// its session: the grant's move onto the session lease proves it
// (OwnerCmps), so a waiter whose session ended is never granted; the
// engine's one watch of session records (sessions.go) makes it learn the
// end while it waits, within the watch's latency (and, after a failed
// watch, at the re-read that replaces it), not when it reaches the head.
//
// A per-lock grant renews nothing when its lease was confirmed recently:
// its Deadline is the send time of the last confirmed keepalive (the
// enqueue's grant of the lease or a renewal while it waited) plus the TTL,
// which the lease outlives; only with less than half the TTL left does the
// grant renew first.
//
// # Semaphores
//
// A lock is a semaphore of limit 1 (limit.go). Each key records the limit
// N it was enqueued with, and condition 3 becomes: fewer than N keys with
// a lower create revision exist at R, and every one of them records N.
// Monotony carries over unchanged: keys ahead can only go, so "fewer than
// N ahead, all of limit N" stays true until the waiter's own key goes.
//
// Never more than N holders. Take the live holders at any revision, in
// create order; let b be the last. Every other live holder a was created
// before b and is live now, so it was live, and ahead of b, at the
// revision b was granted at: it records b's limit N, and all of them
// together were among the fewer than N keys ahead of b. So they number at
// most N, and all record N. No assumption about the limits other keys
// carry is needed: a key of another limit ahead only withholds a grant.
//
// A name's limit is fixed while it has keys, by the enqueue: its
// transaction writes the key and reads the first keys of the name at the
// same revision, and a waiter whose limit differs from the first key's is
// taken back at once and refused (ErrLimitMismatch); a takeover keeps the
// key's limit and refuses a retry with another. Two enqueues with
// different limits on an empty name cannot both pass: each reads the
// first key at its own revision, which exists (its own at least), and the
// later one sees the earlier one's key. A refused key lives for a moment
// (its removal is a second transaction), and while it is first a later
// enqueue of its limit passes the check; a waiter with a key of another
// limit ahead is then simply not granted until that key goes — safety
// rests on the grant condition above, never on the check.
//
// TryAcquire of a lock stays one transaction guarded by "no key at all";
// a semaphore's puts its key, holds if it is among the first N of limit
// N, and takes it back otherwise.
//
// # Lock-delay
//
// A holder that asked for a lock-delay d and whose lease expires keeps the
// name from everyone until expiry + d (delay.go). Its record is written at
// its grant, before the grant is answered, and deleted by a clean release
// in the release transaction; a waiter about to be granted that finds a
// record whose holder key is gone waits d from when it saw that, which is
// after the expiry, whoever sees it and however late. The delay only ever
// postpones a grant, so nothing above changes; every cleanup deletes the
// record of a grant nobody received.
//
// # Re-entrancy
//
// A re-entrant session acquire (reenter.go) of a lock its session holds
// adds a hold, counted in a key of its own beside the name's prefix; the
// lock's key is never written again, so no attempt's mod revision changes
// and the arguments above stand. Release and every cleanup compare that
// the holds key is absent before they delete; with holds, a release drops
// one. The case against re-entrancy stands beside it: a function that
// needs the lock its caller holds is better handed that lock (or its
// token) than made to take it again — re-entry hides which code runs
// inside the critical section. It is off unless asked for.
//
// # Every waiter dies without its attempt
//
// A lock with a lease of its own is renewed only by the attempt that waits
// and then by its holder: without them it lapses within its TTL. A session
// waiter's key rides on the engine's attempt lease until it is granted
// (attempt.go), so it lapses within AttemptTTL once no live attempt serves
// it, whatever the session does.
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
