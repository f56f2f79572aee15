package queue

import (
	"context"
	"time"
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
	pointEnqueue  = "enqueue.txn"      // before the acquire transaction
	pointTakeover = "resume.takeover"  // before an attempt takes over its waiter key
	pointRead     = "wait.read"        // before a waiter re-reads its queue
	pointWatch    = "wait.watch"       // read, before the watches are created
	pointCheck    = "wait.check"       // watches created, before the identity check
	pointGrant    = "grant"            // first in the queue, before the grant is made
	pointCleanup  = "cleanup.txn"      // before a waiter's key is removed
	pointCleaned  = "cleanup.done"     // a removal ended (deleted or found the key not its own)
	pointRelease  = "release.txn"      // before the release transaction
	pointProve    = "renew.prove"      // before a renewal proves the holder
	pointKeep     = "renew.keepalive"  // proven, before the keepalive
	pointAbandon  = "abandon.txn"      // before an undelivered grant is given up
	pointLeaseGet = "attempt.lease"    // before the attempt lease is granted
	pointWatchEnd = "wait.woke"        // a parked waiter woke up
	pointSpawned  = "background.start" // a background task of the caller begins
	pointForce    = "force.txn"        // a force-release read the holder, before its delete
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
	// park is called when a waiter blocks on its watches, with what it
	// waits behind; unpark when it returns.
	park(ctx context.Context, p parked)
	unpark(ctx context.Context)
}

// parked describes a waiter blocked on its watches: it wakes when the key
// it waits behind (pred, created at predRev) goes, its own key (own, last
// written at ownMod) changes, or its session record (session, if any) goes.
type parked struct {
	pred    string
	predRev int64
	own     string
	ownMod  int64
	session string
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
	e.wg.Add(1)
	exit := e.enter()
	go func() {
		defer e.wg.Done()
		defer exit()
		var ctx context.Context = valuesOf{Context: e.ctx, vals: vals}
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
