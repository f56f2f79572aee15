package clock

import (
	"context"
	"sync/atomic"
	"time"
)

// WithTimeoutCause is context.WithTimeoutCause on c's time: the returned
// context ends with cause (its Err is context.DeadlineExceeded) once c has
// moved d past now. On the Real clock (or a nil one) it is exactly
// context.WithTimeoutCause. On any other clock the context reports no
// deadline of its own — a deadline on a fake clock means nothing to etcd or
// the network — and one goroutine waits for the timer until the context
// ends; the cancel func must be called, as always.
func WithTimeoutCause(ctx context.Context, c Clock, d time.Duration, cause error) (context.Context, context.CancelFunc) {
	if c == nil || c == Real {
		return context.WithTimeoutCause(ctx, d, cause)
	}
	if cause == nil {
		cause = context.DeadlineExceeded
	}
	inner, cancel := context.WithCancelCause(ctx)
	out := &timeoutCtx{Context: inner, cause: cause}
	t := c.NewTimer(d)
	go func() {
		defer t.Stop()
		select {
		case <-t.C():
			// Marked before the cancel, so Err never reports the expiry as
			// a plain cancel; Err checks that this cancel was the one that
			// took effect.
			out.expired.Store(true)
			cancel(cause)
		case <-inner.Done():
		}
	}()
	return out, func() { cancel(context.Canceled) }
}

// Sleep waits until c has moved d past now or ctx ends, and reports
// whether d passed (false: ctx ended first).
func Sleep(ctx context.Context, c Clock, d time.Duration) bool {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// timeoutCtx reports its expiry on a non-real clock as
// context.DeadlineExceeded, as a real deadline would be.
type timeoutCtx struct {
	context.Context
	cause   error
	expired atomic.Bool
}

func (c *timeoutCtx) Err() error {
	err := c.Context.Err()
	if err != nil && c.expired.Load() && context.Cause(c.Context) == c.cause {
		return context.DeadlineExceeded
	}
	return err
}
