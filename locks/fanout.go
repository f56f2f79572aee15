package locks

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasegate/leasegate/queue"
)

// Calls over the whole map: every shard is asked at once, so a call
// costs one round trip, not one per shard, and a shard that hangs delays
// it by the request timeout, not by one timeout per shard.

// each runs fn for every i below n at once and returns the results in
// order.
func each[T any](n int, fn func(i int) T) []T {
	out := make([]T, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { out[i] = fn(i) })
	}
	wg.Wait()
	return out
}

// onAll runs fn on every target at once, each through its breaker, and
// returns the values in order, or the first error in order.
func onAll[T any](ctx context.Context, targets []Target, fn func(ctx context.Context, i int, t Target) (T, error)) ([]T, error) {
	type result struct {
		v   T
		err error
	}
	rs := each(len(targets), func(i int) result {
		v, err := do(ctx, targets[i], func(ctx context.Context) (T, error) { return fn(ctx, i, targets[i]) })
		return result{v, err}
	})
	out := make([]T, len(rs))
	for i, r := range rs {
		if r.err != nil {
			return nil, r.err
		}
		out[i] = r.v
	}
	return out, nil
}

// Lock is one name's queue as a shard reported it: a lock of a listing, or
// the queue DescribeQueue reads.
type Lock struct {
	// Shard holds the queue; Breaker is its breaker's state after the read.
	Shard, Breaker string
	queue.LockInfo
}

// ListLocks reads a page of at most size of tenant's locks under prefix
// after cursor, across every shard, merged in key order, their lease
// expiries filled in; more reports that locks follow the page. Each shard
// reads about its share of the page and half again (shardShare); one
// call bounded by RequestTimeout.
func (r *Router) ListLocks(ctx context.Context, tenant, prefix, cursor string, size int) (locks []Lock, more bool, err error) {
	targets, err := r.All(tenant)
	if err != nil {
		return nil, false, err
	}
	ctx, cancel := r.Bound(ctx)
	defer cancel()
	per := shardShare(size, len(targets))
	pages, err := onAll(ctx, targets, func(ctx context.Context, _ int, t Target) (queue.ListPage, error) {
		return t.Engine.ListLocks(ctx, prefix, cursor, per)
	})
	if err != nil {
		return nil, false, err
	}
	type item struct {
		shard int
		lock  queue.LockInfo
	}
	// A shard that has more than it returned knows nothing beyond its last
	// lock: the page ends at the lowest such lock, so no name of any shard
	// is skipped.
	var all []item
	bound := ""
	for i, p := range pages {
		for _, l := range p.Locks {
			all = append(all, item{i, l})
		}
		if n := len(p.Locks); p.More && n > 0 {
			more = true
			if last := p.Locks[n-1].Cursor + "/"; bound == "" || last < bound {
				bound = last
			}
		}
	}
	// Key order: a name's keys are "<cursor>/…".
	slices.SortFunc(all, func(a, b item) int { return cmp.Compare(a.lock.Cursor+"/", b.lock.Cursor+"/") })
	if bound != "" {
		all = slices.DeleteFunc(all, func(it item) bool { return it.lock.Cursor+"/" > bound })
	}
	if len(all) > size {
		all, more = all[:size], true
	}
	// Lease expiries only for the locks kept: a lookup per lease.
	kept := make([][]queue.LockInfo, len(targets))
	for _, it := range all {
		kept[it.shard] = append(kept[it.shard], it.lock)
	}
	if _, err := onAll(ctx, targets, func(ctx context.Context, i int, t Target) (struct{}, error) {
		return struct{}{}, t.Engine.FillExpiry(ctx, kept[i])
	}); err != nil {
		return nil, false, err
	}
	pos := make([]int, len(targets))
	locks = make([]Lock, len(all))
	for j, it := range all {
		t := targets[it.shard]
		locks[j] = Lock{Shard: t.Shard, Breaker: t.Backend.Breaker.State().String(), LockInfo: kept[it.shard][pos[it.shard]]}
		pos[it.shard]++
	}
	return locks, more, nil
}

// shardShare is how many locks each of n shards reads for a page of size:
// its even share and half again, so that most pages come out full while
// each costs about 1.5 pages of reads rather than n.
func shardShare(size, n int) int {
	if n <= 1 {
		return size
	}
	return min(size, (size*3+2*n-1)/(2*n)+4)
}

// AuditRecord is one audit record with the shard that keeps it.
type AuditRecord struct {
	Shard string
	queue.AuditRecord
}

// ListAudit reads a page of at most size of tenant's audit records older
// than before ("" for the newest), newest first, merged across shards;
// more reports that records follow the page. One call bounded by
// RequestTimeout.
func (r *Router) ListAudit(ctx context.Context, tenant, before string, size int) (recs []AuditRecord, more bool, err error) {
	targets, err := r.All(tenant)
	if err != nil {
		return nil, false, err
	}
	ctx, cancel := r.Bound(ctx)
	defer cancel()
	type page struct {
		recs []AuditRecord
		more bool
	}
	pages, err := onAll(ctx, targets, func(ctx context.Context, _ int, t Target) (page, error) {
		rs, more, err := t.Engine.ListAudit(ctx, before, size)
		p := page{more: more}
		for _, r := range rs {
			p.recs = append(p.recs, AuditRecord{t.Shard, r})
		}
		return p, err
	})
	if err != nil {
		return nil, false, err
	}
	for _, p := range pages {
		recs = append(recs, p.recs...)
		more = more || p.more
	}
	slices.SortFunc(recs, func(a, b AuditRecord) int { return strings.Compare(b.ID, a.ID) })
	if len(recs) > size {
		recs, more = recs[:size], true
	}
	return recs, more, nil
}

// boundEach bounds the work of a call that answers shard by shard: by
// RequestTimeout, and to end a margin before the caller's own deadline,
// both with the request timeout's cause. A shard that has not answered by
// then is reported unavailable and the others' outcomes still reach the
// caller; without the margin the caller's deadline would pass first and
// every shard's outcome would be lost with the one slow shard's.
func (r *Router) boundEach(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := r.Bound(ctx)
	dl, ok := ctx.Deadline()
	if !ok {
		return ctx, cancel
	}
	// The caller's deadline is on the wall clock, as the network is.
	margin := min(max(time.Until(dl)/10, minAnswerMargin), maxAnswerMargin)
	sctx, scancel := context.WithDeadlineCause(ctx, dl.Add(-margin), errCallTimeout)
	return sctx, func() { scancel(); cancel() }
}

// The time left, at the end of a shard-by-shard call, for its answer to
// reach the caller: a tenth of the call's time, within these bounds.
const (
	minAnswerMargin = 20 * time.Millisecond
	maxAnswerMargin = 500 * time.Millisecond
)

// ShardHealth is one shard's answer to Ping.
type ShardHealth struct {
	// Shard names the shard.
	Shard string
	// Err is why the shard did not answer; nil when it did.
	Err error
}

// Ping asks every shard names are hashed over, at once, for a
// linearizable read (Backend.Ping) through its Reach, so that a shard
// without a connection answers at once rather than at ctx's end; it
// reports each shard's answer in map order. While the layout record
// names another layout (LayoutRefused) every shard reports that refusal. It blocks until every shard
// has answered or ctx ends.
func (r *Router) Ping(ctx context.Context) []ShardHealth {
	backends := r.Backends()
	if err := r.LayoutRefused(); err != nil {
		return each(len(backends), func(i int) ShardHealth { return ShardHealth{Shard: backends[i].Name, Err: err} })
	}
	return each(len(backends), func(i int) ShardHealth {
		b := backends[i]
		return ShardHealth{Shard: b.Name, Err: b.Reach.Call(ctx, b.Ping)}
	})
}
