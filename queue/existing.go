package queue

import (
	"context"
	"fmt"
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
	resp, err := e.cli.Txn(ctx).Then(clientv3.OpGet(prefix, withFirstN(n)...), clientv3.OpGet(prefix+wid),
		clientv3.OpGet(e.keys.delayPrefix(r.Name), clientv3.WithPrefix())).Commit()
	if err != nil {
		return Grant{}, false, fmt.Errorf("queue: find a grant: %w", err)
	}
	first := resp.Responses[0].GetResponseRange().GetKvs()
	var from int64 // the revision the key's grant is known from; 0: none (a hold's is its own)
	if mine := firstKV(resp.Responses[1]); mine != nil {
		meta, h, err := claim(&r, mine)
		if err != nil {
			return Grant{}, false, err
		}
		// A re-entrant request whose key waits may still have a hold (below).
		if holdsIn(first, mine.CreateRevision, n) {
			from = e.grantMadeIn(r, resp.Responses[2].GetResponseRange().GetKvs(), first, mine, meta, h.Lease == r.Session, resp.Header.Revision)
		}
		g = Grant{Handle: h, TTL: time.Duration(meta.TTL) * time.Second, attempt: mine.ModRevision}
		if meta.Session && from != 0 {
			g.TTL = e.sessionTTL(r.Session)
		}
	}
	if from == 0 {
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
		holds := decodeHolds(firstOf(hr.Kvs))
		i := holdOf(holds, wid)
		if i < 0 {
			return Grant{}, false, nil
		}
		meta, _ := decodeValue(kv.Value)
		h := Handle{Name: r.Name, WaiterID: lid, HoldID: holds[i].ID, Lease: r.Session, Revision: kv.CreateRevision, Epoch: meta.Epoch, Secret: secret, Session: true}
		g = Grant{Handle: h, TTL: e.sessionTTL(r.Session), Holds: len(holds), attempt: kv.ModRevision}
	}
	g.Resumed, g.keep = true, true
	e.grantMade(ctx, g, resp.Header.Revision, from)
	return g, true, nil
}

// grantMadeIn reports from which revision the key mine, which holds by
// its place at revision asOf, is known to be granted — 0 while it is not —
// judged from the name's delay records delays read in the same revision as
// its first keys first. A place is not yet a grant:
//   - a session's key is granted by the transaction that moves it onto
//     the session lease (onSession), with its record and after the name's
//     pending lock-delays were waited out (grant.go); before, it rides an
//     attempt lease (and a re-entrant request's hold may still be found);
//   - a key on a lease of its own whose grant writes its delay record
//     (delay.go) writes it after the name's pending lock-delays were
//     waited out: it is granted once that record is there, whatever went
//     since;
//   - otherwise it is granted once no lock-delay is pending that may have
//     been pending when its key was created: the record of a holder
//     created before it that no longer holds, or one that cannot be read.
//     With losses waited for, that key is the first of an empty name,
//     written with its holder record (loss.go), so no holder was created
//     before it. Without, a semaphore holder ahead of it that went after
//     its grant counts too: the answer is "none", and the key ends with
//     its own lease.
//
// Answering sooner would let a caller act inside another holder's
// lock-delay, or hold with nothing in etcd to make its own expiry wait.
func (e *Engine) grantMadeIn(r AcquireRequest, delays, first []*mvccpb.KeyValue, mine *mvccpb.KeyValue, meta waiterMeta, onSession bool, asOf int64) (from int64) {
	if meta.Session {
		if onSession {
			return mine.ModRevision // the move
		}
		return 0
	}
	own := e.keys.delay(r.Name, waiterIDOf(mine))
	recorded := false
	for _, kv := range delays {
		if rec, ok := parseDelay(kv); ok && rec.rev == mine.CreateRevision {
			if string(kv.Key) == own {
				return kv.CreateRevision // the grant wrote it
			}
			recorded = true // its holder record, written with the key
		}
	}
	if live := among(first); anyPending(delays, func(rev int64) bool { return rev >= mine.CreateRevision || live(rev) }) {
		return 0
	}
	switch {
	case recorded:
		return mine.CreateRevision
	case meta.Delay == 0 && !e.cfg.LossWait:
		return asOf // granted when it came first, at the latest asOf
	}
	return 0
}
