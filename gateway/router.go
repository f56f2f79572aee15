package gateway

import (

	"github.com/leasegate/leasegate/locks"
)

// ErrUnknownShard reports an id naming a shard this gateway does not know.
var ErrUnknownShard = locks.ErrUnknownShard

// allow checks that the caller's tenant's policy allows name (an
// election's own name for an election), before a call routes it.
func (s *Service) allow(id Identity, name string) error {
	return s.cfg.Policy.allows(id.Tenant, name)
}
