package client

import (
	"context"
	"fmt"
	"sync"
)

// Locker is a lock on one name behind the sync.Locker interface, for code
// written against a mutex: NewLocker makes one. Lock blocks until the lock
// is acquired and Unlock releases it. Like a sync.Mutex it may be locked
// by one goroutine and unlocked by another; it is not reentrant (a Lock
// while the same Locker holds waits behind itself until the wait timeout,
// if any); and it must not be copied after first use.
//
// sync.Locker's methods cannot return errors, so Lock panics when it
// cannot acquire (as etcd's concurrency.NewLocker does): a caller that
// carried on would run its critical section unlocked. Use Acquire where a
// failure must be handled. The lock can still be lost while held; Held
// gives the *Lock, whose Context ends then and whose Token fences writes.
type Locker struct {
	c    *Client
	name string
	opts []AcquireOption

	mu   sync.Mutex
	held *Lock
}

// NewLocker returns a Locker for name on c; opts apply to each Lock's
// acquire (WithTTL, WithWaitTimeout, …). It does not block or contact a
// gateway.
func NewLocker(c *Client, name string, opts ...AcquireOption) *Locker {
	return &Locker{c: c, name: name, opts: opts}
}

var _ sync.Locker = (*Locker)(nil)

// Lock blocks until the lock is acquired, waiting in the name's queue
// without a deadline unless WithWaitTimeout was given. It panics with the
// acquire's error (wrapping ErrWaitTimeout, ErrClosed, ErrPermissionDenied,
// …) when the lock cannot be acquired.
func (l *Locker) Lock() {
	lock, err := l.c.Acquire(context.Background(), l.name, l.opts...)
	if err != nil {
		panic(fmt.Errorf("leasegate: Locker.Lock: %w", err))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held = lock
}

// Unlock releases the lock, blocking until a gateway confirms or the
// retries are spent. A release no gateway confirmed is not an error here:
// the lease lapses at its TTL. Unlock panics when the Locker is not
// locked, as sync.Mutex does.
func (l *Locker) Unlock() {
	l.mu.Lock()
	lock := l.held
	l.held = nil
	l.mu.Unlock()
	if lock == nil {
		panic("leasegate: Locker.Unlock of an unlocked Locker")
	}
	_ = lock.Release(context.Background())
}

// Held returns the lock the Locker holds, or nil when it is unlocked. It
// does not block.
func (l *Locker) Held() *Lock {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held
}
