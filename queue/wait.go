package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasegate/leasegate/internal/clock"
)

// wait blocks until the waiter is first, then grants. It registers with
// its name's hub (hub.go), which watches the whole name once for every
// local waiter and tells this one when it is first, when its key is gone
// or taken over, and where it stands; a session waiter also learns from
// the engine's session watch (sessions.go) that its session ended. The
// wait itself reads nothing from etcd.
func (e *Engine) wait(ctx context.Context, r *AcquireRequest, q *enqueued, began time.Time) (Grant, error) {
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if !q.h.Session || r.Heartbeat != nil {
		// The waiter's own lease must outlive the wait, and only the live
		// attempt renews it — after its caller proved it is still there:
		// without one it lapses within its TTL. A session waiter rides on
		// the attempt lease (attempt.go), but its caller is proved alike.
		stop := e.keepWaiterAlive(wctx, r, q, cancel)
		defer stop()
	}

	g, err := e.waitLoop(wctx, r, q, began)
	if err == nil {
		return g, nil
	}
	if wctx.Err() != nil {
		cause := context.Cause(wctx)
		if errors.Is(cause, ErrDetached) {
			e.forgetDetached(ctx, q)
		} else {
			// Leaving the queue starts at once but does not hold up the
			// answer: a slow etcd must not make a timed-out wait late.
			e.removeWaiterLater(ctx, q)
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
// which renews nothing of its own), on timers of the engine's clock: no
// goroutine waits between renewals. It ends the wait when the heartbeat
// fails. Every confirmed renewal moves the lease's known deadline (its
// send time + TTL), which lets the grant skip a renewal of its own. A lease
// that is gone needs no signal: its key goes with it, and the hub sees
// that. The returned func stops the renewals.
func (e *Engine) keepWaiterAlive(ctx context.Context, r *AcquireRequest, q *enqueued, end context.CancelCauseFunc) (stop func()) {
	every := max(q.ttl/3, 300*time.Millisecond)
	if q.h.Session {
		every = e.cfg.AttemptTTL / 3
	}
	var mu sync.Mutex
	var t clock.Timer
	stopped := false
	var tick func()
	arm := func() {
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			t = clock.AfterFunc(e.cfg.Clock, every, tick)
		}
	}
	tick = func() {
		if ctx.Err() != nil {
			return
		}
		if r.Heartbeat != nil {
			if err := r.Heartbeat(ctx); err != nil {
				end(fmt.Errorf("%w: %w", ErrCallerGone, err))
				return
			}
		}
		if !q.h.Session {
			// The keepalive leaves only for a lease the waiter still owns:
			// stop, which the wait runs before it returns a grant, and this
			// registration of the renewal with the lease pool are ordered by
			// mu. A renewal registered first is one a release of the grant
			// sees, and it revokes the lease instead of pooling it
			// (leasepool.go); one after stop sends nothing.
			mu.Lock()
			if stopped {
				mu.Unlock()
				return
			}
			done := e.pool.renew(q.h.Lease)
			mu.Unlock()
			e.leaseEvent(ctx, leaseWaitKeep, q.h.Lease, q.h.Revision)
			rctx, cancel := context.WithTimeout(ctx, every)
			_, deadline, err := e.renewLease(rctx, q.h.Lease)
			cancel()
			done()
			if errors.Is(err, errLeaseNotFound) {
				return
			}
			if err == nil {
				q.confirm(deadline)
			}
		}
		arm()
	}
	arm()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		if t != nil {
			t.Stop()
		}
	}
}

// positionEvery paces a waiter's position reports: at most one per
// positionEvery, but the move to 1 (next in line) at once. A queue of N
// draining at one grant per handoff would otherwise send about N²/2
// reports (every waiter, at every grant ahead of it): 45,000 for 300
// waiters. Paced, a waiter that waits t sends at most t/positionEvery + 2.
// A quarter second keeps a progress display live for a person and is
// long beside a handoff (milliseconds), so a fast queue is reported in
// jumps. It is measured on the real clock: it paces messages, not leases,
// and must not stall under a test's fake clock.
const positionEvery = 250 * time.Millisecond

// reporter paces one waiter's position reports.
type reporter struct {
	fn       func(int64)
	reported int64
	at       time.Time // when the last report went out (real clock)
	timer    *time.Timer
}

// offer reports position n now, or arms the timer to report later; the
// caller offers again when the timer fires. It reports whether a report
// is scheduled (the hub need not wake the waiter for position changes
// above 1 meanwhile).
func (p *reporter) offer(n int64) (paced bool) {
	if p.fn == nil || n == p.reported {
		return p.timer != nil
	}
	now := time.Now()
	if since := now.Sub(p.at); n == 1 || p.reported < 0 || since >= positionEvery {
		p.stopTimer()
		p.reported, p.at = n, now
		p.fn(n)
		return false
	} else if p.timer == nil {
		p.timer = time.NewTimer(positionEvery - since)
	}
	return true
}

func (p *reporter) stopTimer() {
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
}

func (p *reporter) fired() <-chan time.Time {
	if p.timer == nil {
		return nil
	}
	return p.timer.C
}

func (e *Engine) waitLoop(ctx context.Context, r *AcquireRequest, q *enqueued, began time.Time) (Grant, error) {
	prefix := e.keys.namePrefix(r.Name)
	key := prefix + q.h.WaiterID
	e.at(ctx, pointRegister)
	hw := e.hubs.register(ctx, prefix, e.keys.delayPrefix(r.Name), key, q.h.Revision, q.modRev, r.effectiveLimit(), r.OnQueued != nil)
	defer e.hubs.unregister(hw)
	var sessGone <-chan struct{}
	sessKey := ""
	if q.h.Session {
		// The session was proven in the transaction that wrote the
		// attempt's key (enqueue or takeover), at q.modRev.
		gone, stop := e.sess.watch(e.keys, q.h.Lease, q.modRev)
		defer stop()
		sessGone, sessKey = gone, e.keys.session(q.h.Lease)
	}
	rep := reporter{fn: r.OnQueued, reported: -1}
	defer rep.stopTimer()
	if q.ahead >= 0 {
		// While it waits, at least the key it waits behind is ahead.
		rep.offer(position(q.ahead, r.effectiveLimit()))
	}
	// The key right ahead (its create revision), for the wait span's
	// "predecessor.left" event: known from the enqueue when one key was
	// ahead, unknown (but some) when more were. A semaphore's waiter waits
	// on no one key: it has no predecessor event.
	lock := r.effectiveLimit() <= 1
	var pred int64
	predUnknown := lock && q.ahead > 1
	if lock && q.ahead == 1 && q.first != nil {
		pred = q.first.CreateRevision
	}
	waited := q.ahead > 0 && !q.holds // someone held its place: a grant is a handoff
	for {
		if err := ctx.Err(); err != nil {
			return Grant{}, err
		}
		st := hw.status()
		if st.err != nil {
			return Grant{}, st.err
		}
		if st.rev != 0 {
			if lock && (pred != 0 && st.pred != pred || predUnknown && st.ahead == 0) {
				e.predecessorLeft(ctx)
			}
			pred, predUnknown = st.pred, false
			if st.holds {
				if st.left == "" && lock && q.ahead == 1 && q.first != nil {
					// It left before the hub's view was built: the one key
					// ahead at the enqueue is the one that made it first.
					st.left = string(q.first.Key)
				}
				return e.grantFirst(ctx, r, q, hw, st, began, waited)
			}
			waited = true
			hw.setPaced(rep.offer(st.pos))
		}
		parkedNow := e.hooks != nil
		if parkedNow {
			e.hooks.park(ctx, parked{prefix: prefix, own: key, myRev: q.h.Revision, ownMod: q.modRev,
				limit: r.effectiveLimit(), session: sessKey, viewRev: hw.h.viewRev})
		}
		var err error
		select {
		case <-ctx.Done():
		case <-sessGone:
			err = fmt.Errorf("%w: session %x expired or was closed while it waited", ErrSessionLost, int64(q.h.Lease))
		case <-hw.wake:
		case <-rep.fired():
			rep.timer = nil
			hw.setPaced(false)
		}
		if parkedNow {
			e.hooks.unpark(ctx)
		}
		if err != nil {
			return Grant{}, err
		}
	}
}

// grantFirst grants a waiter the hub found holding at revision st.rev: no
// key created before its own existed then (for a semaphore of limit N:
// fewer than N, all of limit N), and none can be created later, so it
// holds until its own key goes (doc.go, "The name hub", "Semaphores").
func (e *Engine) grantFirst(ctx context.Context, r *AcquireRequest, q *enqueued, hw *hubWaiter, st hubStatus, began time.Time, waited bool) (Grant, error) {
	seen := e.cfg.Clock.Now() // when this waiter saw the last key ahead go
	if e.cfg.LossWait && !q.delays && !st.delayed {
		// Every holder had a record before its grant was answered, and
		// only a clean end deletes it with the key (loss.go): a record of
		// a key the view no longer has is a loss to wait out, whichever
		// key ahead left last and however the waiters between left.
		pending, err := hw.pendingRecords(ctx)
		if err != nil {
			return Grant{}, err
		}
		q.delays = pending
	}
	if q.delays || st.delayed {
		// An expired holder's lock-delay may be pending (delay.go).
		if _, err := e.awaitLockDelays(ctx, r.Name, true); err != nil {
			return Grant{}, err
		}
		if st := hw.status(); st.err != nil {
			return Grant{}, st.err
		}
	}
	if r.BeforeGrant != nil {
		if err := r.BeforeGrant(ctx); err != nil {
			return Grant{}, err
		}
		if st := hw.status(); st.err != nil {
			return Grant{}, st.err
		}
	}
	q.handoff = e.handoffOf(ctx, r.Name, st.left, q.h.Revision)
	q.firstAt = st.rev
	g, err := e.granted(ctx, r, q, began)
	if err == nil && waited {
		e.observeHandoff(ctx, seen)
	}
	return g, err
}
