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
// A waiter's key must die, within a bound, without a live attempt to serve
// it, whatever lease it rides on. A lock's own lease does so by itself: only
// the waiting attempt (then the holder) renews it. A session lease does
// not: its owner keeps it alive as long as the client runs, so a session
// waiter whose attempt is gone (its gateway shut down or crashed, its grant
// undeliverable) would become the holder and block the name for the
// session's life.
//
// So a session waiter's key rides, while it waits, on this engine's attempt
// lease, renewed every AttemptTTL/3 only while some attempt of this process
// holds a reference to it: with none it lapses within AttemptTTL, with
// every key left on it (a waiter detached by a shutdown keeps its place
// that long, for a retry elsewhere to take over). A lease not renewed for
// AttemptTTL/3 is retired, so no attempt puts its key on a lease about to
// lapse; a process that stops renews nothing. The grant moves the key onto
// the session lease in the transaction that proves the session (grant.go),
// and a waiter granted in its enqueue's own transaction goes on the session
// lease at once, so an uncontested session acquire stays one transaction.
type attemptLease struct {
	e *Engine

	mu      sync.Mutex
	id      clientv3.LeaseID
	refs    int
	gen     uint64    // bumps whenever id changes
	renewed time.Time // when the last confirmed renewal (or the grant) was sent, on the real clock
	stop    context.CancelFunc
}

// attemptRef is a reference to one attempt lease; the zero value holds none.
type attemptRef struct {
	id  clientv3.LeaseID
	gen uint64
}

// acquire returns the attempt lease, granting it if needed, with a
// reference the caller gives back with release when its attempt no longer
// needs the lease. A lease that is referenced, or was renewed within
// AttemptTTL/3, is usable; otherwise a new one is granted. Callers that
// find no usable lease grant one each rather than wait on one another; all
// but the first to finish revoke theirs.
func (a *attemptLease) acquire(ctx context.Context) (attemptRef, error) {
	a.mu.Lock()
	if a.id != 0 && (a.refs > 0 || time.Since(a.renewed) < a.e.cfg.AttemptTTL/3) {
		// In use (and renewed while it is), or renewed recently.
		a.refs++
		ref := attemptRef{a.id, a.gen}
		a.mu.Unlock()
		return ref, nil
	}
	if a.id != 0 {
		// Unreferenced and not renewed for a third of its TTL: it is left
		// to lapse with the keys of attempts that have gone.
		a.dropLocked()
	}
	a.mu.Unlock()

	a.e.at(ctx, pointLeaseGet)
	sent := time.Now()
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
	a.id, a.refs, a.renewed = resp.ID, 1, sent
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

// keep renews id every AttemptTTL/3 while it has references, on the real
// clock (etcd's lease timers run on it, whatever clock the engine measures
// deadlines with), and lets it lapse once it has none: it ends when the
// lease is retired or, unreferenced at a tick, retires it.
func (a *attemptLease) keep(ctx context.Context, id clientv3.LeaseID, gen uint64) {
	defer a.e.wg.Done()
	every := a.e.cfg.AttemptTTL / 3
	t := time.NewTicker(every)
	defer t.Stop()
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
		if a.refs == 0 {
			// Nobody needs it: a key still on it belongs to no live
			// attempt, and goes with it within AttemptTTL.
			a.dropLocked()
			a.mu.Unlock()
			return
		}
		a.mu.Unlock()
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, every)
		_, _, err := a.e.renewLease(rctx, id)
		cancel()
		if errors.Is(err, errLeaseNotFound) {
			a.invalidate(id)
			return
		}
		if err == nil {
			a.mu.Lock()
			if a.gen == gen {
				a.renewed = sent
			}
			a.mu.Unlock()
		}
	}
}
