package gateway

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasegate/leasegate/locks"
	"github.com/leasegate/leasegate/queue"
	"github.com/leasegate/leasegate/shard"
)

// ErrUnknownShard reports an id naming a shard this gateway does not know.
var ErrUnknownShard = locks.ErrUnknownShard

// route routes name (a lock's, or an election's engine name) for the
// caller, once per call: the tenant's policy
// must allow the name, the target points at the tenant's keys, the
// leasegate.route span records the router's choice and the call's record
// its shard.
func (s *Service) route(ctx context.Context, id Identity, name string) (locks.Target, error) {
	visible := name // an election is allowed by its own name
	if n, ok := queue.ElectionOf(name); ok {
		visible = n
	}
	if err := s.cfg.Policy.allows(id.Tenant, visible); err != nil {
		return locks.Target{}, err
	}
	t, err := s.router.Route(name, id.Tenant)
	s.tel.traceRoute(ctx, t, err)
	if err != nil {
		return t, err
	}
	recordOf(ctx).setShard(t.Shard)
	return t, nil
}

// lookup finds a shard by name for the caller's tenant.
func (s *Service) lookup(id Identity, shard string) (locks.Target, error) {
	return s.router.Lookup(shard, id.Tenant)
}

// call runs fn through t's circuit breaker and notes a refusal (or a
// half-open probe) on ctx's span. Every failure of the shard's cluster is
// reported unavailable (retryable) with a message naming the shard: the
// breaker's or the Reach's refusal as it is, the gateway's own request
// timeout as "did not answer in time" (not the caller's deadline as
// passed), and an etcd or transport failure without its internals.
func call(ctx context.Context, t locks.Target, fn func(context.Context) error) error {
	err := t.Call(ctx, fn)
	noteBreaker(ctx, t.Backend, err)
	return shardErr(ctx, t, err)
}

// freeing runs fn on t's cluster past its breaker but not past its Reach:
// for the calls that can only free what a caller holds (a release, a
// resignation, a session's revocation). A holder letting go is not made to
// wait out a breaker's open interval, nor to wait for a connection longer
// than any call does. Its errors read as call's.
func freeing(ctx context.Context, t locks.Target, fn func(context.Context) error) error {
	return shardErr(ctx, t, t.Backend.Reach.Call(ctx, fn))
}

// shardErr is err, of a call on t under ctx, as the gateway reports it.
func shardErr(ctx context.Context, t locks.Target, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, shard.ErrShardUnavailable):
		return ShardUnavailable(err)
	case errors.Is(context.Cause(ctx), errStoreTimeout):
		return ShardUnavailable(fmt.Errorf("shard %q did not answer in time", t.Shard))
	case ctx.Err() == nil && shard.IsClusterFailure(err):
		return ShardUnavailable(&clusterFailure{shard: t.Shard, err: err})
	}
	return err
}

// clusterFailure is an etcd or transport failure of a shard's cluster: its
// message names the shard and keeps etcd's words for the logs, while
// errors.Is still sees them.
type clusterFailure struct {
	shard string
	err   error
}

func (e *clusterFailure) Error() string {
	return fmt.Sprintf("shard %q: its etcd cluster failed the call; retry", e.shard)
}

func (e *clusterFailure) Unwrap() error { return e.err }
