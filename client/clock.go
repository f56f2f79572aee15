package client

import (
	"context"
	"sync"
	"time"
)

// Clock is the time source for everything the SDK times on its own: renew
// schedules, lock deadlines, retry backoff, wait timeouts and per-attempt
// timeouts. Inject a manual clock with WithClock to test that logic
// without sleeping. Implementations must be safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once, d from now. A d of zero
	// or less fires at once.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer made by a Clock.
type Timer interface {
	// C delivers the fire time once.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did.
	Stop() bool
}

// RealClock is the wall clock, the default of WithClock.
var RealClock Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }

// sleep waits d on clk, or until ctx ends.
func sleep(ctx context.Context, clk Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// withTimeout is context.WithTimeout measured on clk, so attempt timeouts
// follow an injected clock like every other SDK timing.
func withTimeout(ctx context.Context, clk Clock, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := clk.(realClock); ok {
		return context.WithTimeout(ctx, d)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	t := clk.NewTimer(d)
	stop := make(chan struct{})
	go func() {
		select {
		case <-t.C():
			cancel(context.DeadlineExceeded)
		case <-stop:
			t.Stop()
		}
	}()
	return ctx, sync.OnceFunc(func() {
		close(stop)
		cancel(context.Canceled)
	})
}
