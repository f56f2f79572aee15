package locks

import (
	"context"
	"errors"

	"github.com/leasegate/leasegate/queue"
)

// errRouteChanged ends an observation of one target: the shard map changed.
var errRouteChanged = errors.New("the shard map changed")

// errDrained ends an observation of a draining shard: nobody leads there.
var errDrained = errors.New("the previous shard has no leader")

// Observe routes election for tenant now (a route's error is returned at
// once) and returns the observation: run, it calls send with the
// election's leader (nil: nobody) and on every change after, until ctx
// ends or send fails, and returns why it ended. It blocks.
//
// It follows the name across shard-map changes: whenever the router
// applies a new map it routes the name again and observes where it lives
// now. While the name drains from its previous shard, the leader is there
// until that shard has no key of the election left (a campaigner on the
// new shard is elected only then), so it observes the previous shard until
// it reports nobody, then the new one. send may see the same leader twice.
func (r *Router) Observe(ctx context.Context, tenant, election string) (func(ctx context.Context, send func(*queue.Leader) error) error, error) {
	changed := r.Changed() // before routing: a map applied in between re-routes
	t, err := r.route(ctx, tenant, queue.ElectionName(election))
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, send func(*queue.Leader) error) error {
		t, changed := t, changed // each run follows the name from the first route
		for {
			err := observeTarget(ctx, t, election, changed, send)
			if errors.Is(err, queue.ErrClosed) && ctx.Err() == nil {
				// The shard's engine closed: the map that removed it is
				// being applied.
				select {
				case <-changed:
					err = errRouteChanged
				case <-ctx.Done():
				}
			}
			if !errors.Is(err, errRouteChanged) || ctx.Err() != nil {
				return err
			}
			changed = r.Changed()
			if t, err = r.route(ctx, tenant, queue.ElectionName(election)); err != nil {
				return err
			}
		}
	}, nil
}

// observeTarget observes name on t (its previous shard first, while one
// leads there) until ctx ends, send fails or changed closes
// (errRouteChanged).
func observeTarget(ctx context.Context, t Target, name string, changed <-chan struct{}, send func(*queue.Leader) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-changed:
			cancel(errRouteChanged)
		case <-stop:
		}
	}()
	if p := t.Previous; p != nil {
		err := p.Engine.Observe(ctx, name, func(l *queue.Leader) error {
			if l == nil {
				return errDrained
			}
			return send(l)
		})
		if !errors.Is(err, errDrained) {
			return causeOr(ctx, err)
		}
	}
	return causeOr(ctx, t.Engine.Observe(ctx, name, send))
}

// causeOr is ctx's cause once ctx has ended, err otherwise.
func causeOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}
