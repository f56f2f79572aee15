package gateway

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/queue"
)

// Target is the shard one call goes to.
type Target struct {
	// Shard names the etcd cluster.
	Shard string
	// Engine is the lock engine over that cluster.
	Engine *queue.Engine
	// Epoch is the shard-map epoch new waiters are enqueued under.
	Epoch uint16
	// Guards fence new enqueues (see queue.AcquireRequest.Guards).
	Guards []clientv3.Cmp
	// Do runs fn through the shard's circuit breaker; nil runs fn directly.
	Do func(ctx context.Context, fn func(context.Context) error) error
	// ForTenant returns the engine for a tenant's keys on this shard; nil
	// means the shard serves only the unnamed tenant.
	ForTenant func(tenant string) (*queue.Engine, error)
	// Previous is the shard the name is moving away from while it drains;
	// nil when the name did not move. A waiter on this shard is granted
	// only once Previous holds no key of the name.
	Previous *Target
}

// forTenant points the target (and its previous shard) at tenant's keys.
func (t Target) forTenant(tenant string) (Target, error) {
	if tenant == "" {
		return t, nil
	}
	if t.ForTenant == nil {
		return t, fmt.Errorf("%w: this gateway serves no tenants", ErrForbidden)
	}
	e, err := t.ForTenant(tenant)
	if err != nil {
		return t, err
	}
	t.Engine = e
	if t.Previous != nil {
		p, err := t.Previous.forTenant(tenant)
		if err != nil {
			return t, err
		}
		t.Previous = &p
	}
	return t, nil
}

// call runs fn through the target's breaker. When the gateway's own
// request timeout ends the call, the shard is reported unavailable
// (retryable), not the caller's deadline as passed.
func (t Target) call(ctx context.Context, fn func(context.Context) error) error {
	var err error
	if t.Do == nil {
		err = fn(ctx)
	} else {
		err = t.Do(ctx, fn)
	}
	if err != nil && errors.Is(context.Cause(ctx), errStoreTimeout) {
		return ShardUnavailable(fmt.Errorf("shard %q did not answer in time", t.Shard))
	}
	return err
}

// Router maps lock names to shards.
type Router interface {
	// Route returns the shard where new waiters for name enqueue.
	Route(name string) (Target, error)
	// Lookup returns the shard with the given name, for ids that name it.
	Lookup(shard string) (Target, error)
	// All lists every shard, for sessions, which hold a lease on each.
	All() []Target
	// AwaitNewer is called after a shard refused an enqueue routed by
	// epoch; it returns once the router routes by a newer map, or with an
	// error when ctx ends first.
	AwaitNewer(ctx context.Context, epoch uint16) error
}

// ErrUnknownShard reports an id naming a shard this gateway does not know.
var ErrUnknownShard = errors.New("unknown shard")

// SingleRouter routes every name to one engine.
type SingleRouter struct {
	// T is the only shard.
	T Target
}

// Route returns the only shard.
func (r SingleRouter) Route(string) (Target, error) { return r.T, nil }

// Lookup returns the only shard if its name matches.
func (r SingleRouter) Lookup(shard string) (Target, error) {
	if shard != r.T.Shard {
		return Target{}, fmt.Errorf("%w %q", ErrUnknownShard, shard)
	}
	return r.T, nil
}

// All returns the only shard.
func (r SingleRouter) All() []Target { return []Target{r.T} }

// AwaitNewer fails at once: a single shard has no map to reload.
func (r SingleRouter) AwaitNewer(context.Context, uint16) error {
	return fmt.Errorf("%w: the shard refused the enqueue and there is no map to reload", queue.ErrGuardFailed)
}
