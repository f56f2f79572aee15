//go:build linux

package chaos

import (
	"context"
	mrand "math/rand/v2"
	"time"

	"github.com/leasegate/leasegate/client"
)

// runStable is a worker that uses one request id for every acquire, on
// whatever name, and acquires again the moment it has released: the next
// attempt with the id meets the last one's key, or its late cleanup. With
// withSession its locks ride on a session, and its waiters on the
// gateways' attempt leases. Its acquires are recorded like the workers',
// so the stuck-waiter checker sees any stall past the wait timeout.
func (h *Harness) runStable(ctx context.Context, s *sdk, who string, withSession bool, rng *mrand.Rand) {
	rid := newRequestID()
	var sess *client.Session
	defer func() {
		if sess != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = sess.Close(cctx)
			cancel()
		}
	}()
	for ctx.Err() == nil {
		if withSession && (sess == nil || sess.Err() != nil) {
			if sess != nil {
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_ = sess.Close(cctx)
				cancel()
			}
			var err error
			if sess, err = s.base.OpenSession(ctx, client.WithTTL(h.cfg.TTL)); err != nil {
				sess = nil
				h.advPause(ctx, rng)
				continue
			}
		}
		name := h.names[rng.IntN(len(h.names))]
		l, op := h.acquireWith(ctx, s, acquireSpec{who: who, role: "stable", name: name, requestID: rid, session: sess,
			wait: time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))})
		if l == nil {
			var reason string
			h.Hist.update(func() { reason = op.Reason })
			if sess != nil && reason == client.ReasonSessionLost.String() {
				// The map gained a shard the session has no lease on, or
				// the session lapsed: open another.
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_ = sess.Close(cctx)
				cancel()
				sess = nil
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		if rng.IntN(2) == 0 {
			_, _, _ = h.Reg.Write(l.Context(), who, name, l.Token())
		}
		h.release(l, op)
	}
}
