package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/leasegate/leasegate/locks"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/queue"
	"github.com/leasegate/leasegate/shard"
)

// A gateway session is one lease per shard, all proven by one secret
// (locks.Session). The fleet reports each shard's outcome (locks.LeaseOutcome);
// a call fails as a whole only when no shard could be served.

// state is the wire's state of a shard's lease after o.
func state(o locks.LeaseOutcome) v1.ShardLeaseState {
	switch {
	case o.Err == nil:
		return v1.ShardLeaseState_SHARD_LEASE_STATE_LIVE
	case errors.Is(o.Err, queue.ErrSessionLost), errors.Is(o.Err, queue.ErrNotOwner):
		return v1.ShardLeaseState_SHARD_LEASE_STATE_LOST
	default:
		return v1.ShardLeaseState_SHARD_LEASE_STATE_UNAVAILABLE
	}
}

// transient reports a failure that says nothing about the request: the
// shard was down, slow or resharding. Only such a failure leaves a shard
// out of a session; any other fails the call.
func transient(err error) bool {
	if errors.Is(err, ErrLimited) {
		return false
	}
	code, _, _ := classify(err)
	return code == connect.CodeUnavailable
}

// earliest is the live outcomes' earliest deadline with its TTL, and
// their shortest validity: the fields that confirm the session as a whole.
func earliest(outs []locks.LeaseOutcome) (deadline time.Time, ttl, valid time.Duration) {
	valid = -1
	for _, o := range outs {
		if o.Err != nil {
			continue
		}
		if deadline.IsZero() || o.Renewal.Deadline.Before(deadline) {
			deadline, ttl = o.Renewal.Deadline, o.Renewal.TTL
		}
		if valid < 0 || o.Renewal.Valid < valid {
			valid = o.Renewal.Valid
		}
	}
	return deadline, ttl, max(valid, 0)
}

// verdict is the call's error when no shard's lease is live: SESSION_LOST
// when every one is proven gone, otherwise unavailable (retryable), so a
// client tries another gateway as for any call that confirmed nothing.
func verdict(outs []locks.LeaseOutcome) error {
	if len(outs) == 0 {
		return shard.Unavailable(errors.New("the shard map lists no shard"))
	}
	var lost, unavailable error
	nl, nu := 0, 0
	for _, o := range outs {
		switch state(o) {
		case v1.ShardLeaseState_SHARD_LEASE_STATE_LIVE:
			return nil
		case v1.ShardLeaseState_SHARD_LEASE_STATE_LOST:
			nl++
			lost = o.Err
		default:
			nu++
			unavailable = o.Err
		}
	}
	if nu == 0 {
		return fmt.Errorf("%w: every lease of the session is gone", lost)
	}
	if nl == 0 && nu == 1 {
		return unavailable
	}
	return shard.Unavailable(fmt.Errorf("no lease of the session could be confirmed: %d shard(s) did not answer, %d lease(s) are gone; retry", nu, nl))
}

func shardProtos(outs []locks.LeaseOutcome) []*v1.SessionShard {
	out := make([]*v1.SessionShard, len(outs))
	for i, o := range outs {
		out[i] = &v1.SessionShard{Shard: o.Shard, State: state(o)}
		if o.Err == nil {
			out[i].ExpiresAt = timestamppb.New(o.Renewal.Deadline)
			out[i].TtlMs = o.Renewal.TTL.Milliseconds()
			out[i].ValidForMs = max(o.Renewal.Valid.Milliseconds(), 0)
		}
	}
	return out
}

// OpenSession opens the session's lease on every shard that answers, all
// proven by one secret, so a client's locks share one lease per shard
// whatever names they take. A shard that fails transiently is left out
// and reported; ExtendSession adds it later.
func (s *Service) OpenSession(ctx context.Context, req *connect.Request[v1.OpenSessionRequest]) (*connect.Response[v1.OpenSessionResponse], error) {
	who, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	ttl, err := s.ttl("ttl_ms", req.Msg.TtlMs, true)
	if err != nil {
		return nil, err
	}
	if err := s.lim.acquire(who); err != nil {
		return nil, err
	}
	// Here, not left to the engine: it checks behind the shards' breakers.
	if err := queue.ValidateClientID(req.Msg.ClientId); err != nil {
		return nil, fieldOf("client_id", err)
	}
	id := SessionID{Tenant: who.Tenant}
	outs, err := s.router.OpenSession(ctx, s.session(id), req.Msg.ClientId, ttl)
	if err != nil {
		return nil, err
	}
	id.Secret = outs.Secret
	for _, o := range outs.Shards {
		if o.Err == nil {
			id.Leases = append(id.Leases, ShardLease{Shard: o.Shard, Lease: o.Lease})
		}
	}
	if err := s.refuseOpen(id, outs.Shards); err != nil {
		return nil, err
	}
	deadline, effTTL, valid := earliest(outs.Shards)
	return connect.NewResponse(&v1.OpenSessionResponse{
		SessionId: EncodeSessionID(s.keys, id), ExpiresAt: timestamppb.New(deadline), TtlMs: effTTL.Milliseconds(),
		ValidForMs: valid.Milliseconds(), Shards: shardProtos(outs.Shards),
	}), nil
}

// refuseOpen is the error of an open or extension of id that must not go
// ahead — a failure that is not transient (the request is at fault), or no
// live lease — after revoking the leases it opened: no half session is
// left behind. Key cap refusals become the limit's (limiter.capped).
func (s *Service) refuseOpen(id SessionID, outs []locks.LeaseOutcome) error {
	for i := range outs {
		outs[i].Err = s.lim.capped(outs[i].Err)
	}
	err := verdict(outs)
	for _, o := range outs {
		if o.Err != nil && o.Opened && !transient(o.Err) {
			err = o.Err
			break
		}
	}
	if err != nil {
		s.router.RevokeOpened(s.session(id), outs)
	}
	return err
}

// KeepAliveSession renews the session's leases, each on its own: a shard
// that is down or whose lease is gone is reported, the others renewed.
func (s *Service) KeepAliveSession(ctx context.Context, req *connect.Request[v1.KeepAliveSessionRequest]) (*connect.Response[v1.KeepAliveSessionResponse], error) {
	who, id, err := s.sessionFor(ctx, req.Msg.SessionId)
	if err != nil {
		return nil, err
	}
	leases, err := pickLeases(id, req.Msg.Shards)
	if err != nil {
		return nil, err
	}
	if err := s.lim.renew(who); err != nil {
		return nil, err
	}
	outs := s.router.KeepAliveSession(ctx, s.session(id), leases)
	for _, o := range outs {
		if o.Err != nil && !transient(o.Err) && state(o) != v1.ShardLeaseState_SHARD_LEASE_STATE_LOST {
			return nil, o.Err // e.g. the tenant lost access to the shard
		}
	}
	if err := verdict(outs); err != nil {
		return nil, err
	}
	out := &v1.KeepAliveSessionResponse{Shards: shardProtos(outs)}
	if !slices.ContainsFunc(outs, func(o locks.LeaseOutcome) bool { return state(o) != v1.ShardLeaseState_SHARD_LEASE_STATE_LIVE }) {
		// The top-level fields confirm the whole session. A client that
		// reads only them takes them for every lease's, so they stay unset
		// while any lease went unconfirmed: such a client confirms
		// nothing, and loses the session at its deadline.
		deadline, effTTL, valid := earliest(outs)
		out.ExpiresAt, out.TtlMs, out.ValidForMs = timestamppb.New(deadline), effTTL.Milliseconds(), valid.Milliseconds()
	}
	return connect.NewResponse(out), nil
}

// pickLeases returns the shards of id's leases among shards, or all of
// them when shards is empty.
func pickLeases(id SessionID, shards []string) ([]string, error) {
	if len(shards) == 0 {
		return id.shards(), nil
	}
	seen := map[string]bool{}
	for _, sh := range shards {
		if _, ok := id.Lease(sh); !ok {
			return nil, badField("shards", "%q is not a shard the session id lists", sh)
		}
		if seen[sh] {
			return nil, badField("shards", "%q is named twice", sh)
		}
		seen[sh] = true
	}
	return shards, nil
}

// CloseSession revokes the session's leases, releasing every lock on them.
// Every shard is tried; a shard that fails makes the call fail (retry it:
// leases already revoked count as closed).
func (s *Service) CloseSession(ctx context.Context, req *connect.Request[v1.CloseSessionRequest]) (*connect.Response[v1.CloseSessionResponse], error) {
	who, id, err := s.sessionFor(ctx, req.Msg.SessionId)
	if err != nil {
		return nil, err
	}
	if err := s.lim.renew(who); err != nil {
		return nil, err
	}
	for _, o := range s.router.CloseSession(ctx, s.session(id), id.shards()) {
		if o.Err != nil {
			return nil, o.Err
		}
	}
	return connect.NewResponse(&v1.CloseSessionResponse{}), nil
}

// session is id as the fleet's session calls take it, under the tenant's key cap.
func (s *Service) session(id SessionID) locks.Session {
	return locks.Session{Tenant: id.Tenant, Secret: id.Secret, Leases: id, KeyCap: s.cfg.Limits.MaxKeysPerTenant}
}

// shards lists the shards id holds a lease on, in id's order.
func (id SessionID) shards() []string {
	out := make([]string, len(id.Leases))
	for i, l := range id.Leases {
		out[i] = l.Shard
	}
	return out
}

// maxSessionShards bounds the shards one session spans; session ids with
// more do not decode.
const maxSessionShards = 64

// ExtendSession opens the session's lease on the named shards and returns
// a session id that lists them besides the leases the old id listed.
//
// A session id is signed, so only a gateway can add to it; the new lease is
// proven by the session's secret like the others. A shard the id already
// lists keeps its lease, renewed, unless the caller asks to replace it:
// then the old lease is revoked before a new one is opened, so the locks of
// a lease the client has given up as lost are released, never carried
// over to the new lease (their lock ids name the old one).
func (s *Service) ExtendSession(ctx context.Context, req *connect.Request[v1.ExtendSessionRequest]) (*connect.Response[v1.ExtendSessionResponse], error) {
	m := req.Msg
	who, id, err := s.sessionFor(ctx, m.SessionId)
	if err != nil {
		return nil, err
	}
	ttl, err := s.ttl("ttl_ms", m.TtlMs, true)
	if err != nil {
		return nil, err
	}
	// Checked before a replaced lease is revoked, as the engine would not.
	if err := queue.ValidateClientID(m.ClientId); err != nil {
		return nil, fieldOf("client_id", err)
	}
	if len(m.Shards) == 0 || len(m.Shards) > maxSessionShards {
		return nil, badField("shards", "names %d shards; want 1 to %d", len(m.Shards), maxSessionShards)
	}
	seen := map[string]bool{}
	for _, sh := range m.Shards {
		if seen[sh] {
			return nil, badField("shards", "%q is named twice", sh)
		}
		seen[sh] = true
		if err := s.router.Known(sh); err != nil {
			return nil, err
		}
	}
	if n := len(id.Leases) + len(m.Shards); n > maxSessionShards {
		// Counted generously (listed shards named again count twice),
		// which can only refuse a session that is near the bound anyway.
		return nil, badField("shards", "would make the session span up to %d shards; the limit is %d", n, maxSessionShards)
	}
	if err := s.lim.acquire(who); err != nil {
		return nil, err
	}
	outs, err := s.router.ExtendSession(ctx, s.session(id), m.Shards, m.Replace, m.ClientId, ttl)
	if err != nil {
		return nil, err
	}
	if err := s.refuseOpen(id, outs); err != nil {
		return nil, err
	}
	next := SessionID{Tenant: id.Tenant, Secret: id.Secret, Leases: slices.Clone(id.Leases)}
	for _, o := range outs {
		if o.Err != nil || !o.Opened {
			continue
		}
		l := ShardLease{Shard: o.Shard, Lease: o.Lease}
		if i := slices.IndexFunc(next.Leases, func(x ShardLease) bool { return x.Shard == l.Shard }); i >= 0 {
			next.Leases[i] = l
		} else {
			next.Leases = append(next.Leases, l)
		}
	}
	return connect.NewResponse(&v1.ExtendSessionResponse{SessionId: EncodeSessionID(s.keys, next), Shards: shardProtos(outs)}), nil
}
