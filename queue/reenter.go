package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Re-entrancy (opt-in, sessions only).
//
// A re-entrant acquire (AcquireRequest.Reentrant) through a session that
// already holds the name, acquired re-entrant by the same caller, adds a
// hold to that lock. A hold is an identity of its own: the lock's handle
// with a HoldID, random and drawn when the hold is added, so its own lock
// id, and the lock's fencing token. Releasing a hold drops exactly that
// hold and a repeated release of it is a no-op; the lock is freed when its
// last hold goes. An acquire retried with the request id of a hold it
// already has is the same hold, not another (the entry records the waiter
// id its request id derives); a hold added again under a request id whose
// hold was released is another, with an id of its own, so a late copy of
// the earlier hold's release drops nothing.
//
// The waiter key is never written again by a re-entry: a rewrite would
// change its mod revision, which is an attempt's identity (doc.go,
// "Identities"). The holds live in one record per lock incarnation,
// <prefix>/holds/<escaped name>/<waiter id>/<create revision>, on the
// session lease (it dies with the session, as the lock does), outside the
// name's prefix (no hub, count or Describe sees it). Its value lists the
// holds, the key's own first hold as the empty id; no record means that
// one hold alone. The create revision in the key binds the record to
// exactly one key: a record left by an earlier key of the same waiter id
// names another revision and is never read for a later one, and a
// force-release deletes every record of the waiter id with the key.
//
//   - Adding a hold is one transaction comparing the waiter key's create
//     revision, mod revision (as read: no takeover since), lease (the
//     session's: it was granted) and secret, the session's secret, and
//     the record's mod revision as read. The key was among the holders at
//     the read (holdsIn), and a key that holds at some revision holds
//     until it goes (doc.go, "Semaphores").
//   - Each entry carries the nonce of the attempt that wrote it last, so a
//     retry of a hold's acquire re-takes the entry with a nonce of its own
//     and the attempt it replaced, giving up its undelivered grant, finds
//     another nonce and drops nothing.
//   - Release of the key's own hold compares that no record exists and
//     deletes the key; otherwise every release and give-up removes its
//     entry comparing the record's mod revision, and the removal of the
//     last entry deletes the key and the record in the same transaction.
//     Concurrent releases of two holds serialise on that mod revision.
//   - Every cleanup (deleteOwned) compares that no record exists: a waiter
//     key with holds is not an attempt's to delete.
//
// The secret is sealed in the waiter value with a digest of the session's
// secret as well as of the request id, so only a caller that proves the
// session (its id is a secret) can be handed a lock id of the lock again.

// MaxHolds is the most holds one re-entered lock may have at once.
const MaxHolds = 64

// holdEntry is one hold of a re-entered lock.
type holdEntry struct {
	// ID is the hold's id: "" for the key's own hold, else drawn at random
	// when the hold was added (newHoldID).
	ID string `json:"i,omitempty"`
	// Req is the waiter id the request id of the acquire that added the
	// hold derives: a retry of that acquire finds its hold by it.
	Req string `json:"r,omitempty"`
	// Attempt is the nonce of the attempt that took the hold last.
	Attempt string `json:"a,omitempty"`
}

type holdsValue struct {
	Holds []holdEntry `json:"h"`
}

// decodeHolds decodes a holds record: the key's own hold alone when kv is nil.
// A record that cannot be read counts as that one hold, which can only
// withhold a release, never make one.
func decodeHolds(kv *mvccpb.KeyValue) []holdEntry {
	var v holdsValue
	if kv == nil || json.Unmarshal(kv.Value, &v) != nil || len(v.Holds) == 0 {
		return []holdEntry{{}}
	}
	return v.Holds
}

func encodeHolds(hs []holdEntry) string {
	b, _ := json.Marshal(holdsValue{Holds: hs}) // strings only
	return string(b)
}

// holdIndex is the index of the hold id in hs, -1 when it has none.
func holdIndex(hs []holdEntry, id string) int {
	return slices.IndexFunc(hs, func(h holdEntry) bool { return h.ID == id })
}

// holdOf is the index of the hold the acquire of waiter id wid added in
// hs, -1 when it has none.
func holdOf(hs []holdEntry, wid string) int {
	return slices.IndexFunc(hs, func(h holdEntry) bool { return h.ID != "" && h.Req == wid })
}

// reenterMask masks a lock's secret for the re-entrant acquires of the
// session whose secret is s.
func reenterMask(s Secret) [SecretLen]byte { return maskOf("leasegate/reenter\x00", s[:]) }

// errReenterContended reports a re-entrant acquire whose lock kept changing
// under it; retrying the same request is safe.
var errReenterContended = errors.New("queue: re-entrant acquire: the lock kept changing under it; retry")

// reenter adds a hold to the lock r's session holds on r.Name, if it
// acquired it re-entrant as the same caller. It returns nil and no error
// when there is none, and when r is the lock's own acquire retried (its
// request id is the key's): the enqueue then takes its key over as for any
// retry.
func (e *Engine) reenter(ctx context.Context, r *AcquireRequest) (*Grant, error) {
	prefix := e.keys.namePrefix(r.Name)
	n := r.effectiveLimit()
	rid := WaiterID(r.RequestID)
	for try := 0; try < 8; try++ {
		resp, err := e.cli.Get(ctx, prefix, withFirstN(n)...)
		if err != nil {
			return nil, fmt.Errorf("queue: re-entrant acquire: %w", err)
		}
		kv, secret := e.heldBySession(r, resp.Kvs, n)
		if kv == nil {
			return nil, nil
		}
		if waiterIDOf(kv) == rid {
			// The lock's own acquire again: a retry while its own hold
			// lives; once that hold was released and other holds keep the
			// lock, a new hold of its own (takeOver refuses the key's).
			released, err := e.ownHoldReleased(ctx, r.Name, kv)
			if err != nil || !released {
				return nil, err
			}
		}
		g, err := e.addHold(ctx, r, kv, secret, rid)
		if errors.Is(err, errRaced) {
			continue
		}
		return g, err
	}
	return nil, errReenterContended
}

// ownHoldReleased reports whether kv, a re-entered lock's key, has a holds
// record without the key's own hold: it was released, and the lock lives
// on for its other holds.
func (e *Engine) ownHoldReleased(ctx context.Context, name string, kv *mvccpb.KeyValue) (bool, error) {
	hr, err := e.cli.Get(ctx, e.keys.holds(name, waiterIDOf(kv), kv.CreateRevision))
	if err != nil {
		return false, fmt.Errorf("queue: re-entrant acquire: %w", err)
	}
	return len(hr.Kvs) > 0 && holdIndex(decodeHolds(hr.Kvs[0]), "") < 0, nil
}

// waiterIDOf is the waiter id a waiter key ends in.
func waiterIDOf(kv *mvccpb.KeyValue) string {
	key := string(kv.Key)
	return key[strings.LastIndexByte(key, '/')+1:]
}

// heldBySession finds, among kvs (the first n keys of a name), a key that
// holds, rides on r's session lease, was enqueued re-entrant by r's caller
// with r's limit, and whose secret the session unseals.
func (e *Engine) heldBySession(r *AcquireRequest, kvs []*mvccpb.KeyValue, n int) (*mvccpb.KeyValue, Secret) {
	for _, kv := range kvs {
		meta, err := decodeValue(kv.Value)
		if clientv3.LeaseID(kv.Lease) != r.Session || err != nil || meta.Reenter == "" || meta.Owner != r.binding() ||
			max(meta.Limit, 1) != n || !holdsIn(kvs, kv.CreateRevision, n) {
			continue
		}
		if secret, err := unsealWith(meta.Reenter, reenterMask(r.SessionSecret)); err == nil && hasHeader(kv.Value, secret) {
			return kv, secret
		}
	}
	return nil, Secret{}
}

// addHold adds a hold for the acquire of waiter id rid to kv's lock, which
// held at the read, or takes it again when the lock has it already (a
// retry); see above.
func (e *Engine) addHold(ctx context.Context, r *AcquireRequest, kv *mvccpb.KeyValue, secret Secret, rid string) (*Grant, error) {
	key := string(kv.Key)
	wid := waiterIDOf(kv)
	hkey := e.keys.holds(r.Name, wid, kv.CreateRevision)
	hr, err := e.cli.Get(ctx, hkey)
	if err != nil {
		return nil, fmt.Errorf("queue: re-entrant acquire: %w", err)
	}
	rec := firstOf(hr.Kvs)
	holds := decodeHolds(rec)
	nonce := newAttempt()
	i := holdOf(holds, rid)
	retried := i >= 0
	switch {
	case retried:
		holds[i].Attempt = nonce
	case len(holds) >= MaxHolds:
		return nil, fmt.Errorf("%w: %q already has %d holds through this session, the most a re-entered lock may have", ErrTooManyHolds, r.Name, MaxHolds)
	default:
		i = len(holds)
		holds = append(holds, holdEntry{ID: newHoldID(), Req: rid, Attempt: nonce})
	}
	hid := holds[i].ID
	skey := e.keys.session(r.Session)
	cmps := append([]clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(key), "=", kv.CreateRevision),
		clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision),
		clientv3.Compare(clientv3.LeaseValue(key), "=", r.Session),
		clientv3.Compare(clientv3.ModRevision(hkey), "=", rec.GetModRevision()),
	}, ownerCmps(key, secret)...)
	cmps = append(cmps, ownerCmps(skey, r.SessionSecret)...)
	meta, _ := decodeValue(kv.Value)
	h := Handle{Name: r.Name, WaiterID: wid, HoldID: hid, Lease: r.Session, Revision: kv.CreateRevision, Epoch: meta.Epoch, Secret: secret, Session: true}
	e.at(ctx, pointReenter)
	tctx, cancel := e.answered(ctx)
	resp, err := e.cli.Txn(tctx).If(cmps...).
		Then(clientv3.OpPut(hkey, encodeHolds(holds), clientv3.WithLease(r.Session)), clientv3.OpGet(skey)).
		Commit()
	cancel()
	if err != nil {
		// The hold may have been added and its answer lost: it is given up
		// by its nonce, in the background, as an undelivered grant's is.
		// Left, it would keep the name held, through the session, after
		// every other hold went.
		e.Abandon(ctx, Grant{Handle: h, hold: nonce, keep: retried})
		return nil, fmt.Errorf("queue: re-entrant acquire: %w", err)
	}
	if !resp.Succeeded {
		return nil, errRaced // released, expired or re-entered meanwhile: look again
	}
	ttl := sessionRecordTTL(resp.Responses[1])
	// attempt is the write the key carries, unchanged: the grant rests on
	// it as an attempt's does (the explorer checks it); giving the grant
	// up compares the hold's nonce instead.
	g := Grant{Handle: h, TTL: ttl, Holds: len(holds), Resumed: retried, attempt: kv.ModRevision, hold: nonce, keep: retried}
	e.grantMade(ctx, g, resp.Header.Revision, 0)
	return &g, nil
}

// dropHold removes hold h.HoldID from h's lock, whose holds record was read
// as rec (nil: the key's own hold alone, which the release transaction
// handles), comparing the lock key's identity, lease and secret and the
// record's mod revision; and, for an undelivered grant's give-up, the
// hold's nonce (nonce) or, for the key's own hold, the key's mod revision
// (keyMod). The removal of the last hold deletes the key and the record
// in the same transaction, as a release does.
//
// It reports dropped when it removed the hold, and final when the outcome
// stands (removed, or the hold is not there); not final means the keys
// changed since the read, and the caller reads again.
func (e *Engine) dropHold(ctx context.Context, h Handle, rec *mvccpb.KeyValue, nonce string, keyMod int64) (dropped, final bool, err error) {
	holds := decodeHolds(rec)
	i := holdIndex(holds, h.HoldID)
	if i < 0 || nonce != "" && holds[i].Attempt != nonce {
		// Released before (a repeated release), or re-taken by a retry
		// that now serves the caller.
		return false, true, nil
	}
	rest := slices.Delete(slices.Clone(holds), i, i+1)
	key := e.keys.waiter(h.Name, h.WaiterID)
	hkey := string(rec.Key)
	cmps := handleCmps(key, h, clientv3.Compare(clientv3.ModRevision(hkey), "=", rec.ModRevision))
	if keyMod != 0 {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", keyMod))
	}
	e.at(ctx, pointDropHold)
	var resp *clientv3.TxnResponse
	switch {
	case len(rest) == 0:
		// The last hold: the lock is released.
		resp, err = e.releaseCommit(ctx, h, key, cmps, clientv3.OpDelete(hkey))
		if err == nil && resp.Succeeded {
			e.recycleOwnLease(ctx, deletedKV(resp))
		}
	case len(rest) == 1 && rest[0].ID == "":
		// The key's own hold alone: no record says so.
		resp, err = e.cli.Txn(ctx).If(cmps...).Then(clientv3.OpDelete(hkey)).Commit()
	default:
		resp, err = e.cli.Txn(ctx).If(cmps...).
			Then(clientv3.OpPut(hkey, encodeHolds(rest), clientv3.WithLease(clientv3.LeaseID(rec.Lease)))).Commit()
	}
	if err != nil {
		return false, false, fmt.Errorf("queue: release a hold: %w", err)
	}
	return resp.Succeeded, resp.Succeeded, nil
}

// dropHoldOwned gives up the hold of an undelivered grant g (Abandon): a
// re-entered hold while its entry carries g's nonce, the key's own hold
// while the key carries g's attempt. It retries transient failures and
// re-reads a few times when the keys change, and then leaves them: keys
// that keep changing are another attempt's.
func (e *Engine) dropHoldOwned(ctx context.Context, g Grant) {
	key := e.keys.waiter(g.Name, g.WaiterID)
	hkey := e.keys.holds(g.Name, g.WaiterID, g.Revision)
	nonce, keyMod := g.hold, int64(0)
	if g.HoldID == "" {
		keyMod = g.attempt
	}
	b := newBackoff(e.cfg.Clock)
	for changed := 0; changed < 3; {
		resp, err := e.cli.Txn(ctx).Then(clientv3.OpGet(key), clientv3.OpGet(hkey)).Commit()
		if err == nil {
			mine, rec := firstKV(resp.Responses[0]), firstKV(resp.Responses[1])
			if mine == nil || mine.CreateRevision != g.Revision {
				return // the lock is gone
			}
			var final bool
			switch {
			case g.HoldID != "" && (rec == nil || holdIndex(decodeHolds(rec), g.HoldID) < 0):
				// Not added, or added by a write still in flight, which
				// compares the record's mod revision it read: the fence
				// changes it, so that write cannot land after this look.
				final, err = e.fenceHolds(ctx, g.Handle, rec)
			case rec == nil:
				return // the key's own hold alone, which deleteOwned gives up
			default:
				_, final, err = e.dropHold(ctx, g.Handle, rec, nonce, keyMod)
			}
			if err == nil {
				if final {
					return
				}
				changed++
				continue
			}
		}
		if b.wait(ctx) != nil {
			return
		}
	}
}

// fenceHolds rewrites h's lock's holds record, read as rec (nil: none,
// written then as the key's own hold alone), unchanged but for its mod
// revision, comparing the lock key's identity, lease and secret and the
// record's mod revision as read. A hold's write compares the record's mod
// revision its attempt read, so one in flight that etcd has not applied
// yet never lands after the fence: the give-up of an undelivered hold that
// found it missing stands. final is false when the keys changed since the
// read, and the caller reads again.
func (e *Engine) fenceHolds(ctx context.Context, h Handle, rec *mvccpb.KeyValue) (final bool, err error) {
	key := e.keys.waiter(h.Name, h.WaiterID)
	hkey := e.keys.holds(h.Name, h.WaiterID, h.Revision)
	cmps := handleCmps(key, h, clientv3.Compare(clientv3.ModRevision(hkey), "=", rec.GetModRevision()))
	resp, err := e.cli.Txn(ctx).If(cmps...).
		Then(clientv3.OpPut(hkey, encodeHolds(decodeHolds(rec)), clientv3.WithLease(h.Lease))).Commit()
	if err != nil {
		return false, fmt.Errorf("queue: fence a hold's give-up: %w", err)
	}
	return resp.Succeeded, nil
}

// reenterSeal is what a waiter value of r records for re-entry: the
// secret sealed for r's session, or nothing for an acquire that is not
// re-entrant.
func reenterSeal(r *AcquireRequest, s Secret) string {
	if !r.Reentrant || r.Session == 0 {
		return ""
	}
	return sealWith(s, reenterMask(r.SessionSecret))
}
