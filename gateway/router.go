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
