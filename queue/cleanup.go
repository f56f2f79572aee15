package queue

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Cleanup owns what it deletes.
//
// An attempt removes its waiter key — after a cancelled or timed-out wait,
// a lost session, a grant it could not deliver — only while it still owns
// the key: the transaction compares the key's create revision (it is the
// same waiter) and mod revision (this attempt wrote it last). A retry of
// the same request id that took the key over, perhaps on another gateway,
// has written it since, so a late cleanup of the attempt it replaced
// deletes nothing. The lease revoked afterwards is read back from the
// deletion itself, and only when the deleted key's own value says the lease
// is the lock's own: never a lease a caller named, a session's or the
// attempt lease.

// answered is the context of a write that puts or takes a waiter's key or
// hold — one etcd may apply while its caller goes away: detached from ctx's
// cancellation (its values kept) and bounded by RequestTimeout. A write
// cancelled in flight can still land, after every cleanup has looked and
// found nothing, and leave a key or a hold granted to nobody (on a session
// lease, for the session's life); answered, the attempt knows what it
// wrote and its caller's departure is handled as after any write: the key
// or hold is taken back or given up. Only a write etcd does not answer
// within RequestTimeout stays unknown (forgetUnknown, Abandon).
func (e *Engine) answered(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), e.cfg.RequestTimeout)
}

// takeBack removes the key of q, an enqueue that is refused after its
// key was put, before the refusal is answered, so a refused caller finds
// the name as it was. The removal runs on a context of its own, bounded by
// RequestTimeout, not the caller's: a caller gone at this moment does not
// stop it. One not settled by then (etcd unreachable) goes on in the
// background, owned by the engine, until it is.
func (e *Engine) takeBack(ctx context.Context, q *enqueued) {
	if q.moveInDoubt {
		e.forgetMove(ctx, q)
		return
	}
	dctx, cancel := e.answered(ctx)
	e.deleteOwned(dctx, q.h.Name, q.h.WaiterID, q.h.Revision, q.modRev, pointCleanup)
	settled := dctx.Err() == nil
	cancel()
	if !settled {
		e.removeWaiterLater(ctx, q)
		return
	}
	e.att.release(q.att)
}

// removeWaiterLater runs removeWaiter in the background, owned by the
// engine: the caller's context may already be done.
func (e *Engine) removeWaiterLater(ctx context.Context, q *enqueued) {
	e.background(ctx, "cleanup", 0, func(ctx context.Context) { e.removeWaiter(ctx, q) })
}

// forgetDetached leaves q's key, detached from its attempt, for a retry
// elsewhere to take over (ErrDetached), and removes it AttemptTTL later if
// nobody has: the removal compares this attempt's mod revision, which a
// takeover changes. So a detached key outlives its attempt by at most
// AttemptTTL however busy this engine is; when the engine stops first, the
// key lapses with its lease — the attempt lease within AttemptTTL (its
// reference is given back now), a lock's own lease within its TTL.
func (e *Engine) forgetDetached(ctx context.Context, q *enqueued) {
	e.att.release(q.att)
	q.att = attemptRef{}
	e.background(ctx, "detached", 0, func(ctx context.Context) {
		t := e.cfg.Clock.NewTimer(e.cfg.AttemptTTL)
		defer t.Stop()
		select {
		case <-e.ctx.Done():
			return
		case <-t.C():
		}
		if q.moveInDoubt {
			e.forgetMove(ctx, q)
			return
		}
		e.deleteOwned(ctx, q.h.Name, q.h.WaiterID, q.h.Revision, q.modRev, pointCleanup)
	})
}

// removeWaiter deletes q's key if q's attempt still owns it, retrying
// transient failures until ctx ends, and then gives back the attempt lease
// reference: a key that could not be removed dies with that lease once no
// attempt needs it.
func (e *Engine) removeWaiter(ctx context.Context, q *enqueued) {
	if q.moveInDoubt {
		e.forgetMove(ctx, q)
		return
	}
	defer e.att.release(q.att)
	e.deleteOwned(ctx, q.h.Name, q.h.WaiterID, q.h.Revision, q.modRev, pointCleanup)
}

// forgetMove takes back the key of q, whose move onto the session lease
// is in doubt (enqueued.moveInDoubt): the move, had it landed, wrote the
// key's value unchanged — this attempt's, which carries its nonce and which
// no other attempt writes — so the key is this attempt's, on the attempt
// lease or the session's, while it holds that value. It goes with its
// holder record, as a clean end, unless a re-entrant hold rests on it (a
// session that re-entered the lock meanwhile holds it). It runs in the
// background until etcd answers.
func (e *Engine) forgetMove(ctx context.Context, q *enqueued) {
	key := e.keys.waiter(q.h.Name, q.h.WaiterID)
	noHolds := clientv3.Compare(clientv3.CreateRevision(e.keys.holds(q.h.Name, q.h.WaiterID, q.h.Revision)), "=", 0)
	del := append([]clientv3.Op{clientv3.OpDelete(key)}, e.releaseDelayOps(q.h)...)
	del = append(del, e.endMark(markGiveUp, key))
	e.forget(ctx, key, q.value, []clientv3.Op{clientv3.OpTxn([]clientv3.Cmp{noHolds}, del, nil)}, 0, q.att)
}

// deleteOwned deletes a waiter key if its create revision is rev and its
// mod revision is modRev, and revokes the key's own lease. It reports
// whether it deleted.
func (e *Engine) deleteOwned(ctx context.Context, name, waiterID string, rev, modRev int64, point string) bool {
	key := e.keys.waiter(name, waiterID)
	// A grant nobody received leaves no lock-delay behind (delay.go), and
	// its end is a clean one (loss.go).
	del := append([]clientv3.Op{clientv3.OpDelete(key, clientv3.WithPrevKV())}, e.releaseDelayOps(Handle{Name: name, WaiterID: waiterID, Revision: rev})...)
	del = append(del, e.endMark(markGiveUp, key))
	defer e.at(ctx, pointCleaned)
	b := newBackoff(e.cfg.Clock)
	for {
		e.at(ctx, point)
		rctx, cancel := context.WithTimeout(ctx, e.cfg.RequestTimeout)
		resp, err := e.cli.Txn(rctx).If(
			clientv3.Compare(clientv3.CreateRevision(key), "=", rev),
			clientv3.Compare(clientv3.ModRevision(key), "=", modRev),
			// A lock re-entered through its session is not an attempt's
			// to delete (reenter.go).
			clientv3.Compare(clientv3.CreateRevision(e.keys.holds(name, waiterID, rev)), "=", 0),
		).Then(del...).Commit()
		cancel()
		if err == nil {
			if resp.Succeeded {
				e.revokeOwnLease(ctx, deletedKV(resp))
			}
			return resp.Succeeded
		}
		if b.wait(ctx) != nil {
			return false
		}
	}
}

// Abandon gives up a grant that could not be delivered to its client: it
// deletes the holder's key if the attempt that made the grant still owns it
// (a retry with the same request id that took the key over, and may have
// delivered the grant, keeps it) and revokes the lock's own lease. A grant
// of a hold of a re-entered lock, or of a lock re-entered since, gives up
// that one hold (reenter.go). A grant of a key or hold that was granted
// before its attempt took it over gives nothing up: the attempt it
// replaced may have delivered it, and the key ends with its lease. It does
// not block: the removal runs in the background, owned by the engine.
func (e *Engine) Abandon(ctx context.Context, g Grant) {
	if g.keep {
		return // another attempt may have delivered it (Grant.keep)
	}
	e.background(ctx, "abandon", 0, func(ctx context.Context) {
		if g.HoldID == "" && e.deleteOwned(ctx, g.Name, g.WaiterID, g.Revision, g.attempt, pointAbandon) {
			return
		}
		e.dropHoldOwned(ctx, g)
	})
}

// ownLease reports whether prev, a waiter key just deleted (read back from
// the deletion), has a lease its value says is the lock's own.
func ownLease(prev *mvccpb.KeyValue) (waiterMeta, bool) {
	if prev == nil || prev.Lease == 0 {
		return waiterMeta{}, false
	}
	meta, err := decodeValue(prev.Value)
	return meta, err == nil && !meta.Session
}

// revokeOwnLease revokes prev's lease when it is the lock's own (ownLease).
func (e *Engine) revokeOwnLease(ctx context.Context, prev *mvccpb.KeyValue) {
	if _, own := ownLease(prev); own {
		e.revokeLater(ctx, clientv3.LeaseID(prev.Lease))
	}
}

// recycleOwnLease is revokeOwnLease for a clean release: the lease goes
// back to the pool when the pool may reuse it, and is revoked otherwise.
func (e *Engine) recycleOwnLease(ctx context.Context, prev *mvccpb.KeyValue) {
	if meta, own := ownLease(prev); own && !e.pool.giveBackReleased(ctx, prev, meta) {
		e.revokeLater(ctx, clientv3.LeaseID(prev.Lease))
	}
}

// deletedKV is the key removed by a delete with WithPrevKV, resp's first op.
func deletedKV(resp *clientv3.TxnResponse) *mvccpb.KeyValue {
	if len(resp.Responses) == 0 {
		return nil
	}
	return firstOf(resp.Responses[0].GetResponseDeleteRange().GetPrevKvs())
}

// forgetUnknown takes back what an enqueue transaction whose answer was
// lost may have written. The key is deleted only if it still holds the
// exact value this attempt wrote (its nonce makes it unique): a retry that
// took the key over since wrote a value of its own and keeps it. The
// holder record the transaction may have written beside the key (loss.go)
// goes with it when it carries this attempt's nonce. The attempt's fresh
// per-lock lease is revoked only when no key of this attempt can be on it:
// the key was deleted here, is absent, or rides on another lease. The
// attempt lease reference is given back at the end.
func (e *Engine) forgetUnknown(ctx context.Context, key, value, hrec, hval string, lease clientv3.LeaseID, att attemptRef) {
	e.forget(ctx, key, value, []clientv3.Op{clientv3.OpDelete(key), e.endMark(markGiveUp, key),
		clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(hrec), "=", hval)}, []clientv3.Op{clientv3.OpDelete(hrec)}, nil)},
		lease, att)
}

// forgetTakeover takes back a takeover whose answer was lost, as
// forgetUnknown does an enqueue, unless the key has a delay or holder
// record of its own (dkey, hrec; rev is the key's create revision): such a
// key was granted, perhaps delivered by the attempt the takeover replaced,
// and no retry gives it up (its end is its lease's).
func (e *Engine) forgetTakeover(ctx context.Context, key, value, dkey, hrec string, rev int64, att attemptRef) {
	del := []clientv3.Op{clientv3.OpDelete(key), e.endMark(markGiveUp, key)}
	// A value compare on an absent key fails: each Else runs when that
	// record is not the key's.
	noHolderRecord := clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(hrec), "=", rev)}, nil, del)
	noRecord := clientv3.OpTxn(recordOfCmps(dkey, rev), nil, []clientv3.Op{noHolderRecord})
	e.forget(ctx, key, value, []clientv3.Op{noRecord}, 0, att)
}

// forget runs then, in the background and until etcd answers, if key still
// holds value; it then revokes lease (when not 0) if no key of the attempt
// can be on it, and gives the attempt lease reference back.
func (e *Engine) forget(ctx context.Context, key, value string, then []clientv3.Op, lease clientv3.LeaseID, att attemptRef) {
	e.background(ctx, "forget", 0, func(ctx context.Context) {
		defer e.att.release(att)
		defer e.at(ctx, pointCleaned)
		b := newBackoff(e.cfg.Clock)
		for {
			e.at(ctx, pointCleanup)
			rctx, cancel := context.WithTimeout(ctx, e.cfg.RequestTimeout)
			resp, err := e.cli.Txn(rctx).If(clientv3.Compare(clientv3.Value(key), "=", value)).
				Then(then...).Else(clientv3.OpGet(key)).Commit()
			cancel()
			if err == nil {
				kv := firstKV(resp.Responses[0])
				if lease != 0 && (resp.Succeeded || kv == nil || clientv3.LeaseID(kv.Lease) != lease) {
					// Bounded like every call: a lease not revoked lapses
					// at its TTL anyway.
					rctx, cancel := context.WithTimeout(ctx, e.cfg.RequestTimeout)
					_, _ = e.cli.Revoke(rctx, lease)
					cancel()
				}
				return
			}
			if b.wait(ctx) != nil {
				return
			}
		}
	})
}
