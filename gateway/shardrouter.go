package gateway

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/shard"
)

// ShardRouter routes by a shard.Router: names hashed over several etcd
// clusters, each behind its own circuit breaker.
type ShardRouter struct {
	// R is the shard map follower.
	R *shard.Router
}

func backendTarget(b *shard.Backend) Target {
	return Target{
		Shard:     b.Name,
		Engine:    b.Engine,
		ForTenant: b.TenantEngine,
		Do: func(ctx context.Context, fn func(context.Context) error) error {
			err := b.Breaker.Execute(ctx, fn)
			noteBreaker(ctx, b, err)
			if errors.Is(err, shard.ErrShardUnavailable) {
				return ShardUnavailable(err)
			}
			return err
		},
	}
}

// Route returns the shard name's new waiters enqueue on, with the epoch
// guard and, while the name drains from its previous shard, that shard.
func (r ShardRouter) Route(name string) (Target, error) {
	rt, err := r.R.Route(name)
	if err != nil {
		return Target{}, err
	}
	if rt.Backend == nil {
		return Target{}, ShardUnavailable(fmt.Errorf("no client for the shard that owns the name"))
	}
	t := backendTarget(rt.Backend)
	t.Epoch, t.Guards = rt.Epoch, []clientv3.Cmp{rt.Guard}
	if rt.Previous != nil {
		p := backendTarget(rt.Previous)
		t.Previous = &p
	}
	return t, nil
}

// Lookup returns a shard by name, including shards that only drain.
func (r ShardRouter) Lookup(name string) (Target, error) {
	b, ok := r.R.Backend(name)
	if !ok {
		return Target{}, fmt.Errorf("%w %q", ErrUnknownShard, name)
	}
	return backendTarget(b), nil
}

// All lists the shards names are hashed over.
func (r ShardRouter) All() []Target {
	var out []Target
	for _, b := range r.R.Backends() {
		out = append(out, backendTarget(b))
	}
	return out
}

// AwaitNewer reloads the map until one newer than epoch is in force.
func (r ShardRouter) AwaitNewer(ctx context.Context, epoch uint16) error {
	return r.R.AwaitNewer(ctx, epoch)
}
