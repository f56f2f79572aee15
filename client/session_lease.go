package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

// shardLease is a session's lease on one shard, and the conservative
// deadline of every lock on it. It is lost once and for all: when the
// session needs a lease on that shard again it opens a new one, a new
// shardLease, and the locks of the old one stay lost.
type shardLease struct {
	shard string
	ttl   time.Duration

	ctx    context.Context // cancelled when lost or when the session closes
	cancel context.CancelCauseFunc

	leaseState
}

// leaseState is what a lease's renewer (a lock's keeper, a session's run
// loop) and its readers share: the conservative deadline, which only moves
// forward, and the cause of the loss, which is set once.
type leaseState struct {
	mu       sync.Mutex
	deadline time.Time
	lostBy   error // nil while live
}

// Deadline is the lease's conservative deadline on the client's clock.
func (l *leaseState) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// lost returns the cause of the loss, or nil while the lease is live.
func (l *leaseState) lost() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lostBy
}

// extend moves the deadline to d if d is later and the lease is live.
func (l *leaseState) extend(d time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lostBy == nil && d.After(l.deadline) {
		l.deadline = d
	}
}

// lose marks the lease lost with cause, unless it was already lost or
// closed; it reports whether this call lost it.
func (l *shardLease) lose(cause error) bool {
	l.mu.Lock()
	if l.lostBy != nil || l.ctx.Err() != nil {
		l.mu.Unlock()
		return false
	}
	l.lostBy = cause
	l.mu.Unlock()
	l.cancel(cause)
	return true
}

// sessionView is one gateway session id and the shard leases it lists.
// A view never changes: extending the session makes a new one.
type sessionView struct {
	id     string
	leases map[string]*shardLease
}

// with returns a view of id with l added or swapped in for its shard.
func (v *sessionView) with(id string, l *shardLease) *sessionView {
	n := &sessionView{id: id, leases: maps.Clone(v.leases)} // never nil: a session opens with a lease
	n.leases[l.shard] = l
	return n
}

// live lists the view's live leases, by shard name.
func (v *sessionView) live() []*shardLease {
	var out []*shardLease
	for _, l := range v.leases {
		if l.lost() == nil && l.ctx.Err() == nil {
			out = append(out, l)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].shard < out[j].shard })
	return out
}

// leaseLost is the cause a shard lease is lost with: it wraps
// ErrSessionLost, so the locks on it report both ErrLockLost and
// ErrSessionLost, and the gateway's answer when there was one.
func leaseLost(shard string, cause error) error {
	return &opError{op: fmt.Sprintf("session lease on shard %q", shard), kind: ErrSessionLost, cause: cause}
}

// goneOnShard is the loss of a lease on shard, as a gateway error would
// carry it (SESSION_LOST with the shard), so Reason and errors.As treat
// it like any other; why says how it was learnt.
func goneOnShard(shard, why string) error {
	err := connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("the session's lease on shard %q %s", shard, why))
	if d, derr := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: ReasonSessionLost.String(), Domain: v1.ErrorDomain, Metadata: map[string]string{v1.MetadataShard: shard}}); derr == nil {
		err.AddDetail(d)
	}
	return err
}

// shardLeases turns a gateway's per-shard answer to a request sent at sent
// into live leases, keyed by shard.
func (c *Client) shardLeases(sent time.Time, shards []*v1.SessionShard) map[string]*shardLease {
	out := map[string]*shardLease{}
	for _, sh := range shards {
		if sh.GetState() != v1.ShardLeaseState_SHARD_LEASE_STATE_LIVE || sh.GetShard() == "" || sh.GetTtlMs() <= 0 {
			continue
		}
		conf := confirmation{ttl: ms(sh.TtlMs), valid: ms(sh.ValidForMs)}
		l := &shardLease{shard: sh.Shard, ttl: conf.ttl, leaseState: leaseState{deadline: c.deadline(sent, conf)}}
		l.ctx, l.cancel = context.WithCancelCause(context.Background())
		out[sh.Shard] = l
	}
	return out
}

// errNoShard is an open or extension that the gateway answered without a
// live lease to use: there is nothing for the session to renew.
var errNoShard = errors.New("the gateway reported no live session lease")

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
