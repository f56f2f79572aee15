// Package clienttest exposes the Go SDK's internal timing to tests of the
// SDK itself: a hook on every renewal, the clock time a lock was lost, and
// the safety margin a client subtracts from a lease. leasegate's own SDK
// tests (internal/sdktest, in the server's module) use it with a manual
// clock (client.WithClock) to check deadlines without sleeping.
//
// Applications do not need it, and it is not covered by the SDK's
// compatibility promise: its names may change in any release.
package clienttest

import (
	"time"

	"github.com/leasegate/leasegate/client"
	"github.com/leasegate/leasegate/client/internal/testhook"
)

// WithRenewHook makes fn observe every renewal or keepalive attempt (of a
// lock or a session) after the renewer has processed it, so the lock's new
// deadline is already set when fn runs. fn runs on the renewer's goroutine
// and must not block for long: the next renewal waits for it. Default: no
// hook.
func WithRenewHook(fn func(sent time.Time, err error)) client.Option {
	return testhook.RenewHook(fn).(client.Option)
}

// LostAt is the clock time (of the client's Clock) at which l was lost,
// zero while it was not. It does not block.
func LostAt(l *client.Lock) time.Time { return testhook.LostAt(l) }

// Margin is the safety margin c subtracts from a lease of ttl when it sets
// a lock's deadline: the lock counts as lost that long before the lease
// could lapse in etcd.
func Margin(c *client.Client, ttl time.Duration) time.Duration { return testhook.Margin(c, ttl) }

// WaitingRenewals is how many of c's scheduled lock renewals are due but
// wait for their turn (see client.WithMaxRenewals). It does not block.
func WaitingRenewals(c *client.Client) int { return testhook.WaitingRenewals(c) }
