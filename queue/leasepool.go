package queue

import (
	"context"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Lease recycling.
//
// A lock with a lease of its own would cost two raft writes beside its
// transactions: a LeaseGrant on the acquire's path and a LeaseRevoke at
// its release. The pool takes both off: per TTL class (the TTL in whole
// seconds the caller asked for, which the waiter's value records) it keeps
// up to Config.LeasePool free leases, granted ahead of need in batches by a
// background pass that a take starts when the class runs below half; an
// acquire takes one and sends its keepalive beside the enqueue
// transaction, so the grant's deadline is measured from that keepalive's
// send; a clean release gives the lease back instead of revoking it, into
// a quarantine of up to poolHeld × LeasePool leases, from which passes
// refresh them into the free pool.
//
// A pooled lease is handed out only with at least half its TTL left by its
// conservative deadline (the send time of its grant or last keepalive plus
// its TTL): the keepalive beside the enqueue must land before the lease
// lapses, and half a TTL (half a second at the least) is far above one
// round trip, while a lease below it is kept alive by the pool's next pass
// (which refreshes those below two thirds) rather than dropped. A lease that
// lapses anyway is caught by that keepalive (or the enqueue itself fails
// with lease-not-found): the acquire removes the key it put on it, grants a
// lease inline and tries once more. A pool miss is never the caller's
// error.
//
// Why reuse is sound, and the one window it opens, is in doc.go ("Recycled
// leases") and docs/safety.md.
const (
	// poolQuarantine is how long a lease given back waits before the
	// pool refreshes it and may hand it out again. It must exceed
	// proofWindow: a renewal on another gateway that proved the old lock
	// before its release sends its keepalive within proofWindow of that
	// proof, so before the quarantine ends.
	poolQuarantine = time.Second
	// proofWindow is the longest a Renew lets pass between sending its
	// proof and sending its keepalive; a slower proof is made again.
	proofWindow = 500 * time.Millisecond
	// maxPoolClasses bounds the TTL classes an engine pools; acquires of
	// other TTLs grant inline.
	maxPoolClasses = 16
	// poolBatch bounds the grants and keepalives one pass has in flight.
	poolBatch = 16
	// poolHeld is how many leases in quarantine a class keeps per lease
	// of LeasePool: a class reuses every released lease while releases
	// come at most poolHeld × LeasePool per poolQuarantine (4,096 a second
	// by default). Each is a live etcd lease with no key, a few hundred
	// bytes of the leader's memory.
	poolHeld = 64
)

// leasePool is an engine's pool of per-lock leases.
type leasePool struct {
	e    *Engine
	size int // per class; 0 disables the pool

	mu       sync.Mutex
	classes  map[int64]*leaseClass
	renewing map[clientv3.LeaseID]int // Renew calls between their proof and their keepalive's answer
	closed   bool
}

// leaseClass is the pool of one TTL.
type leaseClass struct {
	ttlSec  int64
	free    []pooledLease // deadline known; the newest at the end
	held    []pooledLease // given back: quarantined until usable, deadline unknown
	filling bool          // a pass is running
}

// pooledLease is a lease no key rides on, owned by the pool or by the one
// attempt that took it.
type pooledLease struct {
	id       clientv3.LeaseID
	ttlSec   int64         // its class
	ttl      time.Duration // the TTL etcd granted
	deadline time.Time     // conservative; zero when unknown
	usable   time.Time     // end of its quarantine
}

func newLeasePool(e *Engine, size int) *leasePool {
	return &leasePool{e: e, size: size, classes: map[int64]*leaseClass{}, renewing: map[clientv3.LeaseID]int{}}
}

func (p *leasePool) low() int { return max(1, p.size/2) }

// classLocked returns ttlSec's class, creating it while there are fewer
// than maxPoolClasses; nil otherwise.
func (p *leasePool) classLocked(ttlSec int64) *leaseClass {
	c := p.classes[ttlSec]
	if c == nil && len(p.classes) < maxPoolClasses {
		c = &leaseClass{ttlSec: ttlSec}
		p.classes[ttlSec] = c
	}
	return c
}

// take hands out a pooled lease of ttlSec with at least half its TTL left,
// and starts a background pass when the class runs low or has leases to
// refresh. It reports false on a miss: the caller grants inline.
func (p *leasePool) take(ctx context.Context, ttlSec int64) (pooledLease, bool) {
	if p.size == 0 {
		return pooledLease{}, false
	}
	p.e.at(ctx, pointPoolTake)
	now := p.e.cfg.Clock.Now()
	p.mu.Lock()
	c := p.classLocked(ttlSec)
	if p.closed || c == nil {
		p.mu.Unlock()
		return pooledLease{}, false
	}
	var out pooledLease
	ok := false
	for i := len(c.free) - 1; i >= 0; i-- {
		if l := c.free[i]; l.deadline.Sub(now) >= l.ttl/2 {
			out, ok = l, true
			c.free = slices.Delete(c.free, i, i+1)
			break
		}
	}
	pass := p.duePassLocked(c, now)
	p.mu.Unlock()
	if pass {
		p.pass(ctx, c)
	}
	if ok {
		p.e.leaseEvent(ctx, leaseTaken, out.id, 0)
	}
	return out, ok
}

// duePassLocked reports whether c needs a pass now and, if so, marks one
// running.
func (p *leasePool) duePassLocked(c *leaseClass, now time.Time) bool {
	if c.filling || p.closed {
		return false
	}
	due := len(c.free) < p.low() && len(c.free)+len(c.held) < p.size
	for _, l := range c.held {
		due = due || len(c.free) < p.size && !l.usable.After(now)
	}
	for _, l := range c.free {
		due = due || l.deadline.Sub(now) < 2*l.ttl/3
	}
	c.filling = due
	return due
}

// pass runs one background pass over c: it refreshes, by keepalive, the
// leases given back whose quarantine is over and the free ones below two
// thirds of their TTL, drops those past their deadline (they lapse on
// their own), and grants enough to fill the class, poolBatch at a time.
func (p *leasePool) pass(ctx context.Context, c *leaseClass) {
	p.e.background(ctx, "leasepool", p.e.cfg.RequestTimeout, func(ctx context.Context) {
		defer func() {
			p.mu.Lock()
			c.filling = false
			p.mu.Unlock()
		}()
		p.e.at(ctx, pointPoolFill)
		now := p.e.cfg.Clock.Now()
		var refresh []pooledLease
		p.mu.Lock()
		free := c.free[:0]
		for _, l := range c.free {
			switch left := l.deadline.Sub(now); {
			case left <= 0:
			case left < 2*l.ttl/3:
				refresh = append(refresh, l)
			default:
				free = append(free, l)
			}
		}
		c.free = free
		// Out of quarantine, as many as the free pool has room for; the
		// others wait for a later pass (and are dropped then if they
		// lapsed meanwhile).
		room := p.size - len(c.free) - len(refresh)
		held := c.held[:0]
		for _, l := range c.held {
			if now.Sub(l.usable) > 2*time.Duration(l.ttlSec)*time.Second {
				continue // it lapsed long ago, or soon will: leave it
			}
			if room > 0 && !l.usable.After(now) {
				refresh = append(refresh, l)
				room--
			} else {
				held = append(held, l)
			}
		}
		c.held = held
		grants := max(0, room-len(c.held))
		p.mu.Unlock()

		// got holds the grants first, then the refreshed leases.
		got := make([]pooledLease, grants+len(refresh))
		ok := make([]bool, len(got))
		sem := make(chan struct{}, poolBatch)
		var wg sync.WaitGroup
		for i := range got {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				if i >= grants {
					l := refresh[i-grants]
					ttl, deadline, err := p.e.renewLease(ctx, l.id)
					l.ttl, l.deadline = ttl, deadline
					got[i], ok[i] = l, err == nil
					return
				}
				id, ttl, deadline, err := p.e.grantLease(ctx, c.ttlSec)
				got[i], ok[i] = pooledLease{id: id, ttlSec: c.ttlSec, ttl: ttl, deadline: deadline}, err == nil
			})
		}
		wg.Wait()
		// The refreshed last: they are handed out first (the newest at
		// the end), so leases given back are reused before fresh grants
		// are.
		for i, l := range got {
			if ok[i] {
				p.giveBack(ctx, l)
			}
		}
	})
}

// giveBack returns a lease to the free pool of its class: one just granted
// or refreshed, or one an attempt took and never put a key on. A lease the
// pool has no room for is revoked.
func (p *leasePool) giveBack(ctx context.Context, l pooledLease) {
	p.mu.Lock()
	c := p.classes[l.ttlSec]
	room := !p.closed && c != nil && len(c.free) < p.size && l.deadline.After(p.e.cfg.Clock.Now())
	if room {
		c.free = append(c.free, l)
	}
	p.mu.Unlock()
	if !room {
		p.e.revokeLater(ctx, l.id)
	}
}

// giveBackReleased quarantines the lease of a key that Release just
// deleted (prev, as etcd returned it, never what a lock id claims), or
// reports false for the caller to revoke it. It pools only the lock's own
// lease, of a TTL class of this engine, of a key never taken over (no
// other attempt of it can be about to keep the lease alive), with no
// renewal of it in flight on this engine (doc.go, "Recycled leases").
func (p *leasePool) giveBackReleased(ctx context.Context, prev *mvccpb.KeyValue, meta waiterMeta) bool {
	if p.size == 0 || meta.Session || prev.ModRevision != prev.CreateRevision {
		return false
	}
	id := clientv3.LeaseID(prev.Lease)
	p.e.at(ctx, pointPoolBack)
	p.mu.Lock()
	defer p.mu.Unlock()
	// renewing first, then the streams: a renewal that ended (and left
	// the map) before this look left its keepalive on a stream if it is
	// unanswered; one that begins after it cannot prove the deleted key.
	if p.renewing[id] > 0 || p.e.ka.inFlight(id) {
		return false
	}
	c := p.classes[meta.TTL]
	if p.closed || c == nil || len(c.held) >= poolHeld*p.size {
		return false
	}
	c.held = append(c.held, pooledLease{id: id, ttlSec: meta.TTL, usable: p.e.cfg.Clock.Now().Add(poolQuarantine)})
	return true
}

// renew registers a Renew of id from before its proof until its
// keepalive is answered; the returned func ends it.
func (p *leasePool) renew(id clientv3.LeaseID) func() {
	if p.size == 0 {
		return func() {}
	}
	p.mu.Lock()
	p.renewing[id]++
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.renewing[id]--; p.renewing[id] <= 0 {
			delete(p.renewing, id)
		}
	}
}

// close revokes the pooled leases, all at once and for at most a second
// (those left lapse within their TTL), and stops pooling.
func (p *leasePool) close() {
	p.mu.Lock()
	p.closed = true
	var ids []clientv3.LeaseID
	for _, c := range p.classes {
		for _, l := range slices.Concat(c.free, c.held) {
			ids = append(ids, l.id)
		}
		c.free, c.held = nil, nil
	}
	p.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(time.Second, p.e.cfg.RequestTimeout))
	defer cancel()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() { _, _ = p.e.cli.Revoke(ctx, id) })
	}
	wg.Wait()
}

// besideKeep is the keepalive a pooled lease gets beside the enqueue
// transaction that puts a key on it, started once the transaction is about
// to be sent, never before.
type besideKeep struct {
	e       *Engine
	id      clientv3.LeaseID
	started bool
	done    chan struct{}
	ttl     time.Duration
	dl      time.Time
	err     error
}

func (k *besideKeep) start(ctx context.Context) {
	if k == nil || k.started {
		return
	}
	k.started, k.done = true, make(chan struct{})
	go func() {
		defer close(k.done)
		k.ttl, k.dl, k.err = k.e.renewLease(ctx, k.id)
	}()
}

// wait returns the keepalive's outcome once it has one; nil and zero when
// it was never started.
func (k *besideKeep) wait() (time.Duration, time.Time, error) {
	if k == nil || !k.started {
		return 0, time.Time{}, nil
	}
	<-k.done
	return k.ttl, k.dl, k.err
}
