package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// granted turns an attempt whose key is first into a Grant.
//
// A lock with a lease of its own reports the deadline of the last
// confirmation of its lease — the enqueue's grant of it or a renewal while
// it waited: that request's send time plus the TTL, which the lease
// outlives. Only when less than half the TTL would be left does the grant
// renew the lease first, so the holder starts with at least half a TTL and
// a grant after a short wait costs no round trip. A session waiter's key
// still rides on the attempt lease: one transaction moves it onto the
// session lease, comparing the key's identity (create revision), this
// attempt's ownership of it (mod revision) and the session's secret.
// Failures that say nothing about the lock — a leader change, a timeout —
// are retried until ctx ends, so a waiter at the head never loses its
// place to a transient error.
func (e *Engine) granted(ctx context.Context, r *AcquireRequest, q *enqueued, began time.Time) (out Grant, err error) {
	ctx, sp := e.traceGrant(ctx, q)
	defer func() { sp.endGrant(out, err) }()
	e.at(ctx, pointGrant)
	// An attempt first when it wrote its key (enqueue, takeover) read the
	// first key in that same transaction.
	asOf := max(q.firstAt, q.modRev)
	heldFrom := asOf
	if q.firstAt != 0 {
		heldFrom = q.firstAt
	}
	defer func() {
		if err == nil {
			e.grantMade(ctx, out, asOf, heldFrom)
		}
	}()
	if q.h.Session {
		if !q.onSession() {
			if err := e.moveToSession(ctx, r, q); err != nil {
				return Grant{}, err
			}
			asOf = q.modRev
		}
		if err := e.granting(ctx, r, q, q.ttl); err != nil {
			return Grant{}, err
		}
		return Grant{Handle: q.h, TTL: q.ttl, Resumed: q.resumed, attempt: q.modRev, keep: q.keep}, nil
	}
	deadline := q.confirmed()
	g := Grant{Handle: q.h, TTL: q.ttl, Deadline: deadline, Resumed: q.resumed, attempt: q.modRev, keep: q.keep}
	if deadline.IsZero() || deadline.Sub(e.cfg.Clock.Now()) < q.ttl/2 {
		b := newBackoff(e.cfg.Clock)
		for {
			ttl, deadline, err := e.renewLease(ctx, q.h.Lease)
			if errors.Is(err, errLeaseNotFound) {
				return Grant{}, fmt.Errorf("%w: the waiter's lease expired before the grant", ErrLeaseLost)
			}
			if err == nil {
				g.TTL, g.Deadline = ttl, deadline
				q.confirm(deadline)
				break
			}
			if werr := b.wait(ctx); werr != nil {
				return Grant{}, fmt.Errorf("queue: renew lease at grant: %w", err)
			}
		}
	}
	if err := e.granting(ctx, r, q, max(g.TTL, q.ttl)); err != nil {
		return Grant{}, err
	}
	g.Valid = g.Deadline.Sub(began)
	return g, nil
}

// granting makes what a grant's end needs before the grant is answered:
// a holder with a lock-delay, and with losses waiting every holder, has its
// record in etcd (delay.go, loss.go) — written with its key, or with the
// move onto its session lease, or here — and a holder with a lock-delay
// is watched by this engine until it goes, to stamp its expiry at once.
// ttl is the lease's TTL as etcd granted it.
func (e *Engine) granting(ctx context.Context, r *AcquireRequest, q *enqueued, ttl time.Duration) error {
	if !q.recorded && (r.LockDelay > 0 || e.cfg.LossWait) {
		if err := e.recordLockDelay(ctx, r, q, ttl); err != nil {
			return err
		}
		q.recorded = true
	}
	if r.LockDelay > 0 {
		e.hubs.watchHolder(ctx, e.keys.namePrefix(q.h.Name), e.keys.delayPrefix(q.h.Name), e.keys.waiter(q.h.Name, q.h.WaiterID), q.h.Revision)
	}
	return nil
}

// confirm records a later confirmed deadline of the waiter's own lease.
func (q *enqueued) confirm(deadline time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if deadline.After(q.deadline) {
		q.deadline = deadline
	}
}

// confirmed is the latest confirmed deadline of the waiter's own lease;
// zero when none is known (a resumed waiter).
func (q *enqueued) confirmed() time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.deadline
}

// moveToSession moves a granted session waiter's key from the attempt
// lease onto its session lease.
func (e *Engine) moveToSession(ctx context.Context, r *AcquireRequest, q *enqueued) error {
	key := e.keys.waiter(q.h.Name, q.h.WaiterID)
	skey := e.keys.session(q.h.Lease)
	var t txnParts
	t.compare(clientv3.Compare(clientv3.CreateRevision(key), "=", q.h.Revision),
		clientv3.Compare(clientv3.ModRevision(key), "=", q.modRev))
	t.compare(ownerCmps(skey, r.SessionSecret)...)
	keyNow := t.both(clientv3.OpPut(key, q.value, clientv3.WithLease(q.h.Lease)), clientv3.OpGet(key))
	session := t.read(clientv3.OpGet(skey))
	record := !q.recorded && (r.LockDelay > 0 || e.cfg.LossWait)
	if record {
		// The holder's record goes with the move that grants it (grant.go,
		// granting): no round trip of its own.
		ttl, err := e.knownSessionTTL(ctx, q.h.Lease)
		if err != nil {
			return err
		}
		t.onThen(clientv3.OpPut(e.keys.delay(q.h.Name, q.h.WaiterID), delayValue(q.h.Revision, r.LockDelay, max(ttl, q.ttl))))
	}
	moved := func(resp *clientv3.TxnResponse, rev int64) error {
		e.att.release(q.att)
		q.att, q.modRev = attemptRef{}, rev
		q.ttl = sessionRecordTTL(session.of(resp.Responses))
		return nil
	}
	b := newBackoff(e.cfg.Clock)
	for {
		// A try runs to its answer even when the wait ends meanwhile (a
		// gateway shutting down detaches its waiters): a move whose outcome
		// nobody learns would leave the key on the session lease, granted
		// to nobody and never given up, for as long as the session lives.
		// With the answer, a move that landed is a grant, and a grant the
		// caller can no longer receive is given up (Abandon). A try without
		// an answer after the wait ended leaves the move in doubt, and the
		// attempt's cleanup takes the key back whichever lease it is on.
		tctx, cancel := e.answered(ctx)
		resp, err := t.commit(tctx, e.cli)
		cancel()
		if err != nil {
			if werr := b.wait(ctx); werr != nil {
				q.moveInDoubt = true
				return fmt.Errorf("queue: grant: %w", err)
			}
			continue
		}
		if resp.Succeeded {
			q.recorded = q.recorded || record
			return moved(resp, resp.Header.Revision)
		}
		switch mine := firstKV(keyNow.of(resp.Responses)); {
		case mine == nil || mine.CreateRevision != q.h.Revision:
			return fmt.Errorf("%w: the waiter's key is gone", ErrLeaseLost)
		case mine.ModRevision != q.modRev && clientv3.LeaseID(mine.Lease) == q.h.Lease && string(mine.Value) == q.value:
			// An earlier try of this very move landed and its answer was
			// lost: the value, with this attempt's nonce, is on the
			// session lease (the session's secret was compared when it
			// landed, and the key would have gone with the session). No
			// other attempt writes this value, so the key is this grant's.
			return moved(resp, mine.ModRevision)
		case mine.ModRevision != q.modRev:
			return fmt.Errorf("%w: a retry with the same request id took the waiter over", ErrSuperseded)
		default:
			return fmt.Errorf("%w: session %x expired or was closed before the grant", ErrSessionLost, int64(q.h.Lease))
		}
	}
}

// endAttempt cleans up after an attempt that ended without a grant. An
// attempt that took over a key already granted leaves it (enqueued.keep).
func (e *Engine) endAttempt(ctx context.Context, q *enqueued, err error) {
	if q.keep || errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrSuperseded) || errors.Is(err, ErrClosed) {
		// The key is gone, or another attempt owns it: nothing here to
		// remove. A closed engine starts no work: its waiter's key lapses
		// with its lease, as after a crash.
		e.att.release(q.att)
		return
	}
	e.removeWaiterLater(ctx, q)
}
