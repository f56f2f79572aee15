package queue

import (
	"context"
	"errors"
	"fmt"
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
	// ClientID is the caller's self-reported identity (≤ 128 bytes).
	ClientID string
	// RequestID is the idempotency key (1 to 128 bytes). A retry with the
	// same request id finds the waiter's key and its place.
	RequestID string
	// Epoch is the shard-map epoch the caller routes by; it becomes part of
	// the fencing token.
	Epoch uint16
	// Guards must all hold for a new waiter key to be created (the shard
	// router fences enqueues by epoch with them). A resumed waiter skips them.
	Guards []clientv3.Cmp
	// WaitTimeout bounds the wait; zero waits until ctx is done.
	WaitTimeout time.Duration
	// OnQueued, when set, receives the number of keys ahead of the waiter
	// (the holder plus earlier waiters) when it is first known and whenever
	// it changes. It is called from the acquiring goroutine.
	OnQueued func(position int64)
	// MaxKeys, when positive, caps the keys (holder and waiters) of the
	// name: a new waiter beyond it is removed at once and refused with
	// ErrQueueFull.
	MaxKeys int
	// BeforeGrant, when set, runs once the waiter is first in its queue and
	// before it is granted; the wait goes on while it runs (the lease is
	// kept alive, the wait timeout and cancellation apply). The shard router
	// uses it to hold a moved name until its previous cluster has let go.
	BeforeGrant func(ctx context.Context) error
}

func (r *AcquireRequest) validate(cfg Config) (ttlSec int64, err error) {
	if err := ValidateName(r.Name); err != nil {
		return 0, err
	}
	if err := validateIDs(r.ClientID, r.RequestID); err != nil {
		return 0, err
	}
	if r.WaitTimeout < 0 {
		return 0, fmt.Errorf("%w: wait timeout %s is negative", ErrInvalidArgument, r.WaitTimeout)
	}
	if r.Epoch > MaxEpoch {
		return 0, fmt.Errorf("%w: epoch %d is above %d", ErrInvalidArgument, r.Epoch, MaxEpoch)
	}
	if r.Session != 0 {
		return 0, nil
	}
	return cfg.ttlSeconds(r.TTL)
}

// enqueued is the state of a waiter after its enqueue transaction.
type enqueued struct {
	h        Handle
	ttl      time.Duration
	deadline time.Time // zero when unknown (resumed waiter)
	resumed  bool
	first    *mvccpb.KeyValue
	handoff  *handoffRecord // the traced release that made the waiter first
}

// lease obtains the lease for a new waiter: a fresh per-lock lease, or the
// caller's session lease renewed in parallel with nothing else to wait on.
func (e *Engine) lease(ctx context.Context, r *AcquireRequest, ttlSec int64) (clientv3.LeaseID, time.Duration, time.Time, error) {
	if r.Session != 0 {
		ttl, deadline, err := e.renewLease(ctx, r.Session)
		if errors.Is(err, errLeaseNotFound) {
			return 0, 0, time.Time{}, fmt.Errorf("%w: session lease %x expired", ErrSessionLost, int64(r.Session))
		}
		return r.Session, ttl, deadline, err
	}
	sent := e.cfg.Clock.Now()
	resp, err := e.cli.Grant(ctx, ttlSec)
	if err != nil {
		return 0, 0, time.Time{}, fmt.Errorf("queue: grant lease: %w", err)
	}
	ttl := time.Duration(resp.TTL) * time.Second
	return resp.ID, ttl, sent.Add(ttl), nil
}

// enqueue runs the acquire transaction. When onlyIfFree is set the key is
// created only if no other waiter exists (TryAcquire).
func (e *Engine) enqueue(ctx context.Context, r *AcquireRequest, ttlSec int64, onlyIfFree bool) (*enqueued, error) {
	var (
		lease    clientv3.LeaseID
		ttl      time.Duration
		deadline time.Time
		err      error
		renewed  chan error
	)
	if r.Session != 0 {
		// The session's keepalive runs beside the transaction: one round
		// trip, not two. The stored TTL is 0, meaning "the session's".
		lease, ttlSec = r.Session, 0
		renewed = make(chan error, 1)
		go func() {
			var err error
			_, ttl, deadline, err = e.lease(ctx, r, 0)
			renewed <- err
		}()
	} else if lease, ttl, deadline, err = e.lease(ctx, r, ttlSec); err != nil {
		return nil, err
	}
	q, err := e.enqueueTxn(ctx, r, lease, ttlSec, onlyIfFree)
	if renewed != nil {
		if kerr := <-renewed; kerr != nil {
			if errors.Is(kerr, ErrSessionLost) {
				return nil, kerr
			}
			deadline = time.Time{} // unknown: the grant renews again
		}
	}
	if q != nil && !q.resumed && q.h.Revision != 0 {
		q.ttl, q.deadline = ttl, deadline
	}
	return q, err
}

// enqueueTxn runs the acquire transaction on lease.
func (e *Engine) enqueueTxn(ctx context.Context, r *AcquireRequest, lease clientv3.LeaseID, ttlSec int64, onlyIfFree bool) (*enqueued, error) {
	secret, err := NewSecret()
	if err != nil {
		return nil, err
	}
	meta := waiterMeta{
		ClientID: r.ClientID,
		TTL:      ttlSec,
		Epoch:    r.Epoch,
		Session:  r.Session != 0,
		Sealed:   sealSecret(secret, r.RequestID),
		Enqueued: e.cfg.Clock.Now().UnixMilli(),
	}
	prefix := e.keys.namePrefix(r.Name)
	wid := WaiterID(r.RequestID)
	key := prefix + wid

	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)}
	if onlyIfFree {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(prefix).WithPrefix(), "=", 0))
	}
	if r.Session != 0 {
		cmps = append(cmps, ownerCmps(e.keys.session(r.Session), r.SessionSecret)...)
	}
	cmps = append(cmps, r.Guards...)
	elseOps := []clientv3.Op{
		clientv3.OpGet(key),
		clientv3.OpGet(prefix, clientv3.WithFirstCreate()...),
	}
	if r.Session != 0 {
		elseOps = append(elseOps, clientv3.OpGet(e.keys.session(r.Session)))
	}
	thenOps := []clientv3.Op{
		clientv3.OpPut(key, encodeValue(secret, meta), clientv3.WithLease(lease)),
		clientv3.OpGet(prefix, clientv3.WithFirstCreate()...),
	}
	if r.MaxKeys > 0 {
		thenOps = append(thenOps, clientv3.OpGet(prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()))
	}
	resp, err := e.cli.Txn(ctx).If(cmps...).Then(thenOps...).Else(elseOps...).Commit()
	if err != nil {
		if r.Session == 0 {
			e.revokeLater(lease)
		}
		return nil, fmt.Errorf("queue: enqueue: %w", err)
	}
	h := Handle{Name: r.Name, WaiterID: wid, Lease: lease, Epoch: r.Epoch, Secret: secret, Session: r.Session != 0}
	if resp.Succeeded {
		h.Revision = resp.Header.Revision
		if r.MaxKeys > 0 {
			if n := resp.Responses[2].GetResponseRange().Count; n > int64(r.MaxKeys) {
				e.removeWaiter(h)
				return nil, fmt.Errorf("%w: %q already has %d holders and waiters, the limit", ErrQueueFull, r.Name, r.MaxKeys)
			}
		}
		return &enqueued{h: h, first: firstKV(resp.Responses[1])}, nil
	}

	// The transaction did not create the key: find out why.
	if r.Session == 0 {
		e.revokeLater(lease) // the fresh lease is not needed
	}
	mine := firstKV(resp.Responses[0])
	first := firstKV(resp.Responses[1])
	if mine != nil {
		return e.resume(r, mine, first)
	}
	if r.Session != 0 {
		if s := firstKV(resp.Responses[2]); s == nil || !hasHeader(s.Value, r.SessionSecret) {
			return nil, fmt.Errorf("%w: session %x is unknown, expired or not yours", ErrSessionLost, int64(r.Session))
		}
	}
	if onlyIfFree && first != nil {
		return &enqueued{first: first}, nil
	}
	return nil, fmt.Errorf("%w: the cluster refused the enqueue", ErrGuardFailed)
}

// resume rebuilds the handle of a waiter enqueued by an earlier attempt with
// the same request id.
func (e *Engine) resume(r *AcquireRequest, mine, first *mvccpb.KeyValue) (*enqueued, error) {
	_, meta, err := decodeValue(mine.Value)
	if err != nil {
		return nil, err
	}
	secret, err := unsealSecret(meta.Sealed, r.RequestID)
	if err != nil {
		return nil, err
	}
	h := Handle{
		Name: r.Name, WaiterID: WaiterID(r.RequestID), Lease: clientv3.LeaseID(mine.Lease),
		Revision: mine.CreateRevision, Epoch: meta.Epoch, Secret: secret, Session: meta.Session,
	}
	return &enqueued{h: h, ttl: time.Duration(meta.TTL) * time.Second, resumed: true, first: first}, nil
}

func hasHeader(v []byte, s Secret) bool {
	h := valueHeader(s)
	return len(v) > len(h) && string(v[:len(h)]) == h
}

func firstKV(r *pb.ResponseOp) *mvccpb.KeyValue {
	rr := r.GetResponseRange()
	if rr == nil || len(rr.Kvs) == 0 {
		return nil
	}
	return rr.Kvs[0]
}

// Acquire enqueues the caller and blocks until it holds the lock, the wait
// timeout passes (ErrWaitTimeout), its lease is lost (ErrLeaseLost) or ctx
// is done. A waiter that stops waiting deletes its key at once, unless ctx
// was cancelled with cause ErrDetached.
func (e *Engine) Acquire(ctx context.Context, r AcquireRequest) (Grant, error) {
	w, err := e.Enqueue(ctx, r)
	if err != nil {
		return Grant{}, err
	}
	return w.Wait(ctx)
}

// Waiter is an enqueued acquire that has not been granted yet.
type Waiter struct {
	e *Engine
	r AcquireRequest
	q *enqueued
}

// Enqueue runs the acquire transaction (one round trip on top of the lease)
// and returns the waiter without waiting. It is Acquire's first half, for
// callers that treat the bounded enqueue and the unbounded wait differently
// (a circuit breaker must not count a long wait against its cluster).
func (e *Engine) Enqueue(ctx context.Context, r AcquireRequest) (*Waiter, error) {
	ttlSec, err := r.validate(e.cfg)
	if err != nil {
		return nil, err
	}
	sctx, sp := e.traceEnqueue(ctx, &r, false)
	q, err := e.enqueue(sctx, &r, ttlSec, false)
	sp.endEnqueue(q, err)
	if err != nil {
		return nil, err
	}
	return &Waiter{e: e, r: r, q: q}, nil
}

// Wait blocks until the waiter holds the lock; see Acquire.
func (w *Waiter) Wait(ctx context.Context) (Grant, error) {
	if w.q.first != nil && w.q.first.CreateRevision == w.q.h.Revision && w.r.BeforeGrant == nil {
		return w.e.granted(ctx, w.q)
	}
	return w.e.tracedWait(ctx, &w.r, w.q)
}

// granted turns an enqueued waiter that is first into a Grant. A fresh
// waiter's deadline comes from its lease grant; otherwise the lease is
// renewed now so that the holder starts with a full TTL.
func (e *Engine) granted(ctx context.Context, q *enqueued) (out Grant, err error) {
	ctx, sp := e.traceGrant(ctx, q)
	defer func() { sp.endGrant(out, err) }()
	g := Grant{Handle: q.h, TTL: q.ttl, Deadline: q.deadline, Resumed: q.resumed}
	if !q.deadline.IsZero() {
		return g, nil
	}
	ttl, deadline, err := e.renewLease(ctx, q.h.Lease)
	if errors.Is(err, errLeaseNotFound) {
		return Grant{}, fmt.Errorf("%w: the waiter's lease expired before the grant", ErrLeaseLost)
	}
	if err != nil {
		return Grant{}, fmt.Errorf("queue: renew lease at grant: %w", err)
	}
	g.TTL, g.Deadline = ttl, deadline
	return g, nil
}

// TryResult is the outcome of TryAcquire.
type TryResult struct {
	// Acquired reports whether the lock was granted.
	Acquired bool
	// Grant is set when Acquired.
	Grant Grant
	// Holder describes the current holder when not Acquired.
	Holder *Holder
}

// TryAcquire grants the lock only if nobody holds or waits for it; it never
// waits. A retry with the request id of an earlier successful TryAcquire
// returns the same grant while it is held.
func (e *Engine) TryAcquire(ctx context.Context, r AcquireRequest) (TryResult, error) {
	r.WaitTimeout, r.OnQueued = 0, nil
	ttlSec, err := r.validate(e.cfg)
	if err != nil {
		return TryResult{}, err
	}
	sctx, sp := e.traceEnqueue(ctx, &r, true)
	q, err := e.enqueue(sctx, &r, ttlSec, true)
	sp.endEnqueue(q, err)
	if err != nil {
		return TryResult{}, err
	}
	if q.h.Revision != 0 && q.first != nil && q.first.CreateRevision == q.h.Revision {
		g, err := e.granted(ctx, q)
		if err != nil {
			return TryResult{}, err
		}
		return TryResult{Acquired: true, Grant: g}, nil
	}
	if q.resumed {
		// An earlier Acquire with this request id is still waiting; a
		// TryAcquire must not leave it queued behind the caller's back.
		e.removeWaiter(q.h)
	}
	holder, err := e.holderInfo(ctx, q.first)
	if err != nil {
		return TryResult{}, err
	}
	return TryResult{Holder: holder}, nil
}

// removeWaiterLater runs removeWaiter in the background, owned by the engine.
func (e *Engine) removeWaiterLater(h Handle) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.removeWaiter(h)
	}()
}

// removeWaiter deletes a waiter's key if it is still the same incarnation,
// and revokes its lease if the lease is its own.
func (e *Engine) removeWaiter(h Handle) {
	ctx, cancel := e.opCtx()
	defer cancel()
	key := e.keys.waiter(h.Name, h.WaiterID)
	resp, err := e.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", h.Revision)).
		Then(clientv3.OpDelete(key)).Commit()
	if err == nil && resp.Succeeded && !h.Session {
		e.revokeLater(h.Lease)
	}
}
