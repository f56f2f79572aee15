package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// wait blocks until the waiter is first, then grants. It watches only its
// immediate predecessor and its own key; it re-reads on the predecessor's
// deletion, on any change to its own key, on any watch failure
// (compaction, cancellation, lost leader) and when its lease may have been
// lost — never hangs on a dead watch.
func (e *Engine) wait(ctx context.Context, r *AcquireRequest, q *enqueued, began time.Time) (Grant, error) {
	// The deadline of the lease grant is stale once the caller has waited:
	// the grant renews the lease and measures a fresh one.
	q.deadline = time.Time{}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if r.WaitTimeout > 0 {
		t := e.cfg.Clock.NewTimer(r.WaitTimeout)
		defer t.Stop()
		go func() {
			select {
			case <-t.C():
				cancel(ErrWaitTimeout)
			case <-wctx.Done():
			}
		}()
	}
	lost := make(chan struct{}, 1)
	if !q.h.Session || r.Heartbeat != nil {
		// The waiter's own lease must outlive the wait, and only the live
		// attempt renews it — after its caller proved it is still there:
		// without one it lapses within its TTL. A session waiter rides on
		// the attempt lease (attempt.go), but its caller is proved alike.
		go e.keepWaiterAlive(wctx, r, q, lost, cancel)
	}

	g, err := e.waitLoop(wctx, r, q, lost, began)
	if err == nil {
		return g, nil
	}
	if wctx.Err() != nil {
		cause := context.Cause(wctx)
		if errors.Is(cause, ErrDetached) {
			// The key stays for a retry elsewhere; it lapses with its lease
			// (per-lock) or this process's attempt lease (session) unless
			// that retry takes it over.
			e.att.release(q.att)
		} else {
			// Leaving the queue starts at once but does not hold up the
			// answer: a slow etcd must not make a timed-out wait late.
			e.removeWaiterLater(ctx, q)
		}
		if errors.Is(cause, ErrWaitTimeout) {
			return Grant{}, fmt.Errorf("%w after %s", ErrWaitTimeout, r.WaitTimeout)
		}
		if cause != nil {
			return Grant{}, cause
		}
		return Grant{}, ctx.Err()
	}
	e.endAttempt(ctx, q, err)
	return Grant{}, err
}

// keepWaiterAlive proves the caller is there (Heartbeat) and then renews a
// waiting per-lock lease, every TTL/3 (AttemptTTL/3 for a session waiter,
// which renews nothing of its own). It ends the wait when the heartbeat
// fails, and signals lost when etcd says the lease is gone.
func (e *Engine) keepWaiterAlive(ctx context.Context, r *AcquireRequest, q *enqueued, lost chan<- struct{}, end context.CancelCauseFunc) {
	every := max(q.ttl/3, 300*time.Millisecond)
	if q.h.Session {
		every = e.cfg.AttemptTTL / 3
	}
	for {
		t := e.cfg.Clock.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		if r.Heartbeat != nil {
			if err := r.Heartbeat(ctx); err != nil {
				end(fmt.Errorf("%w: %w", ErrCallerGone, err))
				return
			}
		}
		if q.h.Session {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, every)
		_, _, err := e.renewLease(rctx, q.h.Lease)
		cancel()
		if errors.Is(err, errLeaseNotFound) {
			select {
			case lost <- struct{}{}:
			default:
			}
			return
		}
	}
}

// position is a waiter's count of keys ahead, exact as of revision asOf.
type position struct {
	n     int64
	asOf  int64
	known bool
}

func (e *Engine) waitLoop(ctx context.Context, r *AcquireRequest, q *enqueued, lost <-chan struct{}, began time.Time) (Grant, error) {
	prefix := e.keys.namePrefix(r.Name)
	key := prefix + q.h.WaiterID
	pos := position{n: q.ahead, asOf: q.aheadRev, known: q.ahead >= 0}
	reported := int64(-1)
	report := func() {
		// While it waits, at least the key it waits behind is ahead.
		if n := max(pos.n, 1); r.OnQueued != nil && pos.known && n != reported {
			reported = n
			r.OnQueued(n)
		}
	}
	backoff := newBackoff(e.cfg.Clock)
	var sub *posSub
	defer func() {
		if sub != nil {
			e.pos.unsubscribe(prefix, sub)
		}
	}()
	var pred string    // the key last waited behind
	var predRev int64  // its create revision: its identity
	var woke time.Time // when the last wait for a change ended
	for {
		if err := ctx.Err(); err != nil {
			return Grant{}, err
		}
		// One key ahead is all a grant needs: the predecessor, or none.
		// The whole queue ahead is read only when positions are wanted and
		// not known (a resumed waiter, or after the position feed failed).
		// Keys-only answers carry revisions but not leases (etcd reads them
		// from its index): nothing here needs a lease.
		full := r.OnQueued != nil && !pos.known
		ops := []clientv3.Op{
			clientv3.OpGet(key, clientv3.WithKeysOnly()),
			clientv3.OpGet(prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
				clientv3.WithMaxCreateRev(q.h.Revision-1),
				clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(1)),
		}
		sessKey := ""
		if q.h.Session {
			// A session waiter's key rides on the attempt lease, so the
			// session's end does not remove it: the waiter checks the
			// session record itself.
			sessKey = e.keys.session(q.h.Lease)
			ops = append(ops, clientv3.OpGet(sessKey, clientv3.WithCountOnly()))
		}
		fullAt := len(ops)
		if full {
			ops = append(ops, clientv3.OpGet(prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
				clientv3.WithMaxCreateRev(q.h.Revision-1)))
		}
		e.at(ctx, pointRead)
		resp, err := e.cli.Txn(ctx).Then(e.handoffRead(ops, r.Name)...).Commit()
		if err != nil {
			// etcd unreachable or leaderless: retry until ctx ends; the
			// lease decides whether the place survives.
			if werr := backoff.wait(ctx); werr != nil {
				return Grant{}, werr
			}
			continue
		}
		backoff.reset()
		mine := firstKV(resp.Responses[0])
		if mine == nil || mine.CreateRevision != q.h.Revision {
			return Grant{}, fmt.Errorf("%w: the waiter's key is gone (its lease expired or was revoked)", ErrLeaseLost)
		}
		if mine.ModRevision != q.modRev {
			return Grant{}, fmt.Errorf("%w: a retry with the same request id took the waiter over", ErrSuperseded)
		}
		if sessKey != "" && resp.Responses[2].GetResponseRange().Count == 0 {
			return Grant{}, fmt.Errorf("%w: session %x expired or was closed while it waited", ErrSessionLost, int64(q.h.Lease))
		}
		ahead := firstKV(resp.Responses[1])
		if full {
			pos = position{n: int64(len(resp.Responses[fullAt].GetResponseRange().Kvs)), asOf: resp.Header.Revision, known: true}
		}
		if pred != "" && (ahead == nil || string(ahead.Key) != pred || ahead.CreateRevision != predRev) {
			e.predecessorLeft(ctx)
		}
		if ahead == nil {
			if r.BeforeGrant != nil {
				if err := r.BeforeGrant(ctx); err != nil {
					return Grant{}, err
				}
			}
			q.handoff = e.handoffFrom(resp, len(ops), pred, q.h.Revision)
			g, err := e.granted(ctx, r, q, began)
			if err == nil && pred != "" {
				e.observeHandoff(ctx, woke)
			}
			return g, err
		}
		report()
		if sub == nil && r.OnQueued != nil {
			sub = e.pos.subscribe(prefix, pos.asOf)
		}
		pred, predRev = string(ahead.Key), ahead.CreateRevision
		e.awaitChange(ctx, waitState{
			pred: pred, predRev: predRev, own: key, ownMod: q.modRev, session: sessKey, lost: lost,
			sub: sub, myRev: q.h.Revision, pos: &pos, report: report,
		})
		woke = e.cfg.Clock.Now()
	}
}

// waitState is what awaitChange needs to know of a waiter.
type waitState struct {
	pred    string
	predRev int64 // the predecessor's create revision: its identity
	own     string
	ownMod  int64  // the mod revision of the attempt's last write to its key
	session string // the session record a session waiter depends on; "" for none
	lost    <-chan struct{}
	sub     *posSub // nil when nobody asked for positions
	myRev   int64
	pos     *position
	report  func()
}

// awaitChange watches the predecessor and the waiter's own key and returns
// when the predecessor is deleted, the own key changes in any way, a watch
// fails, the lease may be lost or ctx ends. The caller re-reads in every
// case.
func (e *Engine) awaitChange(ctx context.Context, w waitState) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	// The watches start at the current revision, never at an older one:
	// etcd delivers events to a watch that has history to catch up on only
	// every 100 ms, which would delay a handoff. What happened between the
	// read and the watches is covered by one check once both are created.
	//
	// That check compares identities, not existence. The predecessor must
	// still have the create revision the read saw: a key deleted and
	// created again under the same name (its owner released and, with the
	// same request id, enqueued again at once) is a different waiter, now
	// behind this one, and waiting on it would deadlock the two. The own
	// key must still carry this attempt's last write: anything else means
	// it is gone or another attempt took it over.
	e.at(ctx, pointWatch)
	pw := e.cli.Watch(wctx, w.pred, clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	ow := e.cli.Watch(wctx, w.own, clientv3.WithCreatedNotify())
	watches := 2
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(w.pred), "=", w.predRev),
		clientv3.Compare(clientv3.ModRevision(w.own), "=", w.ownMod),
	}
	var sw clientv3.WatchChan
	if w.session != "" {
		sw = e.cli.Watch(wctx, w.session, clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
		watches++
		cmps = append(cmps, clientv3.Compare(clientv3.Version(w.session), ">", 0))
	}
	created, parkedNow := 0, false
	onCreated := func() (changed bool) {
		if created++; created < watches {
			return false
		}
		e.at(ctx, pointCheck)
		resp, err := e.cli.Txn(ctx).If(cmps...).Commit()
		if err != nil || !resp.Succeeded {
			return true
		}
		if e.hooks != nil {
			parkedNow = true
			e.hooks.park(ctx, parked{pred: w.pred, predRev: w.predRev, own: w.own, ownMod: w.ownMod, session: w.session})
		}
		return false
	}
	defer func() {
		if parkedNow {
			e.hooks.unpark(ctx)
		}
	}()
	var events <-chan posEvent
	var resync <-chan struct{}
	if w.sub != nil {
		events, resync = w.sub.events, w.sub.resync
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.lost:
			return
		case <-resync:
			w.pos.known = false // re-read the queue ahead in full
			return
		case pe := <-events:
			// Someone ahead left: one fewer ahead. Deletions the last exact
			// count already saw (at or below asOf) are not counted twice.
			if pe.rev > w.pos.asOf {
				w.pos.asOf = pe.rev
				if pe.createRev < w.myRev {
					w.pos.n--
					w.report()
				}
			}
		case wr, ok := <-pw:
			if ok && wr.Created && wr.Err() == nil {
				if onCreated() {
					return
				}
				continue
			}
			if !ok || wr.Err() != nil || hasDelete(wr.Events) {
				return
			}
		case wr, ok := <-ow:
			if ok && wr.Created && wr.Err() == nil {
				if onCreated() {
					return
				}
				continue
			}
			if !ok || wr.Err() != nil || len(wr.Events) > 0 {
				return
			}
		case wr, ok := <-sw:
			if ok && wr.Created && wr.Err() == nil {
				if onCreated() {
					return
				}
				continue
			}
			if !ok || wr.Err() != nil || hasDelete(wr.Events) {
				return
			}
		}
	}
}

func hasDelete(evs []*clientv3.Event) bool {
	for _, ev := range evs {
		if ev.Type == mvccpb.DELETE {
			return true
		}
	}
	return false
}
