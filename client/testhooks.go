package client

import (
	"time"

	"github.com/leasegate/leasegate/client/internal/testhook"
)

// The SDK's own tests observe its timing through client/clienttest; these
// are the accessors it calls. Applications never need them.
func init() {
	testhook.RenewHook = func(fn func(sent time.Time, err error)) any { return withRenewHook(fn) }
	testhook.LostAt = func(l any) time.Time { return lostAt(l.(*Lock)) }
	testhook.Margin = func(c any, ttl time.Duration) time.Duration { return c.(*Client).cfg.marginFor(ttl) }
	testhook.WaitingRenewals = func(c any) int { return c.(*Client).renews.waitingCount() }
}

// withRenewHook makes fn observe every renewal or keepalive attempt after
// the renewer has processed it, on the renewer's goroutine.
func withRenewHook(fn func(sent time.Time, err error)) Option {
	return optionFunc(func(c *config) { c.hooks.renewed = fn })
}

// lostAt is the clock time at which l was lost, zero while it was not.
func lostAt(l *Lock) time.Time {
	if k := l.keeper; k != nil {
		k.mu.Lock()
		defer k.mu.Unlock()
		return k.lostAt
	}
	l.lease.mu.Lock()
	defer l.lease.mu.Unlock()
	return l.lease.lostAt
}
