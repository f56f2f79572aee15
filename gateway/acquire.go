package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/leasegate/leasegate/locks"
	"github.com/leasegate/leasegate/queue"
)

// reshardWait bounds how long a call waits for a new shard map after a
// shard refused its enqueue.
const reshardWait = 5 * time.Second

// acquire enqueues (through the shard's breaker) and waits (outside it: a
// long wait says nothing about the cluster's health). A name draining from
// its previous shard first looks for the caller's old place there; a new
// waiter is granted only once the previous shard has let go of the name.
// A shard that refuses the enqueue because the map moved on makes the
// router reload, and the call is routed again.
func (s *Service) acquire(ctx context.Context, id Identity, t locks.Target, r queue.AcquireRequest, sess *SessionID) (locks.Target, queue.Grant, error) {
	for attempt := 0; ; attempt++ {
		if p := t.Previous; p != nil {
			var w *queue.Waiter
			var err error
			if pr, ok := asOnShard(r, p, sess); ok {
				rctx, cancel := s.storeTimeout(ctx)
				err = call(rctx, *p, func(ctx context.Context) error {
					var err error
					w, err = p.Engine.Resume(ctx, pr)
					return err
				})
				cancel()
			}
			if err != nil {
				return t, queue.Grant{}, err
			}
			if w != nil {
				g, err := w.Wait(ctx)
				return *p, g, err
			}
			name, onQueued := r.Name, r.OnQueued
			r.BeforeGrant = func(ctx context.Context) error {
				// First here, but the name's keys on the draining shard are
				// all ahead (report them as the position), and so are the
				// lock-delays and loss waits its holders left there.
				return p.Engine.WaitEmpty(ctx, name, onQueued)
			}
		}
		if err := s.checkKeys(ctx, id, t); err != nil {
			return t, queue.Grant{}, err
		}
		// The enqueue is one bounded round trip; only the wait after it is
		// unbounded (by anything but the caller and its wait timeout).
		var w *queue.Waiter
		ectx, cancel := s.storeTimeout(ctx)
		err := call(ectx, t, func(ctx context.Context) error {
			var err error
			w, err = t.Engine.Enqueue(ctx, r)
			return err
		})
		cancel()
		if errors.Is(err, queue.ErrGuardFailed) && attempt < 3 {
			if t, err = s.reroute(ctx, id, t, &r, sess); err != nil {
				return t, queue.Grant{}, err
			}
			continue
		}
		if err != nil {
			return t, queue.Grant{}, err
		}
		g, err := w.Wait(ctx)
		return t, g, err
	}
}

// asOnShard is r as it was enqueued on shard p: a session acquire rides on
// the session's lease there (a session without one has no waiter there).
func asOnShard(r queue.AcquireRequest, p *locks.Target, sess *SessionID) (queue.AcquireRequest, bool) {
	if sess == nil {
		return r, true
	}
	lease, ok := sess.Lease(p.Shard)
	r.Session = lease
	return r, ok
}

// reroute waits for a newer map and routes the request again.
func (s *Service) reroute(ctx context.Context, id Identity, t locks.Target, r *queue.AcquireRequest, sess *SessionID) (locks.Target, error) {
	actx, cancel := s.withTimeout(ctx, reshardWait, nil)
	defer cancel()
	if err := s.router.AwaitNewer(actx, t.Epoch); err != nil {
		return t, errors.Join(queue.ErrGuardFailed, err)
	}
	r.BeforeGrant = nil
	return s.target(ctx, id, r, sess)
}

// tryAcquire grants the lock only if it is free, on the shard the name
// lives on now and on the shard it drains from.
func (s *Service) tryAcquire(ctx context.Context, id Identity, t locks.Target, r queue.AcquireRequest, sess *SessionID) (locks.Target, queue.TryResult, error) {
	for attempt := 0; ; attempt++ {
		if p := t.Previous; p != nil {
			// A retry of a TryAcquire granted on the draining shard finds
			// its grant there, as an Acquire would.
			var res queue.TryResult
			var found bool
			pr, ok := asOnShard(r, p, sess)
			if err := call(ctx, *p, func(ctx context.Context) error {
				if !ok {
					return nil
				}
				w, err := p.Engine.Resume(ctx, pr)
				if err != nil || w == nil {
					return err
				}
				found = true
				res, err = w.Try(ctx)
				return err
			}); err != nil {
				return t, queue.TryResult{}, err
			}
			if found {
				return *p, res, nil
			}
			var busy bool
			if err := call(ctx, *p, func(ctx context.Context) error {
				var err error
				busy, err = p.Engine.Occupied(ctx, r.Name)
				return err
			}); err != nil {
				return t, queue.TryResult{}, err
			}
			if busy {
				var d queue.Description
				err := call(ctx, *p, func(ctx context.Context) error {
					var err error
					d, err = p.Engine.Describe(ctx, r.Name)
					return err
				})
				return *p, queue.TryResult{Holder: d.Holder}, err
			}
			// A holder that left the draining shard without a clean end
			// withholds the name here for as long as it would there.
			var until time.Time
			if err := call(ctx, *p, func(ctx context.Context) error {
				var err error
				until, err = p.Engine.PendingDelay(ctx, r.Name)
				return err
			}); err != nil {
				return t, queue.TryResult{}, err
			}
			if !until.IsZero() {
				return *p, queue.TryResult{DelayedUntil: until}, nil
			}
		}
		if err := s.checkKeys(ctx, id, t); err != nil {
			return t, queue.TryResult{}, err
		}
		var res queue.TryResult
		err := call(ctx, t, func(ctx context.Context) error {
			var err error
			res, err = t.Engine.TryAcquire(ctx, r)
			return err
		})
		if errors.Is(err, queue.ErrGuardFailed) && attempt < 3 {
			if t, err = s.reroute(ctx, id, t, &r, sess); err != nil {
				return t, queue.TryResult{}, err
			}
			continue
		}
		return t, res, err
	}
}
