package client

import "time"

// AcquireOption configures one Acquire or TryAcquire call.
type AcquireOption interface{ applyAcquire(*acquireConfig) }

// SessionOption configures OpenSession.
type SessionOption interface{ applySession(*sessionConfig) }

// TTLOption sets a lease TTL; it applies to Acquire, TryAcquire and
// OpenSession.
type TTLOption interface {
	AcquireOption
	SessionOption
}

type acquireConfig struct {
	ttl       time.Duration
	wait      time.Duration
	onQueued  func(position int64)
	requestID string
	// manualRenew turns the background renewal off (WithManualRenew).
	manualRenew bool
	limit       int
	reentrant   bool
	lockDelay   time.Duration
}

type sessionConfig struct {
	ttl time.Duration
}

type acquireFunc func(*acquireConfig)

func (f acquireFunc) applyAcquire(c *acquireConfig) { f(c) }

type ttlOption time.Duration

func (o ttlOption) applyAcquire(c *acquireConfig) { c.ttl = time.Duration(o) }
func (o ttlOption) applySession(c *sessionConfig) { c.ttl = time.Duration(o) }

// WithTTL sets the lease TTL of a lock or a session. etcd rounds it up to
// whole seconds and to at least its own minimum (about 1.5 × its election
// timeout); Lock.TTL reports the effective value. Default 0: the gateway's
// default TTL (30 s unless the gateway is configured otherwise). Locks
// acquired through a Session ignore it: the session's TTL applies.
func WithTTL(d time.Duration) TTLOption { return ttlOption(d) }

// checkTTL refuses a negative WithTTL for op; what else is allowed, the
// gateway decides.
func checkTTL(op string, ttl time.Duration) error {
	if ttl < 0 {
		return invalid(op, "ttl %s is negative; want 0 (the gateway's default) or at least 1s", ttl)
	}
	return nil
}

// WithWaitTimeout bounds how long Acquire waits in the queue, across
// retries, before it fails with ErrWaitTimeout. Default 0: wait until the
// context ends. Gateways cap it (1 h unless configured otherwise).
// TryAcquire ignores it.
func WithWaitTimeout(d time.Duration) AcquireOption {
	return acquireFunc(func(c *acquireConfig) { c.wait = d })
}

// WithOnQueued registers fn to receive the caller's queue position (1 when
// it is next to be granted: for a lock, the number of holders and waiters
// ahead; for a semaphore of limit N with k keys ahead, k - N + 1, the
// numbering DescribeQueue and Watch use too) while Acquire waits: first when the
// caller is enqueued, then whenever it changes, and again after a retry on
// another gateway. fn runs on the goroutine that called Acquire and delays
// the wait while it runs: keep it short. Default: none.
func WithOnQueued(fn func(position int64)) AcquireOption {
	return acquireFunc(func(c *acquireConfig) { c.onQueued = fn })
}

// WithRequestID sets the idempotency key of the call (up to 128 bytes).
// Retries reuse it, on any gateway, so a waiter keeps its queue place and a
// grant whose answer was lost is collected again. Default: 128 random bits
// in hex, drawn once per call.
//
// A session call that returns an error after an attempt whose answer was
// lost gives up, in the background, whatever the gateway made under its
// request id — unless a held Lock of the session was granted under it (a
// retry of a delivered hold). A later call of the session on the same name
// with that id stops the give-up and is a retry: it keeps the lost
// attempt's queue place or grant. If the give-up had already released that
// grant, the id is spent (a copy of the release may still land, and would
// end a hold granted again under it): the call then asks under a fresh
// random id, which its Lock is granted under.
func WithRequestID(id string) AcquireOption {
	return acquireFunc(func(c *acquireConfig) { c.requestID = id })
}

// WithLimit makes the name a semaphore of limit n: the first n callers
// hold at once, each with a lock of its own (its own lock id and fencing
// token); later ones wait in order, as for a lock. Default 0, which is 1:
// a lock. At most 1000. A name's limit is fixed while it has holders or
// waiters: an acquire with another limit fails with ErrLimitMismatch.
func WithLimit(n int) AcquireOption {
	return acquireFunc(func(c *acquireConfig) { c.limit = n })
}

// WithReentrant makes a Session.Acquire or Session.TryAcquire re-entrant:
// when the session already holds the name through a re-entrant acquire,
// it returns a hold of that lock — the lock's Token, an ID of its own —
// with HoldCount the lock's holds, and each hold's Release drops that hold
// (a second Release of it drops nothing); the last frees the name. A retry
// with a hold's request id (WithRequestID) is that hold again. Off by
// default, and only through a session (its id is a secret that proves the
// holder): Client.Acquire with it fails with ErrInvalidArgument. Prefer
// passing the held Lock down to code that needs it.
func WithReentrant() AcquireOption {
	return acquireFunc(func(c *acquireConfig) { c.reentrant = true })
}

// WithLockDelay asks for a lock-delay (Chubby's, Consul's): should this
// lock's lease expire rather than be released, nobody is granted the name
// until d after the expiry, so a holder that was cut off has time to
// notice before the next one starts. Release frees the name at once.
// Default 0; at most 60 s, in whole milliseconds. It is a heuristic for
// holders without fencing: a holder paused longer than d still acts late;
// fencing tokens are the real answer.
func WithLockDelay(d time.Duration) AcquireOption {
	return acquireFunc(func(c *acquireConfig) { c.lockDelay = d })
}
