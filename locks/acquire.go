package locks

import (
	"context"
	"errors"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/internal/clock"
	"github.com/leasegate/leasegate/queue"
)

// reshardWait bounds how long a call waits for a new shard map after a
// shard refused its enqueue.
const reshardWait = 5 * time.Second

// rerouteAttempts is how often one call routes again after a shard
// refused its enqueue because the map moved on.
const rerouteAttempts = 3

// ErrNoSessionLease reports a session acquire whose session holds no
// lease on the shard the name lives on: not a lost session, but one
// opened while the shard was down, or before it joined the map. The
// session can be extended to the shard and the call retried.
var ErrNoSessionLease = errors.New("the session has no lease on the name's shard")

// Leases are a session's leases, one per shard.
type Leases interface {
	// Lease returns the session's lease on shard, if it has one.
	Lease(shard string) (clientv3.LeaseID, bool)
}

// Acquire is one acquire of a name over the shard map.
type Acquire struct {
	// Tenant whose key space the name is in; "" is the unnamed tenant's.
	Tenant string
	// Request is the engine's request. Its Epoch, Guards and Session are
	// the fleet's to fill in for the shard it goes to; BeforeGrant too,
	// while the name drains from a previous shard.
	Request queue.AcquireRequest
	// Session, when set, holds the session's leases: the request rides on
	// the one of each shard it goes to.
	Session Leases
	// KeyCap caps the keys the tenant may have on the shard the request
	// goes to (ErrKeyCap); 0 is no cap.
	KeyCap int
	// Election makes the acquire a campaign in the election
	// Request.Name: it queues under the election's own name
	// (queue.ElectionName), apart from any lock's.
	Election bool
}

// Validate checks a.Request as the engine will (queue.AcquireRequest.Validate),
// as a campaign when a.Election and riding on a.Session, reading no etcd:
// a caller that calls it before it routes a refuses a bad request even
// while the shard is down.
func (a Acquire) Validate() error {
	req := a.request()
	return req.Validate(a.Session != nil)
}

// request is a.Request under the name it queues under.
func (a Acquire) request() queue.AcquireRequest {
	req := a.Request
	if a.Election {
		req.Name = queue.ElectionName(req.Name)
	}
	return req
}

// Acquire enqueues r.Request on the shard that owns its name (one bounded
// round trip through the shard's breaker) and waits (outside it: a long
// wait says nothing about the cluster's health) until it is granted or
// ctx ends. It returns the shard that granted it. The handover of a
// resharding is handover's.
func (r *Router) Acquire(ctx context.Context, a Acquire) (shard string, g queue.Grant, err error) {
	previous := func(ctx context.Context, p Target, req *queue.AcquireRequest) (*queue.Waiter, bool, error) {
		if pr, ok := onShard(*req, p, a.Session); ok {
			rctx, cancel := r.Bound(ctx)
			w, err := do(rctx, p, func(ctx context.Context) (*queue.Waiter, error) { return p.Engine.Resume(ctx, pr) })
			cancel()
			if err != nil || w != nil {
				return w, err == nil, err
			}
		}
		name, onQueued := req.Name, req.OnQueued
		req.BeforeGrant = func(ctx context.Context) error {
			// First here, but the name's keys on the draining shard are
			// all ahead (report them as the position), and so are the
			// lock-delays and loss waits its holders left there.
			return p.Engine.WaitEmpty(ctx, name, onQueued)
		}
		return nil, false, nil
	}
	enqueue := func(ctx context.Context, t Target, req queue.AcquireRequest) (*queue.Waiter, error) {
		ectx, cancel := r.Bound(ctx)
		defer cancel()
		return do(ectx, t, func(ctx context.Context) (*queue.Waiter, error) { return t.Engine.Enqueue(ctx, req) })
	}
	t, w, err := handover(ctx, r, a, previous, enqueue)
	if err != nil {
		return t.Shard, queue.Grant{}, err
	}
	g, err = w.Wait(ctx)
	return t.Shard, g, err
}

// TryAcquire grants r.Request only if its name is free, on the shard the
// name lives on now and on the shard it drains from; the whole call is
// bounded by RequestTimeout. It returns the shard that answered.
func (r *Router) TryAcquire(ctx context.Context, a Acquire) (shard string, res queue.TryResult, err error) {
	ctx, cancel := r.Bound(ctx)
	defer cancel()
	previous := func(ctx context.Context, p Target, req *queue.AcquireRequest) (queue.TryResult, bool, error) {
		// A retry of a TryAcquire granted on the draining shard finds its
		// grant there, as an Acquire would.
		var res queue.TryResult
		var found bool
		pr, ok := onShard(*req, p, a.Session)
		if err := p.Backend.call(ctx, func(ctx context.Context) error {
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
		}); err != nil || found {
			return res, found && err == nil, err
		}
		busy, err := do(ctx, p, func(ctx context.Context) (bool, error) { return p.Engine.Occupied(ctx, req.Name) })
		if err != nil {
			return queue.TryResult{}, false, err
		}
		if busy {
			d, err := do(ctx, p, func(ctx context.Context) (queue.Description, error) { return p.Engine.Describe(ctx, req.Name) })
			return queue.TryResult{Holder: d.Holder}, true, err
		}
		// A holder that left the draining shard without a clean end
		// withholds the name here for as long as it would there.
		until, err := do(ctx, p, func(ctx context.Context) (time.Time, error) { return p.Engine.PendingDelay(ctx, req.Name) })
		if err != nil || !until.IsZero() {
			return queue.TryResult{DelayedUntil: until}, err == nil, err
		}
		return queue.TryResult{}, false, nil
	}
	try := func(ctx context.Context, t Target, req queue.AcquireRequest) (queue.TryResult, error) {
		return do(ctx, t, func(ctx context.Context) (queue.TryResult, error) { return t.Engine.TryAcquire(ctx, req) })
	}
	t, res, err := handover(ctx, r, a, previous, try)
	return t.Shard, res, err
}

// Existing finds the grant made under a's request id for its caller while
// it holds (queue.Engine.Existing), on the shard the name drains from and
// then on the shard that owns it; it writes nothing. The call is bounded
// by RequestTimeout. It returns the shard that answered.
func (r *Router) Existing(ctx context.Context, a Acquire) (shard string, g queue.Grant, found bool, err error) {
	ctx, cancel := r.Bound(ctx)
	defer cancel()
	req := a.request()
	// A session without a lease on the shard the name lives on has no key
	// there, and may still hold it on the shard it drains from: onShard
	// leaves out every shard the session has no lease on.
	t, err := r.routeAcquire(ctx, a, &req)
	if err != nil && !errors.Is(err, ErrNoSessionLease) {
		return t.Shard, queue.Grant{}, false, err
	}
	targets := []Target{t}
	if p := t.Previous; p != nil {
		targets = []Target{*p, t}
	}
	for i, t := range targets {
		pr, ok := onShard(req, t, a.Session)
		if !ok {
			continue
		}
		var g queue.Grant
		var found bool
		err := t.Backend.call(ctx, func(ctx context.Context) error {
			var err error
			g, found, err = t.Engine.Existing(ctx, pr)
			return err
		})
		if err == nil && found && i == 1 && !g.Handle.Session {
			// A key of its own lease first on this shard is granted only
			// once the shard the name drains from has let go of it
			// (BeforeGrant); until then, by its place or its holder
			// record written with it, it only looks granted. A session's
			// key is moved onto its session lease only after that.
			p := targets[0]
			drained, derr := do(ctx, p, func(ctx context.Context) (bool, error) { return p.Engine.Drained(ctx, req.Name) })
			if derr != nil || !drained {
				return t.Shard, queue.Grant{}, false, derr
			}
		}
		if err != nil || found {
			return t.Shard, g, found, err
		}
	}
	return t.Shard, queue.Grant{}, false, nil
}

// handover runs one acquire over the shard map; it is the resharding
// handover, for Acquire and TryAcquire alike:
//
//  1. Route the name (routeAcquire): the shard that owns it now, the
//     epoch and guard to enqueue under, the session's lease there.
//  2. While the name drains from a previous shard, ask that shard first
//     (previous): a retry finds its place there, and a new waiter is
//     granted only once the previous shard has let go of the name.
//     previous answers done when the previous shard settled the call
//     (a waiter resumed there, a TryAcquire answered there), whose answer
//     is then that shard's.
//  3. Admit the call on the current shard under the tenant's key cap
//     (Acquire.KeyCap).
//  4. Enqueue on the current shard (enqueue).
//  5. A shard that refuses the enqueue because the map moved on
//     (queue.ErrGuardFailed) makes the router load a newer map; the call
//     is routed again and goes on from step 2, at most rerouteAttempts
//     times.
//
// An error is the current shard's unless previous settled the call.
func handover[W any](ctx context.Context, r *Router, a Acquire,
	previous func(ctx context.Context, p Target, req *queue.AcquireRequest) (W, bool, error),
	enqueue func(ctx context.Context, t Target, req queue.AcquireRequest) (W, error),
) (Target, W, error) {
	var zero W
	req := a.request()
	t, err := r.routeAcquire(ctx, a, &req)
	if err != nil {
		return t, zero, err
	}
	for attempt := 0; ; attempt++ {
		if p := t.Previous; p != nil {
			v, done, err := previous(ctx, *p, &req)
			if done {
				return *p, v, err
			}
			if err != nil {
				return t, zero, err
			}
		}
		if err := r.checkKeys(ctx, a.Tenant, t, a.KeyCap); err != nil {
			return t, zero, err
		}
		w, err := enqueue(ctx, t, req)
		if errors.Is(err, queue.ErrGuardFailed) && attempt < rerouteAttempts {
			if t, err = r.reroute(ctx, a, t, &req); err != nil {
				return t, zero, err
			}
			continue
		}
		return t, w, err
	}
}

// routeAcquire routes req's name and fills in req for the shard it goes
// to.
func (r *Router) routeAcquire(ctx context.Context, a Acquire, req *queue.AcquireRequest) (Target, error) {
	t, err := r.Route(req.Name, a.Tenant)
	routed(ctx, t, err)
	if err != nil {
		return t, err
	}
	req.Epoch, req.Guards = t.Epoch, t.Guards
	if a.Session != nil {
		lease, ok := a.Session.Lease(t.Shard)
		if !ok {
			return t, ErrNoSessionLease
		}
		req.Session = lease
	}
	return t, nil
}

// reroute waits for a map newer than the one t was routed by and routes
// the request again.
func (r *Router) reroute(ctx context.Context, a Acquire, t Target, req *queue.AcquireRequest) (Target, error) {
	actx, cancel := clock.WithTimeoutCause(ctx, r.cfg.Clock, reshardWait, nil)
	defer cancel()
	if err := r.AwaitNewer(actx, t.Epoch); err != nil {
		return t, errors.Join(queue.ErrGuardFailed, err)
	}
	req.BeforeGrant = nil
	return r.routeAcquire(ctx, a, req)
}

// onShard is req as it was enqueued on shard p: a session acquire rides on
// the session's lease there (a session without one has no waiter there).
func onShard(req queue.AcquireRequest, p Target, sess Leases) (queue.AcquireRequest, bool) {
	if sess == nil {
		return req, true
	}
	lease, ok := sess.Lease(p.Shard)
	req.Session = lease
	return req, ok
}

// Abandon gives up g, a grant of tenant's on shard that never reached its
// caller, while the attempt that got it still owns it: a retry that took
// the key over keeps it (queue.Engine.Abandon).
func (r *Router) Abandon(ctx context.Context, tenant, shard string, g queue.Grant) {
	if t, err := r.Lookup(shard, tenant); err == nil {
		t.Engine.Abandon(ctx, g)
	}
}
