package queue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Force-release and its audit trail.
//
// ForceRelease reads the name's first key (the holder) and deletes it in a
// transaction that compares the key's create revision with the one read:
// the key is still the same incarnation, and since no key can be created
// with a lower create revision later, still the first — still the holder
// the call read. A key released, expired or re-created under the same
// request id in between fails the compare, and nothing is deleted: the
// call never evicts a holder it did not read. The same transaction writes
// the audit record and drops records past the age bound, so an eviction
// without its record, or a record without its eviction, cannot exist.
//
// Audit records live at <prefix>/audit/<id>, where the id is the time in
// Unix nanoseconds (20 digits) and a random suffix, so key order is time
// order. Retention is per key space (tenant) and shard: at most
// AuditRetention.MaxRecords records (the oldest beyond are deleted after
// the write that passed the bound) and none older than MaxAge (deleted by
// the next force-release's transaction). Both are enforced only when a
// record is written: no background task runs.

// Default audit retention.
const (
	DefaultAuditMaxRecords = 1000
	DefaultAuditMaxAge     = 90 * 24 * time.Hour
)

// ActionForceRelease is the audit action of ForceRelease.
const ActionForceRelease = "force_release"

// AuditRetention bounds the audit records kept in one key space.
type AuditRetention struct {
	// MaxRecords is the most records kept; 0 means DefaultAuditMaxRecords.
	MaxRecords int
	// MaxAge is how long a record is kept; 0 means DefaultAuditMaxAge.
	MaxAge time.Duration
}

func (r AuditRetention) withDefaults() AuditRetention {
	if r.MaxRecords <= 0 {
		r.MaxRecords = DefaultAuditMaxRecords
	}
	if r.MaxAge <= 0 {
		r.MaxAge = DefaultAuditMaxAge
	}
	return r
}

// ForceReleaseRequest asks to evict a name's holder.
type ForceReleaseRequest struct {
	// Name is the lock name.
	Name string
	// Reason is recorded; required.
	Reason string
	// Actor is who asks, as authenticated; recorded.
	Actor string
	// Token, when non-zero, picks the holder to evict by its fencing
	// token — any holder of a semaphore — and must be a holder's
	// (ErrHolderChanged otherwise). Zero evicts the first holder.
	Token int64
	// Retention bounds the audit records.
	Retention AuditRetention
}

// ForceReleaseResult is what ForceRelease did.
type ForceReleaseResult struct {
	// Released is false when the name was free.
	Released bool
	// Evicted is the holder that was evicted.
	Evicted QueueEntry
	// Record is the audit record written with the eviction.
	Record AuditRecord
}

// AuditRecord is one administrative action, as stored.
type AuditRecord struct {
	// ID orders records by time within a key space and shard.
	ID string `json:"id"`
	// Action is ActionForceRelease.
	Action string `json:"action"`
	// Name is the lock acted on.
	Name string `json:"name"`
	// Actor is who acted.
	Actor string `json:"actor"`
	// Reason is why.
	Reason string `json:"reason"`
	// At is when, on the acting gateway's clock.
	At time.Time `json:"at"`
	// EvictedToken is the evicted holder's fencing token.
	EvictedToken int64 `json:"token"`
	// EvictedClientID is the evicted holder's client id.
	EvictedClientID string `json:"client"`
	// Key is the evicted key relative to the locks prefix ("segment/
	// waiter"), which the watch matches with the key's delete. The gateway
	// does not send it (it is not secret, but it is no caller's business).
	Key string `json:"key"`
}

// MaxReasonBytes is the longest force-release reason.
const MaxReasonBytes = 512

func (k keys) auditPrefix() string { return k.prefix + auditSeg }

// auditID is the record id for time t: key order is time order.
func auditID(t time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%020d-%s", t.UnixNano(), hex.EncodeToString(b[:]))
}

// validateReason checks a force-release reason: 1 to MaxReasonBytes of
// printable UTF-8 (firstUnprintable), like a name.
func validateReason(r string) error {
	if r == "" || len(r) > MaxReasonBytes {
		return fmt.Errorf("%w: reason: want 1 to %d bytes, got %d", ErrInvalidArgument, MaxReasonBytes, len(r))
	}
	if i, c := firstUnprintable(r); i >= 0 {
		return fmt.Errorf("%w: reason has a control or non-printable character %U at byte %d; allowed: printable UTF-8 and plain spaces", ErrInvalidArgument, c, i)
	}
	return nil
}

// ForceRelease evicts name's current holder (see the comment above): the
// next waiter is granted with a higher token, and the evicted holder's
// renew and release fail. A name found free is Released == false and
// records nothing. A holder that changed between the read and the delete,
// or whose token is not r.Token, is ErrHolderChanged.
func (e *Engine) ForceRelease(ctx context.Context, r ForceReleaseRequest) (ForceReleaseResult, error) {
	if err := ValidateName(r.Name); err != nil {
		return ForceReleaseResult{}, err
	}
	if err := validateReason(r.Reason); err != nil {
		return ForceReleaseResult{}, err
	}
	ret := r.Retention.withDefaults()
	prefix := e.keys.namePrefix(r.Name)
	kv, err := e.forceTarget(ctx, prefix, r.Token)
	if err != nil || kv == nil {
		return ForceReleaseResult{}, err
	}
	if _, err := decodeValue(kv.Value); err != nil {
		return ForceReleaseResult{}, err
	}
	held := entryOf(kv)
	if r.Token != 0 && held.Token != r.Token {
		return ForceReleaseResult{}, fmt.Errorf("%w: the holder's fencing token is %d, not %d", ErrHolderChanged, held.Token, r.Token)
	}
	key := string(kv.Key)
	now := e.cfg.Clock.Now()
	rec := AuditRecord{
		ID: auditID(now), Action: ActionForceRelease, Name: r.Name, Actor: r.Actor, Reason: r.Reason,
		At: now, EvictedToken: held.Token, EvictedClientID: held.ClientID,
		Key: e.keys.rel(key),
	}
	val, _ := json.Marshal(rec)
	ap := e.keys.auditPrefix()
	records, recLease, err := e.evictedRecordsOp(ctx, r.Name, kv, now)
	if err != nil {
		return ForceReleaseResult{}, err
	}
	e.at(ctx, pointForce)
	txn, err := e.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(key), "=", kv.CreateRevision),
	).Then(
		clientv3.OpDelete(key, clientv3.WithPrevKV()),
		// A re-entered lock's holds go with it (reenter.go).
		clientv3.OpDelete(e.keys.holdsOf(r.Name, waiterIDOf(kv)), clientv3.WithPrefix()),
		clientv3.OpPut(ap+rec.ID, string(val)),
		e.endMark(markForce, key),
		clientv3.OpDelete(ap, clientv3.WithRange(ap+auditID(now.Add(-ret.MaxAge))[:20])),
		clientv3.OpGet(ap, clientv3.WithPrefix(), clientv3.WithCountOnly()),
		// An eviction is no loss to wait out, but the holder's lock-delay
		// holds from now (delay.go, loss.go).
		records,
	).Commit()
	if err != nil {
		return ForceReleaseResult{}, fmt.Errorf("queue: force release: %w", err)
	}
	if !txn.Succeeded {
		if recLease != 0 {
			e.revokeLater(ctx, recLease)
		}
		return ForceReleaseResult{}, fmt.Errorf("%w: the holder (token %d) left before it could be evicted; nothing was evicted", ErrHolderChanged, held.Token)
	}
	e.revokeOwnLease(ctx, deletedKV(txn))
	if n := txn.Responses[5].GetResponseRange().Count; n > int64(ret.MaxRecords) {
		e.trimAudit(ctx, n-int64(ret.MaxRecords))
	}
	return ForceReleaseResult{Released: true, Evicted: held, Record: rec}, nil
}

// evictedRecordsOp replaces the delay and holder records of kv, a key
// being evicted at now, with its lock-delay stamped from now, or deletes
// them when it asked for none. The stamped record rides on a lease of its
// own, granted here, that outlives the delay (putStamped), so that it goes
// by itself when nobody looks at the name again; lease is 0 when none was
// granted.
func (e *Engine) evictedRecordsOp(ctx context.Context, name string, kv *mvccpb.KeyValue, now time.Time) (op clientv3.Op, lease clientv3.LeaseID, err error) {
	h := Handle{Name: name, WaiterID: waiterIDOf(kv), Revision: kv.CreateRevision}
	meta, _ := decodeValue(kv.Value)
	if meta.Delay <= 0 {
		return clientv3.OpTxn(nil, e.releaseDelayOps(h), nil), 0, nil // one slot of the force-release's transaction
	}
	d := time.Duration(meta.Delay) * time.Millisecond
	g, err := e.cli.Grant(ctx, e.stampedLeaseTTL(d))
	if err != nil {
		return clientv3.Op{}, 0, fmt.Errorf("queue: force release: grant the lock-delay's lease: %w", err)
	}
	hrec := e.keys.holderRecord(name, h.WaiterID)
	return clientv3.OpTxn(nil, []clientv3.Op{
		clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(hrec), "=", kv.CreateRevision)},
			[]clientv3.Op{clientv3.OpDelete(hrec)}, nil),
		clientv3.OpPut(e.keys.delay(name, h.WaiterID), stampedValue(kv.CreateRevision, d, now, e.id), clientv3.WithLease(g.ID)),
	}, nil), g.ID, nil
}

// trimAudit deletes the n oldest audit records, best effort: a failure
// leaves them to the next force-release.
func (e *Engine) trimAudit(ctx context.Context, n int64) {
	ap := e.keys.auditPrefix()
	resp, err := e.cli.Get(ctx, ap, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend), clientv3.WithLimit(n))
	if err != nil || len(resp.Kvs) == 0 {
		return
	}
	last := string(resp.Kvs[len(resp.Kvs)-1].Key)
	_, _ = e.cli.Delete(ctx, ap, clientv3.WithRange(last+"\x00"))
}

// ListAudit reads up to limit audit records, newest first, with ids below
// before ("" for the newest).
func (e *Engine) ListAudit(ctx context.Context, before string, limit int) (recs []AuditRecord, more bool, err error) {
	if limit <= 0 {
		return nil, false, fmt.Errorf("%w: audit limit %d must be positive", ErrInvalidArgument, limit)
	}
	ap := e.keys.auditPrefix()
	end := clientv3.GetPrefixRangeEnd(ap)
	if before != "" {
		end = ap + before
	}
	resp, err := e.cli.Get(ctx, ap, clientv3.WithRange(end),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(int64(limit)))
	if err != nil {
		return nil, false, fmt.Errorf("queue: list audit: %w", err)
	}
	for _, kv := range resp.Kvs {
		var rec AuditRecord
		if json.Unmarshal(kv.Value, &rec) != nil {
			continue
		}
		recs = append(recs, rec)
	}
	return recs, resp.More, nil
}

// forceTarget reads the key a force-release evicts: the first key of the
// name (which holds by the grant rule: no key is ahead of it), or, given a
// token, the key whose create revision the token carries — one of a
// semaphore's holders — provided it holds by the grant rule (holders) at
// the revision read. Keys created later cannot get ahead of it, so a
// holder found here holds until its key goes, which the delete's compare
// of its create revision checks. It returns nil for a free name.
func (e *Engine) forceTarget(ctx context.Context, prefix string, token int64) (*mvccpb.KeyValue, error) {
	if token == 0 {
		resp, err := e.cli.Get(ctx, prefix, clientv3.WithFirstCreate()...)
		if err != nil {
			return nil, fmt.Errorf("queue: force release: %w", err)
		}
		return firstOf(resp.Kvs), nil
	}
	_, rev, err := SplitToken(token)
	if err != nil || rev <= 0 {
		return nil, fmt.Errorf("%w: fencing token %d names no key", ErrHolderChanged, token)
	}
	resp, err := e.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithMinCreateRev(rev), clientv3.WithMaxCreateRev(rev))
	if err != nil {
		return nil, fmt.Errorf("queue: force release: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("%w: no key of the name has fencing token %d", ErrHolderChanged, token)
	}
	kv := resp.Kvs[0]
	// A holder is among the first N keys, N its limit; their values say
	// whether it holds (a key of another limit ahead withholds it).
	first, err := e.cli.Get(ctx, prefix, append(withFirstN(max(limitOf(kv.Value), 1)), clientv3.WithRev(resp.Header.Revision))...)
	if err != nil {
		return nil, fmt.Errorf("queue: force release: %w", err)
	}
	if !slices.ContainsFunc(heldKVs(first.Kvs), func(h *mvccpb.KeyValue) bool { return h.CreateRevision == rev }) {
		return nil, fmt.Errorf("%w: fencing token %d is a waiter's, not a holder's", ErrHolderChanged, token)
	}
	return kv, nil
}
