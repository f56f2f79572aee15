package gateway

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/leasegate/leasegate/locks"
)

// callRecord is what a call learned that its telemetry is labelled by:
// the interceptor or REST wrapper puts it in the context, the handler fills
// it in, the wrapper reads it at the end. So a metric's shard and outcome
// are the ones the handler acted on, never re-derived. Without telemetry
// there is no record, and filling it in does nothing.
type callRecord struct {
	mu    sync.Mutex  // a streaming Acquire reports queue positions from another goroutine
	route *locks.Note // where the fleet routed the call
	recorded
}

// recorded is what a record holds besides the route.
type recorded struct {
	// shard, once set, is the shard the handler saw grant the call, which
	// the fleet routed to first.
	shard   string
	outcome string
	mode    string // a REST acquire's mode label, when it is not a try
	loss    string
	err     error
	// queuedAt and waitShard: when and where a waiting REST acquire was
	// first queued (zero: it never was).
	queuedAt  time.Time
	waitShard string
}

type recordKey struct{}

// withRecord returns ctx carrying a new record, whose route the fleet
// notes as it routes the call.
func withRecord(ctx context.Context) (context.Context, *callRecord) {
	ctx, route := locks.WithNote(ctx)
	r := &callRecord{route: route}
	return context.WithValue(ctx, recordKey{}, r), r
}

// recordOf returns ctx's record, or nil.
func recordOf(ctx context.Context) *callRecord {
	r, _ := ctx.Value(recordKey{}).(*callRecord)
	return r
}

// set runs f under r's lock; without a record (outside the edge) it does nothing.
func (r *callRecord) set(f func()) {
	if r == nil {
		return
	}
	r.mu.Lock()
	f()
	r.mu.Unlock()
}

// setShard records the shard that granted the call, over the routed one.
func (r *callRecord) setShard(shard string) { r.set(func() { r.shard = shard }) }

// setOutcome records an outcome that is not an error ("busy", "not_held").
func (r *callRecord) setOutcome(outcome string) { r.set(func() { r.outcome = outcome }) }

// setMode records a waiting REST acquire's mode ("immediate", "queued").
func (r *callRecord) setMode(mode string) { r.set(func() { r.mode = mode }) }

// setLoss records a lease found lost, by reason, when the answer carries
// no error that says so (a REST renew answers a lost lock with a body).
func (r *callRecord) setLoss(reason string) { r.set(func() { r.loss = reason }) }

// setErr records a REST call's answer as the Connect error it translated to.
func (r *callRecord) setErr(err error) { r.set(func() { r.err = err }) }

// queued marks a waiting REST acquire queued (its mode, and when and where
// its wait began) and reports whether this call was the first to.
func (r *callRecord) queued(now time.Time) (first bool, shard string) {
	if r == nil {
		return false, ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mode = "queued"
	if !r.queuedAt.IsZero() {
		return false, ""
	}
	r.queuedAt, r.waitShard = now, orUnknown(r.shardLocked())
	return true, r.waitShard
}

// read returns what the record holds, its shard "unknown" when the call
// never got as far as routing.
func (r *callRecord) read() recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.recorded
	out.shard = orUnknown(r.shardLocked())
	return out
}

// currentShard is the shard recorded so far, "" before routing.
func (r *callRecord) currentShard() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.shardLocked()
}

// shardLocked is the shard recorded so far, "" before routing; r.mu is held.
func (r *callRecord) shardLocked() string { return cmp.Or(r.shard, r.route.Shard()) }

// orUnknown is shard, or "unknown" for a call never routed.
func orUnknown(shard string) string { return cmp.Or(shard, "unknown") }
