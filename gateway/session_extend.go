package gateway

import (
	"context"

	"connectrpc.com/connect"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/queue"
)

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
	ttl, err := s.ttl("ttl_ms", m.TtlMs)
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
	s.capped(outs)
	if err := refuseOpen(outs); err != nil {
		s.router.RevokeOpened(s.session(id), outs)
		return nil, err
	}
	var opened []ShardLease
	for _, o := range outs {
		if o.Err == nil && o.Opened {
			opened = append(opened, ShardLease{Shard: o.Shard, Lease: o.Lease})
		}
	}
	next := SessionID{Tenant: id.Tenant, Secret: id.Secret, Leases: append([]ShardLease(nil), id.Leases...)}
	for _, l := range opened {
		replaced := false
		for i := range next.Leases {
			if next.Leases[i].Shard == l.Shard {
				next.Leases[i], replaced = l, true
			}
		}
		if !replaced {
			next.Leases = append(next.Leases, l)
		}
	}
	return connect.NewResponse(&v1.ExtendSessionResponse{SessionId: EncodeSessionID(s.keys, next), Shards: shardProtos(outs)}), nil
}
