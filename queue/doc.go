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
// acquire costs exactly one transaction on top of the lease. That read's
// count, which etcd gives for the whole name whatever the read's limit, is
// the waiter's place; a refused transaction reads only what explains its
// refusal (enqueue.go). A waiter that is not first waits on its name's
// hub (below): one watch per name and engine, however many local waiters
// it serves. A waiter's own key vanishing (its lease died) takes it out of
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
// by create revision, lease and secret and revokes (or gives back to the
// lease pool) only the lease it reads back from the deleted key, and only
// when the key's own value says the lease is the lock's.
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
// replaced and the view read afresh, never patched). A waiter is granted
// when at some R of the view:
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
// therefore as safe as one after a read at R. What a stale own key can do
// is bounded by the compares: a superseded attempt's give-up and Abandon
// compare its mod revision and touch nothing, and a session waiter's grant
// moves its key in a transaction comparing both revisions and the
// session's secret.
//
// A key ahead that went without a clean end — etcd ended its lease, on
// time or early — may leave a holder that still believes it holds: the
// grant then waits out that belief first (loss.go, "Unclean losses").
//
// Conditions 1 and 2 also end the wait: the key written by another attempt
// is ErrSuperseded, the key gone or created anew ErrLeaseLost, judged from
// the view as the re-read judged them before. A session waiter also needs
// its session: the grant's move onto the session lease proves it
// (ownerCmps), so a waiter whose session ended is never granted; the
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
// name from everyone until expiry + d (delay.go). Its record is in etcd
// before the grant is answered (its holder record, written with the key,
// or one written at the grant), and a clean end deletes it in its own
// transaction. The first gateway to see the record with its key gone
// stamps it with that moment, and the delay ends d after the stamp for
// every caller alike. The delay only ever postpones a grant, so nothing
// above changes; every cleanup deletes the record of a grant nobody
// received.
//
// # Unclean losses
//
// A holder key that goes without a clean end (its lease expired or was
// revoked, not released, given up, evicted or closed with its session)
// keeps the name for the holder's TTL after a gateway first saw it, or its
// lock-delay if longer (loss.go): the lost holder may still believe it
// holds until then. This too only postpones grants.
//
// # Re-entrancy
//
// A re-entrant session acquire (reenter.go) of a lock its session holds
// adds a hold of its own identity — the lock's handle with a hold id, so
// its own lock id, and the lock's token — recorded in a record of its key
// incarnation beside the name's prefix; the lock's key is never written
// again, so no attempt's mod revision changes and the arguments above
// stand. A release removes exactly the hold its lock id names, and the
// last one deletes the key; every cleanup compares that no record exists.
// The case against re-entrancy stands beside it: a function that needs the
// lock its caller holds is better handed that lock (or its token) than made
// to take it again — re-entry hides which code runs inside the critical
// section. It is off unless asked for.
//
// # Every waiter dies without its attempt
//
// A lock with a lease of its own is renewed only by the attempt that waits
// and then by its holder: without them it lapses within its TTL. A session
// waiter's key rides on the engine's attempt lease until it is granted
// (attempt.go), which is renewed only while some attempt references it, so
// the key lapses within AttemptTTL once no live attempt serves it,
// whatever the session does; a waiter detached by a shutdown is removed
// AttemptTTL after its detach even on a busy engine (cleanup.go). Every
// cleanup and take-back runs on the engine, never on its caller's context.
//
// # Elections
//
// An election (election.go) is a lock under a name no lock can have
// (ElectionName: a NUL marker, which lock names never contain): the leader
// is the holder, a term is a key, its fencing token is the key's. The
// leader's value lives in its key's record, and Proclaim rewrites it.
//
// # Proclaim and attempt identity
//
// A proclaim writes the leader's key, so it moves the key's mod revision —
// the identity of the attempt that wrote it last. Three facts keep every
// compare of a mod revision right:
//
//  1. A proclaim acts only on a key whose term was granted. It compares the
//     create revision, the lease the leader id names and the secret, and
//     that no key of the election is older. The secret leaves the engine
//     only in a grant, a key that was first stays first while it lives
//     (later keys have later revisions), and a session campaigner's key
//     rides on the attempt lease, not the session's, until its grant moves
//     it: so no proclaim can land on a waiter, nor between a session
//     grant's checks and its move (moveToSession).
//  2. Revisions are never reused: a proclaim's write has a revision no
//     attempt has recorded. A compare of an attempt's mod revision after a
//     proclaim can only fail, never succeed for the wrong attempt. The
//     attempts that can still be running on a granted key are the one that
//     made the grant (whose remaining compare is Abandon, for a grant it
//     could not deliver — but then nobody holds the leader id to proclaim
//     with) and retries with the same request id; for them a failed
//     compare means "leave the key alone": cleanup and Abandon delete
//     nothing, and the term lives on with the caller that proclaimed, until
//     it resigns or stops renewing. A retry that waits before its grant (a
//     moved name's, behind BeforeGrant) may report ErrSuperseded: its
//     caller already leads, through the id it proclaimed with, and a
//     retry of the same request id takes the key over again.
//  3. A proclaim compares the mod revision it read, so it never writes over
//     a takeover's record (its nonce, its lease) with an older one, and a
//     takeover compares the mod revision it read, so it never writes a
//     proclaimed value back to an older one: each retries on a fresh read.
//
// Waiters behind the leader wait on their name's hub, whose view orders
// keys by create revision, which a proclaim keeps: a proclaim moves the
// leader's mod revision in the view and nothing else, so it neither frees
// the name nor moves a position. Observe reports a put on the leader's key
// as a new value of the same term, by the create revision the event
// carries.
//
// # Recycled leases
//
// A lock with a lease of its own takes that lease from a pool granted ahead
// of need (leasepool.go) and a clean release gives it back, so one etcd
// lease serves many locks in turn. Reuse is sound because nothing acts on a
// lease by its id alone: renew and release compare the key's create
// revision, lease and secret inside etcd, and a cleanup revokes (a release
// pools) only the lease read back from the key it deleted. A stale lock id
// naming a recycled lease matches no key of the lease's new lock.
//
// The trap is the keepalive after Renew's proof: it is not a transaction.
// Sent for the old lock after its lease went to a new one, it would keep
// the new lock alive for up to a TTL after its holder died. So a release
// gives the lease back only when no such keepalive can come:
//
//  1. The key was never taken over (its mod revision is its create
//     revision), so no other attempt of it — a zombie about to renew at its
//     grant — exists. Otherwise the lease is revoked.
//  2. No renewal of it runs on this engine: Renew registers from before its
//     proof until its keepalive is answered, and so does a waiting
//     attempt's renewal tick, which sends nothing once its wait has stopped
//     (wait.go); no keepalive for the lease is unanswered on the engine's
//     streams. A renewal that registers later sends its proof after the
//     delete, and fails it.
//  3. Another gateway's renewal is bounded in time: Renew sends its
//     keepalive within proofWindow (500 ms) of sending its proof, or proves
//     again; a lease given back waits out poolQuarantine (1 s) before the
//     pool refreshes it and hands it out. The proof was sent before the
//     release was applied, the release before the lease came back, so a
//     stale keepalive is sent at least 500 ms before the new lock's first.
//
// What 3 orders is sends, not arrivals. A stale keepalive that etcd applies
// after the new lock's own — held more than 500 ms on a stream behind a
// renewal of an expired lease (which waits for etcd's rate-limited revoke),
// or in a partition — extends the new lock's lease once, by at most one TTL
// from when it lands. It never shortens a lease, so it never makes two
// holders and never moves a holder's deadline; it can delay the freeing of
// a dead holder's name by at most one TTL, and only after a lock was
// renewed and released at the same moment on two gateways.
//
// An expired lease is never pooled: a lease given back is refreshed by a
// keepalive after its quarantine and dropped if etcd says it is gone, and a
// pooled lease is handed out only with half its TTL left by its
// conservative deadline. Waiters that give up, undelivered grants and
// enqueues with an unknown outcome revoke their lease, and so does an
// enqueue whose key was put and then removed (a full queue, another
// semaphore limit — a semaphore's TryAcquire included, which puts its key
// before it can see the name's limit): a lease is either revoked or given
// back, never both.
//
// # Observers and administrators
//
// ListLocks, DescribeQueue and WatchLocks (list.go, watch.go) only read,
// and judge holders as the grant does: by holders (limit.go), the one
// statement of the rule above, so every client that believes it holds is
// a holder there and there are never more than the name's limit; a first
// key whose grant is still to come (a lock-delay, a session waiter's move,
// an answer on its way) is a holder there already. They number places as
// the Acquire stream does (position) and list elections under their own
// names. Watchers of one prefix share one view (watchview.go), bounded
// with every other view of the engine by Config.MaxWatchKeys.
// A watcher tells a release from an expiry by the release mark the release
// transaction writes beside its delete (handoff.go): an unconditional put
// of one key per prefix, which adds no compare and no round trip.
// ForceRelease (force.go) deletes the first key only if its create
// revision is still the one it read — a key that left or was re-created
// in between is never deleted — and writes the audit record in the same
// transaction; the explorer's evictor breaks when that compare is gone.
//
// # Key spaces
//
// One engine serves every key space of its cluster (Engine.Space): a
// space is a prefix with the whole layout above under it, and a call
// reads, writes, compares and watches only keys of its own space — its
// hubs are kept by the name's full key prefix, its session, end and watch
// views per space. What spaces share is what nothing acts on by identity
// alone: the attempt lease, the lease pool, the keepalive streams. So
// every argument above holds per space unchanged: a handle, a session or a
// request id of one space names no key of another, and a lease recycled
// from one space's lock to another's is the recycling case above, whose
// compares never looked at a space. The caller picks the space (the
// gateway, from the caller's authentication); the engine never reads one
// from an id.
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
