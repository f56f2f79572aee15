package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/leasegate/leasegate/locks"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/queue"
)

// A gateway session is one lease per shard, all proven by one secret. Each
// lease lives and dies on its own: a shard that is down costs the locks on
// that shard, never those on the others. So every session call works shard
// by shard and reports each shard's outcome (shardOutcome), and fails as a
// whole only when no shard could be served.

// shardOutcome is what one session call did on one shard.
type shardOutcome struct {
	shard string
	// rn is the grant or renewal when err is nil.
	rn  queue.Renewal
	err error
	// granted marks a lease this call opened (as opposed to renewed).
	granted bool
	lease   queue.Session
}

func (o shardOutcome) state() v1.ShardLeaseState {
	switch {
	case o.err == nil:
		return v1.ShardLeaseState_SHARD_LEASE_STATE_LIVE
	case errors.Is(o.err, queue.ErrSessionLost), errors.Is(o.err, queue.ErrNotOwner):
		return v1.ShardLeaseState_SHARD_LEASE_STATE_LOST
	default:
		return v1.ShardLeaseState_SHARD_LEASE_STATE_UNAVAILABLE
	}
}

func (o shardOutcome) proto() *v1.SessionShard {
	out := &v1.SessionShard{Shard: o.shard, State: o.state()}
	if o.err == nil {
		out.ExpiresAt = timestamppb.New(o.rn.Deadline)
		out.TtlMs = o.rn.TTL.Milliseconds()
		out.ValidForMs = max(o.rn.Valid.Milliseconds(), 0)
	}
	return out
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

// earliest summarises the live outcomes for the top-level fields that
// confirm the session as a whole: the earliest deadline with its TTL, and
// the shortest validity.
func earliest(outs []shardOutcome) (deadline time.Time, ttl, valid time.Duration) {
	valid = -1
	for _, o := range outs {
		if o.err != nil {
			continue
		}
		if deadline.IsZero() || o.rn.Deadline.Before(deadline) {
			deadline, ttl = o.rn.Deadline, o.rn.TTL
		}
		if valid < 0 || o.rn.Valid < valid {
			valid = o.rn.Valid
		}
	}
	return deadline, ttl, max(valid, 0)
}

// verdict is the call's error when no shard's lease is live: SESSION_LOST
// when every one is proven gone, otherwise unavailable (retryable), so a
// client tries another gateway as it would for any call that confirmed
// nothing.
func verdict(outs []shardOutcome) error {
	if len(outs) == 0 {
		return ShardUnavailable(errors.New("the shard map lists no shard"))
	}
	var lost, unavailable error
	nl, nu := 0, 0
	for _, o := range outs {
		switch o.state() {
		case v1.ShardLeaseState_SHARD_LEASE_STATE_LIVE:
			return nil
		case v1.ShardLeaseState_SHARD_LEASE_STATE_LOST:
			nl++
			lost = o.err
		default:
			nu++
			unavailable = o.err
		}
	}
	if nu == 0 {
		return fmt.Errorf("%w: every lease of the session is gone", lost)
	}
	if nl == 0 && nu == 1 {
		return unavailable
	}
	return ShardUnavailable(fmt.Errorf("no lease of the session could be confirmed: %d shard(s) did not answer, %d lease(s) are gone; retry", nu, nl))
}

func shardProtos(outs []shardOutcome) []*v1.SessionShard {
	out := make([]*v1.SessionShard, len(outs))
	for i, o := range outs {
		out[i] = o.proto()
	}
	return out
}

// perShardTimeout bounds the work of a call that answers shard by shard:
// by the store's timeout, and to end a margin before the caller's own
// deadline (which Connect and gRPC clients send), both with the store
// timeout's cause. A shard that has not answered by then is reported
// unavailable and the others' outcomes still reach the caller; without
// the margin the caller's deadline would pass first and every shard's
// outcome would be lost with the one slow shard's — a session's renewal
// of its healthy shards included.
func (s *Service) perShardTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := s.storeTimeout(ctx)
	dl, ok := ctx.Deadline()
	if !ok {
		return ctx, cancel
	}
	// The caller's deadline is on the wall clock, as the network is.
	margin := min(max(time.Until(dl)/10, minAnswerMargin), maxAnswerMargin)
	sctx, scancel := context.WithDeadlineCause(ctx, dl.Add(-margin), errStoreTimeout)
	return sctx, func() { scancel(); cancel() }
}

// The time left, at the end of a shard-by-shard call, for its answer to
// reach the caller: a tenth of the call's time, within these bounds.
const (
	minAnswerMargin = 20 * time.Millisecond
	maxAnswerMargin = 500 * time.Millisecond
)

// eachShard runs fn for every target at once and collects the outcomes
// in order: a session costs one round trip, not one per shard, and a
// shard that hangs delays the call by the request timeout, not by one
// timeout per shard.
func eachShard(n int, fn func(i int) shardOutcome) []shardOutcome {
	outs := make([]shardOutcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i] = fn(i)
		}()
	}
	wg.Wait()
	return outs
}

// grant opens the session's lease on t.
func (s *Service) grant(ctx context.Context, who Identity, t locks.Target, clientID string, ttl time.Duration, secret queue.Secret) shardOutcome {
	o := shardOutcome{shard: t.Shard, granted: true}
	// A session is a stored thing the tenant creates: it counts against the
	// tenant's key cap on the shard like a lock does.
	if o.err = s.checkKeys(ctx, who, t); o.err != nil {
		return o
	}
	o.err = call(ctx, t, func(ctx context.Context) error {
		var err error
		o.lease, err = t.Engine.OpenSessionWithSecret(ctx, clientID, ttl, secret)
		return err
	})
	if o.err == nil {
		o.rn = queue.Renewal{TTL: o.lease.TTL, Deadline: o.lease.Deadline, Valid: o.lease.Valid}
	}
	return o
}

// keepAlive renews the session's lease l.
func (s *Service) keepAlive(ctx context.Context, who Identity, id SessionID, l ShardLease) shardOutcome {
	o := shardOutcome{shard: l.Shard}
	t, err := s.lookup(who, l.Shard)
	if err != nil {
		// A shard this gateway does not know (a stale map, or a shard
		// removed since) cannot confirm the lease: unavailable here, and
		// lost to the client once its deadline passes unconfirmed.
		if errors.Is(err, ErrUnknownShard) {
			err = ShardUnavailable(err)
		}
		o.err = err
		return o
	}
	o.err = call(ctx, t, func(ctx context.Context) error {
		var err error
		o.rn, err = t.Engine.KeepAliveSession(ctx, l.Lease, id.Secret)
		return err
	})
	return o
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
	ttl, err := s.ttl("ttl_ms", req.Msg.TtlMs)
	if err != nil {
		return nil, err
	}
	if err := s.lim.acquire(who); err != nil {
		return nil, err
	}
	if err := queue.ValidateClientID(req.Msg.ClientId); err != nil {
		return nil, fieldOf("client_id", err)
	}
	ctx, cancel := s.perShardTimeout(ctx)
	defer cancel()
	secret, err := queue.NewSecret()
	if err != nil {
		return nil, err
	}
	targets, err := s.router.All(who.Tenant)
	if err != nil {
		return nil, err
	}
	outs := eachShard(len(targets), func(i int) shardOutcome {
		return s.grant(ctx, who, targets[i], req.Msg.ClientId, ttl, secret)
	})
	id := SessionID{Tenant: who.Tenant, Secret: secret}
	for _, o := range outs {
		if o.err == nil {
			id.Leases = append(id.Leases, ShardLease{Shard: o.shard, Lease: o.lease.Lease})
		}
	}
	if err := s.refuseOpen(outs); err != nil {
		s.closeLeases(id, id.Leases) // do not leave half a session behind
		return nil, tagTTL(err)
	}
	deadline, effTTL, valid := earliest(outs)
	return connect.NewResponse(&v1.OpenSessionResponse{
		SessionId: EncodeSessionID(s.keys, id), ExpiresAt: timestamppb.New(deadline), TtlMs: effTTL.Milliseconds(),
		ValidForMs: valid.Milliseconds(), Shards: shardProtos(outs),
	}), nil
}

// refuseOpen is the error of an open or extension that must not go ahead:
// a failure that is not transient (the request itself is at fault), or no
// lease live at all.
func (s *Service) refuseOpen(outs []shardOutcome) error {
	for _, o := range outs {
		if o.err != nil && o.granted && !transient(o.err) {
			return o.err
		}
	}
	return verdict(outs)
}

// closeLeases revokes leases of session id, best effort, in the background
// of a failed call.
func (s *Service) closeLeases(id SessionID, leases []ShardLease) {
	ctx, cancel := s.withTimeout(context.Background(), s.cfg.RequestTimeout, nil)
	defer cancel()
	for _, l := range leases {
		if t, err := s.lookup(Identity{Tenant: id.Tenant}, l.Shard); err == nil {
			_ = t.Engine.CloseSession(ctx, l.Lease, id.Secret)
		}
	}
}

// KeepAliveSession renews the session's leases, each on its own: a shard
// that is down or whose lease is gone is reported, and the others are
// renewed all the same.
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
	ctx, cancel := s.perShardTimeout(ctx)
	defer cancel()
	outs := eachShard(len(leases), func(i int) shardOutcome {
		return s.keepAlive(ctx, who, id, leases[i])
	})
	for _, o := range outs {
		if o.err != nil && !transient(o.err) && o.state() != v1.ShardLeaseState_SHARD_LEASE_STATE_LOST {
			return nil, o.err // e.g. the tenant lost access to the shard
		}
	}
	if err := verdict(outs); err != nil {
		return nil, err
	}
	out := &v1.KeepAliveSessionResponse{Shards: shardProtos(outs)}
	if every(outs, v1.ShardLeaseState_SHARD_LEASE_STATE_LIVE) {
		// The top-level fields confirm the whole session. A client that
		// reads only them takes them for every lease's, so they stay unset
		// while any lease went unconfirmed: such a client confirms
		// nothing, and loses the session at its deadline.
		deadline, effTTL, valid := earliest(outs)
		out.ExpiresAt, out.TtlMs, out.ValidForMs = timestamppb.New(deadline), effTTL.Milliseconds(), valid.Milliseconds()
	}
	return connect.NewResponse(out), nil
}

func every(outs []shardOutcome, st v1.ShardLeaseState) bool {
	for _, o := range outs {
		if o.state() != st {
			return false
		}
	}
	return true
}

// pickLeases returns the leases of id on shards, or all of them when
// shards is empty.
func pickLeases(id SessionID, shards []string) ([]ShardLease, error) {
	if len(shards) == 0 {
		return id.Leases, nil
	}
	seen := map[string]bool{}
	var out []ShardLease
	for _, sh := range shards {
		lease, ok := id.Lease(sh)
		if !ok {
			return nil, badField("shards", "%q is not a shard the session id lists", sh)
		}
		if seen[sh] {
			return nil, badField("shards", "%q is named twice", sh)
		}
		seen[sh] = true
		out = append(out, ShardLease{Shard: sh, Lease: lease})
	}
	return out, nil
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
	ctx, cancel := s.perShardTimeout(ctx)
	defer cancel()
	outs := eachShard(len(id.Leases), func(i int) shardOutcome {
		return s.revoke(ctx, who, id, id.Leases[i])
	})
	for _, o := range outs {
		if o.err != nil {
			return nil, o.err
		}
	}
	return connect.NewResponse(&v1.CloseSessionResponse{}), nil
}

// revoke revokes the session's lease l; a lease already gone counts as
// revoked.
func (s *Service) revoke(ctx context.Context, who Identity, id SessionID, l ShardLease) shardOutcome {
	o := shardOutcome{shard: l.Shard}
	t, err := s.lookup(who, l.Shard)
	if err != nil {
		o.err = err
		return o
	}
	o.err = freeing(ctx, t, func(ctx context.Context) error {
		return t.Engine.CloseSession(ctx, l.Lease, id.Secret)
	})
	return o
}
