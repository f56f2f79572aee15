//go:build linux

package chaos

import (
	"context"
	"errors"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/client"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

// Raw clients drive the Connect API directly, for the adversaries that need
// what the SDK hides: which gateway an attempt goes to, when a stream is
// aborted, which id a call carries. A raw holder forms its beliefs as the
// SDK does (client/doc.go): a grant's deadline is the tighter of the first
// attempt's send time plus the TTL and the granted attempt's send time plus
// valid_for_ms, less the SDK's default safety margin; each confirmed
// renewal moves it, and an answer after the deadline revives nothing.

// raw returns a Connect client of the gateway at endpoint over s's
// connections.
func (s *sdk) raw(endpoint string) leasegatev1connect.LockServiceClient {
	return leasegatev1connect.NewLockServiceClient(&http.Client{Transport: s.tr}, endpoint)
}

// rawAdmin returns a Connect admin client of the gateway at endpoint over
// s's connections: one attempt per call, whose answer the caller sees.
func (s *sdk) rawAdmin(endpoint string) leasegatev1connect.AdminServiceClient {
	return leasegatev1connect.NewAdminServiceClient(&http.Client{Transport: s.tr}, endpoint)
}

// sdkMargin is the SDK's default safety margin for a lease of ttl.
func sdkMargin(ttl time.Duration) time.Duration { return min(ttl/100+100*time.Millisecond, ttl/3) }

// grantDeadline is the deadline the SDK gives a grant: anchor is the first
// attempt's send time, sent the granted attempt's.
func grantDeadline(anchor, sent time.Time, g *v1.Granted) time.Time {
	ttl := time.Duration(g.TtlMs) * time.Millisecond
	d := anchor.Add(ttl)
	if v := time.Duration(g.ValidForMs) * time.Millisecond; v > 0 {
		if s := sent.Add(min(v, ttl)); s.Before(d) {
			d = s
		}
	}
	return d.Add(-sdkMargin(ttl))
}

// rawAttempt runs one Acquire stream on rpc, recorded on op as an attempt,
// until it is granted or fails; queued, when set, is called (once) when
// the gateway reports the caller enqueued. Cancelling ctx aborts the
// stream.
func (h *Harness) rawAttempt(ctx context.Context, rpc leasegatev1connect.LockServiceClient, op *AcquireOp, req *v1.AcquireRequest, queued func()) (*v1.Granted, time.Time, error) {
	sent := time.Now()
	var i int
	h.Hist.update(func() {
		i = len(op.Attempts)
		op.Attempts = append(op.Attempts, Attempt{Start: sent})
	})
	defer func() {
		now := time.Now()
		h.Hist.update(func() { op.Attempts[i].End = now })
	}()
	stream, err := rpc.Acquire(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, sent, err
	}
	defer stream.Close()
	for stream.Receive() {
		switch ev := stream.Msg().Event.(type) {
		case *v1.AcquireResponse_Queued:
			now := time.Now()
			h.Hist.update(func() {
				if op.Queued.IsZero() {
					op.Queued = now
				}
				op.LastQueued = now
			})
			if queued != nil {
				queued()
				queued = nil
			}
		case *v1.AcquireResponse_Granted:
			if ev.Granted != nil {
				return ev.Granted, sent, nil
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, sent, err
	}
	return nil, sent, errors.New("the acquire stream ended without a grant")
}

// rawGranted records a raw grant on op.
func (h *Harness) rawGranted(op *AcquireOp, g *v1.Granted) {
	now := time.Now()
	h.Hist.update(func() {
		op.Complete, op.Outcome, op.Token, op.Shard = now, outGranted, g.FencingToken, g.Shard
	})
}

// rawFailed records a raw acquire that ended without a grant.
func (h *Harness) rawFailed(ctx context.Context, op *AcquireOp, err error) {
	now := time.Now()
	h.Hist.update(func() {
		op.Complete, op.Err, op.Code, op.Reason = now, err.Error(), answerCode(err), answerReason(err)
		switch {
		case client.Reason(err) == client.ReasonWaitTimeout:
			op.Outcome = outTimeout
		case ctx.Err() != nil:
			op.Outcome = outCanceled
		default:
			op.Outcome = outError
		}
	})
}

// rawHold keeps a raw grant as a careful holder would: it writes its token
// to the register while its deadline has not passed, renews every TTL/3
// through renewer (whose RenewByID forms deadlines as the SDK's renewer
// does), and releases after holdFor. It records when the holder stopped
// believing: the release's invoke, the deadline passing unconfirmed, or a
// gateway refusing a renewal.
func (h *Harness) rawHold(ctx context.Context, renewer *client.Client, op *AcquireOp, g *v1.Granted, deadline time.Time, holdFor time.Duration) {
	ttl := time.Duration(g.TtlMs) * time.Millisecond
	end := time.Now().Add(holdFor)
	next := time.Now().Add(ttl / 3)
	lose := func(at time.Time, proof bool) {
		h.Hist.update(func() { op.DoneAt, op.End, op.Lost, op.LostProof, op.Deadline = at, time.Now(), true, proof, deadline })
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if released, err := renewer.ReleaseByID(rctx, g.LockId, g.FencingToken); err == nil && released {
			h.stale.addLock(staleLock{id: g.LockId, token: g.FencingToken, name: op.Name, shard: g.Shard, client: op.Client})
		}
	}()
	for {
		now := time.Now()
		if !now.Before(deadline) {
			lose(deadline, false)
			return
		}
		if !now.Before(end) || ctx.Err() != nil {
			h.Hist.update(func() { op.End = now })
			return
		}
		wctx, cancel := context.WithDeadline(ctx, deadline)
		_, _, _ = h.Reg.Write(wctx, op.Client, op.Name, g.FencingToken)
		cancel()
		if !time.Now().Before(next) {
			rctx, cancel := context.WithDeadline(ctx, deadline)
			rn, err := renewer.RenewByID(rctx, g.LockId, g.FencingToken)
			cancel()
			at := time.Now()
			switch {
			case !at.Before(deadline):
				lose(deadline, false)
				return
			case err == nil:
				if rn.Deadline.After(deadline) {
					deadline = rn.Deadline
				}
				next = at.Add(ttl / 3)
			case proofRefused(err):
				lose(at, true)
				return
			default:
				next = at.Add(100 * time.Millisecond)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(min(50*time.Millisecond, time.Until(deadline), time.Until(end))):
		}
	}
}

// proofRefused reports an answer that proves a lock or session gone or
// not the caller's, as the SDK reads it.
func proofRefused(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeFailedPrecondition, connect.CodePermissionDenied, connect.CodeInvalidArgument:
		return true
	}
	return false
}
