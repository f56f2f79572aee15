package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The attempt lease.
//
// A waiter's key must die without a live attempt to serve it, within a
// bound, whatever lease it rides on. A lock with a lease of its own
// satisfies that by itself: its lease is renewed only by the attempt that
// waits (or, once granted, by the holder), so it lapses within its TTL when
// nobody is there. A session lease is different: its owner keeps it alive
// for as long as the client runs, so a session waiter whose attempt is gone
// — its gateway shut down or crashed, or its grant could not be delivered —
// would sit in the queue, become the holder, and block the name for as
// long as the session lives.
//
// So a session waiter's key does not ride on the session lease while it
// waits. It rides on this engine's attempt lease, which lives exactly as
// long as some attempt of this process needs it: it is granted on first
// use, renewed every AttemptTTL/3 while attempts hold references to it, and
// revoked once it has had none for an AttemptTTL. A process that stops
// renews it no more, so its waiters' keys lapse within AttemptTTL — long
// enough for a client to resume its place on another gateway, which moves
// the key onto that gateway's attempt lease. The grant moves the key onto
// the session lease in the same transaction that proves the session (see
// grant.go), and a waiter that is first when it enqueues is put on the
// session lease at once, so an uncontested session acquire stays one
// transaction.
type attemptLease struct {
	e *Engine

	mu   sync.Mutex
	id   clientv3.LeaseID
	refs int
	gen  uint64 // bumps whenever id changes
	stop context.CancelFunc
}

// attemptRef is a reference to one attempt lease; the zero value holds none.
type attemptRef struct {
	id  clientv3.LeaseID
	gen uint64
}

// acquire returns the attempt lease, granting it if needed, with a
// reference the caller gives back with release when its attempt no longer
// needs the lease. Callers that find no lease grant one each rather than
// wait on one another; all but the first to finish revoke theirs.
func (a *attemptLease) acquire(ctx context.Context) (attemptRef, error) {
	a.mu.Lock()
	if a.id != 0 {
		a.refs++
		ref := attemptRef{a.id, a.gen}
		a.mu.Unlock()
		return ref, nil
	}
	a.mu.Unlock()

	a.e.at(ctx, pointLeaseGet)
	resp, err := a.e.cli.Grant(ctx, int64(a.e.cfg.AttemptTTL/time.Second))
	if err != nil {
		return attemptRef{}, fmt.Errorf("queue: grant attempt lease: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.id != 0 {
		// Another attempt's grant won meanwhile.
		a.e.revokeLater(ctx, resp.ID)
		a.refs++
		return attemptRef{a.id, a.gen}, nil
	}
	a.id, a.refs = resp.ID, 1
	a.gen++
	kctx, cancel := context.WithCancel(a.e.ctx)
	a.stop = cancel
	a.e.wg.Add(1)
	go a.keep(kctx, resp.ID, a.gen)
	return attemptRef{resp.ID, a.gen}, nil
}

// release gives back a reference taken by acquire. A reference to a lease
// that has since been dropped is not counted against its successor.
func (a *attemptLease) release(r attemptRef) {
	if r.id == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if r.gen == a.gen && a.refs > 0 {
		a.refs--
	}
}

// invalidate forgets id after etcd said it is gone, so the next acquire
// grants a new lease.
func (a *attemptLease) invalidate(id clientv3.LeaseID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.id == id {
		a.dropLocked()
	}
}

func (a *attemptLease) dropLocked() {
	a.id, a.refs = 0, 0
	a.gen++
	if a.stop != nil {
		a.stop()
		a.stop = nil
	}
}

// keep renews id every AttemptTTL/3 on the real clock (etcd's lease timers
// run on it, whatever clock the engine measures deadlines with) and revokes
// it after an AttemptTTL without references.
func (a *attemptLease) keep(ctx context.Context, id clientv3.LeaseID, gen uint64) {
	defer a.e.wg.Done()
	every := a.e.cfg.AttemptTTL / 3
	t := time.NewTicker(every)
	defer t.Stop()
	var idleSince time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.mu.Lock()
		if a.gen != gen {
			a.mu.Unlock()
			return
		}
		if a.refs > 0 {
			idleSince = time.Time{}
		} else if idleSince.IsZero() {
			idleSince = time.Now()
		} else if time.Since(idleSince) >= a.e.cfg.AttemptTTL {
			// Nobody has needed it for a while: let it go. A key still on
			// it belongs to no live attempt, so it goes with it.
			a.dropLocked()
			a.mu.Unlock()
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.e.cfg.RequestTimeout)
			_, _ = a.e.cli.Revoke(rctx, id)
			cancel()
			return
		}
		a.mu.Unlock()
		rctx, cancel := context.WithTimeout(ctx, every)
		_, _, err := a.e.renewLease(rctx, id)
		cancel()
		if errors.Is(err, errLeaseNotFound) {
			a.invalidate(id)
			return
		}
	}
}
