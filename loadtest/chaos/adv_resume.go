//go:build linux

package chaos

import (
	"context"
	mrand "math/rand/v2"
	"time"

	"github.com/leasegate/leasegate/client"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// resumeRound is one abort-and-resume: an Acquire stream on first that,
// once queued, is aborted and retried with the same request id on second.
// The first gateway cleans up after the aborted stream; the retry has taken
// the waiter over by then, or will, and the cleanup must delete nothing it
// does not own. The SDK moves to another gateway only when one fails, so
// this drives the Connect API itself.
type resumeRound struct {
	who           string
	first, second *Gateway
	name          string
	wait, holdFor time.Duration
	// beforeAbort runs once the first stream is queued, before it is
	// aborted (the nemesis delays the first gateway's link to etcd there,
	// so that its cleanup lands late).
	beforeAbort func()
	// queuedAgain runs once the retry is queued (the nemesis's holder
	// releases there).
	queuedAgain func()
	// renewer renews and releases the grant.
	renewer *client.Client
}

// abortAndResume runs r and holds what it is granted for r.holdFor. It
// returns the op and whether the retry on the second gateway happened.
func (h *Harness) abortAndResume(ctx context.Context, s *sdk, r resumeRound) (*AcquireOp, bool) {
	rid := newRequestID()
	anchor := time.Now()
	op := h.Hist.begin(&AcquireOp{Client: r.who, Role: "resume", Name: r.name, RequestID: rid, Wait: r.wait, TTL: h.cfg.TTL, Invoke: anchor})
	req := &v1.AcquireRequest{Name: r.name, TtlMs: h.cfg.TTL.Milliseconds(), ClientId: r.who, RequestId: rid,
		WaitTimeoutMs: r.wait.Milliseconds()}
	type result struct {
		g    *v1.Granted
		sent time.Time
		err  error
	}
	// The client gives up a wait a little after its timeout, as the SDK
	// does, in case a gateway stalls.
	wctx, cancel := context.WithDeadline(ctx, anchor.Add(r.wait+500*time.Millisecond))
	defer cancel()
	actx, abort := context.WithCancel(wctx)
	defer abort()
	queued := make(chan struct{})
	first := make(chan result, 1)
	go func() {
		g, sent, err := h.rawAttempt(actx, s.raw(r.first.Front.URL()), op, req, func() { close(queued) })
		first <- result{g, sent, err}
	}()
	var res result
	resumed := false
	select {
	case res = <-first:
	case <-queued:
		if r.beforeAbort != nil {
			r.beforeAbort()
		}
		abort()
		if res = <-first; res.g != nil {
			break // granted before the abort took: hold it
		}
		resumed = true
		left := r.wait - time.Since(anchor)
		if left <= 0 {
			h.rawFailed(wctx, op, res.err)
			return op, resumed
		}
		req.WaitTimeoutMs = max(left.Milliseconds(), 1)
		res.g, res.sent, res.err = h.rawAttempt(wctx, s.raw(r.second.Front.URL()), op, req, r.queuedAgain)
	}
	if res.g == nil {
		h.rawFailed(wctx, op, res.err)
		return op, resumed
	}
	h.rawGranted(op, res.g)
	h.rawHold(ctx, r.renewer, op, res.g, grantDeadline(anchor, res.sent, res.g), r.holdFor)
	return op, resumed
}

// runResumer aborts and resumes acquires of the contended names between
// the two gateways, in random order, for the whole run.
func (h *Harness) runResumer(ctx context.Context, s *sdk, rng *mrand.Rand) {
	for ctx.Err() == nil {
		i := rng.IntN(len(h.Gateways))
		h.abortAndResume(ctx, s, resumeRound{
			who: "adv-resume", first: h.Gateways[i], second: h.Gateways[(i+1)%len(h.Gateways)],
			name:    h.names[rng.IntN(len(h.names))],
			wait:    time.Second + time.Duration(rng.Int64N(int64(2*time.Second))),
			holdFor: time.Duration(rng.Int64N(int64(300 * time.Millisecond))),
			renewer: s.base,
		})
		h.advPause(ctx, rng)
	}
}
