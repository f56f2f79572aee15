package locks

import (
	"context"
	"errors"
	"time"

	"github.com/leasegate/leasegate/queue"
)

// Reads of one name, routed by the shard map. While a name drains from a
// previous shard, its holder is there until that shard holds no key of
// it; a lock-delay or loss wait its holders left there withholds it on
// the new shard too.

// route routes name for tenant, noting and tracing the route (routed).
func (r *Router) route(ctx context.Context, tenant, name string) (Target, error) {
	t, err := r.Route(name, tenant)
	routed(ctx, t, err)
	return t, err
}

// holder routes name and, while it drains from a previous shard that
// still has keys of it, returns that shard: where its holder is. The
// previous shard's check is bounded by ctx.
func (r *Router) holder(ctx context.Context, tenant, name string) (Target, error) {
	t, err := r.route(ctx, tenant, name)
	if err != nil {
		return t, err
	}
	if p := t.Previous; p != nil {
		busy, err := do(ctx, *p, func(ctx context.Context) (bool, error) { return p.Engine.Occupied(ctx, name) })
		if err != nil {
			return t, err
		}
		if busy {
			return *p, nil
		}
	}
	return t, nil
}

// Describe reports name's holders and queue, and the shard that holds
// them; one call bounded by RequestTimeout.
func (r *Router) Describe(ctx context.Context, tenant, name string) (shard string, d queue.Description, err error) {
	ctx, cancel := r.Bound(ctx)
	defer cancel()
	t, err := r.holder(ctx, tenant, name)
	if err != nil {
		return "", d, err
	}
	if d, err = do(ctx, t, func(ctx context.Context) (queue.Description, error) { return t.Engine.Describe(ctx, name) }); err != nil {
		return t.Shard, d, err
	}
	if p := t.Previous; p != nil && len(d.Holders) == 0 {
		// The name drains from p with no key left there: a lock-delay or
		// loss wait its holders left there withholds it here too.
		until, err := do(ctx, *p, func(ctx context.Context) (time.Time, error) { return p.Engine.PendingDelay(ctx, name) })
		if err != nil {
			return t.Shard, d, err
		}
		if until.After(d.DelayUntil) {
			d.DelayUntil = until
		}
	}
	return t.Shard, d, nil
}

// DescribeQueue reports the holders and waiters of name (a lock's, or
// with election an election's) in queue order, from the shard that holds
// them; one call bounded by RequestTimeout.
func (r *Router) DescribeQueue(ctx context.Context, tenant, name string, election bool) (Lock, error) {
	ctx, cancel := r.Bound(ctx)
	defer cancel()
	key := name
	if election {
		key = queue.ElectionName(name)
	}
	t, err := r.holder(ctx, tenant, key)
	if err != nil {
		return Lock{}, err
	}
	info, err := do(ctx, t, func(ctx context.Context) (queue.LockInfo, error) { return t.Engine.DescribeQueue(ctx, key) })
	return Lock{Shard: t.Shard, Breaker: t.Backend.Breaker.State().String(), LockInfo: info}, err
}

// CheckFence answers whether token is name's live holder's right now,
// and the current holder's token (0: none); a holder on the shard the
// name drains from is the live one. One call bounded by RequestTimeout.
func (r *Router) CheckFence(ctx context.Context, tenant, name string, token int64) (live bool, current int64, err error) {
	type fence struct {
		live    bool
		current int64
	}
	f, err := drainingFirst(ctx, r, tenant, name, func(ctx context.Context, e *queue.Engine) (fence, error) {
		live, current, err := e.CheckFence(ctx, name, token)
		return fence{live, current}, err
	}, func(f fence, err error) bool { return err != nil || f.current != 0 })
	return f.live, f.current, err
}

// Leader reports election's leader (queue.ErrNoLeader: nobody leads);
// one call bounded by RequestTimeout. While the name drains from its
// previous shard, its leader may still be there; nobody leads on the new
// one before it has let go.
func (r *Router) Leader(ctx context.Context, tenant, election string) (*queue.Leader, error) {
	return drainingFirst(ctx, r, tenant, queue.ElectionName(election), func(ctx context.Context, e *queue.Engine) (*queue.Leader, error) {
		return e.Leader(ctx, election)
	}, func(_ *queue.Leader, err error) bool { return !errors.Is(err, queue.ErrNoLeader) })
}

// drainingFirst routes name and reads it with read, bounded by
// RequestTimeout: while it drains from a previous shard, there first — what
// that shard still has is the live state — and on the current shard only
// when the previous one's answer is not settled by it.
func drainingFirst[T any](ctx context.Context, r *Router, tenant, name string, read func(context.Context, *queue.Engine) (T, error), settled func(T, error) bool) (v T, err error) {
	t, err := r.route(ctx, tenant, name)
	if err != nil {
		return v, err
	}
	ctx, cancel := r.Bound(ctx)
	defer cancel()
	for _, c := range []*Target{t.Previous, &t} {
		if c == nil {
			continue
		}
		if v, err = do(ctx, *c, func(ctx context.Context) (T, error) { return read(ctx, c.Engine) }); settled(v, err) {
			break
		}
	}
	return v, err
}

// ForceRelease evicts name's holder, on the shard that holds it, and
// records why; one call bounded by RequestTimeout. It returns that shard.
func (r *Router) ForceRelease(ctx context.Context, tenant string, req queue.ForceReleaseRequest) (string, queue.ForceReleaseResult, error) {
	ctx, cancel := r.Bound(ctx)
	defer cancel()
	t, err := r.holder(ctx, tenant, req.Name)
	if err != nil {
		return "", queue.ForceReleaseResult{}, err
	}
	res, err := do(ctx, t, func(ctx context.Context) (queue.ForceReleaseResult, error) { return t.Engine.ForceRelease(ctx, req) })
	return t.Shard, res, err
}
