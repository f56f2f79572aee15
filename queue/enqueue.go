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

// enqueueTxn runs the acquire transaction on lease (per-lock, of the TTL
// class ttlSec; leaseTTL is the TTL etcd granted it) or for the session. It
// returns the enqueued waiter, or the key of an earlier attempt with the
// same request id (mine) for the caller to take over.
//
// The transaction is its base (acquireTxn) and a part for each feature the
// request asks for, added in this order: TryAcquire's (onlyIfFree), the
// session's, the loss wait's holder record, the guards. A refused
// transaction is explained by the key it found (mine), else by the
// session, else by the name's first key (TryAcquire), else by the guards;
// an applied one is admitted by its limit and MaxKeys, or its key is taken
// back.
//
// keep, when set, is started right before the transaction is sent, so the
// keepalive of a pooled lease runs beside it.
func (e *Engine) enqueueTxn(ctx context.Context, r *AcquireRequest, lease clientv3.LeaseID, ttlSec int64, leaseTTL time.Duration, onlyIfFree bool, keep *besideKeep) (*enqueued, *mvccpb.KeyValue, error) {
	secret, err := NewSecret()
	if err != nil {
		return nil, nil, err
	}
	nonce := newAttempt()
	// The session's part reads the session's TTL and then takes an attempt
	// lease reference: every return between that reference and the
	// transaction must give the reference back.
	sess, err := e.sessionPart(ctx, r, leaseTTL)
	if err != nil {
		return nil, nil, err
	}
	t := e.acquireTxn(r, secret, nonce, ttlSec, lease)
	free := t.onlyIfFree(onlyIfFree)
	sess.add(t)
	rec := e.holderRecordPart(t, sess.ttl, nonce)
	t.compare(r.Guards...)

	e.at(ctx, pointEnqueue)
	keep.start(ctx)
	tctx, cancel := e.answered(ctx)
	resp, err := t.commit(tctx, e.cli)
	cancel()
	if err != nil {
		if lease != 0 && errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// Nothing was written: the per-lock lease is gone.
			return nil, nil, errLeaseGone
		}
		if sess.lapsed(err) {
			return nil, nil, errRaced
		}
		// The transaction may have been applied and its answer lost: take
		// back what this attempt may have written, by its exact value.
		e.forgetUnknown(ctx, t.key, t.value, rec.key, rec.value, lease, sess.att)
		return nil, nil, fmt.Errorf("queue: enqueue: %w: %w", errUnknownOutcome, err)
	}
	if !resp.Succeeded {
		e.att.release(sess.att)
		if mine := firstKV(t.put.of(resp.Responses)); mine != nil {
			return nil, mine, nil
		}
		if err := sess.refused(resp); err != nil {
			return nil, nil, err
		}
		if q, err := free.refused(resp); q != nil || err != nil {
			return q, nil, err
		}
		return nil, nil, fmt.Errorf("%w: the cluster refused the enqueue", ErrGuardFailed)
	}
	q := t.enqueued(resp)
	sess.enqueued(q, t, resp)
	q.recorded = rec.recorded(t, resp)
	if err := e.admit(ctx, r, q, t.n); err != nil {
		return nil, nil, err
	}
	return q, nil, nil
}

// acquireTxn is the acquire transaction's base. It compares that the
// waiter key is absent and puts it (put; the key as it is when it
// exists). When it puts the key it reads, as of the put, the name's first
// n keys by create revision (firstN; the first key for a lock) and the
// name's lock-delay records, whole: a record of a key among the first
// keys is a live holder's and withholds nothing, any other is pending
// (delay.go). Records are written for holders only, so they are few.
//
// The name's count, the waiter's place, is firstN's own: etcd answers a
// range in a transaction with the count of the whole range whatever its
// limit (executeTxn asks executeRange for the total count;
// TestTxnRangeCountIsTheWholePrefix), so it is the same range at the same
// revision as a count read of its own, and MaxKeys stays exact.
//
// A refused transaction reads only the key: an earlier attempt's key is a
// takeover, and every other refusal is explained by the part whose
// compare failed, from what that part reads in the Else branch. Slots of
// firstN and delays are the Then branch's. The parts add to it; the put
// is made last, from waiter as the parts left it.
type acquireTxn struct {
	txnParts
	r              *AcquireRequest
	h              Handle // the waiter, but for its revision and a session's lease
	n              int    // the limit r asks for
	prefix         string // the name's
	key, value     string
	empty          clientv3.Cmp // the name has no keys
	waiter         waiterPut
	put            slot // in both branches
	firstN, delays slot
	firstTxn       slot // the first-key transaction beside a single put (waiterPut); 0: none
}

func (e *Engine) acquireTxn(r *AcquireRequest, secret Secret, nonce string, ttlSec int64, lease clientv3.LeaseID) *acquireTxn {
	prefix := e.keys.namePrefix(r.Name)
	wid := WaiterID(r.RequestID)
	t := &acquireTxn{r: r, n: r.effectiveLimit(), prefix: prefix, key: prefix + wid,
		h:     Handle{Name: r.Name, WaiterID: wid, Lease: lease, Epoch: r.Epoch, Secret: secret, Session: r.Session != 0},
		empty: clientv3.Compare(clientv3.CreateRevision(prefix).WithPrefix(), "=", 0)}
	t.value = encodeValue(secret, waiterMeta{
		ClientID: r.ClientID,
		TTL:      ttlSec,
		Epoch:    r.Epoch,
		Session:  r.Session != 0,
		Sealed:   sealSecret(secret, r.RequestID),
		Owner:    r.binding(),
		Enqueued: e.cfg.Clock.Now().UnixMilli(),
		Attempt:  nonce,
		Value:    r.Value,
		Limit:    storedLimit(t.n),
		Reenter:  reenterSeal(r, secret),
		Delay:    r.LockDelay.Milliseconds(),
	})
	t.waiter = waiterPut{key: t.key, value: t.value, lease: lease, firstIf: []clientv3.Cmp{t.empty}, firstLease: lease}
	t.compare(clientv3.Compare(clientv3.CreateRevision(t.key), "=", 0))
	t.put = t.both(clientv3.Op{}, clientv3.OpGet(t.key))
	t.firstN = t.onThen(clientv3.OpGet(prefix, withFirstN(t.n)...))
	t.delays = t.onThen(clientv3.OpGet(e.keys.delayPrefix(r.Name), clientv3.WithPrefix()))
	return t
}

func (t *acquireTxn) commit(ctx context.Context, kv clientv3.KV) (*clientv3.TxnResponse, error) {
	put, firstTxn := t.waiter.ops()
	t.then[t.put] = put
	if firstTxn.IsTxn() {
		t.firstTxn = t.onThen(firstTxn)
	}
	return t.txnParts.commit(ctx, kv)
}

// first is the answers of waiter's firstOps, in their order, when the
// transaction found the key first in its name (waiterPut); ok is false
// otherwise.
func (t *acquireTxn) first(resp *clientv3.TxnResponse) (answers []*pb.ResponseOp, ok bool) {
	if t.firstTxn != 0 {
		nested := t.firstTxn.of(resp.Responses).GetResponseTxn()
		return nested.GetResponses(), nested.GetSucceeded()
	}
	if nested := t.put.of(resp.Responses).GetResponseTxn(); nested.GetSucceeded() {
		return nested.GetResponses()[1:], true // after the key's own put
	}
	return nil, false
}

// enqueued is the waiter the base's answers describe.
func (t *acquireTxn) enqueued(resp *clientv3.TxnResponse) *enqueued {
	rev := resp.Header.Revision
	firstN := t.firstN.of(resp.Responses).GetResponseRange()
	q := &enqueued{h: t.h, modRev: rev, value: t.value,
		first: firstOf(firstN.GetKvs()), holds: holdsIn(firstN.GetKvs(), rev, t.n),
		delays: anyPending(t.delays.of(resp.Responses).GetResponseRange().GetKvs(), among(firstN.GetKvs())),
		ahead:  firstN.GetCount() - 1}
	q.h.Revision = rev
	return q
}

// waiterPut is the put of a waiter key. A key that waits goes onto lease.
// A key the transaction finds first in its name (firstIf: the name has no
// keys, and what a part adds) is granted by the transaction itself, with
// no hub to see it go: it goes onto firstLease with firstOps beside it, as
// a nested transaction decides atomically, so an uncontested acquire stays
// one round trip. A put that would write nothing else for a first key
// (the same lease, nothing beside) is a plain put, and so is every put
// with firstIf nil (a part needs the key to wait first).
//
// A put whose first key goes onto the same lease but writes firstOps
// beside it is a single put too, with the nested transaction
// OpTxn(firstIf, firstOps, nil) beside it: its value reaches etcd (and
// the raft log) once, not in both branches. That decides the same: etcd
// evaluates the compares of a transaction and of every nested one on its
// taken path before any of its operations (txn.go: Txn runs compareToPath
// before executeTxn), so firstIf still means "the name had no key before
// this put".
type waiterPut struct {
	key, value string
	lease      clientv3.LeaseID
	firstIf    []clientv3.Cmp
	firstLease clientv3.LeaseID
	firstOps   []clientv3.Op
}

// ifFirst adds op to what a key first in its name writes, and returns its
// slot among firstOps' answers (acquireTxn.first).
func (p *waiterPut) ifFirst(op clientv3.Op) slot {
	p.firstOps = append(p.firstOps, op)
	return slot(len(p.firstOps) - 1)
}

// ops is the put, and the first-key transaction to send beside it when
// the put is a single one (the zero Op otherwise).
func (p *waiterPut) ops() (put, firstTxn clientv3.Op) {
	waits := clientv3.OpPut(p.key, p.value, clientv3.WithLease(p.lease))
	switch {
	case p.firstIf == nil || p.firstLease == p.lease && len(p.firstOps) == 0:
		return waits, clientv3.Op{}
	case p.firstLease == p.lease:
		return waits, clientv3.OpTxn(p.firstIf, p.firstOps, nil)
	}
	first := append([]clientv3.Op{clientv3.OpPut(p.key, p.value, clientv3.WithLease(p.firstLease))}, p.firstOps...)
	return clientv3.OpTxn(p.firstIf, first, []clientv3.Op{waits}), clientv3.Op{}
}

// freePart is TryAcquire's part: a lock's key is created only if the name
// has no key at all. A semaphore's TryAcquire puts its key and looks
// (TryAcquire): "fewer than N keys" is no compare etcd can make. A refusal
// is explained by the name's first n keys, read in the Else branch
// (firstN); no other refusal needs them. nil when the enqueue is not a
// TryAcquire's.
type freePart struct {
	t      *acquireTxn
	firstN slot
}

func (t *acquireTxn) onlyIfFree(on bool) *freePart {
	if !on {
		return nil
	}
	if t.n == 1 {
		t.compare(t.empty)
	}
	return &freePart{t: t, firstN: t.onElse(clientv3.OpGet(t.prefix, withFirstN(t.n)...))}
}

// refused explains a refusal by the name's first key: the holder to
// report (an enqueued without a key of its own), or a limit not the
// name's.
func (p *freePart) refused(resp *clientv3.TxnResponse) (*enqueued, error) {
	if p == nil {
		return nil, nil
	}
	first := firstKV(p.firstN.of(resp.Responses))
	if first == nil {
		return nil, nil
	}
	if have := limitOf(first.Value); have != p.t.n {
		return nil, limitMismatch(p.t.r.Name, p.t.n, have)
	}
	return &enqueued{first: first, ahead: -1}, nil
}

// sessionPart is a session waiter's part: the session record must carry
// the caller's secret. A refusal reads the record back (record, in the
// Else branch) to tell a lost session from the other refusals. An applied
// transaction reads nothing: its compares proved the record at its
// revision, and the TTL the record carries is ttl, which knownSessionTTL
// read before the transaction (the record is written once, at the
// session's open, with the lease's granted TTL, and before its id or
// secret reaches anyone: a record that carries the caller's secret at the
// transaction's revision was there for knownSessionTTL's linearizable
// read).
// The key rides on the attempt lease (att) until its grant, so that it
// dies with its attempt (attempt.go); only a key that is granted in the
// enqueue's own transaction goes straight onto the session lease, which
// its caller keeps alive for as long as the session lives. That is a key
// of a name with no keys at all and no lock-delay record (a pending delay
// would make it wait), and no BeforeGrant (a moved name's first waiter
// still waits for the previous cluster). Without a session the part adds
// nothing and holds no reference.
type sessionPart struct {
	e      *Engine
	r      *AcquireRequest
	ttl    time.Duration // the TTL a holder record carries: the session's, or the per-lock lease's
	att    attemptRef
	record slot
}

func (e *Engine) sessionPart(ctx context.Context, r *AcquireRequest, leaseTTL time.Duration) (sessionPart, error) {
	p := sessionPart{e: e, r: r, ttl: leaseTTL}
	if r.Session == 0 {
		return p, nil
	}
	var err error
	if p.ttl, err = e.knownSessionTTL(ctx, r.Session); err != nil {
		return p, err
	}
	p.att, err = e.att.acquire(ctx)
	return p, err
}

func (p *sessionPart) add(t *acquireTxn) {
	if p.r.Session == 0 {
		return
	}
	skey := p.e.keys.session(p.r.Session)
	t.compare(ownerCmps(skey, p.r.SessionSecret)...)
	p.record = t.onElse(clientv3.OpGet(skey))
	t.waiter.lease = p.att.id
	if p.r.BeforeGrant != nil {
		t.waiter.firstIf = nil
		return
	}
	t.waiter.firstLease = p.r.Session
	t.waiter.firstIf = append(t.waiter.firstIf, clientv3.Compare(clientv3.CreateRevision(p.e.keys.delayPrefix(p.r.Name)).WithPrefix(), "=", 0))
}

// lapsed reports whether err, the transaction's, says the attempt lease
// lapsed behind the engine's back: nothing was written, and the next try
// takes a new one.
func (p *sessionPart) lapsed(err error) bool {
	if p.att.id == 0 || !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return false
	}
	p.e.att.release(p.att)
	p.e.att.invalidate(p.att.id)
	return true
}

func (p *sessionPart) refused(resp *clientv3.TxnResponse) error {
	if p.r.Session == 0 {
		return nil
	}
	if s := firstKV(p.record.of(resp.Responses)); s == nil || !hasHeader(s.Value, p.r.SessionSecret) {
		return fmt.Errorf("%w: session %x is unknown, expired or not yours", ErrSessionLost, int64(p.r.Session))
	}
	return nil
}

// enqueued puts q on the session: on the session lease when the
// transaction granted it, the attempt lease (whose reference q keeps)
// otherwise.
func (p *sessionPart) enqueued(q *enqueued, t *acquireTxn, resp *clientv3.TxnResponse) {
	if p.r.Session == 0 {
		return
	}
	q.h.Lease = p.r.Session
	q.ttl = p.ttl
	if _, first := t.first(resp); first {
		p.e.att.release(p.att) // it went straight onto the session lease
	} else {
		q.att = p.att
	}
}

// holderRecordPart is the loss wait's part: a key first in its name is
// granted by its enqueue's transaction, without a hub to see it go, so
// with losses waiting its holder record goes in with it (loss.go) — only
// a record of no other key of this waiter id: one an earlier key left
// behind is that key's loss to wait out. key and value (empty without the
// loss wait) are the record's, for forgetUnknown to take back.
type holderRecordPart struct {
	key, value string
	put        slot // among the first key's answers (acquireTxn.first); -1: none
}

func (e *Engine) holderRecordPart(t *acquireTxn, ttl time.Duration, nonce string) holderRecordPart {
	p := holderRecordPart{key: e.keys.holderRecord(t.r.Name, t.h.WaiterID), put: -1}
	if e.cfg.LossWait {
		p.value = holderRecordValue(t.r.LockDelay, ttl, nonce)
		p.put = t.waiter.ifFirst(clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(p.key), "=", 0)},
			[]clientv3.Op{clientv3.OpPut(p.key, p.value)}, nil))
	}
	return p
}

// recorded reports whether the record went in.
func (p holderRecordPart) recorded(t *acquireTxn, resp *clientv3.TxnResponse) bool {
	first, ok := t.first(resp)
	return p.put >= 0 && ok && p.put.of(first).GetResponseTxn().GetSucceeded()
}

// admit takes back the key of an enqueue the name refuses: its limit n is
// not the name's, or the name had MaxKeys keys already.
func (e *Engine) admit(ctx context.Context, r *AcquireRequest, q *enqueued, n int) error {
	if have := limitOf(q.first.GetValue()); have != n {
		// The first key at the enqueue's revision carries the name's limit
		// (doc.go, "Semaphores"): one written with another is taken back.
		e.takeBack(ctx, q)
		return keyTakenBack{limitMismatch(r.Name, n, have)}
	}
	if r.MaxKeys > 0 && q.ahead+1 > int64(r.MaxKeys) {
		e.takeBack(ctx, q)
		return keyTakenBack{fmt.Errorf("%w: %q already has %d holders and waiters, the limit", ErrQueueFull, r.Name, r.MaxKeys)}
	}
	return nil
}

// keyTakenBack is the error of an enqueue that put its key and then took
// it back (removeWaiter): the key's per-lock lease is being revoked and
// must never go back to the pool (enqueueOn).
type keyTakenBack struct{ error }

func (k keyTakenBack) Unwrap() error { return k.error }
