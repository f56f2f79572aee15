package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// AcquireRequest asks for a lock.
type AcquireRequest struct {
	// Name is the lock name; see ValidateName.
	Name string
	// TTL is the lease TTL for a lock with a lease of its own; it is rounded
	// up to whole seconds. Ignored when Session is set.
	TTL time.Duration
	// Session attaches the lock to a session lease from OpenSession; zero
	// gives the lock a lease of its own.
	Session clientv3.LeaseID
	// SessionSecret proves ownership of Session.
	SessionSecret Secret
	// Owner is the caller's authenticated identity within the engine's
	// tenant (the gateway passes the authenticated subject). With ClientID
	// and Session it binds the waiter to its caller: a retry with the same
	// request id resumes the waiter only when all three match, and is
	// refused with ErrNotOwner otherwise.
	Owner string
	// ClientID is the caller's self-reported identity (at most MaxIDLen bytes).
	ClientID string
	// RequestID is the idempotency key (1 to MaxIDLen bytes). A retry with the
	// same request id, by the same caller, finds the waiter's key and its
	// place.
	RequestID string
	// Epoch is the shard-map epoch the caller routes by; it becomes part of
	// the fencing token.
	Epoch uint16
	// Guards must all hold for a new waiter key to be created (the shard
	// router fences enqueues by epoch with them). A resumed waiter skips them.
	Guards []clientv3.Cmp
	// OnQueued, when set, receives the number of keys ahead of the waiter
	// (the holder plus earlier waiters) when it is first known and when it
	// changes: at most one report per 250 ms, but the move to 1 at once. It
	// is called from the acquiring goroutine.
	OnQueued func(position int64)
	// MaxKeys, when positive, caps the keys (holder and waiters) of the
	// name: a new waiter beyond it is removed at once and refused with
	// ErrQueueFull.
	MaxKeys int
	// Heartbeat, when set, is called while the waiter waits, before each
	// renewal of its own lease (every TTL/3) and every AttemptTTL/3 for a
	// session waiter: it proves the caller is still there to receive an
	// answer. An error ends the wait and the waiter leaves the queue, so no
	// lease is renewed on behalf of a caller that is gone. It runs on a
	// timer's goroutine, so a call that fell due as the wait ended may
	// still be running, or just begin, when Wait has returned: it must be
	// safe then, and write nothing to a stream that has ended.
	Heartbeat func(ctx context.Context) error
	// BeforeGrant, when set, runs once the waiter is first in its queue and
	// before it is granted; the wait goes on while it runs (the lease is
	// kept alive, the wait timeout and cancellation apply). The shard router
	// uses it to hold a moved name until its previous cluster has let go.
	BeforeGrant func(ctx context.Context) error
	// Value is an election campaigner's value (at most MaxValueLen bytes),
	// published as the leader's once it is first; only for a Name made by
	// ElectionName.
	Value []byte
	// Limit makes the name a semaphore: its first Limit keys by create
	// revision hold at once, each with a lock id and fencing token of its
	// own (limit.go). 0 means 1, a lock; at most MaxLimit. A name's limit
	// is fixed while it has keys: an acquire with another limit is refused
	// with ErrLimitMismatch.
	Limit int
	// Reentrant, for a session acquire only: when the session already
	// holds the name through a re-entrant acquire of the same caller, the
	// acquire returns a hold of that lock (its token, a hold id of its own)
	// and each Release drops the hold its handle names (reenter.go). Without a
	// session it is ErrInvalidArgument.
	Reentrant bool
	// LockDelay, when positive (at most MaxLockDelay), keeps the name from
	// being granted to anyone until LockDelay after this holder's lease
	// expires, should it expire rather than be released (delay.go). A
	// clean release frees the name at once.
	LockDelay time.Duration
}

// Validate reports the first field of r outside its allowed form, as a
// *FieldError naming it, reading no etcd: every field but TTL, whose range
// is an engine's Config. session says whether r will ride on a session,
// whose lease (Session) a router fills in per cluster as it routes r:
// only a session acquire may be Reentrant. The engine validates r again.
func (r *AcquireRequest) Validate(session bool) error {
	var epoch, reentrant error
	if r.Epoch > MaxEpoch {
		epoch = fmt.Errorf("%w: epoch %d is above %d", ErrInvalidArgument, r.Epoch, MaxEpoch)
	}
	if r.Reentrant && !session {
		reentrant = fmt.Errorf("%w: reentrant needs a session: only a session's secret can prove it is the same holder", ErrInvalidArgument)
	}
	for _, f := range [...]struct {
		field string
		err   error
	}{
		{"Name", ValidateKeyName(r.Name)},
		{"Value", validateValue(r.Name, r.Value)},
		{"ClientID", ValidateClientID(r.ClientID)},
		{"RequestID", ValidateRequestID(r.RequestID)},
		{"Epoch", epoch},
		{"Limit", validateLimit(r.Limit)},
		{"LockDelay", validateLockDelay(r.LockDelay)},
		{"Reentrant", reentrant},
	} {
		if f.err != nil {
			return fieldErr(f.field, f.err)
		}
	}
	return nil
}

// validate checks r once per request: Enqueue and TryAcquire before they
// write, Resume before it takes a waiter over. An error is a *FieldError
// naming the field.
func (r *AcquireRequest) validate(cfg Config) (ttlSec int64, err error) {
	if err := r.Validate(r.Session != 0); err != nil || r.Session != 0 {
		return 0, err
	}
	ttlSec, err = cfg.ttlSeconds(r.TTL)
	return ttlSec, fieldErr("TTL", err)
}

// binding is the owner binding a waiter of r records.
func (r *AcquireRequest) binding() string { return ownerBinding(r.Owner, r.ClientID, r.Session) }

// enqueued is the state of one attempt at a waiter key.
//
// An attempt owns the key only while the key's mod revision is the one its
// own last write produced (modRev): a retry with the same request id takes
// the key over by writing it again, and from then on every compare the
// earlier attempt makes — cleanup, grant, give-up — fails. That is what
// keeps a zombie attempt, whose client has moved to another gateway, from
// deleting the key its client now holds through the retry.
type enqueued struct {
	h Handle
	// att is the attempt lease reference of a session waiter whose key
	// rides on the attempt lease (attempt.go). It is zero for every key on
	// h.Lease — a lock's own lease, or the session's once the key is
	// granted — and once the attempt has let its key go (forgetDetached),
	// after which nothing grants it: where the key rides is read from it.
	att      attemptRef
	modRev   int64  // the revision of this attempt's last write to its key
	value    string // the key's value as this attempt wrote it
	ttl      time.Duration
	mu       sync.Mutex // guards deadline once the wait renews the lease
	deadline time.Time  // last confirmed: send time + TTL; zero when unknown (resumed waiter, session lock)
	resumed  bool
	first    *mvccpb.KeyValue
	holds    bool // the key held when its attempt wrote it (holdsIn at modRev)
	recorded bool // its delay or holder record is in etcd (loss.go)
	// keep: the key was granted before this attempt took it over, and the
	// attempt it replaced may have delivered that grant: this attempt never
	// gives the key up; it ends with its lease.
	keep    bool
	delays  bool  // the name may have lock-delay records: look before granting (delay.go)
	ahead   int64 // keys ahead as its put counted them; -1 when unknown
	handoff *handoffRecord
	firstAt int64 // a revision the key was known first at, if later than modRev
	// moveInDoubt: the move onto the session lease that grants the key
	// (grant.go) went without an answer before its caller gave up; it may
	// have landed, so the key is taken back by its value (cleanup.go).
	moveInDoubt bool
}

// onSession reports whether a session waiter's key already rides on the
// session lease (it was first when enqueued, or has been granted): it
// holds no attempt lease reference.
func (q *enqueued) onSession() bool { return q.h.Session && q.att.id == 0 }

// grantLease grants a per-lock lease and measures its conservative deadline
// from the send.
func (e *Engine) grantLease(ctx context.Context, ttlSec int64) (clientv3.LeaseID, time.Duration, time.Time, error) {
	sent := e.cfg.Clock.Now()
	resp, err := e.cli.Grant(ctx, ttlSec)
	if err != nil {
		return 0, 0, time.Time{}, fmt.Errorf("queue: grant lease: %w", err)
	}
	ttl := time.Duration(resp.TTL) * time.Second
	return resp.ID, ttl, sent.Add(ttl), nil
}

// errRaced reports that another attempt changed the waiter key between a
// read and the transaction that relied on it; the caller starts over.
var errRaced = errors.New("queue: the waiter key changed under the attempt")

// errUnknownOutcome marks an enqueue whose transaction may or may not have
// been applied (its answer was lost).
var errUnknownOutcome = errors.New("outcome unknown")

// errLeaseGone reports an enqueue transaction refused because its
// per-lock lease no longer exists: nothing was written.
var errLeaseGone = errors.New("queue: the lock's lease is gone")

// errPoolMiss reports that the lease an enqueue put its key on was gone
// (a pooled lease that lapsed): the enqueue wrote nothing that stays, and
// is tried again on a lease granted inline.
var errPoolMiss = errors.New("queue: the pooled lease was gone")

// enqueue runs the acquire transaction, or takes over the key of an
// earlier attempt with the same request id. When onlyIfFree is set the key
// is created only if no other waiter exists (TryAcquire).
//
// A lock with a lease of its own takes a lease from the pool when it has
// one (leasepool.go) and grants one inline otherwise, or when the pooled
// lease turns out to be gone: a pool miss costs a grant, never an error.
func (e *Engine) enqueue(ctx context.Context, r *AcquireRequest, ttlSec int64, onlyIfFree bool) (*enqueued, error) {
	if r.Session != 0 {
		return e.enqueueOn(ctx, r, ttlSec, onlyIfFree, pooledLease{}, false)
	}
	if l, ok := e.pool.take(ctx, ttlSec); ok {
		q, err := e.enqueueOn(ctx, r, ttlSec, onlyIfFree, l, true)
		if !errors.Is(err, errPoolMiss) {
			e.observePoolTake(ctx, poolHit)
			return q, err
		}
		e.observePoolTake(ctx, poolLapsed)
	} else if e.pool.size > 0 {
		e.observePoolTake(ctx, poolMiss)
	}
	id, ttl, deadline, err := e.grantLease(ctx, ttlSec)
	if err != nil {
		return nil, err
	}
	return e.enqueueOn(ctx, r, ttlSec, onlyIfFree, pooledLease{id: id, ttlSec: ttlSec, ttl: ttl, deadline: deadline}, false)
}

// enqueueOn is enqueue on the per-lock lease l (zero for a session
// waiter). A pooled lease gets a keepalive beside the first enqueue
// transaction, and its deadline from that keepalive; when the keepalive
// or the transaction says the lease is gone, the key put on it (if any) is
// removed and enqueueOn reports errPoolMiss. A lease no key was put on
// goes back to the pool.
func (e *Engine) enqueueOn(ctx context.Context, r *AcquireRequest, ttlSec int64, onlyIfFree bool, l pooledLease, pooled bool) (q *enqueued, err error) {
	lease := l.id
	var keep *besideKeep
	if pooled {
		keep = &besideKeep{e: e, id: lease}
		e.at(ctx, pointPoolKeep)
	}
	// used: a key of this attempt is or was on the lease, so it never
	// goes back to the pool from here. A key put on it and taken back
	// (queue full, another limit) was deleted by a removal that revokes
	// the lease in the background: a lease given back as well would be
	// handed to the next lock and revoked under it. Nothing else revokes
	// it here: a removal that found the key taken over by a retry (which
	// keeps the key's lease) owns neither the key nor the lease.
	used, gone := false, false
	defer func() {
		var put keyTakenBack
		if errors.As(err, &put) {
			err, used = put.error, true
		}
		if lease != 0 && !used && !gone {
			e.pool.giveBack(ctx, l) // no key of this attempt was ever on it
		}
	}()

	for try := 0; ; try++ {
		q, mine, err := e.enqueueTxn(ctx, r, lease, ttlSec, max(time.Duration(ttlSec)*time.Second, l.ttl), onlyIfFree, keep)
		if keep != nil {
			ttl, deadline, kerr := keep.wait()
			switch {
			case errors.Is(kerr, errLeaseNotFound) && !errors.Is(err, errUnknownOutcome) || errors.Is(err, errLeaseGone):
				// (An unknown outcome is forgetUnknown's to clean up,
				// and the caller's to retry.)
				gone = true
				if err == nil && mine == nil && q.h.Revision != 0 {
					// The key went onto a lease that had expired and
					// is not yet revoked: take it off again.
					// Its removal runs without the caller: the lease is
					// past its deadline, and etcd's revocation would take
					// the key too, later.
					dctx, cancel := e.answered(ctx)
					e.deleteOwned(dctx, r.Name, q.h.WaiterID, q.h.Revision, q.modRev, pointCleanup)
					cancel()
				}
				return nil, errPoolMiss
			case kerr == nil:
				l.ttl, l.deadline = ttl, deadline
			}
			keep = nil
		}
		if errors.Is(err, errLeaseGone) {
			gone = true
			return nil, err
		}
		if err != nil {
			if errors.Is(err, errRaced) && try < 3 {
				continue
			}
			if errors.Is(err, errUnknownOutcome) {
				// The lease belongs to forgetUnknown now, which revokes it
				// only once no key of this attempt can be on it.
				used = true
			}
			return nil, err
		}
		if mine == nil {
			if q.h.Revision != 0 && r.Session == 0 {
				used = true
				q.ttl, q.deadline = l.ttl, l.deadline
			}
			return q, nil
		}
		q, err = e.takeOver(ctx, r, mine)
		if errors.Is(err, errRaced) && try < 3 {
			continue
		}
		return q, err
	}
}

func hasHeader(v []byte, s Secret) bool {
	h := valueHeader(s)
	return len(v) > len(h) && string(v[:len(h)]) == h
}

// firstKV is the first key a range response of a transaction read, or nil.
func firstKV(r *pb.ResponseOp) *mvccpb.KeyValue { return firstOf(r.GetResponseRange().GetKvs()) }

// firstOf is kvs' first key, or nil.
func firstOf(kvs []*mvccpb.KeyValue) *mvccpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	return kvs[0]
}

// Waiter is an enqueued acquire that has not been granted yet. Call Wait
// (or Try) once.
type Waiter struct {
	e     *Engine
	r     AcquireRequest
	q     *enqueued
	began time.Time // when the attempt began, on the engine's clock
	// reentered is the grant of a re-entrant acquire that added a hold to
	// a lock its session held: Wait and Try return it.
	reentered *Grant
}

// Enqueue runs the acquire transaction (one round trip on top of the lease)
// and returns the waiter without waiting; Wait is the other half. The two
// are apart for callers that treat the bounded enqueue and the unbounded
// wait differently (a circuit breaker must not count a long wait against
// its cluster).
func (e *Engine) Enqueue(ctx context.Context, r AcquireRequest) (*Waiter, error) {
	return e.start(ctx, r, false)
}

// start validates r, then either adds a hold to the lock a re-entrant
// request's session holds (the waiter's reentered) or runs the enqueue
// (onlyIfFree: TryAcquire's).
func (e *Engine) start(ctx context.Context, r AcquireRequest, onlyIfFree bool) (*Waiter, error) {
	w := &Waiter{e: e, r: r, began: e.cfg.Clock.Now()}
	ttlSec, err := w.r.validate(e.cfg)
	if err != nil {
		return nil, err
	}
	if w.r.Reentrant {
		if w.reentered, err = e.reenter(ctx, &w.r); err != nil {
			return nil, err
		}
		if w.reentered != nil {
			return w, nil
		}
	}
	sctx, sp := e.traceEnqueue(ctx, &w.r, onlyIfFree)
	w.q, err = e.enqueue(sctx, &w.r, ttlSec, onlyIfFree)
	sp.endEnqueue(w.q, err)
	if err != nil {
		return nil, err
	}
	return w, nil
}

// Wait blocks until the waiter holds the lock, its lease is lost
// (ErrLeaseLost) or ctx is done: then it returns ctx's cause (a caller's
// wait timeout ends ctx with ErrWaitTimeout) or ctx's error. A waiter that
// stops waiting deletes its key at once, unless ctx was cancelled with
// cause ErrDetached.
func (w *Waiter) Wait(ctx context.Context) (Grant, error) {
	if w.reentered != nil {
		return *w.reentered, nil
	}
	if w.q.holds && w.r.BeforeGrant == nil && !w.q.delays {
		return w.grantNow(ctx)
	}
	return w.e.tracedWait(ctx, &w.r, w.q, w.began)
}

// grantNow grants the waiter's key, which holds, ending its attempt when
// the grant fails.
func (w *Waiter) grantNow(ctx context.Context) (Grant, error) {
	g, err := w.e.granted(ctx, &w.r, w.q, w.began)
	if err != nil {
		w.e.endAttempt(ctx, w.q, err)
	}
	return g, err
}

// Try grants the waiter if it is first and the name needs nothing else
// (no BeforeGrant); otherwise it leaves the queue and reports the holder.
// It is TryAcquire for a waiter found by Resume: a TryAcquire retried after
// its name moved to another cluster finds its grant where it was made.
func (w *Waiter) Try(ctx context.Context) (TryResult, error) {
	return w.try(ctx, false)
}

// try is TryAcquire's answer for the waiter: its grant when its key holds
// and no lock-delay is pending, else the holder, or when the waiter is
// first the pending lock-delay's end. A key not granted leaves the queue
// first. fresh says the key is TryAcquire's own enqueue's (none when the
// transaction found the name taken), which ignores BeforeGrant; a resumed
// waiter's key is removed in the background.
func (w *Waiter) try(ctx context.Context, fresh bool) (TryResult, error) {
	if w.reentered != nil {
		return TryResult{Acquired: true, Grant: *w.reentered}, nil
	}
	q := w.q
	var until time.Time
	if q.h.Revision != 0 && q.holds && (fresh || w.r.BeforeGrant == nil) {
		if until = w.e.delayPending(ctx, q); until.IsZero() {
			g, err := w.grantNow(ctx)
			if err != nil {
				return TryResult{}, err
			}
			return TryResult{Acquired: true, Grant: g}, nil
		}
	}
	if q.h.Revision != 0 {
		// An earlier Acquire with this request id is still waiting (or a
		// semaphore's TryAcquire put its key and found no free slot); a
		// TryAcquire must not leave it queued behind the caller's back.
		// The takeover or the put made this attempt the key's owner, so
		// the removal cannot touch anything a later attempt wrote. A
		// fresh refusal is answered once the key is gone (takeBack).
		if fresh {
			w.e.takeBack(ctx, q)
		} else {
			w.e.removeWaiterLater(ctx, q)
		}
		if q.first.GetCreateRevision() == q.h.Revision {
			// First, but a lock-delay is pending (or the name is moving):
			// no holder to report.
			return TryResult{DelayedUntil: until}, nil
		}
	}
	holder, err := w.e.holderInfo(ctx, q.first)
	if err != nil {
		return TryResult{}, err
	}
	return TryResult{Holder: holder}, nil
}

// TryResult is the outcome of TryAcquire.
type TryResult struct {
	// Acquired reports whether the lock was granted.
	Acquired bool
	// Grant is set when Acquired.
	Grant Grant
	// Holder describes the current holder when not Acquired.
	Holder *Holder
	// DelayedUntil, when not Acquired and set, is when the pending
	// lock-delay of an expired holder that withheld the grant ends
	// (delay.go): a TryAcquire after it is granted, if nobody took the
	// name meanwhile.
	DelayedUntil time.Time
}

// TryAcquire grants the lock only if nobody holds or waits for it — a
// semaphore's only if it has a free slot and nobody waits — and never
// waits. A retry with the request id of an earlier successful TryAcquire,
// by the same caller, returns the same grant while it is held.
func (e *Engine) TryAcquire(ctx context.Context, r AcquireRequest) (TryResult, error) {
	r.OnQueued = nil
	w, err := e.start(ctx, r, true)
	if err != nil {
		return TryResult{}, err
	}
	return w.try(ctx, true)
}
