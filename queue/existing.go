package queue

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Existing returns the grant made under r's request id for r's caller
// while it holds — its lock, or, with r.Reentrant, its hold of the lock its
// session holds — and writes nothing: it never enqueues, takes a key over,
// adds or re-takes a hold. found is false when there is none: never made,
// gone, or still waiting. A client that lost the answer of an acquire asks
// it what the acquire was granted, to release it; a copy of the question
// that arrives late changes nothing.
//
// The key's identity, owner binding, secret (unsealed with the request
// id, as a retry's is) and place among the holders are read in one
// revision; the grant rests on them as a takeover's would.
func (e *Engine) Existing(ctx context.Context, r AcquireRequest) (g Grant, found bool, err error) {
	r.OnQueued = nil
	if _, err := r.validate(e.cfg); err != nil {
		return Grant{}, false, err
	}
	prefix := e.keys.namePrefix(r.Name)
	n := r.effectiveLimit()
	wid := WaiterID(r.RequestID)
	key := prefix + wid
	resp, err := e.cli.Txn(ctx).Then(clientv3.OpGet(prefix, withFirstN(n)...), clientv3.OpGet(key),
		clientv3.OpGet(e.keys.delayPrefix(r.Name), clientv3.WithPrefix())).Commit()
	if err != nil {
		return Grant{}, false, fmt.Errorf("queue: find a grant: %w", err)
	}
	first := resp.Responses[0].GetResponseRange().GetKvs()
	if mine := firstKV(resp.Responses[1]); mine != nil {
		_, meta, err := decodeValue(mine.Value)
		if err != nil {
			return Grant{}, false, err
		}
		if meta.Owner != r.binding() {
			return Grant{}, false, fmt.Errorf("%w: the request id belongs to another caller's acquire", ErrNotOwner)
		}
		secret, err := unsealSecret(meta.Sealed, r.RequestID)
		if err != nil || !hasHeader(mine.Value, secret) {
			return Grant{}, false, fmt.Errorf("%w: the waiter's record does not match its request id", ErrNotOwner)
		}
		lease := clientv3.LeaseID(mine.Lease)
		if holdsIn(first, mine.CreateRevision, n) && e.grantMadeIn(resp.Responses[2].GetResponseRange().GetKvs(), first, mine, meta.Session, meta.Delay > 0, lease == r.Session) {
			h := Handle{Name: r.Name, WaiterID: wid, Lease: lease, Revision: mine.CreateRevision, Epoch: meta.Epoch, Secret: secret, Session: meta.Session}
			ttl := time.Duration(meta.TTL) * time.Second
			if meta.Session {
				ttl = e.sessionTTL(r.Session)
			}
			return Grant{Handle: h, TTL: ttl, Resumed: true, keep: true}, true, nil
		}
	}
	if !r.Reentrant || r.Session == 0 {
		return Grant{}, false, nil
	}
	kv, secret := e.heldBySession(&r, first, n)
	if kv == nil {
		return Grant{}, false, nil
	}
	lid := waiterIDOf(kv)
	hr, err := e.cli.Get(ctx, e.keys.holds(r.Name, lid, kv.CreateRevision))
	if err != nil {
		return Grant{}, false, fmt.Errorf("queue: find a grant: %w", err)
	}
	var rec *mvccpb.KeyValue
	if len(hr.Kvs) > 0 {
		rec = hr.Kvs[0]
	}
	holds := decodeHolds(rec)
	if holdIndex(holds, wid) < 0 {
		return Grant{}, false, nil
	}
	_, meta, _ := decodeValue(kv.Value)
	h := Handle{Name: r.Name, WaiterID: lid, HoldID: wid, Lease: r.Session, Revision: kv.CreateRevision, Epoch: meta.Epoch, Secret: secret, Session: true}
	return Grant{Handle: h, TTL: e.sessionTTL(r.Session), Holds: len(holds), Resumed: true, keep: true}, true, nil
}

// grantMadeIn reports whether the key mine, which holds by its place, has
// been granted, judged from the name's delay records delays and first
// keys first read in the same revision. A place is not yet a grant:
//   - a session's key is granted by the transaction that moves it onto
//     the session lease (onSession), with its record and after the name's
//     pending lock-delays were waited out (grant.go); before, it rides an
//     attempt lease (and a re-entrant request's hold may still be found);
//   - a key on a lease of its own is granted once no lock-delay is
//     pending (a record of a key that no longer holds) and, where a grant
//     writes its own record before it is answered (a lock-delay, or losses
//     waiting), that record is there: answering it sooner would let a
//     caller act inside another holder's lock-delay, or hold with nothing
//     in etcd to make its own expiry wait.
func (e *Engine) grantMadeIn(delays, first []*mvccpb.KeyValue, mine *mvccpb.KeyValue, session, lockDelay, onSession bool) bool {
	if session {
		return onSession
	}
	if pendingAmong(delays, first) {
		return false
	}
	if !lockDelay && !e.cfg.LossWait {
		return true
	}
	return slices.ContainsFunc(delays, func(kv *mvccpb.KeyValue) bool {
		rec, ok := parseDelay(kv)
		return ok && rec.rev == mine.CreateRevision
	})
}
