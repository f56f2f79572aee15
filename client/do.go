package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Do acquires the lock on name (as Acquire, with opts), runs fn while
// holding it, and releases it after, as redsync and etcd users write by
// hand. It blocks until fn returns and the lock is released, or until the
// acquire fails.
//
// fn's context is cancelled the moment the lock is lost, with the loss as
// its cause (context.Cause reports the same error as Lock.Err), or when
// ctx ends: fn must stop its protected work then. Do does not pass the
// fencing token; when the resource checks tokens, use Acquire and
// Lock.Token instead.
//
// Do returns the acquire's error if it could not acquire; otherwise fn's
// error; otherwise, when the lock was lost before fn returned, the loss
// (wrapping ErrLockLost: the work may have run on past it); otherwise the
// error of Release. Release runs even when ctx has ended, bounded by the
// client's request timeout per attempt, and when fn panics, before the
// panic goes on. A session's lock whose Release no gateway answered does
// not lapse while the session lives, so Do goes on releasing it in the
// background until a gateway answers or the session ends.
func (c *Client) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...AcquireOption) error {
	l, err := c.Acquire(ctx, name, opts...)
	return holdFor(ctx, l, err, fn)
}

// Do acquires the lock on name in the session (as Session.Acquire, with
// opts), runs fn while holding it, and releases it after, leaving the
// session open. It is Client.Do for a session's locks: fn's context ends
// when the lock is lost, which for a session lock includes the session's
// lease on the lock's shard being lost, or the session being closed.
func (s *Session) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...AcquireOption) error {
	l, err := s.Acquire(ctx, name, opts...)
	return holdFor(ctx, l, err, fn)
}

// holdFor runs fn while l is held and releases l after: Do's body, its
// results as Client.Do says; err is the acquire's.
func holdFor(ctx context.Context, l *Lock, err error, fn func(ctx context.Context) error) error {
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(l.Context(), func() { cancel(l.Err()) })
	// free releases l once fn is done; it returns what had ended l before.
	free := func() (lost, rerr error) {
		stop()
		cancel(nil)
		lost = l.Err()
		if rerr = l.Release(context.WithoutCancel(ctx)); rerr != nil && l.sess != nil {
			releaseLater(l)
		}
		return lost, rerr
	}
	defer func() {
		if p := recover(); p != nil {
			// fn panicked: free the lock before the panic goes on.
			free()
			panic(p)
		}
	}()
	ferr := fn(fctx)
	lost, rerr := free()
	switch {
	case ferr != nil:
		return ferr
	case lost != nil && !errors.Is(lost, ErrReleased):
		return lost
	}
	return rerr
}

// releaseLater goes on releasing l, a session's lock whose Release no
// gateway answered, in the background until one answers, the failure is
// not one a retry can fix, or the session ends: Do's caller holds no Lock
// to retry with, and a session's lock does not lapse while its session
// lives.
func releaseLater(l *Lock) {
	s, c := l.sess, l.c
	clk := c.cfg.clock
	go func() {
		bo := c.newBackoff()
		for {
			if err := sleep(s.ctx, clk, bo.next()); err != nil {
				return
			}
			rctx, cancel := withTimeout(s.ctx, clk, c.cfg.requestTimeout)
			err := l.Release(rctx)
			cancel()
			if err == nil || !retryable(err) && rateLimited(err) == nil {
				return
			}
		}
	}()
}

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
