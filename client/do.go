package client

import (
	"context"
	"errors"
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
	if err != nil {
		return err
	}
	return holdFor(ctx, l, fn)
}

// Do acquires the lock on name in the session (as Session.Acquire, with
// opts), runs fn while holding it, and releases it after, leaving the
// session open. It is Client.Do for a session's locks: fn's context ends
// when the lock is lost, which for a session lock includes the session's
// lease on the lock's shard being lost, or the session being closed.
func (s *Session) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...AcquireOption) error {
	l, err := s.Acquire(ctx, name, opts...)
	if err != nil {
		return err
	}
	return holdFor(ctx, l, fn)
}

// holdFor runs fn while l is held and releases l after: Do's body, its
// results as Client.Do says.
func holdFor(ctx context.Context, l *Lock, fn func(ctx context.Context) error) error {
	fctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(l.Context(), func() { cancel(l.Err()) })
	defer func() {
		if p := recover(); p != nil {
			// fn panicked: free the lock before the panic goes on.
			stop()
			cancel(nil)
			if l.Release(context.WithoutCancel(ctx)) != nil && l.sess != nil {
				releaseLater(l)
			}
			panic(p)
		}
	}()
	ferr := fn(fctx)
	stop()
	cancel(nil)
	lost := l.Err()
	rerr := l.Release(context.WithoutCancel(ctx))
	if rerr != nil && l.sess != nil {
		releaseLater(l)
	}
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
