package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Name hubs (doc.go, "The name hub": the view and why a grant by it is
// safe).
//
// An engine keeps one hub per name that has local waiters, in each key
// space (hubs are kept by the name's key prefix, which names the space).
// The hub's watch is created first, at the current revision (so etcd has
// no history to catch up on for it, which it would deliver only every
// 100 ms), and its created notice names R0; the view is read at R0.
//
// Waiters register with their key's create revision and their attempt's
// mod revision. After every revision's events (a transaction's, applied
// together) the hub judges each waiter against the view at that revision
// (judgeLocked), and wakes it only when its verdict changes in a way it
// acts on (wait.go on pacing).

// viewKey is one key of a hub's view.
type viewKey struct {
	create, mod int64
	limit       int  // the semaphore limit its value records (limitOf)
	delay       bool // its value asks for a lock-delay (delay.go)
}

// viewKeyOf is kv as a view records it.
func viewKeyOf(kv *mvccpb.KeyValue) *viewKey {
	k := &viewKey{create: kv.CreateRevision, mod: kv.ModRevision}
	if m, err := decodeValue(kv.Value); err == nil {
		k.limit, k.delay = max(m.Limit, 1), m.Delay > 0
	}
	return k
}

// hubStatus is the hub's verdict on one waiter, exact at revision rev.
type hubStatus struct {
	rev     int64  // the view revision it is exact at; 0 until known
	ahead   int64  // keys with a lower create revision
	holds   bool   // fewer than limit keys ahead, all with the waiter's limit
	pos     int64  // the position to report (position)
	delayed bool   // the name may have lock-delay records (delay.go)
	pred    int64  // create revision of the key right ahead; 0 when first
	left    string // the last key ahead seen to go (the handoff record names it)
	err     error  // ErrLeaseLost, ErrSuperseded or ErrClosed: the wait is over
}

// hubWaiter is one waiter registered with a hub.
type hubWaiter struct {
	h         *nameHub
	key       string
	create    int64 // the key's create revision: its identity
	mod       int64 // the attempt's last write: its ownership
	limit     int   // its semaphore limit, 1 for a lock
	positions bool  // the waiter reports positions
	wake      wakeup

	// Guarded by h.mu.
	st    hubStatus
	paced bool // a position report is already scheduled: wake only for ≤ 1
}

// status returns the waiter's current verdict.
func (w *hubWaiter) status() hubStatus {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	return w.st
}

// pendingRecords reports whether the name has a delay or holder record of
// a key its view no longer has — a loss or a lock-delay to wait out — read
// at the view's revision, so the records and the keys are one state of
// etcd. A read that fails at that revision (compacted) is made at the
// current one against etcd's keys instead.
func (w *hubWaiter) pendingRecords(ctx context.Context) (bool, error) {
	h := w.h
	h.mu.Lock()
	rev := h.rev
	live := make(map[int64]bool, len(h.order))
	for _, c := range h.order {
		live[c] = true
	}
	h.mu.Unlock()
	var kvs []*mvccpb.KeyValue
	if resp, err := h.set.e.cli.Get(ctx, h.delays, clientv3.WithPrefix(), clientv3.WithRev(rev)); err == nil {
		kvs = resp.Kvs
	} else if kvs, live, err = h.set.e.delaysNow(ctx, h.delays, h.prefix); err != nil {
		return true, err
	}
	return anyPending(kvs, func(rev int64) bool { return live[rev] }), nil
}

// setPaced tells the hub whether the waiter will look at its position by
// itself soon, so that position changes need not wake it.
func (w *hubWaiter) setPaced(p bool) {
	w.h.mu.Lock()
	w.paced = p
	w.h.mu.Unlock()
}

// wakeup wakes one goroutine: a signal while one is pending is dropped.
type wakeup chan struct{}

func newWakeup() wakeup { return make(wakeup, 1) }

func (w wakeup) signal() {
	select {
	case w <- struct{}{}:
	default:
	}
}

type nameHub struct {
	set    *hubSet
	prefix string
	delays string // the name's lock-delay records (delay.go)
	refs   int    // guarded by set.mu
	cancel context.CancelFunc
	done   chan struct{} // closed when the hub has no waiters left

	mu     sync.Mutex
	keys   map[string]*viewKey
	order  []int64       // create revisions of keys, ascending
	limits map[int64]int // the limit of each key, by create revision
	rev    int64         // the view is etcd's state of the prefix at rev; 0 while it is built
	// delayed: lock-delay records existed when the view was read, or a
	// key that asked for a lock-delay has gone since (delay.go).
	delayed bool
	waiters map[*hubWaiter]struct{}
	// watched are the keys of holders with a lock-delay this engine
	// granted, by key, with their create revisions: the hub runs until
	// each has gone, to stamp its expiry the moment it sees it (delay.go,
	// step 4). Each counts one of refs.
	watched map[string]int64
}

// hubSet is an engine's hubs, by name prefix.
type hubSet struct {
	e *Engine
	perSpace[string, nameHub]
}

// register adds a waiter for the key named key under prefix, created at
// create and last written by its attempt at mod, starting the name's hub
// if it has none. ctx is the waiter's: the hub started for it carries its
// values (the explorer's actor identity), not its cancellation.
func (s *hubSet) register(ctx context.Context, prefix, delays, key string, create, mod int64, limit int, positions bool) *hubWaiter {
	s.mu.Lock()
	h := s.hubLocked(ctx, prefix, delays)
	h.refs++
	s.mu.Unlock()

	w := &hubWaiter{h: h, key: key, create: create, mod: mod, limit: max(limit, 1), positions: positions, wake: newWakeup()}
	h.mu.Lock()
	h.waiters[w] = struct{}{}
	if s.e.ctx.Err() != nil {
		w.st.err = fmt.Errorf("%w: the engine is closed", ErrClosed)
	}
	h.judgeLocked(w, "")
	h.mu.Unlock()
	return w
}

// hubLocked returns prefix's hub, starting it for ctx (as register) if
// there is none.
func (s *hubSet) hubLocked(ctx context.Context, prefix, delays string) *nameHub {
	h, made := s.getLocked(prefix, func() *nameHub {
		return &nameHub{set: s, prefix: prefix, delays: delays, done: make(chan struct{}),
			keys: map[string]*viewKey{}, limits: map[int64]int{}, waiters: map[*hubWaiter]struct{}{}, watched: map[string]int64{}}
	})
	if made {
		hctx, cancel := context.WithCancel(s.e.ctx)
		h.cancel = cancel
		vals := ctx
		if s.e.hooks != nil {
			vals = s.e.hooks.spawn(ctx, "hub")
		}
		s.wg.Add(1)
		go h.run(valuesOf{Context: hctx, vals: vals})
	}
	return h
}

// unregister removes a waiter; the hub stops with its last reference.
func (s *hubSet) unregister(w *hubWaiter) {
	h := w.h
	h.mu.Lock()
	delete(h.waiters, w)
	h.mu.Unlock()
	s.unref(h, 1)
}

// unref drops n references to h and stops it with its last.
func (s *hubSet) unref(h *nameHub, n int) {
	if n == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if h.refs -= n; h.refs == 0 {
		s.dropLocked(h.prefix, h)
		close(h.done)
		h.cancel()
	}
}

// watchHolder has the hub of prefix watch key, a holder created at create,
// until it goes, to act on the moment it sees it go (observeLoss): stamp
// its lock-delay when it had one (delay.go, step 4), record the wait of an
// unclean loss (loss.go).
func (s *hubSet) watchHolder(ctx context.Context, prefix, delays, key string, create int64) {
	s.mu.Lock()
	if s.e.ctx.Err() != nil {
		s.mu.Unlock()
		return
	}
	h := s.hubLocked(ctx, prefix, delays)
	h.mu.Lock()
	if h.watched[key] == create {
		h.mu.Unlock()
		s.mu.Unlock()
		return // watched already (a retry's grant of the same key)
	}
	if h.watched[key] == 0 {
		h.refs++
	}
	h.watched[key] = create
	var gone []expiry
	if h.rev != 0 {
		gone = h.expiredLocked(s.e.cfg.Clock.Now())
	}
	h.mu.Unlock()
	s.mu.Unlock()
	h.stamp(ctx, gone)
}

// expiry is a watched holder's key seen gone at a moment.
type expiry struct {
	key     string
	create  int64     // its create revision
	at      time.Time // when the hub saw it gone
	watched bool      // it was on the watch list, and held a reference
}

// expiredLocked takes the watched keys the view no longer has, as seen at
// at, off the watch list.
func (h *nameHub) expiredLocked(at time.Time) []expiry {
	var out []expiry
	for key, create := range h.watched {
		if k := h.keys[key]; k == nil || k.create != create {
			out = append(out, expiry{key: key, create: create, at: at, watched: true})
			delete(h.watched, key)
		}
	}
	return out
}

// stamp stamps the lock-delay records of the keys seen gone, in the
// background, and drops the hub's references to them.
func (h *nameHub) stamp(ctx context.Context, gone []expiry) {
	e := h.set.e
	refs := 0
	for _, g := range gone {
		if g.watched {
			refs++
		}
		e.background(ctx, "stamp", e.cfg.RequestTimeout, func(ctx context.Context) {
			e.observeLoss(ctx, h.delays, g)
		})
	}
	h.set.unref(h, refs)
}

// run keeps the view until the hub has no waiters or the engine closes.
func (h *nameHub) run(ctx context.Context) {
	defer h.set.wg.Done()
	e := h.set.e
	defer func() {
		if e.hooks != nil {
			e.hooks.end(ctx)
		}
	}()
	b := newBackoff(e.cfg.Clock)
	for ctx.Err() == nil {
		// A failed watch, or a failed read of the view, is started over
		// after a pause; the view is never patched across a gap.
		_ = h.follow(ctx, b)
		_ = b.wait(ctx)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.waiters {
		// The engine closed under its waiters (a hub whose waiters all
		// left has none).
		w.st.err = fmt.Errorf("%w: the engine closed while the waiter waited", ErrClosed)
		w.wake.signal()
	}
}

// follow builds the view and applies the watch's events until the watch
// fails or ctx ends, and says why. Once the view is built it resets b.
func (h *nameHub) follow(ctx context.Context, b *backoff) error {
	e := h.set.e
	wch, created, stop, err := e.openWatch(ctx, h.prefix, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	defer stop()
	// The watch delivers every revision after the one it was created at,
	// which its created notice names.
	r0 := created.Header.Revision
	e.at(ctx, pointHubRead)
	resp, err := e.cli.Txn(ctx).Then(
		clientv3.OpGet(h.prefix, clientv3.WithPrefix(), clientv3.WithRev(r0)),
		clientv3.OpGet(h.delays, clientv3.WithPrefix(), clientv3.WithRev(r0)),
	).Commit()
	if err != nil {
		return fmt.Errorf("queue: hub read: %w", err)
	}
	h.stamp(ctx, h.rebuild(resp.Responses[0].GetResponseRange().GetKvs(), r0, resp.Responses[1].GetResponseRange().GetKvs()))
	b.reset()
	for {
		var wr clientv3.WatchResponse
		var ok bool
		parkedNow := e.hooks != nil
		if parkedNow {
			e.hooks.park(ctx, parked{hub: true, prefix: h.prefix, viewRev: h.viewRev, closing: h.closing})
		}
		select {
		case <-ctx.Done():
		case wr, ok = <-wch:
		}
		if parkedNow {
			e.hooks.unpark(ctx)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !ok {
			return errors.New("queue: hub watch closed")
		}
		if err := wr.Err(); err != nil {
			return fmt.Errorf("queue: hub watch: %w", err)
		}
		// The events of one revision (one transaction) are applied
		// together: between them the view would be a state etcd never
		// had. etcd never splits a revision across responses.
		for evs := wr.Events; len(evs) > 0; {
			n := 1
			for n < len(evs) && evs[n].Kv.ModRevision == evs[0].Kv.ModRevision {
				n++
			}
			e.at(ctx, pointHubEvent)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			h.stamp(ctx, h.apply(evs[:n]))
			evs = evs[n:]
		}
	}
}

// viewRev is the revision the hub's view is exact at now.
func (h *nameHub) viewRev() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rev
}

// closing reports whether the hub has no waiters left and is stopping.
func (h *nameHub) closing() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// rebuild replaces the view with kvs and the name's delay records recs,
// read at rev, and judges every waiter again. It returns the watched
// holders gone from the view.
func (h *nameHub) rebuild(kvs []*mvccpb.KeyValue, rev int64, recs []*mvccpb.KeyValue) []expiry {
	h.mu.Lock()
	defer h.mu.Unlock()
	// A record of a live holder (its holder record, its lock-delay)
	// withholds nothing until that holder goes.
	h.delayed = h.delayed || anyPending(recs, among(kvs))
	h.keys = make(map[string]*viewKey, len(kvs))
	h.limits = make(map[int64]int, len(kvs))
	h.order = h.order[:0]
	for _, kv := range kvs {
		k := viewKeyOf(kv)
		h.keys[string(kv.Key)] = k
		h.limits[k.create] = k.limit
		h.order = append(h.order, kv.CreateRevision)
	}
	slices.Sort(h.order)
	h.rev = rev
	for w := range h.waiters {
		h.judgeLocked(w, "")
	}
	return h.expiredLocked(h.set.e.cfg.Clock.Now())
}

// apply applies the events of one revision and judges every waiter at
// that revision. It returns the holders with a lock-delay whose keys the
// revision deleted, the moment it saw them go: watched ones, and any other
// (a release deletes the record with the key, and then there is nothing
// to stamp).
func (h *nameHub) apply(evs []*clientv3.Event) []expiry {
	h.mu.Lock()
	defer h.mu.Unlock()
	var gone []expiry
	type leftKey struct {
		key    string
		create int64
	}
	var left []leftKey
	now := h.set.e.cfg.Clock.Now()
	for _, ev := range evs {
		key := string(ev.Kv.Key)
		old := h.keys[key]
		switch ev.Type {
		case mvccpb.PUT:
			if old != nil && old.create == ev.Kv.CreateRevision {
				*old = *viewKeyOf(ev.Kv)
				h.limits[old.create] = old.limit
				continue
			}
			if old != nil {
				// Deleted and created again without the deletion seen:
				// cannot happen in a gapless feed, but identity is the
				// create revision.
				h.removeLocked(old.create)
			}
			h.keys[key] = viewKeyOf(ev.Kv)
			h.limits[ev.Kv.CreateRevision] = h.keys[key].limit
			if n := len(h.order); n == 0 || h.order[n-1] < ev.Kv.CreateRevision {
				h.order = append(h.order, ev.Kv.CreateRevision) // create revisions only grow
			} else {
				i, _ := slices.BinarySearch(h.order, ev.Kv.CreateRevision)
				h.order = slices.Insert(h.order, i, ev.Kv.CreateRevision)
			}
		case mvccpb.DELETE:
			if old == nil {
				continue
			}
			delete(h.keys, key)
			h.removeLocked(old.create)
			left = append(left, leftKey{key, old.create})
			h.delayed = h.delayed || old.delay
			if watched := h.watched[key] == old.create; watched || old.delay {
				if watched {
					delete(h.watched, key)
				}
				gone = append(gone, expiry{key: key, create: old.create, at: now, watched: watched})
			}
		}
	}
	h.rev = evs[len(evs)-1].Kv.ModRevision
	for w := range h.waiters {
		ahead := "" // the last key ahead of w that the revision deleted
		for _, g := range left {
			if g.create < w.create {
				ahead = g.key
			}
		}
		h.judgeLocked(w, ahead)
	}
	return gone
}

func (h *nameHub) removeLocked(create int64) {
	delete(h.limits, create)
	if i, ok := slices.BinarySearch(h.order, create); ok {
		h.order = slices.Delete(h.order, i, i+1)
	}
}

// judgeLocked gives w its verdict at the view's revision and wakes it when
// the change is one it acts on. left, when set, is a key ahead of w that
// this revision deleted.
func (h *nameHub) judgeLocked(w *hubWaiter, left string) {
	if w.st.err != nil || h.rev == 0 || h.rev < w.mod {
		// Over; or the view does not yet reach the attempt's own write
		// (its event is on its way).
		return
	}
	prev := w.st
	st := hubStatus{rev: h.rev, left: prev.left, delayed: h.delayed}
	if left != "" {
		st.left = left
	}
	k := h.keys[w.key]
	switch {
	case k == nil || k.create != w.create:
		st.err = fmt.Errorf("%w: the waiter's key is gone (its lease expired or was revoked)", ErrLeaseLost)
	case k.mod != w.mod:
		st.err = fmt.Errorf("%w: a retry with the same request id took the waiter over", ErrSuperseded)
	default:
		// Keys ahead are those created before w's key. None can be created
		// later: create revisions only grow.
		i, _ := slices.BinarySearch(h.order, w.create)
		st.ahead = int64(i)
		if i > 0 {
			st.pred = h.order[i-1]
		}
		st.holds = i < holders(len(h.order), func(j int) int {
			if j == i {
				return w.limit
			}
			return h.limits[h.order[j]]
		})
		st.pos = position(st.ahead, w.limit)
	}
	w.st = st
	switch {
	case st.err != nil, st.holds:
		w.wake.signal()
	case prev.rev == 0 && w.positions:
		w.wake.signal() // first verdict: the waiter learns its position
	case w.positions && st.pos != prev.pos && (!w.paced || st.pos <= 1):
		w.wake.signal()
	}
}

// openWatch opens a watch (requiring a leader) of key with opts and returns
// it once etcd has confirmed it, with the confirmation; stop ends it, and
// so does ctx.
//
// The watch does not end with ctx before etcd has confirmed it: the
// client cancels a watch whose id it has not yet learned only when etcd
// next sends on it, which for a quiet key may be never, and etcd would keep
// the watcher meanwhile. So a ctx that ends first waits for the
// confirmation (at most RequestTimeout) before the watch is cancelled. The
// client's Watch call itself, which waits for the client's watch stream
// (for as long as its cluster cannot be reached), does end with ctx: the
// client then drops the request before it is sent.
func (e *Engine) openWatch(ctx context.Context, key string, opts ...clientv3.OpOption) (clientv3.WatchChan, clientv3.WatchResponse, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, clientv3.WatchResponse{}, nil, err
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.WithoutCancel(ctx)))
	early := context.AfterFunc(ctx, cancel)
	wch := e.cli.Watch(wctx, key, append(opts, clientv3.WithCreatedNotify())...)
	if !early() {
		// ctx ended while the client waited for its stream.
		return nil, clientv3.WatchResponse{}, nil, ctx.Err()
	}
	select {
	case wr, ok := <-wch:
		if !ok || wr.Err() != nil || !wr.Created {
			cancel()
			return nil, wr, nil, fmt.Errorf("queue: watch %q: not created: %v", key, wr.Err())
		}
		stop := context.AfterFunc(ctx, cancel)
		return wch, wr, func() { stop(); cancel() }, nil
	case <-ctx.Done():
		t := time.NewTimer(e.cfg.RequestTimeout)
		select {
		case <-wch:
		case <-t.C:
		}
		t.Stop()
		cancel()
		return nil, clientv3.WatchResponse{}, nil, ctx.Err()
	}
}
