package gateway

import (
	"context"

	"github.com/leasegate/leasegate/locks"
)

// ErrUnknownShard reports an id naming a shard this gateway does not know.
var ErrUnknownShard = locks.ErrUnknownShard

// allow checks that the caller's tenant's policy allows name (an
// election's own name for an election), before a call routes it.
func (s *Service) allow(id Identity, name string) error {
	return s.cfg.Policy.allows(id.Tenant, name)
}

// admit is the fleet's Admit for the caller: the tenant's key cap on each
// shard a call stores something new on.
func (s *Service) admit(id Identity) locks.Admit {
	return func(ctx context.Context, shard string, count func(context.Context) (int64, error)) error {
		return s.lim.checkKeys(ctx, id.Tenant+"@"+shard, count)
	}
}

// routeObserver is a call's locks.Observer: it traces the fleet's route
// (a leasegate.route span) and records the call's shard as the fleet
// routes it.
type routeObserver struct {
	tel *telemetry
	rec *callRecord
}

func (o routeObserver) Routed(ctx context.Context, t locks.Target, err error) {
	o.tel.traceRoute(ctx, t, err)
	if err == nil {
		o.rec.setShard(t.Shard)
	}
}

func (o routeObserver) Found(_ context.Context, shard string) { o.rec.setShard(shard) }
