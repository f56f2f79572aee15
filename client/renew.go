package client

import (
	"context"
	"time"
)

// WithManualRenew turns the background renewal of the lock off: the lock
// lives until its conservative deadline (Lock.Expires) unless the caller
// renews it with Lock.Renew before then, which moves the deadline. Its
// Context still ends, with ErrLockLost, at the deadline, or at once when a
// gateway proves it lost. Use it when the work knows better than a timer
// when it needs more time (a batch that renews between steps), as a lease
// in etcd's concurrency package is kept by hand. Default off: the SDK
// renews every TTL/3. Locks acquired through a Session ignore it: the
// session keeps their lease.
func WithManualRenew() AcquireOption {
	return acquireFunc(func(c *acquireConfig) { c.manualRenew = true })
}

// Renew renews the lock's lease now and returns its new conservative
// deadline (what Expires reports from then on). It blocks until a gateway
// confirms the lease, the retries (every endpoint, at least 3 attempts)
// are spent, or ctx ends. It works whether or not the lock was acquired
// WithManualRenew; the background renewal, if on, counts its next renewal
// from this one's answer.
//
// A gateway proving the lock gone ends the lock (Done closes) and Renew
// returns an error wrapping ErrLockLost, as Err does. A renewal that no
// gateway answered in time leaves the lock held until its unchanged
// deadline and returns an error wrapping ErrUnavailable (or
// ErrRateLimited); calling Renew again retries. Renew on a lock lost or
// released returns Err. A session lock has no lease of its own: Renew
// returns an error wrapping ErrInvalidArgument.
func (l *Lock) Renew(ctx context.Context) (deadline time.Time, err error) {
	op := "renew " + l.op()
	if l.keeper == nil {
		return time.Time{}, invalid(op, "the lock belongs to a session, which keeps its lease; renew the session instead")
	}
	if err := l.Err(); err != nil {
		return time.Time{}, err
	}
	k := l.keeper
	clk := l.c.cfg.clock
	// A renewal is worth trying only while the lock can still be proven
	// held: the attempts (and any rate-limit pause) end at its deadline,
	// or when the keeper stops.
	ctx, cancel := withTimeout(ctx, clk, k.Deadline().Sub(clk.Now()))
	defer cancel()
	go func() { // ends with ctx, which the deferred cancel ends
		select {
		case <-k.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	r := l.c.renewCall(ctx, op, k.renew)
	m := manualRenewal{result: r, processed: make(chan struct{})}
	select {
	case k.manualc <- m:
		<-m.processed
	case <-k.done:
		// Stopped or lost meanwhile: the lock's own error says which.
	}
	if err := l.Err(); err != nil {
		return time.Time{}, err
	}
	if r.err != nil {
		return time.Time{}, r.err
	}
	return k.Deadline(), nil
}
