package gateway

import (
	"context"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/queue"
)

// OpenSession grants a session lease on every shard, all proven by one
// secret, so a client's locks share one lease per shard whatever names they
// take.
func (s *Service) OpenSession(ctx context.Context, req *connect.Request[v1.OpenSessionRequest]) (*connect.Response[v1.OpenSessionResponse], error) {
	who, err := s.caller(ctx)
	if err != nil {
		return nil, toConnect(err)
	}
	ttl, err := s.ttl("ttl_ms", req.Msg.TtlMs)
	if err != nil {
		return nil, toConnect(err)
	}
	if err := s.lim.acquire(who, req.Msg.ClientId); err != nil {
		return nil, toConnect(err)
	}
	if len(req.Msg.ClientId) > 128 {
		return nil, toConnect(badField("client_id", "is %d bytes; the limit is 128", len(req.Msg.ClientId)))
	}
	ctx, cancel := context.WithTimeoutCause(ctx, s.cfg.RequestTimeout, errStoreTimeout)
	defer cancel()
	secret, err := queue.NewSecret()
	if err != nil {
		return nil, toConnect(err)
	}
	id := SessionID{Tenant: who.Tenant, Secret: secret}
	var earliest time.Time
	var effTTL, valid time.Duration
	for _, t := range s.router.All() {
		t, err := t.forTenant(who.Tenant)
		if err != nil {
			return nil, toConnect(err)
		}
		var sess queue.Session
		err = t.call(ctx, func(ctx context.Context) error {
			var err error
			sess, err = t.Engine.OpenSessionWithSecret(ctx, req.Msg.ClientId, ttl, secret)
			return err
		})
		if err != nil {
			s.closeSession(id) // do not leave half a session behind
			return nil, toConnect(tagTTL(err))
		}
		id.Leases = append(id.Leases, ShardLease{Shard: t.Shard, Lease: sess.Lease})
		if earliest.IsZero() || sess.Deadline.Before(earliest) {
			earliest, effTTL, valid = sess.Deadline, sess.TTL, sess.Valid
		}
	}
	return connect.NewResponse(&v1.OpenSessionResponse{
		SessionId: EncodeSessionID(s.keys, id), ExpiresAt: timestamppb.New(earliest), TtlMs: effTTL.Milliseconds(),
		ValidForMs: max(valid.Milliseconds(), 0),
	}), nil
}

func (s *Service) closeSession(id SessionID) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout)
	defer cancel()
	for _, l := range id.Leases {
		if t, err := s.lookup(Identity{Tenant: id.Tenant}, l.Shard); err == nil {
			_ = t.Engine.CloseSession(ctx, l.Lease, id.Secret)
		}
	}
}

// KeepAliveSession renews the session's lease on every shard.
func (s *Service) KeepAliveSession(ctx context.Context, req *connect.Request[v1.KeepAliveSessionRequest]) (*connect.Response[v1.KeepAliveSessionResponse], error) {
	who, id, err := s.sessionFor(ctx, req.Msg.SessionId)
	if err != nil {
		return nil, toConnect(err)
	}
	if err := s.lim.renew(who); err != nil {
		return nil, toConnect(err)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, s.cfg.RequestTimeout, errStoreTimeout)
	defer cancel()
	// Each shard's lease is renewed in parallel: a session costs one
	// round trip, not one per shard.
	type result struct {
		rn  queue.Renewal
		err error
	}
	results := make([]result, len(id.Leases))
	var wg sync.WaitGroup
	for i, l := range id.Leases {
		t, err := s.lookup(who, l.Shard)
		if err != nil {
			return nil, toConnect(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i].err = t.call(ctx, func(ctx context.Context) error {
				var err error
				results[i].rn, err = t.Engine.KeepAliveSession(ctx, l.Lease, id.Secret)
				return err
			})
		}()
	}
	wg.Wait()
	var earliest time.Time
	var effTTL time.Duration
	valid := time.Duration(-1)
	for _, r := range results {
		if r.err != nil {
			return nil, toConnect(r.err)
		}
		if earliest.IsZero() || r.rn.Deadline.Before(earliest) {
			earliest, effTTL = r.rn.Deadline, r.rn.TTL
		}
		if valid < 0 || r.rn.Valid < valid {
			valid = r.rn.Valid
		}
	}
	return connect.NewResponse(&v1.KeepAliveSessionResponse{ExpiresAt: timestamppb.New(earliest), TtlMs: effTTL.Milliseconds(), ValidForMs: max(valid.Milliseconds(), 0)}), nil
}

// CloseSession revokes the session's leases, releasing every lock on them.
func (s *Service) CloseSession(ctx context.Context, req *connect.Request[v1.CloseSessionRequest]) (*connect.Response[v1.CloseSessionResponse], error) {
	who, id, err := s.sessionFor(ctx, req.Msg.SessionId)
	if err != nil {
		return nil, toConnect(err)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, s.cfg.RequestTimeout, errStoreTimeout)
	defer cancel()
	for _, l := range id.Leases {
		t, err := s.lookup(who, l.Shard)
		if err != nil {
			return nil, toConnect(err)
		}
		if err := t.Engine.CloseSession(ctx, l.Lease, id.Secret); err != nil {
			return nil, toConnect(err)
		}
	}
	return connect.NewResponse(&v1.CloseSessionResponse{}), nil
}
