// Package testhook is how client/clienttest reaches the SDK's unexported
// timing without package client exporting it: package client installs the
// accessors below when it is initialised, and clienttest calls them.
//
// The values are untyped because this package cannot import package client
// (client imports it); clienttest restores the types.
package testhook

import "time"

var (
	// RenewHook returns a client.Option that makes fn observe every
	// renewal or keepalive attempt after the renewer has processed it.
	RenewHook func(fn func(sent time.Time, err error)) any
	// LostAt returns the clock time at which a *client.Lock was lost, zero
	// while it was not.
	LostAt func(lock any) time.Time
	// Margin returns the safety margin a *client.Client applies to a
	// lease of ttl.
	Margin func(c any, ttl time.Duration) time.Duration
	// WaitingRenewals returns how many scheduled renewals of a
	// *client.Client wait for their turn to be sent.
	WaitingRenewals func(c any) int
)
