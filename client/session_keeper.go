package client

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// The session's renewer is the keeper (keeper.go) for many leases at once:
// one KeepAliveSession call renews every live lease of the session, and
// each lease's deadline moves, or passes, on its own. The rules are the
// keeper's: a deadline is measured from the send time of the confirming
// request and is the tighter of TTL and valid_for_ms; an answer that
// arrives after a lease's deadline does not revive it; only a gateway's
// proof that a lease is gone loses it before its deadline.

// sessionRenewal is one keepalive attempt and its answer.
type sessionRenewal struct {
	sent   time.Time
	ep     int
	leases []*shardLease // the leases asked for
	resp   *v1.KeepAliveSessionResponse
	err    error
}

func (s *Session) run(anchor time.Time) {
	defer close(s.done)
	clk := s.c.cfg.clock
	actx, acancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		acancel()
		wg.Wait()
	}()
	results := make(chan sessionRenewal, 1)
	inflight := false
	bo := s.c.newBackoff()
	// unconfirmed holds, per shard, why its lease was last not confirmed:
	// the cause a loss at its deadline reports.
	unconfirmed := map[string]error{}

	renewT := clk.NewTimer(anchor.Add(s.c.renewInterval(s.ttl)).Sub(clk.Now()))
	var deadlineT Timer
	var armed time.Time
	defer func() {
		renewT.Stop()
		if deadlineT != nil {
			deadlineT.Stop()
		}
	}()
	for {
		// One timer, at the earliest deadline of a live lease.
		if next := s.earliest(); !next.Equal(armed) {
			if deadlineT != nil {
				deadlineT.Stop()
			}
			deadlineT, armed = nil, next
			if !next.IsZero() {
				deadlineT = clk.NewTimer(next.Sub(clk.Now()))
			}
		}
		select {
		case <-s.stopc:
			return
		case <-s.ctx.Done():
			return // every lease is lost
		case <-s.kick:
		case <-timerC(deadlineT):
			deadlineT, armed = nil, time.Time{}
			s.expire(clk.Now(), unconfirmed)
		case <-renewT.C():
			v := s.current()
			leases := v.live()
			if inflight || len(leases) == 0 {
				continue
			}
			inflight = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				results <- s.attempt(actx, v, leases)
			}()
		case r := <-results:
			inflight = false
			// Never later than a deadline, even if an answer raced it.
			s.expire(clk.Now(), unconfirmed)
			partial := s.apply(r, unconfirmed)
			if r.err == nil && !partial {
				bo.reset()
				renewT = clk.NewTimer(r.sent.Add(s.c.renewInterval(s.ttl)).Sub(clk.Now()))
			} else {
				// A shard or the gateway did not answer, or the gateway's
				// rate refused the keepalive: try again soon (when a rate
				// limit says), until the deadlines pass; on the next
				// gateway only when this one failed (a partial answer, a
				// refusal or a rate limit is not the gateway's failure).
				if r.err != nil && !proofRefused(r.err) && rateLimited(r.err) == nil {
					s.c.failed(r.ep)
				}
				renewT = clk.NewTimer(retryPause(bo, r.err))
			}
			s.observe(r, partial)
		}
	}
}

// earliest is the earliest deadline among the live leases, zero if none.
func (s *Session) earliest() time.Time {
	var first time.Time
	for _, l := range s.current().live() {
		if d := l.Deadline(); first.IsZero() || d.Before(first) {
			first = d
		}
	}
	return first
}

// expire loses every live lease whose deadline has come.
func (s *Session) expire(now time.Time, unconfirmed map[string]error) {
	for _, l := range s.current().live() {
		d := l.Deadline()
		if now.Before(d) {
			continue
		}
		s.loseLease(l, leaseLost(l.shard, deadlinePassed(d, unconfirmed[l.shard])))
	}
}

// attempt sends one keepalive of leases to the current endpoint. Only the
// live leases are asked for: a lease given up as lost must lapse, with the
// locks on it, rather than be kept alive unseen.
func (s *Session) attempt(ctx context.Context, v *sessionView, leases []*shardLease) sessionRenewal {
	clk := s.c.cfg.clock
	i, ep := s.c.pick()
	req := &v1.KeepAliveSessionRequest{SessionId: v.id}
	if len(leases) < len(v.leases) {
		for _, l := range leases {
			req.Shards = append(req.Shards, l.shard)
		}
	}
	r := sessionRenewal{sent: clk.Now(), ep: i, leases: leases}
	actx, cancel := withTimeout(ctx, clk, min(s.c.cfg.requestTimeout, s.ttl/4))
	defer cancel()
	resp, err := ep.rpc.KeepAliveSession(actx, connect.NewRequest(req))
	if r.err = err; err == nil {
		r.resp = resp.Msg
	}
	return r
}

// apply moves each lease's deadline or loses it by the answer r, and
// reports whether some lease asked for was not confirmed.
func (s *Session) apply(r sessionRenewal, unconfirmed map[string]error) (partial bool) {
	switch {
	case r.err != nil && proofRefused(r.err):
		// Every lease asked for is gone, or the session is not ours.
		for _, l := range r.leases {
			s.loseLease(l, leaseLost(l.shard, r.err))
		}
		return false
	case r.err != nil:
		for _, l := range r.leases {
			unconfirmed[l.shard] = r.err
		}
		return false
	}
	answers := map[string]*v1.SessionShard{}
	for _, sh := range r.resp.Shards {
		answers[sh.GetShard()] = sh
	}
	for _, l := range r.leases {
		sh, ok := answers[l.shard]
		switch {
		case ok && sh.State == v1.ShardLeaseState_SHARD_LEASE_STATE_LIVE && sh.TtlMs > 0:
			// Capped at the lease's granted TTL, which a keepalive never changes.
			l.extend(s.c.deadline(r.sent, confirmation{ttl: min(ms(sh.TtlMs), l.ttl), valid: ms(sh.ValidForMs)}))
			delete(unconfirmed, l.shard)
		case ok && sh.State == v1.ShardLeaseState_SHARD_LEASE_STATE_LOST:
			s.loseLease(l, leaseLost(l.shard, goneOnShard(l.shard, "is gone, the gateway reports")))
		default:
			unconfirmed[l.shard] = fmt.Errorf("the gateway could not confirm the lease on shard %q", l.shard)
			partial = true
		}
	}
	return partial
}

// observe reports a processed keepalive to WithOnRenew's function. A keepalive that
// left some leases unconfirmed reports an error naming their shards.
func (s *Session) observe(r sessionRenewal, partial bool) {
	hook := s.c.cfg.onRenew
	if hook == nil {
		return
	}
	err := r.err
	if err == nil && partial {
		var missing []string
		for _, sh := range r.resp.Shards {
			if sh.State != v1.ShardLeaseState_SHARD_LEASE_STATE_LIVE && sh.State != v1.ShardLeaseState_SHARD_LEASE_STATE_LOST {
				missing = append(missing, sh.Shard)
			}
		}
		sort.Strings(missing)
		err = &opError{op: "keepalive", kind: ErrUnavailable, cause: errors.New("unconfirmed shards: " + strings.Join(missing, ", "))}
	}
	hook(r.sent, err)
}
