package gateway

import "context"

// SealLockIDBody signs an arbitrary lock id body, so fuzzing reaches the
// parser behind the integrity check.
func SealLockIDBody(keys IDKeyring, body []byte) string {
	return seal(keys, lockIDDomain, lockIDVersion, body)
}

// SealSessionIDBody signs an arbitrary session id body.
func SealSessionIDBody(keys IDKeyring, body []byte) string {
	return seal(keys, sessionIDDomain, sessionIDVersion, body)
}

// HoldBeat is how often a WatchHold stream beats, on the gateway's clock.
const HoldBeat = holdBeat

// SetRESTGrantHook makes h run as each waiting REST acquire's grant is
// about to be written, with the request's context. Set it before the
// gateway serves.
func SetRESTGrantHook(s *Service, h func(context.Context)) { s.restGrantHook = h }
