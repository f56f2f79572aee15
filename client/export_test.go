package client

import "time"

// WithRenewHook makes fn observe every renewal or keepalive attempt after
// the renewer has processed it, on the renewer's goroutine.
func WithRenewHook(fn func(sent time.Time, err error)) Option {
	return optionFunc(func(c *config) { c.hooks.renewed = fn })
}

// LostAt is the clock time at which l was lost, zero while it was not.
func LostAt(l *Lock) time.Time {
	if k := l.keeper; k != nil {
		k.mu.Lock()
		defer k.mu.Unlock()
		return k.lostAt
	}
	l.lease.mu.Lock()
	defer l.lease.mu.Unlock()
	return l.lease.lostAt
}

// Margin is the safety margin a client applies to a lease of ttl.
func Margin(c *Client, ttl time.Duration) time.Duration { return c.cfg.marginFor(ttl) }
