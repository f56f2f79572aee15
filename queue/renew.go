package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Renewal is the outcome of a successful Renew.
type Renewal struct {
	// TTL is the lease's effective TTL.
	TTL time.Duration
	// Deadline is conservative: when the keepalive that confirmed the
	// lease was sent, plus TTL.
	Deadline time.Time
	// Valid is how long after the call began the lease is certain to live:
	// Deadline minus that moment. It is what a client that sent the
	// request before the call began may add to its own send time. It can
	// be shorter than TTL: a renewal may be answered by a keepalive that
	// was already in flight when it arrived.
	Valid time.Duration
}

// checkToken refuses a fencing token that is not the handle's own.
func checkToken(h Handle, token int64) error {
	if token != h.Token() {
		return fmt.Errorf("%w: fencing token %d does not belong to this lock id", ErrNotOwner, token)
	}
	return nil
}

// Renew extends the lease of a held lock. It first proves, in one
// transaction, that the holder's key still exists with the same create
// revision, lease and secret; only then does it send a keepalive, so a
// caller without the secret cannot keep someone else's lease alive, and
// the lease it renews is the one etcd says the key rides on, not merely
// the one the handle names. (Between the proof and the keepalive the key
// can only go away — released by its owner or expired — and a lapsed lease
// is not revived by a keepalive.)
//
// The keepalive goes out within proofWindow (500 ms) of the proof's send,
// or the proof is made again first: another gateway may recycle the lease
// once a quarantine longer than that has passed since the lock's release
// (leasepool.go). Against an etcd that answers no proof within it, Renew
// ends with ctx.
//
// It answers ErrReleased when the key's holder released it, ErrEvicted
// when an administrator force-released it, otherwise ErrExpired when the
// key is gone and nobody holds the name or ErrStolen when another waiter
// holds it now (ends.go tells them apart), and ErrNotOwner when the
// secret, lease or fencing token does not match.
func (e *Engine) Renew(ctx context.Context, h Handle, token int64) (rn Renewal, err error) {
	began := e.cfg.Clock.Now()
	ctx, sp := e.traceHandle(ctx, spanRenew, h)
	defer func() { sp.end("renewed", err) }()
	if err := checkToken(h, token); err != nil {
		return Renewal{}, err
	}
	// The lease is not given back to this engine's pool while the renewal
	// runs, and a proof older than proofWindow is made again before the
	// keepalive goes out: another gateway's pool hands a lease out again
	// only after a quarantine longer than that (leasepool.go, doc.go).
	defer e.pool.renew(h.Lease)()
	for {
		sent := e.cfg.Clock.Now()
		e.at(ctx, pointProve)
		if err := e.proveHolder(ctx, h); err != nil {
			if errors.Is(err, ErrExpired) || errors.Is(err, ErrStolen) {
				// Gone: say how (released, evicted, lost).
				return Renewal{}, e.endOf(ctx, h, err).Err
			}
			return Renewal{}, err
		}
		e.at(ctx, pointKeep)
		if e.cfg.Clock.Now().Sub(sent) <= proofWindow {
			break
		}
	}
	e.leaseEvent(ctx, leaseRenewProof, h.Lease, h.Revision)
	ttl, deadline, err := e.renewLease(ctx, h.Lease)
	if errors.Is(err, errLeaseNotFound) {
		// The lease died between the check and the keepalive.
		return Renewal{}, e.endOf(ctx, h, e.classifyGone(ctx, h.Name)).Err
	}
	if err != nil {
		return Renewal{}, fmt.Errorf("queue: keepalive: %w", err)
	}
	return Renewal{TTL: ttl, Deadline: deadline, Valid: deadline.Sub(began)}, nil
}

// proveHolder checks in one transaction that h's key is still the same
// incarnation, on the same lease, with the same secret.
func (e *Engine) proveHolder(ctx context.Context, h Handle) error {
	prefix := e.keys.namePrefix(h.Name)
	key := prefix + h.WaiterID
	cmps := handleCmps(key, h)
	var then []clientv3.Op
	if h.HoldID != "" {
		// A hold of a re-entered lock is held while its record lists it
		// (reenter.go).
		then = append(then, clientv3.OpGet(e.keys.holds(h.Name, h.WaiterID, h.Revision)))
	}
	resp, err := e.cli.Txn(ctx).If(cmps...).Then(then...).Else(
		clientv3.OpGet(key),
		clientv3.OpGet(prefix, clientv3.WithFirstCreate()...),
	).Commit()
	if err != nil {
		return fmt.Errorf("queue: check holder: %w", err)
	}
	if resp.Succeeded {
		if h.HoldID != "" && holdIndex(decodeHolds(firstKV(resp.Responses[0])), h.HoldID) < 0 {
			return fmt.Errorf("%w: this hold of the lock was released; the lock's other holds keep it", ErrReleased)
		}
		return nil
	}
	if mine := firstKV(resp.Responses[0]); mine != nil && mine.CreateRevision == h.Revision {
		return fmt.Errorf("%w: the lock id does not match the lock's secret or lease", ErrNotOwner)
	}
	return goneError(firstKV(resp.Responses[1]))
}

func goneError(first interface{ GetKey() []byte }) error {
	if first != nil && len(first.GetKey()) > 0 {
		return fmt.Errorf("%w: the lease lapsed and another holder has the name", ErrStolen)
	}
	return fmt.Errorf("%w: the lease lapsed and the name is free", ErrExpired)
}

// classifyGone tells expired from stolen for a holder whose key is gone.
func (e *Engine) classifyGone(ctx context.Context, name string) error {
	resp, err := e.cli.Get(ctx, e.keys.namePrefix(name), clientv3.WithFirstCreate()...)
	if err != nil {
		return fmt.Errorf("queue: read holder: %w", err)
	}
	return goneError(firstOf(resp.Kvs))
}

// Release frees a held lock with a compare-and-delete, never a plain
// delete: the transaction compares the key's create revision (the same
// waiter, not a later one under the same request id), its lease and its
// owner's secret, and reads the deleted key back. It is idempotent:
// releasing a lock that is already gone reports released == false and no
// error, and a late or retried release can never remove a newer holder's
// key. A handle with a HoldID releases that hold of a re-entered lock
// (reenter.go) and nothing else; releasing it again is released == false.
//
// Only the lease read back from the deleted key is revoked, and only when
// the key's own value says it is the lock's own lease: the lease a lock id
// names is a claim, and revoking it unchecked would let a caller who edits
// its own lock id revoke any lease of the cluster — another client's lock,
// another tenant's session. That lease is given back to the engine's lease
// pool instead when the pool may reuse it (leasepool.go).
func (e *Engine) Release(ctx context.Context, h Handle, token int64) (released bool, err error) {
	ctx, sp := e.traceHandle(ctx, spanRelease, h)
	defer func() { sp.endRelease(released, err) }()
	if err := checkToken(h, token); err != nil {
		return false, err
	}
	key := e.keys.waiter(h.Name, h.WaiterID)
	hkey := e.keys.holds(h.Name, h.WaiterID, h.Revision)
	cmps := handleCmps(key, h)
	for {
		e.at(ctx, pointRelease)
		var mine, rec *mvccpb.KeyValue
		if h.HoldID == "" {
			// The key's own hold: one transaction when the lock has no
			// other holds.
			resp, err := e.releaseCommit(ctx, h, key, append(cmps, clientv3.Compare(clientv3.CreateRevision(hkey), "=", 0)))
			if err != nil {
				return false, fmt.Errorf("queue: release: %w", err)
			}
			if resp.Succeeded {
				e.recycleOwnLease(ctx, deletedKV(resp))
				return true, nil
			}
			mine, rec = firstKV(resp.Responses[0]), firstKV(resp.Responses[1])
		} else {
			resp, err := e.cli.Txn(ctx).Then(clientv3.OpGet(key), clientv3.OpGet(hkey)).Commit()
			if err != nil {
				return false, fmt.Errorf("queue: release: %w", err)
			}
			mine, rec = firstKV(resp.Responses[0]), firstKV(resp.Responses[1])
		}
		if mine == nil || mine.CreateRevision != h.Revision {
			return false, nil
		}
		if clientv3.LeaseID(mine.Lease) != h.Lease || !hasHeader(mine.Value, h.Secret) {
			return false, fmt.Errorf("%w: the lock id does not match the lock's secret or lease", ErrNotOwner)
		}
		if rec == nil {
			// A hold of a lock that has only its own hold left: released
			// before.
			if h.HoldID != "" {
				return false, nil
			}
			continue // the record went since the read
		}
		dropped, final, err := e.dropHold(ctx, h, rec, "", 0)
		if err != nil || final {
			return dropped, err
		}
		if err := ctx.Err(); err != nil {
			return false, err
		}
		// The keys changed since the read: look again.
	}
}
