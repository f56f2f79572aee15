package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// takeOver resumes the waiter an earlier attempt with the same request id
// enqueued: its key (mine, as read) keeps its create revision — its place
// and its fencing token — and this attempt becomes its owner.
//
// The value read is a claim until etcd confirms it. The caller must be the
// waiter's owner (its binding: authenticated subject, client id, session)
// or it is refused with ErrNotOwner, whatever request id it knows. Then one
// transaction writes the key again, comparing its create revision and mod
// revision with what was read: the write succeeds only on the exact value
// that was checked, and the new mod revision makes this attempt the owner.
// A session waiter's key moves onto this process's attempt lease, unless it
// already rides on the session lease (it holds); the session is proven in
// the same transaction.
func (e *Engine) takeOver(ctx context.Context, r *AcquireRequest, mine *mvccpb.KeyValue) (*enqueued, error) {
	meta, h, err := claim(r, mine)
	if err != nil {
		return nil, err
	}
	secret, n, key := h.Secret, r.effectiveLimit(), string(mine.Key)
	if have := max(meta.Limit, 1); have != n {
		// The key keeps the limit it was enqueued with.
		return nil, limitMismatch(r.Name, n, have)
	}
	// The takeover writes the value again with a nonce of its own, and
	// with what the retry asks for where a retry may ask anew: the value is
	// what every gateway's hub and grant read the lock's lock-delay and
	// re-entrancy from, so it must say what the grant will do.
	meta.Attempt = newAttempt()
	meta.Delay = r.LockDelay.Milliseconds()
	if meta.Session {
		meta.Reenter = reenterSeal(r, secret)
	}
	value := encodeValue(secret, meta)
	keyLease := h.Lease
	var att attemptRef
	var t txnParts
	t.compare(clientv3.Compare(clientv3.CreateRevision(key), "=", mine.CreateRevision),
		clientv3.Compare(clientv3.ModRevision(key), "=", mine.ModRevision))
	put := t.onThen(clientv3.Op{})
	firstN := t.onThen(clientv3.OpGet(e.keys.namePrefix(r.Name), withFirstN(n)...))
	var session slot
	var holdsRev int64 // the mod revision of the key's holds record as read (0: none)
	hkey := e.keys.holds(r.Name, h.WaiterID, mine.CreateRevision)
	if meta.Session {
		h.Lease = r.Session
		if keyLease != r.Session {
			if att, err = e.att.acquire(ctx); err != nil {
				return nil, err
			}
			keyLease = att.id
		}
		t.compare(ownerCmps(e.keys.session(r.Session), r.SessionSecret)...)
		session = t.onThen(clientv3.OpGet(e.keys.session(r.Session)))
		// A session lock re-entered keeps its holds in a record; once the
		// key's own hold is released there, the request id's lock is let go
		// and a retry of it must not be handed that hold again: the lock
		// lives on only for its other holds (reenter.go).
		hr, err := e.cli.Get(ctx, hkey)
		if err != nil {
			e.att.release(att)
			return nil, fmt.Errorf("queue: resume: %w", err)
		}
		rec := firstOf(hr.Kvs)
		if rec != nil && holdIndex(decodeHolds(rec), "") < 0 {
			e.att.release(att)
			return nil, fmt.Errorf("%w: the lock acquired under this request id was released; the session's other holds keep it: acquire re-entrant to add a hold, or use another request id", ErrReleased)
		}
		holdsRev = rec.GetModRevision()
		t.compare(clientv3.Compare(clientv3.ModRevision(hkey), "=", holdsRev))
	}
	t.then[put] = clientv3.OpPut(key, value, clientv3.WithLease(keyLease))
	// The key's records take the retry's lock-delay and nonce, while they
	// are this key's (delay.go, loss.go), and are read back: a key with a
	// record was granted, perhaps delivered by the attempt this one
	// replaces, and this attempt never gives it up (its end is the lease's).
	ttl, err := e.takeoverTTL(ctx, r, meta, mine)
	if err != nil {
		e.att.release(att)
		return nil, err
	}
	dkey, hrec := e.keys.delay(r.Name, h.WaiterID), e.keys.holderRecord(r.Name, h.WaiterID)
	delayRec, holderRec := t.onThen(clientv3.OpGet(dkey)), t.onThen(clientv3.OpGet(hrec))
	t.onThen(clientv3.OpTxn(recordOfCmps(dkey, mine.CreateRevision), []clientv3.Op{clientv3.OpPut(dkey, delayValue(mine.CreateRevision, r.LockDelay, ttl))}, nil))
	t.onThen(clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(hrec), "=", mine.CreateRevision)},
		[]clientv3.Op{clientv3.OpPut(hrec, holderRecordValue(r.LockDelay, ttl, meta.Attempt))}, nil))
	keyNow, holdsNow := t.onElse(clientv3.OpGet(key, clientv3.WithKeysOnly())), t.onElse(clientv3.OpGet(hkey, clientv3.WithKeysOnly()))
	e.at(ctx, pointTakeover)
	tctx, cancel := e.answered(ctx)
	defer cancel()
	resp, err := t.commit(tctx, e.cli)
	if err != nil {
		if att.id != 0 && errors.Is(err, rpctypes.ErrLeaseNotFound) {
			e.att.release(att)
			e.att.invalidate(att.id)
			return nil, errRaced
		}
		// It may have been applied and its answer lost: take back what it
		// wrote, by its exact value, unless the key was granted
		// (cleanup.go). The key's own lease is the waiter's, and it lapses
		// unrenewed.
		e.forgetTakeover(ctx, key, value, dkey, hrec, mine.CreateRevision, att)
		return nil, fmt.Errorf("queue: resume: %w: %w", errUnknownOutcome, err)
	}
	if !resp.Succeeded {
		e.att.release(att)
		if meta.Session {
			if kv := firstKV(keyNow.of(resp.Responses)); kv != nil && kv.ModRevision == mine.ModRevision && firstKV(holdsNow.of(resp.Responses)).GetModRevision() == holdsRev {
				// Neither the key nor its holds changed: the session compare failed.
				return nil, fmt.Errorf("%w: session %x is unknown, expired or not yours", ErrSessionLost, int64(r.Session))
			}
		}
		return nil, errRaced
	}
	q := &enqueued{h: h, att: att, modRev: resp.Header.Revision, value: value,
		ttl: time.Duration(meta.TTL) * time.Second, resumed: true, first: firstKV(firstN.of(resp.Responses)), ahead: -1, delays: true,
		holds: holdsIn(firstN.of(resp.Responses).GetResponseRange().GetKvs(), mine.CreateRevision, n)}
	if meta.Session {
		q.ttl = e.learnSessionRecord(r.Session, session.of(resp.Responses))
	}
	q.recorded = ownRecord(delayRec.of(resp.Responses), mine.CreateRevision) || ownRecord(holderRec.of(resp.Responses), mine.CreateRevision)
	q.keep = q.recorded || meta.Session && clientv3.LeaseID(mine.Lease) == r.Session
	return q, nil
}

// claim checks that r's caller owns mine, a waiter key of r's request id:
// the key's owner binding is r's, and the secret its record seals with
// the request id heads its value. It returns the record and the key's
// handle as read.
func claim(r *AcquireRequest, mine *mvccpb.KeyValue) (waiterMeta, Handle, error) {
	meta, err := decodeValue(mine.Value)
	if err != nil {
		return meta, Handle{}, err
	}
	if meta.Owner != r.binding() {
		return meta, Handle{}, fmt.Errorf("%w: the request id belongs to another caller's acquire; use a request id of your own", ErrNotOwner)
	}
	secret, err := unsealSecret(meta.Sealed, r.RequestID)
	if err != nil || !hasHeader(mine.Value, secret) {
		return meta, Handle{}, fmt.Errorf("%w: the waiter's record does not match its request id", ErrNotOwner)
	}
	return meta, Handle{Name: r.Name, WaiterID: WaiterID(r.RequestID), Lease: clientv3.LeaseID(mine.Lease),
		Revision: mine.CreateRevision, Epoch: meta.Epoch, Secret: secret, Session: meta.Session}, nil
}

// ownRecord reports whether r read a delay or holder record of the key
// created at rev.
func ownRecord(r *pb.ResponseOp, rev int64) bool {
	rec, ok := parseDelay(firstKV(r))
	return ok && rec.rev == rev
}

// takeoverTTL is the TTL a retry's records carry: the session's, or the
// one etcd granted the key's own lease (it may have raised the asked one).
func (e *Engine) takeoverTTL(ctx context.Context, r *AcquireRequest, meta waiterMeta, mine *mvccpb.KeyValue) (time.Duration, error) {
	if meta.Session {
		return e.knownSessionTTL(ctx, r.Session)
	}
	ttl := time.Duration(meta.TTL) * time.Second
	resp, err := e.cli.TimeToLive(ctx, clientv3.LeaseID(mine.Lease))
	if err != nil {
		return 0, fmt.Errorf("queue: resume: read the lease: %w", err)
	}
	return max(ttl, time.Duration(resp.GrantedTTL)*time.Second), nil
}

// Resume finds the waiter an earlier acquire with r.RequestID enqueued on
// this cluster, without enqueueing anything, and takes it over as Enqueue
// would. It returns nil and no error if there is none. The shard router
// uses it to let a client resume its place on the cluster a name is moving
// away from, and enqueues on the new cluster when there is none.
//
// r is validated only once there is a waiter to take over, before
// anything is written: a Resume that finds none leaves the request to the
// Enqueue that follows it, so that a request is validated once whichever
// way it goes.
func (e *Engine) Resume(ctx context.Context, r AcquireRequest) (*Waiter, error) {
	began := e.cfg.Clock.Now()
	key := e.keys.waiter(r.Name, WaiterID(r.RequestID))
	for try := 0; ; try++ {
		resp, err := e.cli.Get(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("queue: look up waiter: %w", err)
		}
		if len(resp.Kvs) == 0 {
			return nil, nil
		}
		if try == 0 {
			if _, err := r.validate(e.cfg); err != nil {
				return nil, err
			}
		}
		q, err := e.takeOver(ctx, &r, resp.Kvs[0])
		if errors.Is(err, errRaced) && try < 3 {
			continue
		}
		if err != nil {
			return nil, err
		}
		return &Waiter{e: e, r: r, q: q, began: began}, nil
	}
}
