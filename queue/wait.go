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
// deletion, on any watch failure (compaction, cancellation, lost leader)
// and when its lease may have been lost — never hangs on a dead watch.
func (e *Engine) wait(ctx context.Context, r *AcquireRequest, q *enqueued) (Grant, error) {
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
	if !q.h.Session {
		// The waiter's own lease must outlive the wait; a session lease is
		// kept alive by its owner.
		go e.keepWaiterAlive(wctx, q.h.Lease, q.ttl, lost)
	}

	g, err := e.waitLoop(wctx, r, q, lost)
	if err == nil {
		return g, nil
	}
	if wctx.Err() != nil {
		cause := context.Cause(wctx)
		if !errors.Is(cause, ErrDetached) {
			// Leaving the queue starts at once but does not hold up the
			// answer: a slow etcd must not make a timed-out wait late.
			e.removeWaiterLater(q.h)
		}
		if errors.Is(cause, ErrWaitTimeout) {
			return Grant{}, fmt.Errorf("%w after %s", ErrWaitTimeout, r.WaitTimeout)
		}
		if cause != nil {
			return Grant{}, cause
		}
		return Grant{}, ctx.Err()
	}
	if !errors.Is(err, ErrLeaseLost) {
		e.removeWaiterLater(q.h)
	}
	return Grant{}, err
}

// keepWaiterAlive renews a waiting per-lock lease every TTL/3. It signals
// lost when etcd says the lease is gone.
func (e *Engine) keepWaiterAlive(ctx context.Context, lease clientv3.LeaseID, ttl time.Duration, lost chan<- struct{}) {
	every := max(ttl/3, 300*time.Millisecond)
	for {
		t := e.cfg.Clock.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		rctx, cancel := context.WithTimeout(ctx, every)
		_, _, err := e.renewLease(rctx, lease)
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

func (e *Engine) waitLoop(ctx context.Context, r *AcquireRequest, q *enqueued, lost <-chan struct{}) (Grant, error) {
	prefix := e.keys.namePrefix(r.Name)
	key := prefix + q.h.WaiterID
	position := int64(-1)
	backoff := newBackoff(e.cfg.Clock)
	var sub *posSub
	defer func() {
		if sub != nil {
			e.pos.unsubscribe(prefix, sub)
		}
	}()
	var pred string    // the key last waited behind
	var woke time.Time // when the last wait for a change ended
	for {
		if err := ctx.Err(); err != nil {
			return Grant{}, err
		}
		resp, err := e.cli.Txn(ctx).Then(e.handoffRead([]clientv3.Op{
			clientv3.OpGet(key),
			clientv3.OpGet(prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
				clientv3.WithMaxCreateRev(q.h.Revision-1),
				clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend)),
		}, r.Name)...).Commit()
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
		ahead := resp.Responses[1].GetResponseRange().Kvs
		if pred != "" && (len(ahead) == 0 || string(ahead[0].Key) != pred) {
			e.predecessorLeft(ctx)
		}
		if len(ahead) == 0 {
			if r.BeforeGrant != nil {
				if err := r.BeforeGrant(ctx); err != nil {
					return Grant{}, err
				}
			}
			q.handoff = e.handoffFrom(resp, 2, pred, q.h.Revision)
			g, err := e.granted(ctx, q)
			if err == nil && pred != "" {
				e.observeHandoff(ctx, woke)
			}
			return g, err
		}
		readRev := resp.Header.Revision
		report := func(n int64) {
			if n != position {
				position = n
				if r.OnQueued != nil {
					r.OnQueued(n)
				}
			}
		}
		report(int64(len(ahead)))
		if sub == nil && r.OnQueued != nil {
			sub = e.pos.subscribe(prefix, readRev)
		}
		pred = string(ahead[0].Key)
		e.awaitChange(ctx, waitState{
			pred: pred, own: key, rev: readRev + 1, lost: lost,
			sub: sub, myRev: q.h.Revision, position: position, report: report,
		})
		woke = e.cfg.Clock.Now()
	}
}

// waitState is what awaitChange needs to know of a waiter.
type waitState struct {
	pred, own string
	rev       int64 // watch from here (the read's revision + 1)
	lost      <-chan struct{}
	sub       *posSub // nil when nobody asked for positions
	myRev     int64
	position  int64
	report    func(int64)
}

// awaitChange watches the predecessor and the waiter's own key from rev and
// returns when either is deleted, the watch fails, the lease may be lost or
// ctx ends. The caller re-reads in every case.
func (e *Engine) awaitChange(ctx context.Context, w waitState) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	// The watches start at the current revision, never at an older one:
	// etcd delivers events to a watch that has history to catch up on only
	// every 100 ms, which would delay a handoff. What happened between the
	// read and the watches is covered by checking, once both are created,
	// that the predecessor and the waiter's own key still exist.
	opts := []clientv3.OpOption{clientv3.WithFilterPut(), clientv3.WithCreatedNotify()}
	pw := e.cli.Watch(wctx, w.pred, opts...)
	ow := e.cli.Watch(wctx, w.own, opts...)
	created := 0
	onCreated := func() (gone bool) {
		if created++; created < 2 {
			return false
		}
		resp, err := e.cli.Txn(ctx).Then(
			clientv3.OpGet(w.pred, clientv3.WithCountOnly()),
			clientv3.OpGet(w.own, clientv3.WithCountOnly()),
		).Commit()
		return err != nil || resp.Responses[0].GetResponseRange().Count == 0 || resp.Responses[1].GetResponseRange().Count == 0
	}
	var events <-chan posEvent
	var resync <-chan struct{}
	if w.sub != nil {
		events, resync = w.sub.events, w.sub.resync
	}
	position := w.position
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.lost:
			return
		case <-resync:
			return
		case pe := <-events:
			// Someone ahead left: one fewer ahead. Deletions the last read
			// already saw (rev < w.rev) are not counted twice.
			if pe.rev >= w.rev && pe.createRev < w.myRev && position > 1 {
				position--
				w.report(position)
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
