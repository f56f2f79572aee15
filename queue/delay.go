package queue

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	leasegatev1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// Lock-delay (Chubby, Consul).
//
// A holder that asked for a lock-delay d and whose lease expires — not a
// clean release — keeps the name from being granted to anyone until
// expiry + d: a holder cut off from its gateway gets time to notice before
// the next one starts. etcd's watch cannot tell a release from an expiry
// (both are a DELETE), and a gateway that sees the expiry may crash before
// it tells anyone, so the fact is in etcd before it is needed:
//
//  1. At the grant, before it is answered, the holder writes a delay
//     record <prefix>/delays/<escaped name>/<waiter id> = "<create
//     revision> <d in ms>", with no lease, in a transaction comparing its
//     key's create and mod revision. A gateway that dies before the write
//     never answered the grant: that holder never acted.
//  2. A clean release deletes the record in the release transaction (a
//     nested transaction comparing the record's create-revision prefix),
//     so it frees at once.
//  3. The first gateway to see a record whose holder key is gone — an
//     expiry — stamps it with the moment it saw that, on its clock, in a
//     transaction comparing the record's mod revision: "<rev> <d> <ms>".
//     The moment is after the expiry, whoever sees it and however late,
//     and the delay ends d after the stamp for every caller alike: a
//     waiter waits it out, a TryAcquire is refused until then and granted
//     after it, and Describe reports it. Once it has passed, whoever looks
//     next deletes the records it has outlived, comparing their mod
//     revision, and looks again.
//  4. So that the stamp is the expiry itself and not a later first look,
//     the gateway that granted a holder with a lock-delay watches the
//     holder's key (its name's hub) until the key goes, and stamps at once
//     when it goes without its record (the granting gateway down, the next
//     to look stamps; the delay then counts from that look).
//
// Stamps are read across gateways, so the delay's end is measured on the
// stamping gateway's clock: gateways' clocks are assumed to agree within a
// small skew, which the delay (a courtesy to holders without fencing, on
// top of the fencing tokens that protect the data) absorbs.
//
// Looking costs a read, paid only where a record may exist: an enqueue
// counts the name's records in its own transaction, and a hub notes
// records present when it reads its view and every deletion of a key
// whose value asked for a delay.

// MaxLockDelay is the longest lock-delay an acquire may ask for.
const MaxLockDelay = leasegatev1.MaxLockDelayMs * time.Millisecond

func validateLockDelay(d time.Duration) error {
	if d < 0 || d > MaxLockDelay {
		return fmt.Errorf("%w: lock delay %s is outside 0 to %s", ErrInvalidArgument, d, MaxLockDelay)
	}
	return nil
}

func (k keys) delayPrefix(name string) string { return k.delays() + escapeName(name) + "/" }

func (k keys) delay(name, waiterID string) string { return k.delayPrefix(name) + waiterID }

// A delay record's value is "<create revision> <d ms>", then, once a
// gateway saw its holder gone, " <stamp ms>"; a record written at a grant
// also carries the holder's TTL, " <stamp ms or 0> <ttl ms>", which an
// unclean loss adds to the wait (loss.go). A stamped record's d is final.

// delayValue is a delay record's value for the holder key created at rev,
// with the holder's lease TTL.
func delayValue(rev int64, d, ttl time.Duration) string {
	return fmt.Sprintf("%d %d 0 %d", rev, d.Milliseconds(), ttl.Milliseconds())
}

// stampedValue is a stamped delay record's value, stamped at at by the
// engine with id stamper.
func stampedValue(rev int64, d time.Duration, at time.Time, stamper string) string {
	return fmt.Sprintf("%d %d %d 0 %s", rev, d.Milliseconds(), at.UnixMilli(), stamper)
}

// delayRecord is a decoded delay record.
type delayRecord struct {
	kv  *mvccpb.KeyValue
	rev int64         // the holder key's create revision
	d   time.Duration // the delay
	ttl time.Duration // the holder's TTL, while unstamped; 0 when unknown
	// expired is the stamp: when a gateway first saw the holder key gone;
	// zero while unstamped.
	expired time.Time
	// stamper is the id of the engine that stamped it.
	stamper string
}

// endFor is when the delay ends for engine e; zero while unstamped. A
// stamp another engine made was read off its clock: e adds
// Config.MaxClockSkew, which bounds how far the gateways' clocks may
// disagree, so that no gateway grants before the stamper would.
func (r delayRecord) endFor(e *Engine) time.Time {
	if r.expired.IsZero() {
		return time.Time{}
	}
	end := r.expired.Add(r.d)
	if r.stamper != e.id {
		end = end.Add(e.cfg.MaxClockSkew)
	}
	return end
}

// parseDelay reads a delay record; none (nil) is no record. A holder
// record (loss.go) names no revision: its own create revision is its key's.
func parseDelay(kv *mvccpb.KeyValue) (delayRecord, bool) {
	f := strings.Fields(string(kv.GetValue()))
	if len(f) < 2 || len(f) > 5 {
		return delayRecord{}, false
	}
	var n [4]int64
	for i, v := range f[:min(len(f), 4)] {
		x, err := strconv.ParseInt(v, 10, 64)
		if err != nil || x < 0 && i > 0 {
			return delayRecord{}, false
		}
		n[i] = x
	}
	rec := delayRecord{kv: kv, rev: n[0], d: time.Duration(n[1]) * time.Millisecond, ttl: time.Duration(n[3]) * time.Millisecond}
	if rec.rev == 0 {
		rec.rev = kv.CreateRevision
	}
	if n[2] > 0 {
		rec.expired, rec.ttl = time.UnixMilli(n[2]), 0
		if len(f) == 5 {
			rec.stamper = f[4]
		}
	}
	return rec, true
}

// anyPending reports whether any of recs, a name's delay and holder
// records, cannot be read or is of a key live does not know (by its
// create revision): a loss or a lock-delay that may withhold a grant.
func anyPending(recs []*mvccpb.KeyValue, live func(rev int64) bool) bool {
	for _, kv := range recs {
		if rec, ok := parseDelay(kv); !ok || !live(rec.rev) {
			return true
		}
	}
	return false
}

// among is live for anyPending: whether one of kvs was created at rev.
func among(kvs []*mvccpb.KeyValue) func(rev int64) bool {
	return func(rev int64) bool {
		return slices.ContainsFunc(kvs, func(kv *mvccpb.KeyValue) bool { return kv.CreateRevision == rev })
	}
}

// releaseDelayOps delete h's delay and holder records (loss.go), each if
// it is h's, in a clean end of h's key: two nested transactions that go
// beside the key's delete in the same branch. Each decides by its own
// compares, which etcd evaluates before any operation of the transaction
// runs, so their place among the branch's operations changes nothing.
func (e *Engine) releaseDelayOps(h Handle) []clientv3.Op {
	dkey, hrec := e.keys.delay(h.Name, h.WaiterID), e.keys.holderRecord(h.Name, h.WaiterID)
	return []clientv3.Op{
		clientv3.OpTxn(recordOfCmps(dkey, h.Revision), []clientv3.Op{clientv3.OpDelete(dkey)}, nil),
		clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(hrec), "=", h.Revision)},
			[]clientv3.Op{clientv3.OpDelete(hrec)}, nil),
	}
}

// recordOfCmps are the compares that the delay record dkey is the one of
// the key created at rev: its value begins "<rev> " (a value compare on an
// absent key fails).
func recordOfCmps(dkey string, rev int64) []clientv3.Cmp {
	own := strconv.FormatInt(rev, 10) + " "
	return []clientv3.Cmp{clientv3.Compare(clientv3.Value(dkey), ">", own), clientv3.Compare(clientv3.Value(dkey), "<", own+"\xff")}
}

// pendingDelays reads name's delay records whose holder key is gone, as
// of now.
func (e *Engine) pendingDelays(ctx context.Context, name string) ([]delayRecord, error) {
	kvs, live, err := e.delaysNow(ctx, e.keys.delayPrefix(name), e.keys.namePrefix(name))
	if err != nil {
		return nil, err
	}
	var out []delayRecord
	for _, kv := range kvs {
		rec, ok := parseDelay(kv)
		if ok && live[rec.rev] {
			continue // its holder lives: nothing has expired
		}
		if !ok {
			// Unreadable: a delay of its own length from whenever it is
			// seen, so that it too ends.
			rec = delayRecord{kv: kv}
		}
		out = append(out, rec)
	}
	return out, nil
}

// delaysNow reads, in one revision, the delay records under delays and
// the create revisions of the keys under prefix, their name's.
func (e *Engine) delaysNow(ctx context.Context, delays, prefix string) ([]*mvccpb.KeyValue, map[int64]bool, error) {
	resp, err := e.cli.Txn(ctx).Then(
		clientv3.OpGet(delays, clientv3.WithPrefix()),
		clientv3.OpGet(prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return nil, nil, fmt.Errorf("queue: read lock-delays: %w", err)
	}
	live := map[int64]bool{}
	for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
		live[kv.CreateRevision] = true
	}
	return resp.Responses[0].GetResponseRange().GetKvs(), live, nil
}

// stampDelay stamps rec with the moment at, its first sighting, unless
// another gateway changed it since it was read; it reports the record as it
// now stands, or false when it is gone or changed (read it again).
func (e *Engine) stampDelay(ctx context.Context, rec delayRecord, at time.Time) (delayRecord, bool, error) {
	key := string(rec.kv.Key)
	v := stampedValue(rec.rev, rec.d, at, e.id)
	resp, err := e.putStamped(ctx, key, clientv3.Compare(clientv3.ModRevision(key), "=", rec.kv.ModRevision), v, at.Add(rec.d))
	if err != nil {
		return rec, false, fmt.Errorf("queue: stamp a lock-delay: %w", err)
	}
	if !resp.Succeeded {
		return rec, false, nil
	}
	rec.expired, rec.ttl, rec.stamper = time.UnixMilli(at.UnixMilli()), 0, e.id
	rec.kv = &mvccpb.KeyValue{Key: rec.kv.Key, Value: []byte(v), ModRevision: resp.Header.Revision, CreateRevision: rec.kv.CreateRevision}
	return rec, true, nil
}

// putStamped puts the stamped record value at key if cmp holds, on a lease
// of its own that outlives the delay's end (end, on the engine's clock, and
// the clock-skew margin) by a second, so that a record nobody clears goes by itself once it withholds
// nothing. The lease is granted and never renewed: no etcd leader's clock,
// however stale, ends it before its TTL.
func (e *Engine) putStamped(ctx context.Context, key string, cmp clientv3.Cmp, value string, end time.Time) (*clientv3.TxnResponse, error) {
	g, err := e.cli.Grant(ctx, e.stampedLeaseTTL(end.Sub(e.cfg.Clock.Now())))
	if err != nil {
		return nil, err
	}
	resp, err := e.cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(key, value, clientv3.WithLease(g.ID))).Commit()
	if err != nil || !resp.Succeeded {
		e.revokeLater(ctx, g.ID)
	}
	return resp, err
}

// stampedLeaseTTL is the TTL, in seconds, of the lease of a stamped record
// whose delay ends left from now: it outlives the end as every other
// engine reads it (endFor) by a second or more.
func (e *Engine) stampedLeaseTTL(left time.Duration) int64 {
	return max(int64((left+e.cfg.MaxClockSkew)/time.Second)+2, 2)
}

// awaitLockDelays waits out name's pending lock-delays (steps 3 and 4
// above) and deletes the records it outlived. With wait unset it never
// waits: it reports when the pending delays end (zero when none is
// pending), stamping the ones nobody has stamped yet.
func (e *Engine) awaitLockDelays(ctx context.Context, name string, wait bool) (until time.Time, err error) {
	for {
		recs, err := e.pendingDelays(ctx, name)
		if err != nil || len(recs) == 0 {
			return time.Time{}, err
		}
		now := e.cfg.Clock.Now()
		until = time.Time{}
		changed := false
		for i, rec := range recs {
			if rec.expired.IsZero() {
				// Nobody saw how the holder went: it may have been an
				// unclean loss (loss.go), so its TTL counts too.
				rec.d = e.lossWait(rec.d, rec.ttl)
				var ok bool
				if recs[i], ok, err = e.stampDelay(ctx, rec, now); err != nil {
					return now.Add(rec.d), err
				}
				changed = changed || !ok
			}
			if end := recs[i].endFor(e); end.After(until) {
				until = end
			}
		}
		if changed {
			continue // another gateway wrote a record meanwhile: look again
		}
		if until.After(now) {
			if !wait {
				return until, nil
			}
			if err := e.sleepUntil(ctx, until); err != nil {
				return until, err
			}
			continue
		}
		for _, rec := range recs {
			// Only the record seen: one written again since is another's.
			key := string(rec.kv.Key)
			_, err := e.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rec.kv.ModRevision)).
				Then(clientv3.OpDelete(key)).Commit()
			if err != nil {
				return time.Time{}, fmt.Errorf("queue: clear a lock-delay: %w", err)
			}
		}
	}
}

// sleepUntil waits on the engine's clock until at, or ctx's end.
func (e *Engine) sleepUntil(ctx context.Context, at time.Time) error {
	e.at(ctx, pointDelay)
	t := e.cfg.Clock.NewTimer(at.Sub(e.cfg.Clock.Now()))
	defer t.Stop()
	if e.hooks != nil {
		e.hooks.park(ctx, parked{until: at, now: e.cfg.Clock.Now})
		defer e.hooks.unpark(ctx)
	}
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C():
		return nil
	}
}

// delayPending reports until when q, which holds, must not be granted for
// a pending lock-delay: TryAcquire's look, which never waits. An answer it
// cannot get counts as pending (until a delay's length from now).
func (e *Engine) delayPending(ctx context.Context, q *enqueued) time.Time {
	if !q.delays {
		return time.Time{}
	}
	until, err := e.awaitLockDelays(ctx, q.h.Name, false)
	if err != nil && until.IsZero() {
		until = e.cfg.Clock.Now().Add(MaxLockDelay)
	}
	return until
}

// recordLockDelay writes the delay record of a grant, a holder's with
// the lease's TTL ttl (step 1 above; loss.go).
func (e *Engine) recordLockDelay(ctx context.Context, r *AcquireRequest, q *enqueued, ttl time.Duration) error {
	key := e.keys.waiter(q.h.Name, q.h.WaiterID)
	resp, err := e.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(key), "=", q.h.Revision),
		clientv3.Compare(clientv3.ModRevision(key), "=", q.modRev),
	).Then(clientv3.OpPut(e.keys.delay(q.h.Name, q.h.WaiterID), delayValue(q.h.Revision, r.LockDelay, ttl))).
		Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return fmt.Errorf("queue: record the lock-delay: %w", err)
	}
	if resp.Succeeded {
		return nil
	}
	if kv := firstKV(resp.Responses[0]); kv != nil && kv.CreateRevision == q.h.Revision {
		return fmt.Errorf("%w: a retry with the same request id took the waiter over", ErrSuperseded)
	}
	return fmt.Errorf("%w: the waiter's key is gone (its lease expired or was revoked)", ErrLeaseLost)
}
