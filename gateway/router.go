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
	// Prepare, when set, runs before a granted waiter is reported (the
	// shard router waits there for a draining cluster to let go of a name
	// that moved). It may block until ctx ends.
	Prepare func(ctx context.Context, name string) error
}

// call runs fn through the target's breaker.
func (t Target) call(ctx context.Context, fn func(context.Context) error) error {
	if t.Do == nil {
		return fn(ctx)
	}
	return t.Do(ctx, fn)
}

// Router maps lock names to shards.
type Router interface {
	// Route returns the shard where new waiters for name enqueue.
	Route(name string) (Target, error)
	// Lookup returns the shard with the given name, for ids that name it.
	Lookup(shard string) (Target, error)
	// All lists every shard, for sessions, which hold a lease on each.
	All() []Target
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
