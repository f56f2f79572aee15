package queue

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Re-entrancy (opt-in, sessions only).
//
// A re-entrant acquire (AcquireRequest.Reentrant) through a session that
// already holds the name, acquired re-entrant by the same caller, returns
// the same lock — the same handle, so the same lock id and token — and
// adds a hold; every release drops one, and the last frees the name.
//
// The waiter key is never written again: a rewrite would change its mod
// revision, which is an attempt's identity (doc.go, "Identities"). The
// extra holds are counted in a key of their own, <prefix>/holds/<escaped
// name>/<waiter id>, on the session lease (it dies with the session, as
// the lock does), outside the name's prefix (no hub, count or Describe
// sees it). Its value is the number of holds beyond the first.
//
//   - Adding a hold is one transaction comparing the waiter key's create
//     revision, mod revision (as read: no takeover since) and lease (the
//     session's: it was granted) and its secret,
//     the session's secret, and the holds key's mod revision as read. The
//     key was among the holders at the read (holdsIn), and a key that
//     holds at some revision holds until it goes (doc.go, "Semaphores"):
//     the create revision compare makes the hold a hold on a live grant.
//   - Release compares, beside what it always compares, that no holds key
//     exists; when one does, it drops a hold instead, comparing the holds
//     key's mod revision, and deletes nothing else.
//   - Every cleanup (deleteOwned) compares that no holds key exists: an
//     undelivered grant given up (Abandon) while another acquire through
//     the session re-entered it drops a hold instead of freeing a lock
//     someone was told they hold.
//
// The secret is sealed in the waiter value with a digest of the session's
// secret as well as of the request id, so only a caller that proves the
// session (its id is a secret) can be handed the lock id again.

// reenterMask masks a lock's secret for the re-entrant acquires of the
// session whose secret is s.
func reenterMask(s Secret) [SecretLen]byte {
	h := sha256.Sum256(append([]byte("leasegate/reenter\x00"), s[:]...))
	var m [SecretLen]byte
	copy(m[:], h[:])
	return m
}

// reenter adds a hold to the lock r's session holds on r.Name, if it
// acquired it re-entrant as the same caller. It returns nil and no error
// when there is none (the caller enqueues as usual).
func (e *Engine) reenter(ctx context.Context, r *AcquireRequest) (*Grant, error) {
	prefix := e.keys.namePrefix(r.Name)
	n := r.effectiveLimit()
	for try := 0; try < 3; try++ {
		resp, err := e.cli.Get(ctx, prefix, withFirstN(n)...)
		if err != nil {
			return nil, fmt.Errorf("queue: re-entrant acquire: %w", err)
		}
		kv, secret := e.heldBySession(r, resp.Kvs, n)
		if kv == nil {
			return nil, nil
		}
		g, err := e.addHold(ctx, r, kv, secret)
		if errors.Is(err, errRaced) {
			continue
		}
		return g, err
	}
	return nil, nil
}

// heldBySession finds, among kvs (the first n keys of a name), a key that
// holds, rides on r's session lease, was enqueued re-entrant by r's caller
// with r's limit, and whose secret the session unseals.
func (e *Engine) heldBySession(r *AcquireRequest, kvs []*mvccpb.KeyValue, n int) (*mvccpb.KeyValue, Secret) {
	for _, kv := range kvs {
		if clientv3.LeaseID(kv.Lease) != r.Session {
			continue
		}
		_, meta, err := decodeValue(kv.Value)
		if err != nil || meta.Reenter == "" || meta.Owner != r.binding() || max(meta.Limit, 1) != n {
			continue
		}
		if !holdsIn(kvs, kv.CreateRevision, n) {
			continue
		}
		secret, err := unsealWith(meta.Reenter, reenterMask(r.SessionSecret))
		if err != nil || !hasHeader(kv.Value, secret) {
			continue
		}
		return kv, secret
	}
	return nil, Secret{}
}

// addHold adds a hold to kv, which held at the read; see above.
func (e *Engine) addHold(ctx context.Context, r *AcquireRequest, kv *mvccpb.KeyValue, secret Secret) (*Grant, error) {
	key := string(kv.Key)
	wid := key[strings.LastIndexByte(key, '/')+1:]
	hkey := e.keys.holds(r.Name, wid)
	hr, err := e.cli.Get(ctx, hkey)
	if err != nil {
		return nil, fmt.Errorf("queue: re-entrant acquire: %w", err)
	}
	extra, hmod := int64(0), int64(0)
	if len(hr.Kvs) > 0 {
		extra, hmod = holdsOf(hr.Kvs[0]), hr.Kvs[0].ModRevision
	}
	skey := e.keys.session(r.Session)
	cmps := append([]clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(key), "=", kv.CreateRevision),
		clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision),
		clientv3.Compare(clientv3.LeaseValue(key), "=", r.Session),
		clientv3.Compare(clientv3.ModRevision(hkey), "=", hmod),
	}, OwnerCmps(key, secret)...)
	cmps = append(cmps, OwnerCmps(skey, r.SessionSecret)...)
	e.at(ctx, pointReenter)
	resp, err := e.cli.Txn(ctx).If(cmps...).
		Then(clientv3.OpPut(hkey, strconv.FormatInt(extra+1, 10), clientv3.WithLease(r.Session)), clientv3.OpGet(skey)).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("queue: re-entrant acquire: %w", err)
	}
	if !resp.Succeeded {
		return nil, errRaced // released, expired or re-entered meanwhile: look again
	}
	_, meta, _ := decodeValue(kv.Value)
	h := Handle{Name: r.Name, WaiterID: wid, Lease: r.Session, Revision: kv.CreateRevision, Epoch: meta.Epoch, Secret: secret, Session: true}
	ttl := time.Duration(decodeSession(firstKV(resp.Responses[1]).GetValue()).TTL) * time.Second
	// attempt is the write the key carries, unchanged: the grant rests on it
	// as an attempt's does (the explorer checks it), but nothing deletes by
	// it — giving this grant up drops a hold.
	return &Grant{Handle: h, TTL: ttl, Holds: int(extra + 2), reentered: true, attempt: kv.ModRevision, asOf: resp.Header.Revision}, nil
}

// holdsOf reads a holds key's count of extra holds.
func holdsOf(kv *mvccpb.KeyValue) int64 {
	n, err := strconv.ParseInt(string(kv.Value), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// dropHold drops one extra hold of h's lock, read as hk, comparing the
// lock key's identity, lease and secret (and its mod revision when modRev
// is set: an Abandon's attempt) and the holds key's mod revision. It
// reports whether it dropped one; false with no error means the keys
// changed since the read.
func (e *Engine) dropHold(ctx context.Context, h Handle, hk *mvccpb.KeyValue, modRev int64) (bool, error) {
	key := e.keys.waiter(h.Name, h.WaiterID)
	cmps := append([]clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(key), "=", h.Revision),
		clientv3.Compare(clientv3.LeaseValue(key), "=", h.Lease),
		clientv3.Compare(clientv3.ModRevision(string(hk.Key)), "=", hk.ModRevision),
	}, OwnerCmps(key, h.Secret)...)
	if modRev != 0 {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", modRev))
	}
	op := clientv3.OpDelete(string(hk.Key))
	if n := holdsOf(hk) - 1; n > 0 {
		op = clientv3.OpPut(string(hk.Key), strconv.FormatInt(n, 10), clientv3.WithLease(clientv3.LeaseID(hk.Lease)))
	}
	e.at(ctx, pointDropHold)
	resp, err := e.cli.Txn(ctx).If(cmps...).Then(op).Commit()
	if err != nil {
		return false, fmt.Errorf("queue: release a hold: %w", err)
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
