package locks

import (
	"context"

	"github.com/leasegate/leasegate/queue"
)

// Held is a lock (or an election's term) as its id names it: its handle
// and the shard that granted it. A lock stays on that shard however the
// map has changed since, so a held lock is found by its shard, never
// routed by its name.
type Held struct {
	r *Router
	t Target
	h queue.Handle
}

// Held finds the lock h of tenant's on shard and notes the shard in ctx's
// Note. A shard this router does not know is ErrUnknownShard.
// It reads no etcd.
func (r *Router) Held(ctx context.Context, tenant, shard string, h queue.Handle) (Held, error) {
	t, err := r.Lookup(shard, tenant)
	if err != nil {
		return Held{}, err
	}
	note(ctx, t.Shard)
	return Held{r: r, t: t, h: h}, nil
}

// Shard names the shard that holds the lock.
func (l Held) Shard() string { return l.t.Shard }

// Election reports whether the lock is an election's term (a leader id's),
// not a lock's.
func (l Held) Election() bool {
	_, ok := queue.ElectionOf(l.h.Name)
	return ok
}

// Renew extends the lock's lease while token holds it; one call bounded
// by RequestTimeout.
func (l Held) Renew(ctx context.Context, token int64) (queue.Renewal, error) {
	ctx, cancel := l.r.Bound(ctx)
	defer cancel()
	return do(ctx, l.t, func(ctx context.Context) (queue.Renewal, error) { return l.t.Engine.Renew(ctx, l.h, token) })
}

// Release frees the lock and reports whether token still held it; one
// call bounded by RequestTimeout, past the shard's breaker (a holder
// letting go does not wait out an open breaker).
func (l Held) Release(ctx context.Context, token int64) (bool, error) {
	ctx, cancel := l.r.Bound(ctx)
	defer cancel()
	return via(ctx, l.t.Backend.freeing, func(ctx context.Context) (bool, error) { return l.t.Engine.Release(ctx, l.h, token) })
}

// Proclaim replaces the leader's value while the term lasts; one call
// bounded by RequestTimeout.
func (l Held) Proclaim(ctx context.Context, value []byte) error {
	ctx, cancel := l.r.Bound(ctx)
	defer cancel()
	return l.t.Backend.call(ctx, func(ctx context.Context) error { return l.t.Engine.Proclaim(ctx, l.h, value) })
}

// AwaitEnd blocks until the lock ends or ctx does, and tells how it ended
// (queue.Engine.AwaitEnd). It goes through no breaker: it is one long
// wait that costs the cluster nothing while the lock is held.
func (l Held) AwaitEnd(ctx context.Context, token int64) (queue.End, error) {
	return l.t.Engine.AwaitEnd(ctx, l.h, token)
}
