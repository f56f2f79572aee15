// Package fence is the protected resource's half of leasegate: it accepts a
// write only if the fencing token that comes with it is at least the highest
// token the resource has already accepted for the same key.
//
// # Why the resource must check
//
// A leasegate lock is a lease: it ends when released or when its TTL lapses.
// The TTL protects against a dead holder, but nothing the lock service or the
// client does can protect against a holder that does not know it is dead. A
// garbage-collection pause, a VM migration, a network partition or a clock
// jump can stop a holder for longer than its TTL; meanwhile the lease expires,
// another client is granted the lock, and when the first holder wakes up it
// still believes it holds the lock and writes. A TTL lock alone is therefore
// never safe for correctness.
//
// Every grant carries a fencing token that only grows for a lock name. If the
// resource remembers the highest token it has accepted per key and refuses
// lower ones, the stale holder's late write is rejected:
//
//	A: acquire(order:42) → token 10, then pauses for 60 s; its lease expires
//	B: acquire(order:42) → token 11, writes with 11; the resource records 11
//	A: wakes up, writes with 10; the resource refuses: 10 < 11
//
// The check and the write must be one atomic step. A resource that first
// reads the highest token and then writes in a separate step lets two writers
// both pass the check; every guard in this package makes the check part of
// the write itself.
//
// # Rules
//
//   - A token passes if it is greater than or equal to the highest accepted
//     token for the key. Equal tokens pass because they come from the same
//     grant: the holder may write as often as it likes.
//   - A refused write fails with an error that errors.Is(err, ErrStaleToken)
//     recognises; errors.As with *StaleTokenError gives both tokens.
//   - Tokens are compared per key, so all writers of one key must take their
//     tokens from the same lock name: tokens of different names are unrelated.
//   - Tokens are non-negative int64 values. leasegate issues
//     token = epoch<<48 | create revision of the holder's key.
//
// # Implementations
//
// Memory keeps the highest tokens in a map: for tests and single-process
// resources. SQLGuard fences writes into PostgreSQL or SQLite inside one
// transaction. EtcdGuard fences writes into an etcd cluster inside one etcd
// transaction. Middleware fences HTTP requests against any Store. Orders is a
// worked example of a table written only by fenced writes.
//
// The package depends on nothing else of leasegate: a resource can use it
// without the lock service's code. It is a module of its own,
// github.com/leasegate/leasegate/fence, whose only requirement is etcd's
// client (for EtcdGuard); SQLGuard takes a *sql.DB, so the resource brings
// the database driver. Package storetest checks a Store of your own against
// the contract the guards here meet.
package fence

import (
	"context"
	"errors"
	"fmt"
)

// Errors returned by this package. Wrapped errors keep these as their cause,
// so compare with errors.Is.
var (
	// ErrStaleToken means a write carried a token lower than the highest
	// token already accepted for its key. The error's concrete type is
	// *StaleTokenError.
	ErrStaleToken = errors.New("fence: stale token")
	// ErrInvalidToken means a token was negative; tokens are >= 0.
	ErrInvalidToken = errors.New("fence: invalid token")
	// ErrEmptyResource means the resource key was the empty string.
	ErrEmptyResource = errors.New("fence: empty resource key")
	// ErrInvalidConfig means a guard's configuration was rejected; the
	// message names the bad value and what is allowed.
	ErrInvalidConfig = errors.New("fence: invalid config")
	// ErrNotFound means a record (such as an order) does not exist.
	ErrNotFound = errors.New("fence: not found")
)

// Store records, per resource key, the highest fencing token accepted so far.
// *Memory, *SQLGuard and *EtcdGuard implement it; Middleware uses it.
type Store interface {
	// Accept records token as the highest token for resource if token is
	// not lower than the current highest, as one atomic step. A lower
	// token is refused with a *StaleTokenError and leaves the store
	// unchanged. Accept blocks while another write of the same resource is
	// in progress, until ctx is done.
	Accept(ctx context.Context, resource string, token int64) error
	// Highest returns the highest token accepted for resource, and false if
	// no token was ever accepted for it.
	Highest(ctx context.Context, resource string) (token int64, ok bool, err error)
}

// StaleTokenError is the error of a refused write. It matches ErrStaleToken
// under errors.Is.
type StaleTokenError struct {
	// Resource is the key the write was for.
	Resource string
	// Token is the refused write's token.
	Token int64
	// Highest is the highest token accepted for Resource when the write was
	// refused; it is greater than Token.
	Highest int64
}

// Error says both tokens, e.g.
// fence: stale token 10 for "order:42": highest accepted is 11.
func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("fence: stale token %d for %q: highest accepted is %d", e.Token, e.Resource, e.Highest)
}

// Unwrap returns ErrStaleToken, so errors.Is(err, ErrStaleToken) holds.
func (e *StaleTokenError) Unwrap() error { return ErrStaleToken }

// stale builds the error for a refused token.
func stale(resource string, token, highest int64) error {
	return &StaleTokenError{Resource: resource, Token: token, Highest: highest}
}

// validate rejects arguments no guard accepts.
func validate(resource string, token int64) error {
	if resource == "" {
		return ErrEmptyResource
	}
	if token < 0 {
		return fmt.Errorf("%w: %d is negative; tokens are >= 0", ErrInvalidToken, token)
	}
	return nil
}
