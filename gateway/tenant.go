package gateway

import (
	"context"
	"errors"
	"fmt"
)

// caller returns the authenticated identity of the call.
func (s *Service) caller(ctx context.Context) (Identity, error) {
	id, err := IdentityFrom(ctx)
	if err != nil && !s.auth.required && errors.Is(err, ErrUnauthenticated) {
		// The service used without the authentication middleware, with no
		// authentication configured: the single unnamed tenant.
		return Identity{Method: "none"}, nil
	}
	return id, err
}

// route routes name for the caller: the tenant's policy must allow the
// name, and the target points at the tenant's keys.
func (s *Service) route(id Identity, name string) (Target, error) {
	if err := s.cfg.Policy.allows(id.Tenant, name); err != nil {
		return Target{}, err
	}
	t, err := s.router.Route(name)
	if err != nil {
		return t, err
	}
	return t.forTenant(id.Tenant)
}

// lookup finds a shard by name for the caller's tenant.
func (s *Service) lookup(id Identity, shard string) (Target, error) {
	t, err := s.router.Lookup(shard)
	if err != nil {
		return t, err
	}
	return t.forTenant(id.Tenant)
}

// checkKeys applies the per-tenant key cap on the target shard. Its count
// is one bounded etcd read: an Acquire's own context may wait for hours.
func (s *Service) checkKeys(ctx context.Context, id Identity, t Target) error {
	return s.lim.checkKeys(ctx, id.Tenant+"@"+t.Shard, func(ctx context.Context) (int64, error) {
		var n int64
		cctx, cancel := s.storeTimeout(ctx)
		defer cancel()
		err := t.call(cctx, func(ctx context.Context) error {
			var err error
			n, err = t.Engine.CountKeys(ctx)
			return err
		})
		return n, err
	})
}

// sessionFor decodes a session id and checks it belongs to the caller.
func (s *Service) sessionFor(ctx context.Context, sessionID string) (Identity, SessionID, error) {
	who, err := s.caller(ctx)
	if err != nil {
		return who, SessionID{}, err
	}
	id, err := DecodeSessionID(s.keys, sessionID)
	if err != nil {
		return who, id, fieldOf("session_id", err)
	}
	if id.Tenant != who.Tenant {
		return who, id, fmt.Errorf("%w: the session belongs to another tenant", ErrForbidden)
	}
	return who, id, nil
}
