package gateway

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasegate/leasegate/locks"
	"github.com/leasegate/leasegate/queue"
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

// admit authenticates the caller and charges the call to its acquire
// rates.
func (s *Service) admit(ctx context.Context) (Identity, error) {
	id, err := s.caller(ctx)
	if err != nil {
		return id, err
	}
	return id, s.lim.acquire(id)
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
		return who, id, fmt.Errorf("%w: the session belongs to another tenant", queue.ErrNotOwner)
	}
	return who, id, nil
}

// ErrUnknownShard reports an id naming a shard this gateway does not know.
var ErrUnknownShard = locks.ErrUnknownShard

// allow checks that the caller's tenant's policy allows name (an
// election's own name for an election), before a call routes it.
func (s *Service) allow(id Identity, name string) error {
	return s.cfg.Policy.allows(id.Tenant, name)
}
