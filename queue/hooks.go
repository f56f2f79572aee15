package queue

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Interleaving points.
//
// The engine names the places between its etcd operations where another
// client, another gateway or a background cleanup can act. In production
// nothing listens (one nil check each). The interleaving explorer in this
// package's tests installs a scheduler that stops every actor at each point
// and chooses who goes next, so the orders that reviews find by luck are
// enumerated on purpose against a real etcd.
const (
	pointEnqueue     = "enqueue.txn"       // before the acquire transaction
	pointTakeover    = "resume.takeover"   // before an attempt takes over its waiter key
	pointRegister    = "wait.register"     // enqueued, before the waiter registers with its name's hub
	pointHubEvent    = "hub.event"         // a name hub has a revision's watch events, before it applies them to its view
	pointHubRead     = "hub.read"          // a name hub's watch started, before it reads its view at the watch's revision
	pointGrant       = "grant"             // first in the queue, before the grant is made
	pointCleanup     = "cleanup.txn"       // before a waiter's key is removed
	pointCleaned     = "cleanup.done"      // a removal ended (deleted or found the key not its own)
	pointRelease     = "release.txn"       // before the release transaction
	pointProve       = "renew.prove"       // before a renewal proves the holder
	pointKeep        = "renew.keepalive"   // proven, before the keepalive
	pointAbandon     = "abandon.txn"       // before an undelivered grant is given up
	pointReenter     = "reenter.txn"       // before a re-entrant acquire adds a hold
	pointDropHold    = "drophold.txn"      // before a release drops a re-entered hold
	pointDelay       = "delay.wait"        // before a grant waits out an expired holder's lock-delay
	pointLeaseGet    = "attempt.lease"     // before the attempt lease is granted
	pointSessionRead = "session.read"      // before a session's record is read for its TTL
	pointSpawned     = "background.start"  // a background task of the caller begins
	pointProclaim    = "election.proclaim" // read the leader's key, before the proclaim transaction
	pointPoolTake    = "pool.take"         // before an acquire takes a pooled lease
	pointPoolKeep    = "pool.keepalive"    // before the enqueue and the keepalive beside it of a pooled lease
	pointPoolBack    = "pool.return"       // before a released key's lease is given back to the pool
	pointPoolFill    = "pool.fill"         // before the pool's pass grants and refreshes leases
	pointForce       = "force.txn"         // a force-release read the holder, before its delete
	pointEndProof    = "ends.proof"        // AwaitEnd found the lock held (or could not tell), before it waits to be woken
	pointEndWatch    = "ends.watch"        // before the watch of audit or wait records for AwaitEnd opens
)

// Lease events: what the explorer learns about a lease's users, beyond the
// points (the scheduler checks them against etcd).
const (
	leaseTaken      = "pool.taken"  // an acquire took the lease from the pool
	leaseRenewProof = "renew.proof" // a Renew proved the key of rev rides on the lease, and now sends its keepalive
	leaseWaitKeep   = "wait.keep"   // a waiting attempt of the key of rev sends a keepalive for its lease
)

// hooks observe and order the engine's interleaving points. All methods
// may block; they run on the goroutine doing the work.
type hooks interface {
	// at is called at a named point.
	at(ctx context.Context, point string)
	// spawn is called before a background task of ctx's actor starts; the
	// returned context carries the task's own identity. end is called when
	// the task has finished.
	spawn(ctx context.Context, task string) context.Context
	end(ctx context.Context)
	// park is called when a waiter blocks waiting for its hub, or a hub
	// for its watch, with what it waits for; unpark when it returns.
	park(ctx context.Context, p parked)
	unpark(ctx context.Context)
	// lease reports a lease event (above) of the lease id, for the key
	// created at rev when there is one.
	lease(ctx context.Context, event string, id clientv3.LeaseID, rev int64)
	// granted reports a grant as it is made, with what it rests on: asOf
	// is a revision at which the key was first and carried the granting
	// attempt's write; heldFrom the revision from which the key held its
	// place among the first keys — the revision its hub found it holding
	// at, or its own write's; for a grant Existing found, the first
	// revision known to show it granted — so that a slot earned before
	// another holder expired is told from that holder's (0 for a
	// re-entered hold).
	granted(ctx context.Context, g Grant, asOf, heldFrom int64)
}

// parked describes an actor blocked on etcd. A waiter (hub false) wakes
// when its name's hub judges it at the hub's view revision (viewRev): first
// (no key under prefix created before myRev), its own key (own) no longer
// carrying its attempt's write (ownMod), or — from the session watch, at
// any revision — its session record (session, if any) gone. A hub wakes
// when etcd has an event under prefix past its view revision, or when it
// has no waiters left (closing).
type parked struct {
	hub    bool
	prefix string
	own    string
	myRev  int64
	ownMod int64
	limit  int // the waiter's semaphore limit
	// until, when set, parks a grant waiting out a lock-delay until the
	// engine's clock reaches it (delay.go); now reads that clock.
	until   time.Time
	now     func() time.Time
	session string
	viewRev func() int64
	closing func() bool
}

func (e *Engine) leaseEvent(ctx context.Context, event string, id clientv3.LeaseID, rev int64) {
	if e.hooks != nil {
		e.hooks.lease(ctx, event, id, rev)
	}
}

func (e *Engine) grantMade(ctx context.Context, g Grant, asOf, heldFrom int64) {
	if e.hooks != nil {
		e.hooks.granted(ctx, g, asOf, heldFrom)
	}
}

func (e *Engine) at(ctx context.Context, point string) {
	if e.hooks != nil {
		e.hooks.at(ctx, point)
	}
}

// background runs fn on a goroutine owned by the engine. Its context ends
// with the engine and, when d is positive, after d; it carries parent's
// values (trace context, the explorer's actor identity), not its
// cancellation: cleanup must run after the caller has gone.
func (e *Engine) background(parent context.Context, task string, d time.Duration, fn func(ctx context.Context)) {
	vals := parent
	if e.hooks != nil {
		vals = e.hooks.spawn(parent, task)
	}
	e.tasks.Add(1)
	go func() {
		defer e.tasks.Done()
		var ctx context.Context = valuesOf{Context: e.bg, vals: vals}
		if d > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		e.at(ctx, pointSpawned)
		fn(ctx)
		if e.hooks != nil {
			e.hooks.end(ctx)
		}
	}()
}

// valuesOf is a context with the lifetime of its embedded Context and the
// values of vals.
type valuesOf struct {
	context.Context
	vals context.Context
}

func (v valuesOf) Value(key any) any { return v.vals.Value(key) }
