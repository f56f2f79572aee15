package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Ends of held locks, told to their holders.
//
// A holder learns that its lock is gone at its next renewal. AwaitEnd
// tells it sooner: it blocks while the lock is held and returns how it
// ended as soon as this engine learns of it. An eviction writes its audit
// record, and the first gateway to see an unclean loss writes its wait
// record (loss.go); both are rare, so while any AwaitEnd of a key space
// runs the engine watches the two prefixes, whichever gateway wrote them,
// and wakes the awaiters of the key they concern, which then read how the
// key ended (endOf). A failed watch wakes every awaiter, which proves its
// lock again. A holder that releases its lock ends its AwaitEnd itself.

// EndKind is how a held lock ended.
type EndKind int

const (
	// EndReleased: its holder released it (or closed its session).
	EndReleased EndKind = iota
	// EndEvicted: an administrator force-released it.
	EndEvicted
	// EndLost: its lease expired or was revoked, or its gateway gave an
	// undelivered grant up.
	EndLost
)

// End is how a held lock ended.
type End struct {
	Kind EndKind
	// Err is what a renewal of the lock answers now: ErrReleased,
	// ErrEvicted, ErrExpired or ErrStolen, with what happened.
	Err error
	// Audit is an eviction's record.
	Audit *AuditRecord
}

// endWatch is an engine's watches over audit and wait records for
// AwaitEnd: two watches per space, by prefix, while it has an awaiter.
type endWatch struct {
	e *Engine
	perSpace[string, endSpace]
}

// endSpace is one space's awaiters and watches.
type endSpace struct {
	keys   keys
	subs   map[string]map[*endSub]struct{} // by waiter key
	cancel context.CancelFunc
}

type endSub struct {
	rev  int64
	wake wakeup
}

// subscribe registers an awaiter of key, a key of the space ks created at
// rev, starting the space's watches with its first.
func (w *endWatch) subscribe(ks keys, key string, rev int64) (*endSub, func()) {
	sub := &endSub{rev: rev, wake: newWakeup()}
	w.mu.Lock()
	defer w.mu.Unlock()
	sp, made := w.getLocked(ks.prefix, func() *endSpace {
		return &endSpace{keys: ks, subs: map[string]map[*endSub]struct{}{}}
	})
	if made && w.e.ctx.Err() == nil {
		ctx, cancel := context.WithCancel(w.e.ctx)
		sp.cancel = cancel
		for _, prefix := range []string{ks.auditPrefix(), ks.delays()} {
			w.e.wg.Add(1)
			go w.run(ctx, sp, prefix)
		}
	}
	if sp.subs[key] == nil {
		sp.subs[key] = map[*endSub]struct{}{}
	}
	sp.subs[key][sub] = struct{}{}
	return sub, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(sp.subs[key], sub)
		if len(sp.subs[key]) == 0 {
			delete(sp.subs, key)
		}
		if len(sp.subs) == 0 && w.dropLocked(ks.prefix, sp) && sp.cancel != nil {
			sp.cancel()
		}
	}
}

// run follows the puts under prefix, of sp's space, until ctx ends.
func (w *endWatch) run(ctx context.Context, sp *endSpace, prefix string) {
	defer w.e.wg.Done()
	b := newBackoff(w.e.cfg.Clock)
	for ctx.Err() == nil {
		w.e.at(ctx, pointEndWatch)
		wch, _, stop, err := w.e.openWatch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithFilterDelete())
		if err == nil {
			// The watch starts where etcd confirmed it, not where an
			// awaiter that subscribed before proved its lock: every
			// awaiter proves it again, so an end in between is seen.
			w.wakeAll(sp)
			for wr := range wch {
				if wr.Err() != nil {
					break
				}
				b.reset()
				for _, ev := range wr.Events {
					w.put(sp, ev.Kv)
				}
			}
			stop()
		}
		// Whatever the gap held, every awaiter proves its lock again.
		w.wakeAll(sp)
		if b.wait(ctx) != nil {
			return
		}
	}
}

// put wakes the awaiters of the key an audit or wait record of sp's space
// concerns.
func (w *endWatch) put(sp *endSpace, kv *mvccpb.KeyValue) {
	ks := sp.keys
	key, rev := "", int64(0)
	if k := string(kv.Key); strings.HasPrefix(k, ks.auditPrefix()) {
		var rec AuditRecord
		if json.Unmarshal(kv.Value, &rec) != nil {
			return
		}
		key = ks.locks() + rec.Key
		_, rev, _ = SplitToken(rec.EvictedToken)
	} else {
		rec, ok := parseDelay(kv)
		if !ok || rec.expired.IsZero() {
			return // a record of a live holder, not a loss
		}
		key = ks.locks() + strings.TrimSuffix(strings.TrimPrefix(k, ks.delays()), ".h")
		rev = rec.rev
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for sub := range sp.subs[key] {
		if sub.rev == rev {
			sub.wake.signal()
		}
	}
}

func (w *endWatch) wakeAll(sp *endSpace) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range sp.subs {
		for sub := range m {
			sub.wake.signal()
		}
	}
}

// AwaitEnd blocks while the lock h names is held and returns how it ended
// once this engine learns of an eviction or a loss (see above), or at once
// when the lock is gone already; ctx's end ends the wait with its error. A
// caller that releases the lock ends its AwaitEnd itself. The token must
// be the lock's (ErrNotOwner otherwise), and so must the secret.
func (e *Engine) AwaitEnd(ctx context.Context, h Handle, token int64) (End, error) {
	if err := checkToken(h, token); err != nil {
		return End{}, err
	}
	key := e.keys.waiter(h.Name, h.WaiterID)
	sub, stop := e.ends.subscribe(e.keys, key, h.Revision)
	defer stop()
	for {
		// Proven after subscribing: an end before the watch began is
		// seen here, one after it wakes the subscription.
		err := e.proveHolder(ctx, h)
		switch {
		case errors.Is(err, ErrNotOwner):
			return End{}, err
		case errors.Is(err, ErrReleased):
			return End{Kind: EndReleased, Err: err}, nil // a hold released
		case errors.Is(err, ErrExpired), errors.Is(err, ErrStolen):
			end := e.endOf(ctx, h, err)
			if errors.Is(end.Err, ErrNotOwner) {
				return End{}, end.Err
			}
			return end, nil
		case err != nil && ctx.Err() != nil:
			return End{}, context.Cause(ctx)
		}
		e.at(ctx, pointEndProof)
		select {
		case <-ctx.Done():
			return End{}, context.Cause(ctx)
		case <-e.ctx.Done():
			return End{}, fmt.Errorf("%w: the engine is closed", ErrClosed)
		case <-sub.wake:
		}
	}
}

// endOf says how h's key, found gone (gone: the verdict of its absence,
// ErrExpired or ErrStolen), ended: its history names the revision that
// deleted it, and the mark at that revision how (loss.go). The key's last
// value proves h's secret, or the end is ErrNotOwner: a lock id is a claim
// even once its key is gone. History etcd compacted away leaves gone as it
// is.
func (e *Engine) endOf(ctx context.Context, h Handle, gone error) End {
	key := e.keys.waiter(h.Name, h.WaiterID)
	ck := endKey{key: key, create: h.Revision}
	f, ok := e.endFacts.Get(ck)
	if !ok {
		var err error
		if f, err = e.readEnd(ctx, key, h); err != nil {
			return e.evictedByAudit(ctx, key, h, gone)
		}
		e.endFacts.Add(ck, f)
	}
	if !hasHeader(f.last, h.Secret) {
		return End{Err: fmt.Errorf("%w: the lock id does not match the lock's secret", ErrNotOwner)}
	}
	switch {
	case f.kind == lossClean && f.gaveUp:
		return End{Kind: EndLost, Err: fmt.Errorf("%w: the gateway gave the grant up, unable to deliver it", gone)}
	case f.kind == lossClean && errors.Is(gone, ErrStolen):
		return End{Kind: EndReleased, Err: fmt.Errorf("%w: its holder released it, and another holder has the name now", ErrReleased)}
	case f.kind == lossClean:
		return End{Kind: EndReleased, Err: fmt.Errorf("%w: its holder released it, and the name is free", ErrReleased)}
	case f.kind == lossEvicted:
		msg := "an administrator force-released it"
		if rec := f.audit; rec != nil {
			msg = fmt.Sprintf("an administrator force-released it at %s (audit record %s): %s", rec.At.UTC().Format("2006-01-02T15:04:05.000Z"), rec.ID, rec.Reason)
		}
		return End{Kind: EndEvicted, Err: fmt.Errorf("%w: %s", ErrEvicted, msg), Audit: f.audit}
	}
	return End{Kind: EndLost, Err: gone}
}

// evictedByAudit is the end of h's key when etcd's history no longer
// tells it (compacted past the deletion): an eviction still has its audit
// record, which names the key and its fencing token and is written after
// the key's creation, so a current read of the records since then finds
// it. Without the key's last value the lock id's secret is unproven, so
// the end names the record but not its reason; anything else is gone as
// it is (a loss).
func (e *Engine) evictedByAudit(ctx context.Context, key string, h Handle, gone error) End {
	resp, err := e.cli.Get(ctx, e.keys.auditPrefix(), clientv3.WithPrefix(), clientv3.WithMinModRev(h.Revision))
	if err != nil {
		return End{Kind: EndLost, Err: gone}
	}
	rel, token := e.keys.rel(key), h.Token()
	for _, kv := range resp.Kvs {
		var rec AuditRecord
		if json.Unmarshal(kv.Value, &rec) != nil || rec.Key != rel || rec.EvictedToken != token {
			continue
		}
		return End{Kind: EndEvicted, Err: fmt.Errorf("%w: an administrator force-released it at %s (audit record %s)", ErrEvicted, rec.At.UTC().Format("2006-01-02T15:04:05.000Z"), rec.ID)}
	}
	return End{Kind: EndLost, Err: gone}
}

// endKey names one incarnation of a waiter key.
type endKey struct {
	key    string
	create int64
}

// endFacts is what etcd's history says of a deleted key's end. It never
// changes once read, so an engine remembers it (endFactsCached of them):
// a caller that asks again and again about the same lost lock costs one
// read of the history, not one per call.
type endFacts struct {
	last   []byte // the key's last value (its secret proves a lock id)
	kind   lossKind
	gaveUp bool         // a clean end that was a give-up
	audit  *AuditRecord // a force-release's record; nil when there is none
}

// endFactsCached bounds the ends an engine remembers.
const endFactsCached = 1 << 12

// readEnd reads the end of the key created at h.Revision from etcd's
// history; an error when the history cannot tell (compacted, unreachable).
func (e *Engine) readEnd(ctx context.Context, key string, h Handle) (endFacts, error) {
	rev, prev, err := e.deletionRev(ctx, key, h.Revision)
	if err != nil {
		return endFacts{}, err
	}
	if prev == nil {
		return endFacts{}, fmt.Errorf("queue: no value of %q before its deletion", key)
	}
	kind, err := e.classifyLoss(ctx, key, rev, h)
	if err != nil {
		return endFacts{}, err
	}
	f := endFacts{last: prev.Value, kind: kind}
	switch kind {
	case lossClean:
		f.gaveUp, err = e.gaveUp(ctx, key, rev)
	case lossEvicted:
		f.audit, err = e.auditAt(ctx, rev)
	}
	return f, err
}

// gaveUp reports whether the mark at rev is a give-up's of key (rather
// than its release or a session close).
func (e *Engine) gaveUp(ctx context.Context, key string, rev int64) (bool, error) {
	resp, err := e.cli.Get(ctx, e.keys.mark(), clientv3.WithRev(rev))
	if err != nil {
		return false, err
	}
	m := firstOf(resp.Kvs)
	return m != nil && m.ModRevision == rev && string(m.Value) == markGiveUp+e.keys.rel(key), nil
}

// auditAt reads the audit record written at rev, nil when there is none
// (or it is unreadable).
func (e *Engine) auditAt(ctx context.Context, rev int64) (*AuditRecord, error) {
	resp, err := e.cli.Get(ctx, e.keys.auditPrefix(), clientv3.WithPrefix(), clientv3.WithRev(rev), clientv3.WithMinModRev(rev))
	if err != nil {
		return nil, err
	}
	var rec AuditRecord
	if len(resp.Kvs) == 0 || json.Unmarshal(resp.Kvs[0].Value, &rec) != nil {
		return nil, nil
	}
	return &rec, nil
}
