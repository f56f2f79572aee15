package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

// Acquire takes the lock name, with a lease of its own that the SDK renews
// in the background. It blocks while the caller waits in the name's FIFO
// queue, until it is granted, the wait timeout passes (ErrWaitTimeout) or
// ctx ends (an error wrapping ctx.Err()). A wait abandoned that way leaves
// the queue at once, unless it ends between two attempts after a gateway
// failure: the waiter's key then lapses on its own — within one TTL for a
// lock with a lease of its own, within the gateway's attempt TTL (10 s by
// default) for a lock in a session, whose waiting key rides on a lease of
// the gateway's until it is granted. A session call that ends without a
// lock after an attempt whose answer was lost (it may have been granted)
// gives that grant up in the background, so it never holds the name for
// the session's life: see WithRequestID.
//
// Each call draws a random 128-bit request id unless WithRequestID sets
// one. A request id is a retry key: the gateway lets only the same caller
// (authenticated identity, client id and session) resume its waiter, and
// refuses anyone else with permission denied. Use a request id for one
// call at a time: a retry means the previous call failed.
//
// It waits on the streaming Acquire RPC. When a gateway fails, stops
// (SHUTTING_DOWN), loses etcd or the stream breaks before the grant, it
// retries on the next endpoint with the same request id, so the caller
// keeps its place in the queue; WithOnQueued reports the position.
//
// If the wait lasted longer than one renew interval, Acquire renews the
// lease before it returns, so the lock starts with a deadline close to a
// full TTL away.
func (c *Client) Acquire(ctx context.Context, name string, opts ...AcquireOption) (*Lock, error) {
	return c.acquire(ctx, name, nil, opts)
}

// TryAcquire takes the lock name if nobody holds or waits for it, and never
// waits in the queue. When the lock is taken it returns a *HeldError
// (errors.Is(err, ErrNotAcquired)) with the holder's expiry. It blocks only
// for the call itself, retried on other endpoints on transient failures
// with the same request id. WithWaitTimeout and WithOnQueued are ignored.
func (c *Client) TryAcquire(ctx context.Context, name string, opts ...AcquireOption) (*Lock, error) {
	return c.tryAcquire(ctx, name, nil, opts)
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// acquireOptions checks that c is open, applies opts and checks what the
// gateway cannot: the SDK's own wait timeout, the values the wire would
// carry unfaithfully — a negative TTL or lock delay that rounds to 0 ms
// (which means the default and none), a limit beyond int32 — and
// WithReentrant without a session (use names the session's method).
// Everything else the gateway checks, and its refusal is
// ErrInvalidArgument. It returns the request the options ask for.
func (c *Client) acquireOptions(op, name string, s *Session, use string, opts []AcquireOption) (acquireConfig, *v1.AcquireRequest, error) {
	var cfg acquireConfig
	if err := c.checkOpen(op); err != nil {
		return cfg, nil, err
	}
	for _, o := range opts {
		o.applyAcquire(&cfg)
	}
	if err := checkTTL(op, cfg.ttl); err != nil {
		return cfg, nil, err
	}
	switch {
	case cfg.wait < 0:
		return cfg, nil, invalid(op, "wait timeout %s is negative; want 0 (until cancelled) or positive", cfg.wait)
	case cfg.limit < 0 || cfg.limit > v1.MaxSemaphoreLimit:
		return cfg, nil, invalid(op, "limit %d is outside 0 (a lock) to %d", cfg.limit, v1.MaxSemaphoreLimit)
	case cfg.lockDelay < 0:
		return cfg, nil, invalid(op, "lock delay %s is negative; want 0 (none) to %s", cfg.lockDelay, v1.MaxLockDelayMs*time.Millisecond)
	case cfg.reentrant && s == nil:
		return cfg, nil, invalid(op, "WithReentrant needs a session: use Session.%s", use)
	}
	if cfg.requestID == "" {
		cfg.requestID = newRequestID()
	}
	return cfg, &v1.AcquireRequest{Name: name, TtlMs: cfg.ttl.Milliseconds(), ClientId: c.cfg.clientID, RequestId: cfg.requestID,
		Limit: int32(cfg.limit), Reentrant: cfg.reentrant, LockDelayMs: cfg.lockDelay.Milliseconds()}, nil
}

func (c *Client) acquire(ctx context.Context, name string, s *Session, opts []AcquireOption) (*Lock, error) {
	return c.acquireStream(ctx, fmt.Sprintf("acquire %q", name), name, s, opts, acquireOnce, false)
}

// existing settles a waiter with a TryAcquire that only answers the grant
// made under its request id while it holds (existing_only), and writes
// nothing: no enqueue, no takeover, no hold added.
func existing(req *v1.TryAcquireRequest) settleAgain {
	return func(ctx context.Context, ep endpoint, sessionID string) (*v1.Granted, error) {
		r := proto.CloneOf(req)
		r.SessionId, r.ExistingOnly = sessionID, true
		resp, err := ep.rpc.TryAcquire(ctx, connect.NewRequest(r))
		if err != nil || !resp.Msg.Acquired {
			return nil, err
		}
		return resp.Msg.Granted, nil
	}
}

// tryRequest is the TryAcquire of what req asks for; existing of it is the
// existing ask of a streaming acquire.
func tryRequest(req *v1.AcquireRequest, election bool) *v1.TryAcquireRequest {
	return &v1.TryAcquireRequest{Name: req.Name, TtlMs: req.TtlMs, ClientId: req.ClientId, RequestId: req.RequestId,
		Limit: req.Limit, Reentrant: req.Reentrant, LockDelayMs: req.LockDelayMs, Election: election}
}

// streamOnce runs one attempt of a streaming acquire (LockService.Acquire,
// ElectionService.Campaign) of req on ep to its end; queued reports whether
// the gateway enqueued the caller before the stream ended.
type streamOnce func(ctx context.Context, ep endpoint, req *v1.AcquireRequest, onQueued func(int64)) (g *v1.Granted, queued bool, err error)

// acquireStream is Acquire's retry loop around once: the same request id
// on every endpoint in turn, the wait timeout, session recovery, and the
// grant turned into a Lock renewed in the background. A session call that
// ends without a Lock after an attempt in doubt settles its request id
// (settle.go); election says the waiter is a campaign's.
func (c *Client) acquireStream(ctx context.Context, op, name string, s *Session, opts []AcquireOption, once streamOnce, election bool) (l *Lock, err error) {
	cfg, req, err := c.acquireOptions(op, name, s, "Acquire", opts)
	if err != nil {
		return nil, err
	}
	var sc *sessionCall // this call's part in its session's settlements
	if s != nil {
		defer func() { sc.end(l, req.RequestId) }()
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		// A wait for a session lock ends with the session.
		defer context.AfterFunc(s.ctx, func() { cancel(context.Cause(s.ctx)) })()
	}
	clk := c.cfg.clock
	// Every lease event of this grant happens after this instant, so it
	// is a conservative anchor for the lock's first deadline.
	anchor := clk.Now()
	var waitUntil time.Time
	if cfg.wait > 0 {
		waitUntil = anchor.Add(cfg.wait)
	}
	if s != nil {
		if sc, err = s.beginCall(ctx, waitUntil, election, name, &req.RequestId, func() settleAgain { return existing(tryRequest(req, election)) }); err != nil {
			return nil, &opError{op: op, kind: err}
		}
	}
	bo := c.newBackoff()
	var last error
	var view *sessionView
	recoveries := 0
	for tries := 1; ; tries++ {
		if s != nil {
			if err := s.check(op); err != nil {
				return nil, err
			}
			view = s.current()
			req.SessionId = view.id
		}
		if cfg.wait > 0 {
			left := waitUntil.Sub(clk.Now())
			if left <= 0 {
				return nil, &opError{op: op, kind: ErrWaitTimeout, cause: last}
			}
			req.WaitTimeoutMs = int64((left + time.Millisecond - 1) / time.Millisecond)
		}
		i, ep := c.pick()
		actx, cancelAttempt := ctx, context.CancelFunc(func() {})
		if cfg.wait > 0 {
			// The gateway ends the wait itself; this bound only guards
			// against a gateway or network that stalls.
			actx, cancelAttempt = withTimeout(ctx, clk, waitUntil.Sub(clk.Now())+waitGrace)
		}
		sent := clk.Now()
		g, queued, err := once(actx, ep, req, cfg.onQueued)
		cancelAttempt()
		if err != nil && inDoubt(err) {
			sc.doubt(req.RequestId, existing(tryRequest(req, election)))
		}
		if err == nil && s != nil && view.leaseFor(g.Shard) == nil {
			c.letGo(ctx, g, waitUntil)
			err = sessionLeaseLost(g.Shard)
		}
		if err == nil {
			return c.held(ctx, op, name, req.RequestId, g, grantTimes{anchor: anchor, sent: sent}, s, view, waitUntil, cfg.manualRenew)
		}
		if s != nil && recoveries < maxSessionRecoveries {
			// Covering the shard again is part of the wait: bounded by
			// its deadline (plus grace) like an attempt.
			rctx, cancelRecover := ctx, context.CancelFunc(func() {})
			if cfg.wait > 0 {
				rctx, cancelRecover = withTimeout(ctx, clk, waitUntil.Sub(clk.Now())+waitGrace)
			}
			handled, rerr := s.recover(rctx, op, err, view, sc, &req.RequestId)
			cancelRecover()
			if handled {
				recoveries++
				if rerr == nil {
					continue // the session covers the shard now: retry at once
				}
				err = rerr
			}
		}
		if cfg.wait > 0 && ctx.Err() == nil && !clk.Now().Before(waitUntil) {
			return nil, &opError{op: op, kind: ErrWaitTimeout, cause: err}
		}
		if ctx.Err() != nil {
			return nil, c.ctxError(op, ctx, s, err)
		}
		if rl := rateLimited(err); rl != nil {
			// Wait the gateway's delay and ask the same gateway again,
			// unless the delay outlasts the wait or the context.
			d, ok := c.rateLimitPause(ctx, rl, waitUntil, bo)
			if !ok {
				return nil, wrap(op, err)
			}
			last = err
			if err := sleep(ctx, clk, d); err != nil {
				return nil, c.ctxError(op, ctx, s, last)
			}
			continue
		}
		if !retryable(err) {
			return nil, wrap(op, err)
		}
		c.failed(i)
		last = err
		if queued {
			bo.reset() // the attempt made progress: this is not a dead loop
		}
		if tries%len(c.eps) == 0 {
			pause := bo.next()
			if cfg.wait > 0 {
				pause = min(pause, waitUntil.Sub(clk.Now()))
			}
			if err := sleep(ctx, clk, pause); err != nil {
				return nil, c.ctxError(op, ctx, s, last)
			}
		}
	}
}

// ctxError reports a wait that ended because ctx (or the session) did.
func (c *Client) ctxError(op string, ctx context.Context, s *Session, last error) error {
	if s != nil {
		if err := s.check(op); err != nil {
			return err
		}
	}
	return &opError{op: op, kind: ctx.Err(), cause: last}
}

// acquireOnce is the streamOnce of LockService.Acquire.
func acquireOnce(ctx context.Context, ep endpoint, req *v1.AcquireRequest, onQueued func(int64)) (g *v1.Granted, queued bool, err error) {
	stream, err := ep.rpc.Acquire(ctx, connect.NewRequest(req))
	return receiveGrant(stream, err, onQueued, func(m *v1.AcquireResponse) (*v1.Queued, *v1.Granted) {
		return m.GetQueued(), m.GetGranted()
	})
}

// receiveGrant reads a streaming acquire (Acquire, Campaign) that opened
// with openErr to its grant, reporting positions on the way; event picks a
// message's position or grant.
func receiveGrant[M any](stream *connect.ServerStreamForClient[M], openErr error, onQueued func(int64), event func(*M) (*v1.Queued, *v1.Granted)) (g *v1.Granted, queued bool, err error) {
	if openErr != nil {
		return nil, false, openErr
	}
	defer stream.Close()
	last := int64(-1)
	for stream.Receive() {
		q, g := event(stream.Msg())
		if g != nil {
			return g, queued, nil
		}
		if q != nil {
			queued = true
			// The gateway repeats the position as a heartbeat; report
			// only changes (and the first, on every attempt).
			if p := q.GetPosition(); onQueued != nil && p != last {
				last = p
				onQueued(p)
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, queued, err
	}
	return nil, queued, errStreamEnded
}

func (c *Client) tryAcquire(ctx context.Context, name string, s *Session, opts []AcquireOption) (l *Lock, err error) {
	op := fmt.Sprintf("try acquire %q", name)
	cfg, areq, err := c.acquireOptions(op, name, s, "TryAcquire", opts)
	if err != nil {
		return nil, err
	}
	req := tryRequest(areq, false)
	anchor := c.cfg.clock.Now()
	var sc *sessionCall // this call's part in its session's settlements
	if s != nil {
		defer func() { sc.end(l, req.RequestId) }()
		// A try blocks for a call's time at most: a settlement's release in
		// flight is answered within it.
		if sc, err = s.beginCall(ctx, c.cfg.clock.Now().Add(c.cfg.requestTimeout), false, name, &req.RequestId,
			func() settleAgain { return existing(proto.CloneOf(req)) }); err != nil {
			return nil, &opError{op: op, kind: err}
		}
	}
	for recoveries := 0; ; recoveries++ {
		var view *sessionView
		if s != nil {
			if err := s.check(op); err != nil {
				return nil, err
			}
			view = s.current()
			req.SessionId = view.id
		}
		var resp *v1.TryAcquireResponse
		var sent time.Time
		err = c.call(ctx, op, func(ctx context.Context, rpc leasegatev1connect.LockServiceClient) error {
			sent = c.cfg.clock.Now()
			r, err := rpc.TryAcquire(ctx, connect.NewRequest(req))
			if err == nil {
				resp = r.Msg
			} else if inDoubt(err) {
				sc.doubt(req.RequestId, existing(proto.CloneOf(req)))
			}
			return err
		})
		if err == nil && s != nil && resp.Acquired && resp.Granted != nil && view.leaseFor(resp.Granted.Shard) == nil {
			c.letGo(ctx, resp.Granted, time.Time{})
			err = sessionLeaseLost(resp.Granted.Shard)
		}
		if err != nil {
			if s != nil && recoveries < maxSessionRecoveries {
				if handled, rerr := s.recover(ctx, op, err, view, sc, &req.RequestId); handled {
					if rerr != nil {
						return nil, rerr
					}
					continue
				}
			}
			return nil, err
		}
		if !resp.Acquired || resp.Granted == nil {
			return nil, &HeldError{Name: name, HolderExpires: timeOf(resp.HolderExpiresAt), DelayUntil: timeOf(resp.DelayUntil)}
		}
		return c.held(ctx, op, name, req.RequestId, resp.Granted, grantTimes{anchor: anchor, sent: sent}, s, view, time.Time{}, cfg.manualRenew)
	}
}

// letGo releases a grant that will not be handed out, best effort: if no
// gateway answers, the lock lapses with its lease. The release is bounded
// by the request timeout. With a wait deadline (waitUntil not zero) the
// caller waits for it only until that deadline plus waitGrace — an Acquire
// returns by then whatever the release does — and the release goes on in
// the background for the rest of its bound.
func (c *Client) letGo(ctx context.Context, g *v1.Granted, waitUntil time.Time) {
	release := func() {
		rctx, cancel := withTimeout(context.WithoutCancel(ctx), c.cfg.clock, c.cfg.requestTimeout)
		defer cancel()
		_, _ = c.ReleaseByID(rctx, g.LockId, g.FencingToken)
	}
	if waitUntil.IsZero() {
		release()
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		release()
	}()
	t := c.cfg.clock.NewTimer(max(waitUntil.Add(waitGrace).Sub(c.cfg.clock.Now()), 0))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C():
	}
}

// grantTimes are the clock readings a grant's first deadline is measured
// from: before the first attempt (every lease event of the grant follows
// it) and before the attempt that was granted (valid_for_ms counts from its
// arrival).
type grantTimes struct {
	anchor, sent time.Time
}

// waitGrace is how long past its wait deadline an Acquire may take to
// return: the time to confirm a grant that arrived at the deadline.
const waitGrace = 500 * time.Millisecond

// held turns a grant made under request id rid into a Lock.
func (c *Client) held(ctx context.Context, op, name, rid string, g *v1.Granted, at grantTimes, s *Session, view *sessionView, waitUntil time.Time, manual bool) (*Lock, error) {
	l := &Lock{c: c, name: name, id: g.LockId, shard: g.Shard, token: g.FencingToken, ttl: ms(g.TtlMs), rid: rid,
		holds: int(max(g.HoldCount, 1))}
	if s != nil {
		// The attempt checked that the lease was live; if it was lost
		// since, the lock is lost with it, as it should be.
		lease := view.leases[g.Shard]
		if l.ttl <= 0 {
			l.ttl = lease.ttl
		}
		l.attach(s, lease)
		return l, nil
	}
	if l.ttl <= 0 {
		return nil, &opError{op: op, kind: ErrUnavailable, cause: fmt.Errorf("the gateway granted a lease with ttl_ms %d", g.TtlMs)}
	}
	clk := c.cfg.clock
	// The tighter of the first attempt's send time plus the TTL and the
	// granted attempt's send time plus what the gateway says the lease owes
	// from that attempt's arrival.
	anchor := at.anchor
	deadline := c.deadline(at.anchor, confirmation{ttl: l.ttl})
	if v := ms(g.ValidForMs); v > 0 {
		if d := c.deadline(at.sent, confirmation{ttl: l.ttl, valid: v}); d.Before(deadline) {
			deadline = d
		}
	}
	if clk.Now().Sub(anchor) >= time.Duration(float64(l.ttl)*c.cfg.renewFraction) {
		// A long wait leaves only the send time of the first attempt to
		// measure the deadline from; a renewal now gives a fresh one.
		rctx, cancel := ctx, context.CancelFunc(func() {})
		if !waitUntil.IsZero() {
			// Confirming the grant must not hold the caller far past
			// the wait deadline it asked for.
			rctx, cancel = withTimeout(ctx, clk, max(waitUntil.Sub(clk.Now()), 0)+waitGrace)
		}
		defer cancel()
		r := c.renewCall(rctx, op, l.renewRPC)
		switch {
		case r.err == nil:
			anchor = r.sent
			if r.ttl > 0 {
				l.ttl = r.ttl
			}
			deadline = c.deadline(r.sent, confirmation{ttl: l.ttl, valid: r.valid})
		case proofRefused(r.err):
			return nil, &opError{op: op, kind: ErrLockLost, cause: r.err}
		}
	}
	if !clk.Now().Before(deadline) {
		// Granted, but it cannot be confirmed in time: let it go.
		c.letGo(ctx, g, waitUntil)
		return nil, &opError{op: op, kind: ErrUnavailable, cause: errors.New("granted, but no gateway confirmed the lease before its deadline; released it")}
	}
	l.keeper = c.startKeeper(l.ttl, anchor, deadline, manual, l.renewRPC, l.lostError)
	l.ctx = l.keeper.ctx
	c.watchHold(l, l.keeper.loseNow)
	return l, nil
}
