package client

import (
	"context"
	"fmt"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

// maxSessionRecoveries bounds how often one acquire extends its session
// and retries at once, so gateways that disagree about the shard map
// cannot keep it looping.
const maxSessionRecoveries = 4

// cover makes sure the session holds a live lease on shard: it opens one
// there (ExtendSession), replacing a lease the session has lost, unless
// another call did so in the meantime. A lost lease is replaced, never
// revived: the gateway revokes it first, so locks the holders were told
// they lost are freed, and they stay lost.
func (s *Session) cover(ctx context.Context, op, shard string) error {
	// Wait for another extension to end only as long as ctx allows: a
	// caller's wait deadline bounds this wait too.
	select {
	case s.extending <- struct{}{}:
	case <-ctx.Done():
		return &opError{op: op, kind: ctx.Err(), cause: context.Cause(ctx)}
	}
	defer func() { <-s.extending }()
	if err := s.check(op); err != nil {
		return err
	}
	v := s.current()
	old := v.leases[shard]
	if old != nil && old.lost() == nil {
		return nil
	}
	req := &v1.ExtendSessionRequest{
		SessionId: v.id, Shards: []string{shard}, TtlMs: s.ttl.Milliseconds(),
		ClientId: s.c.cfg.clientID, Replace: old != nil,
	}
	resp, sent, err := unary(ctx, s.c, op, req, leasegatev1connect.LockServiceClient.ExtendSession)
	if err != nil {
		return err
	}
	l := s.c.shardLeases(sent, resp.Shards)[shard]
	if l == nil {
		return &opError{op: op, kind: ErrUnavailable, cause: fmt.Errorf("%w on shard %q", errNoShard, shard)}
	}
	return s.install(resp.SessionId, l)
}

// recover handles an acquire's failure that concerns one of the session's
// leases: the session has none on the name's shard, or the gateway proved
// it gone (the lease is then lost, with its locks). It reports whether it
// handled err, and the error of covering the shard.
//
// A waiter key left behind by an attempt on a lost lease is bound to that
// lease, so a retry under the same id on the new lease would be refused as
// another caller's: the call sc moves to a fresh *rid, and what its
// attempt left died with the old lease. A shard the session lacked had no
// key written.
func (s *Session) recover(ctx context.Context, op string, err error, v *sessionView, sc *sessionCall, rid *string) (bool, error) {
	shard := shardOf(err)
	if shard == "" {
		return false, nil
	}
	switch Reason(err) {
	case ReasonSessionShardMissing:
	case ReasonSessionLost:
		if l := v.leases[shard]; l != nil {
			s.loseLease(l, leaseLost(shard, err))
		}
		*rid = newRequestID()
		sc.clear()
	default:
		return false, nil
	}
	return true, s.cover(ctx, op, shard)
}

// leaseFor returns the lease a grant on shard rides on, or nil when the
// session has given that lease up: a lease lost by its deadline can still
// live in etcd for a while, and a grant on it must not be handed out.
func (v *sessionView) leaseFor(shard string) *shardLease {
	l := v.leases[shard]
	if l == nil || l.lost() != nil || l.ctx.Err() != nil {
		return nil
	}
	return l
}

// sessionLeaseLost is the failure of an attempt granted on a lease the
// session had given up: the grant is let go, and recover replaces the
// lease so the name is taken again on a fresh one.
func sessionLeaseLost(shard string) error {
	return goneOnShard(shard, "was given up as lost before the grant; the grant was released")
}
