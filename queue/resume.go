package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	_, meta, err := decodeValue(mine.Value)
	if err != nil {
		return nil, err
	}
	if meta.Owner != r.binding() {
		return nil, fmt.Errorf("%w: the request id belongs to another caller's acquire; use a request id of your own", ErrNotOwner)
	}
	secret, err := unsealSecret(meta.Sealed, r.RequestID)
	if err != nil || !hasHeader(mine.Value, secret) {
		return nil, fmt.Errorf("%w: the waiter's record does not match its request id", ErrNotOwner)
	}
	if have := max(meta.Limit, 1); have != r.effectiveLimit() {
		// The key keeps the limit it was enqueued with.
		return nil, limitMismatch(r.Name, r.effectiveLimit(), have)
	}
	n := r.effectiveLimit()
	prefix := e.keys.namePrefix(r.Name)
	key := string(mine.Key)
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
	h := Handle{
		Name: r.Name, WaiterID: WaiterID(r.RequestID), Lease: clientv3.LeaseID(mine.Lease),
		Revision: mine.CreateRevision, Epoch: meta.Epoch, Secret: secret, Session: meta.Session,
	}
	keyLease := h.Lease
	var att attemptRef
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(key), "=", mine.CreateRevision),
		clientv3.Compare(clientv3.ModRevision(key), "=", mine.ModRevision),
	}
	then := []clientv3.Op{{}, clientv3.OpGet(prefix, withFirstN(n)...)}
	if meta.Session {
		h.Lease = r.Session
		if keyLease != r.Session {
			if att, err = e.att.acquire(ctx); err != nil {
				return nil, err
			}
			keyLease = att.id
		}
		cmps = append(cmps, OwnerCmps(e.keys.session(r.Session), r.SessionSecret)...)
		then = append(then, clientv3.OpGet(e.keys.session(r.Session)))
	}
	then[0] = clientv3.OpPut(key, value, clientv3.WithLease(keyLease))
	if meta.Delay == 0 {
		// A lock-delay record an earlier attempt's grant wrote goes: the
		// lock asks for none now.
		then = append(then, e.lockDelayRecordOp(h))
	}
	recorded := -1 // the response index of the holder record's rewrite
	if e.cfg.LossWait {
		// A holder record (loss.go) takes the retry's lock-delay and nonce.
		ttl := time.Duration(meta.TTL) * time.Second
		if meta.Session {
			ttl = e.sessionTTL(r.Session)
		}
		hrec := e.keys.holderRecord(r.Name, h.WaiterID)
		recorded = len(then)
		then = append(then, clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(hrec), "=", mine.CreateRevision)},
			[]clientv3.Op{clientv3.OpPut(hrec, holderRecordValue(r.LockDelay, ttl, meta.Attempt))}, nil))
	}
	e.at(ctx, pointTakeover)
	resp, err := e.cli.Txn(ctx).If(cmps...).Then(then...).Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).Commit()
	if err != nil {
		e.att.release(att)
		if att.id != 0 && errors.Is(err, rpctypes.ErrLeaseNotFound) {
			e.att.invalidate(att.id)
			return nil, errRaced
		}
		return nil, fmt.Errorf("queue: resume: %w", err)
	}
	if !resp.Succeeded {
		e.att.release(att)
		if meta.Session {
			if kv := firstKV(resp.Responses[0]); kv != nil && kv.ModRevision == mine.ModRevision {
				// The key did not change: the session compare failed.
				return nil, fmt.Errorf("%w: session %x is unknown, expired or not yours", ErrSessionLost, int64(r.Session))
			}
		}
		return nil, errRaced
	}
	q := &enqueued{h: h, keyLease: keyLease, att: att, modRev: resp.Header.Revision, value: value,
		ttl: time.Duration(meta.TTL) * time.Second, resumed: true, first: firstKV(resp.Responses[1]), ahead: -1, limit: n, delays: true,
		holds: holdsIn(resp.Responses[1].GetResponseRange().GetKvs(), mine.CreateRevision, n)}
	if meta.Session {
		q.ttl = time.Duration(decodeSession(firstKV(resp.Responses[2]).GetValue()).TTL) * time.Second
		e.learnSessionTTL(r.Session, q.ttl)
	}
	if recorded >= 0 {
		q.recorded = resp.Responses[recorded].GetResponseTxn().GetSucceeded()
	}
	return q, nil
}

// Resume finds the waiter an earlier acquire with r.RequestID enqueued on
// this cluster, without enqueueing anything, and takes it over as Enqueue
// would. It returns nil and no error if there is none. The shard router
// uses it to let a client resume its place on the cluster a name is moving
// away from.
func (e *Engine) Resume(ctx context.Context, r AcquireRequest) (*Waiter, error) {
	exit := e.enter()
	began := e.cfg.Clock.Now()
	if _, err := r.validate(e.cfg); err != nil {
		exit()
		return nil, err
	}
	key := e.keys.waiter(r.Name, WaiterID(r.RequestID))
	for try := 0; ; try++ {
		resp, err := e.cli.Get(ctx, key)
		if err != nil {
			exit()
			return nil, fmt.Errorf("queue: look up waiter: %w", err)
		}
		if len(resp.Kvs) == 0 {
			exit()
			return nil, nil
		}
		q, err := e.takeOver(ctx, &r, resp.Kvs[0])
		if errors.Is(err, errRaced) && try < 3 {
			continue
		}
		if err != nil {
			exit()
			return nil, err
		}
		return &Waiter{e: e, r: r, q: q, began: began, exit: exit}, nil
	}
}
