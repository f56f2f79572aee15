package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The explorer's recycled leases: both gateways run with small lease pools,
// filled before the run; a ticker moves their shared clock past quarantines
// and proof windows; stale lock ids are renewed and released while their
// leases are recycled; pooled leases vanish behind the pools' backs. The
// check (leaseEvent) is that no renewal's keepalive is sent for a lease an
// acquire took from a pool after the renewed key was created.

// The explorer reports how much it exercised recycling: pool takes of a
// lease taken before (handed out again after a release gave it back),
// renewals of locks on such leases, and renewals whose keepalive went out
// after the renewed key was deleted (stale, but not for a recycled lease:
// leaseEvent fails the schedule on those).
var exploreRecycled, exploreRenewedRecycled, exploreStaleSends atomic.Int64

// explorePool is the engines' LeasePool in the explorer: small, so that
// the leases given back are soon handed out again; exploreTTL is every
// per-lock acquire's TTL there.
const (
	explorePool = 2
	exploreTTL  = 10 * time.Minute
)

// prefill grants the pool's leases of ttlSec at once (the explorer fills
// its engines' pools before a run).
func (p *leasePool) prefill(ctx context.Context, ttlSec int64) error {
	p.mu.Lock()
	p.classLocked(ttlSec)
	p.mu.Unlock()
	for i := 0; i < p.size; i++ {
		id, ttl, deadline, err := p.e.grantLease(ctx, ttlSec)
		if err != nil {
			return err
		}
		p.giveBack(ctx, pooledLease{id: id, ttlSec: ttlSec, ttl: ttl, deadline: deadline})
	}
	return nil
}

// leaseEvent checks a lease event against what etcd showed when the lease
// was last taken from a pool: a renewal's keepalive is sent only for a
// lease that has not been handed to another lock since the renewed key was
// created. Otherwise a stale lock id would keep a lease alive for a lock
// that is not its own, and a dead holder would block its name past its TTL.
func (w *world) leaseEvent(ctx context.Context, event string, id clientv3.LeaseID, rev int64) {
	switch event {
	case leaseTaken:
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		resp, err := w.sch.cli.Get(rctx, w.prefix+"/clock")
		cancel()
		if err != nil {
			w.violate("read the revision at a pool take: %v", err)
			return
		}
		w.leases.mu.Lock()
		if w.leases.takenAt[id] != 0 {
			exploreRecycled.Add(1)
		}
		w.leases.takenAt[id] = resp.Header.Revision
		w.leases.mu.Unlock()
	case leaseRenewProof, leaseWaitKeep:
		w.leases.mu.Lock()
		at := w.leases.takenAt[id]
		w.leases.mu.Unlock()
		if at != 0 && at < rev {
			exploreRenewedRecycled.Add(1)
		}
		if r, err := w.sch.cli.Get(context.WithoutCancel(ctx), w.prefix+"/", clientv3.WithPrefix()); err == nil {
			found := false
			for _, kv := range r.Kvs {
				found = found || kv.CreateRevision == rev
			}
			if !found {
				exploreStaleSends.Add(1)
			}
		}
		if at > rev {
			w.violate("%s: a renewal of the lock created at %d sent a keepalive for lease %x after an acquire took that lease from a pool (at revision %d)",
				actorOf(ctx), rev, int64(id), at)
		}
	}
}

// ticker moves the gateways' clock past a pool quarantine and a renewal's
// proof window, twice, at moments the scheduler picks, and lets the pools
// refresh what has come out of quarantine (as their next acquire would).
func (w *world) ticker(name string) actorSpec {
	return actorSpec{name: name, run: func(ctx context.Context) {
		for i := 0; i < 2; i++ {
			w.step(ctx, "tick")
			w.clock.Advance(poolQuarantine + proofWindow)
			for _, e := range w.engines {
				e.pool.kick(ctx)
			}
		}
	}}
}

// addStale adds a holder whose lock id outlives its lock: it takes the
// lock, lets it go and takes it again under another request id, while a
// second actor of the same client renews the first lock id, on either
// gateway, at moments the scheduler picks — before the release, between a
// proof and its keepalive, after the lease went back to a pool and was
// handed out again — and replays its release once it is released. None of
// it may free, or keep alive, anyone else's lock.
func (w *world) addStale(name string) {
	e, other := w.engines[0], w.engines[1]
	if w.rng.IntN(2) == 0 {
		e, other = other, e
	}
	var (
		mu       sync.Mutex
		stale    *Grant
		released bool
	)
	w.add(actorSpec{name: name, client: name, run: func(ctx context.Context) {
		for i := 0; i < 3; i++ {
			w.step(ctx, "acquire")
			g, err := w.acquire(ctx, name, e, w.request(name, fmt.Sprintf("%s-req%d", name, i)))
			if err != nil {
				if !expectedEnd(err) {
					w.violate("%s: acquire %d: %v", name, i, err)
				}
				return
			}
			believed := w.believe(name, *g)
			if i == 0 {
				mu.Lock()
				stale = g
				mu.Unlock()
			}
			if believed {
				w.release(ctx, name, e, *g)
			} else if _, err := e.Release(ctx, g.Handle, g.Token()); err != nil && !errors.Is(err, ErrNotOwner) {
				w.violate("%s: release: %v", name, err)
			}
			if i == 0 {
				mu.Lock()
				released = true
				mu.Unlock()
			}
		}
	}})
	w.add(actorSpec{name: name + "-stale", run: func(ctx context.Context) {
		for i := 0; i < 4; i++ {
			w.step(ctx, "stale")
			mu.Lock()
			g, done := stale, released
			mu.Unlock()
			if g == nil {
				continue
			}
			re := other // mostly another gateway: its renewals are invisible to e's pool
			if w.rng.IntN(3) == 0 {
				re = e
			}
			if i == 3 && done {
				if ok, err := re.Release(ctx, g.Handle, g.Token()); ok || err != nil {
					w.violate("%s: replayed release of a released lock = %v, %v; want false, nil", name, ok, err)
				}
				continue
			}
			if _, err := re.Renew(ctx, g.Handle, g.Token()); err != nil &&
				!errors.Is(err, ErrReleased) && !errors.Is(err, ErrExpired) && !errors.Is(err, ErrStolen) {
				w.violate("%s: renewal of its first lock id: %v", name, err)
			}
		}
	}})
}

// poolExpirer revokes the lease a gateway's pool would hand out next, as if
// it had lapsed in the pool: the acquire that takes it must fall back to a
// lease granted inline, never fail.
func (w *world) poolExpirer(name string) actorSpec {
	e := w.engine()
	return actorSpec{name: name, run: func(ctx context.Context) {
		for i := 0; i < 2; i++ {
			w.step(ctx, "expire-pooled")
			e.pool.mu.Lock()
			var id clientv3.LeaseID
			if c := e.pool.classes[int64(exploreTTL/time.Second)]; c != nil && len(c.free) > 0 {
				id = c.free[len(c.free)-1].id
			}
			e.pool.mu.Unlock()
			if id != 0 {
				_, _ = w.sch.cli.Revoke(ctx, id)
			}
		}
	}}
}
