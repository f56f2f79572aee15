package queue

import (
	"context"
	"fmt"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Unclean losses.
//
// A holder believes it holds until its conservative deadline: the send
// time of the request that last confirmed its lease, plus the TTL. etcd
// frees the name when the lease expires, which is later than that deadline
// — unless etcd revokes a lease early. One etcd leader that was stalled
// past an election and resumes still revokes, by its own stale clock,
// leases the new leader has renewed since (docs/safety.md, "What etcd does
// underneath"): the key goes while its holder, renewed moments ago, rightly
// believes it holds for up to a TTL more. Fencing tokens keep its writes
// out, but two clients would believe at once.
//
// So, with Config.LossWait (the default), a holder key that goes without a
// clean end is not taken to free the name at once: nobody is granted the
// name until the lost holder's belief has certainly ended, its TTL after
// the loss was first seen. Its last confirmation was sent before the key
// went, so its deadline is at most a TTL after; a holder whose lease
// really expired had passed its deadline already, and for it the wait is
// the price of not knowing which of the two happened.
//
// A clean end is one the engine made, each marked in its own transaction
// by the release mark (handoff.go) naming the key: a release (the key
// itself), an undelivered grant given up or an attempt's cleanup ("~"
// and the key) and a force-release ("!" and the key, whose lock-delay
// alone applies: an administrator evicting a live holder means it). A
// session closed by its owner deletes its record before it revokes the
// lease, so a session key that goes after its session's record went is a
// clean end too. Everything else — the lease expired or was revoked — is
// unclean.
//
// The wait is a lock-delay record (delay.go) written by the first gateway
// that sees the loss, stamped with that moment, with the TTL as its delay
// (or the holder's lock-delay, when longer): every gateway, waiter and
// TryAcquire honours it from there. A gateway sees a loss in the name hub
// of a waiter that the loss makes first (grantFirst), so a queue's
// handoffs are covered; so is a holder with a lock-delay, whose record was
// written at its grant and which its granting gateway watches. An
// uncontested holder lost while nobody waits leaves nothing behind: a
// TryAcquire that finds the name free at once takes it, and the lost
// holder learns at its next renewal (docs/safety.md states the window).

// Holder records. A key granted by its own enqueue transaction — the first
// in its name — has no hub to see it go. With losses waiting, that
// transaction also writes the key's holder record, <prefix>/delays/<escaped
// name>/<waiter id>.h, created in the same revision as the key (so its
// create revision is the key's, its identity), with the key's lock-delay,
// TTL and attempt nonce: "0 <d ms> 0 <ttl ms> <nonce>". It is a lock-delay
// record like any other (delay.go): every clean end deletes it in its own
// transaction, and one whose key is gone makes every later acquire wait,
// from its first sighting, for the longer of the delay and the TTL. A key
// granted after a wait is watched instead by its granting engine's hub
// until it goes (watchExpiry), which records the loss if it was unclean.
//
// A session's TTL is not in the transaction that writes the record: the
// engine remembers the TTLs of the sessions it has seen, and reads a
// session's record once before the first acquire it makes in it.

// sessionTTLs bounds the session TTLs an engine remembers.
const sessionTTLs = 1 << 16

func (k keys) holderRecord(name, waiterID string) string {
	return k.delayPrefix(name) + waiterID + ".h"
}

// holderRecordValue is a holder record's value.
func holderRecordValue(d, ttl time.Duration, nonce string) string {
	return fmt.Sprintf("0 %d 0 %d %s", d.Milliseconds(), ttl.Milliseconds(), nonce)
}

// sessionRef names a session by its space and lease: a TTL learned from
// one space's record is never taken for another space's session.
type sessionRef struct {
	space string
	lease clientv3.LeaseID
}

// sessionTTL is lease's TTL as last seen in e's space, 0 when unknown.
func (e *Engine) sessionTTL(lease clientv3.LeaseID) time.Duration {
	ttl, _ := e.sessTTLs.Get(sessionRef{e.keys.prefix, lease})
	return ttl
}

func (e *Engine) learnSessionTTL(lease clientv3.LeaseID, ttl time.Duration) {
	if ttl > 0 {
		e.sessTTLs.Add(sessionRef{e.keys.prefix, lease}, ttl)
	}
}

// sessionRecordTTL is the TTL of the session record op read; 0 when
// there was none.
func sessionRecordTTL(op *pb.ResponseOp) time.Duration { return sessionTTLOf(firstKV(op)) }

// sessionTTLOf is the TTL session record kv records; 0 for nil.
func sessionTTLOf(kv *mvccpb.KeyValue) time.Duration {
	return time.Duration(decodeSession(kv.GetValue()).TTL) * time.Second
}

// learnSessionRecord is sessionRecordTTL, learnt as lease's.
func (e *Engine) learnSessionRecord(lease clientv3.LeaseID, op *pb.ResponseOp) time.Duration {
	ttl := sessionRecordTTL(op)
	e.learnSessionTTL(lease, ttl)
	return ttl
}

// knownSessionTTL is lease's TTL, read from its session record the first
// time this engine meets the session: a holder record written without it
// would make its loss wait nothing. A session whose record is gone has no
// TTL to give (0): its acquire fails on the record anyway.
func (e *Engine) knownSessionTTL(ctx context.Context, lease clientv3.LeaseID) (time.Duration, error) {
	if ttl := e.sessionTTL(lease); ttl > 0 {
		return ttl, nil
	}
	e.at(ctx, pointSessionRead)
	resp, err := e.cli.Get(ctx, e.keys.session(lease))
	if err != nil {
		return 0, fmt.Errorf("queue: read the session: %w", err)
	}
	ttl := sessionTTLOf(firstOf(resp.Kvs))
	e.learnSessionTTL(lease, ttl)
	return ttl, nil
}

// lossKind is how a holder key ended.
type lossKind int

const (
	lossClean   lossKind = iota // released, given up or cleaned up by its attempt
	lossEvicted                 // force-released
	lossUnclean                 // its lease expired or was revoked
)

// Release mark prefixes of the ends other than a release (handoff.go).
const (
	markGiveUp = "~"
	markForce  = "!"
)

// lossWait is the wait an unclean loss imposes: the longer of a holder's
// lock-delay d and its TTL, or d alone when losses do not wait.
func (e *Engine) lossWait(d, ttl time.Duration) time.Duration {
	if e.cfg.LossWait {
		return max(d, ttl)
	}
	return d
}

// classifyLoss says how h's key, key, ended at revision rev.
func (e *Engine) classifyLoss(ctx context.Context, key string, rev int64, h Handle) (lossKind, error) {
	ops := []clientv3.Op{clientv3.OpGet(e.keys.mark(), clientv3.WithRev(rev))}
	if h.Session {
		ops = append(ops, clientv3.OpGet(e.keys.session(h.Lease), clientv3.WithRev(rev-1)))
	}
	resp, err := e.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return lossUnclean, fmt.Errorf("queue: read how a holder ended: %w", err)
	}
	rel := e.keys.rel(key)
	if m := firstKV(resp.Responses[0]); m != nil && m.ModRevision == rev {
		switch string(m.Value) {
		case rel, markGiveUp + rel:
			return lossClean, nil
		case markForce + rel:
			return lossEvicted, nil
		}
	}
	if h.Session && firstKV(resp.Responses[1]) == nil {
		return lossClean, nil // its owner closed the session first
	}
	return lossUnclean, nil
}

// deletionRev finds the revision that deleted key, created at create, in
// etcd's history, and the key as it was just before. A compaction since
// the key's creation keeps both as long as it came before the deletion:
// the key's value lives at the compaction's revision, and the deletion
// after it, so the search goes on from there (an operator compacts every
// few minutes, and a lock may be held longer). Only a deletion compacted
// away leaves an error.
func (e *Engine) deletionRev(ctx context.Context, key string, create int64) (int64, *mvccpb.KeyValue, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.RequestTimeout)
	defer cancel()
	from := create + 1
	for try := 0; ; try++ {
		rev, prev, compacted, err := e.watchDeletion(ctx, key, create, from)
		if compacted == 0 || try == 2 {
			return rev, prev, err
		}
		resp, gerr := e.cli.Get(ctx, key, clientv3.WithRev(compacted))
		if gerr != nil {
			return 0, nil, fmt.Errorf("queue: read a holder key at the compaction: %w", gerr)
		}
		if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != create {
			return 0, nil, fmt.Errorf("queue: the deletion of a holder key was compacted away: %w", err)
		}
		from = compacted + 1
	}
}

// watchDeletion watches key, created at create, from revision from for
// its deletion. It reports the compaction's revision when etcd compacted
// past from. A write or deletion of another incarnation of key before the
// key's own deletion says the key created at create was never there (a
// handle of another key space names the same path): it ends the watch at
// once, with an error.
func (e *Engine) watchDeletion(ctx context.Context, key string, create, from int64) (rev int64, prev *mvccpb.KeyValue, compacted int64, err error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for wr := range e.cli.Watch(clientv3.WithRequireLeader(wctx), key, clientv3.WithRev(from), clientv3.WithPrevKV()) {
		if err := wr.Err(); err != nil {
			return 0, nil, wr.CompactRevision, err
		}
		for _, ev := range wr.Events {
			switch {
			case ev.Type == mvccpb.DELETE && (ev.PrevKv == nil || ev.PrevKv.CreateRevision == create):
				return ev.Kv.ModRevision, ev.PrevKv, 0, nil
			case ev.Type == mvccpb.DELETE, ev.Kv.CreateRevision != create:
				return 0, nil, 0, fmt.Errorf("queue: the holder key created at %d was not there at %d", create, ev.Kv.ModRevision)
			}
		}
	}
	return 0, nil, 0, fmt.Errorf("queue: no deletion of a holder key found: %w", context.Cause(ctx))
}

// observeLoss stamps, with the moment a hub saw g's key go (g.at), the
// delay and holder records g's key left behind: a clean end took them
// with the key (a force-release left its lock-delay stamped already), so a
// record still there is an expiry or a loss, waited out from now. A
// failure leaves the record to the next look (an acquire, the sweep).
func (e *Engine) observeLoss(ctx context.Context, delays string, g expiry) {
	wid := g.key[strings.LastIndexByte(g.key, '/')+1:]
	resp, err := e.cli.Txn(ctx).Then(clientv3.OpGet(delays+wid), clientv3.OpGet(delays+wid+".h")).Commit()
	if err != nil {
		return
	}
	for _, r := range resp.Responses {
		if rec, ok := parseDelay(firstKV(r)); ok && rec.rev == g.create && rec.expired.IsZero() {
			rec.d = e.lossWait(rec.d, rec.ttl)
			if _, _, err := e.stampDelay(ctx, rec, g.at); err != nil {
				return
			}
		}
	}
}
