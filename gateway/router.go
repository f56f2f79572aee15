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
// half-open probe) on ctx's span. When the gateway's own request timeout
// ends the call, the shard is reported unavailable (retryable), not the
// caller's deadline as passed.
func call(ctx context.Context, t locks.Target, fn func(context.Context) error) error {
	err := t.Call(ctx, fn)
	noteBreaker(ctx, t.Backend, err)
	if errors.Is(err, shard.ErrShardUnavailable) {
		err = ShardUnavailable(err)
	}
	if err != nil && errors.Is(context.Cause(ctx), errStoreTimeout) {
		return ShardUnavailable(fmt.Errorf("shard %q did not answer in time", t.Shard))
	}
	return err
}
