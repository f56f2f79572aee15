package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Shared watch views.
//
// Every WatchLocks of one prefix of one key space on an engine shares one
// view (viewState): one etcd watch and one copy of the queues, however
// many watchers. The view applies each etcd response once, under its lock,
// and hands the same batch to every subscriber's queue, which the
// subscriber's own goroutine emits. So a watcher pins only its batches not
// yet emitted (shared with the others and the ring) and, while its
// snapshot is sent, the queue slices it captured (a changed queue is
// stored as a new slice, so a capture copies slice headers, not keys):
//
//   - A watcher from revision 0 captures the view's queues at the view's
//     revision R under the lock, subscribes at R, and sends the capture
//     as its snapshot; the view's batches after R follow.
//   - A watcher resuming from revision F joins directly when the view's
//     ring (its latest batches, watchRingEvents events at most) holds
//     every event after F: F at or above the ring's floor and at most R.
//     Otherwise it catches up on a view of its own, loaded at F (which
//     checks that F's history is still there), until that view reaches
//     the shared view's ring or passes it; then it drops its view and
//     joins. With no shared view of the prefix, its view becomes it.
//   - A subscriber whose queue passes watchSubEvents events (and holds
//     more than one batch) is dropped with errWatchLagging, its queue
//     freed: the caller resumes from the last revision it emitted. One
//     slow watcher never holds the others back, nor more than its queue.
//     A view's only subscriber is not dropped: the view waits for it (it
//     holds nobody else back), so a watch resumed far behind replays
//     history at its own pace.
//   - A view's broken etcd watch is resumed from its revision; history
//     compacted under it ends the view and every subscriber with
//     ErrCompacted. The last subscriber to leave ends it.
//
// Every view (shared or catching up) counts its keys against its key
// space's budget, Config.MaxWatchKeys (one space's watches never take
// another's): a view whose keys would pass it is refused before it is
// read (one count read), and one that grows past it ends with
// ErrWatchBudget.

// Bounds on a view's memory beside its keys; variables so that tests can
// reach them with few events.
var (
	// watchRingEvents bounds the events a view keeps for resumes.
	watchRingEvents = 4096
	// watchSubEvents bounds the events a subscriber may have waiting.
	watchSubEvents = 4096
)

// errWatchLagging ends a subscriber that fell behind its view.
var errWatchLagging = errors.New("queue: watch: the watcher fell behind; resume from its last revision")

// errViewEnded ends a view whose last subscriber left.
var errViewEnded = errors.New("queue: watch view ended")

// watchSet is an engine's shared views, by space and prefix.
type watchSet struct {
	e *Engine
	perSpace[viewID, watchView]
	// closed: the engine is closing, no view starts (guarded by mu).
	closed bool

	// budget is the keys every view of each space holds, by space
	// prefix; a space whose views hold none has no entry.
	bmu    sync.Mutex
	budget map[string]int64
}

// viewID names a view: the prefix of the names it follows, in a space.
type viewID struct{ space, prefix string }

func newWatchSet(e *Engine) *watchSet {
	return &watchSet{e: e, budget: map[string]int64{}}
}

// count adds n keys (fewer, for n < 0) to space's budget and returns what
// its views hold now.
func (s *watchSet) count(space string, n int64) int64 {
	s.bmu.Lock()
	defer s.bmu.Unlock()
	have := s.budget[space] + n
	if have == 0 {
		delete(s.budget, space)
	} else {
		s.budget[space] = have
	}
	return have
}

// close waits for the views to end; the engine's context, which every
// view's follows, has ended.
func (s *watchSet) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.wg.Wait()
}

// reserve takes n keys from the budget of id's space for a view of id,
// or refuses.
func (s *watchSet) reserve(id viewID, n int64) error {
	lim := int64(s.e.cfg.MaxWatchKeys)
	if have := s.count(id.space, n); lim > 0 && have > lim {
		s.count(id.space, -n)
		return fmt.Errorf("%w: watching prefix %q follows %d keys, and this tenant's watches on this shard may follow %d at most (%d followed now): watch a narrower prefix",
			ErrWatchBudget, id.prefix, n, lim, have-n)
	}
	return nil
}

// grow counts n more keys (fewer, for n < 0) of a live view of id and
// reports ErrWatchBudget when its space's budget is passed.
func (s *watchSet) grow(id viewID, n int64) error {
	lim := int64(s.e.cfg.MaxWatchKeys)
	if have := s.count(id.space, n); n > 0 && lim > 0 && have > lim {
		return fmt.Errorf("%w: the keys under prefix %q grew past the %d this tenant's watches on this shard may follow", ErrWatchBudget, id.prefix, lim)
	}
	return nil
}

// watchView is one prefix's shared view and its subscribers.
type watchView struct {
	set    *watchSet
	id     viewID
	ready  chan struct{}   // closed once the view is loaded or has failed
	ctx    context.Context // its run's: set by start
	cancel context.CancelFunc

	mu    sync.Mutex
	st    *viewState
	ring  []WatchBatch // the latest batches with events, oldest first
	ringN int          // events in ring
	floor int64        // every event above floor is in ring
	subs  map[*watchSub]struct{}
	err   error // set once the view has ended
	// drained is signalled when a subscriber takes its queue, leaves or
	// the view ends: the view may be waiting for its only subscriber.
	drained sync.Cond
}

// watchSub is one subscriber of a view.
type watchSub struct {
	v    *watchView
	wake wakeup

	// Guarded by v.mu.
	queue []WatchBatch
	n     int // events in queue
	err   error
}

// take returns the subscriber's queued batches and, once it has ended,
// why.
func (sub *watchSub) take() ([]WatchBatch, error) {
	sub.v.mu.Lock()
	defer sub.v.mu.Unlock()
	q := sub.queue
	sub.queue, sub.n = nil, 0
	sub.v.drained.Broadcast()
	return q, sub.err
}

// newViewLocked adds a view of id, with no state yet, to the set, and
// subscribes its first watcher.
func (s *watchSet) newViewLocked(id viewID) (*watchView, *watchSub) {
	v, _ := s.getLocked(id, func() *watchView {
		v := &watchView{set: s, id: id, ready: make(chan struct{}), subs: map[*watchSub]struct{}{}}
		v.drained.L = &v.mu
		return v
	})
	return v, v.addLocked(false)
}

// addLocked subscribes a new watcher and queues the ring's batches for it.
func (v *watchView) addLocked(ring bool) *watchSub {
	sub := &watchSub{v: v, wake: newWakeup()}
	v.subs[sub] = struct{}{}
	if ring && len(v.ring) > 0 {
		sub.queue = slices.Clone(v.ring)
		sub.wake.signal()
	}
	return sub
}

// publishLocked hands b to every subscriber and keeps it in the ring. With
// one subscriber whose queue is full it first waits for it to take it
// (or leave), releasing the lock meanwhile.
func (v *watchView) publishLocked(b WatchBatch) {
	for len(v.subs) == 1 && v.err == nil && v.ctx.Err() == nil {
		var only *watchSub
		for sub := range v.subs {
			only = sub
		}
		if only.n < watchSubEvents {
			break
		}
		v.drained.Wait()
	}
	if v.err != nil || v.ctx.Err() != nil {
		return
	}
	if len(b.Events) > 0 {
		v.ring = append(v.ring, b)
		v.ringN += len(b.Events)
		drop := 0
		for v.ringN > watchRingEvents && len(v.ring)-drop > 1 {
			v.floor = v.ring[drop].Revision
			v.ringN -= len(v.ring[drop].Events)
			drop++
		}
		if drop > 0 {
			v.ring = slices.Clone(v.ring[drop:])
		}
	}
	for sub := range v.subs {
		if n := len(sub.queue); len(b.Events) == 0 && n > 0 && len(sub.queue[n-1].Events) == 0 {
			sub.queue[n-1] = b // progress after progress: the later says all
		} else {
			sub.queue = append(sub.queue, b)
		}
		sub.n += len(b.Events)
		if sub.n > watchSubEvents && len(sub.queue) > 1 && len(v.subs) > 1 {
			sub.queue, sub.n, sub.err = nil, 0, errWatchLagging
			delete(v.subs, sub)
		}
		sub.wake.signal()
	}
}

// endLocked ends the view and every subscriber with err.
func (v *watchView) endLocked(err error) {
	if v.err != nil {
		return
	}
	v.err = err
	for sub := range v.subs {
		sub.err = err
		sub.wake.signal()
	}
	v.ring = nil
	if v.cancel != nil {
		v.cancel()
	}
	v.drained.Broadcast()
}

// end removes v from the set, ends it with err and gives its state's
// keys, if it has one, back to the budget.
func (s *watchSet) end(v *watchView, err error) {
	s.mu.Lock()
	s.dropLocked(v.id, v)
	s.mu.Unlock()
	v.mu.Lock()
	v.endLocked(err)
	if v.st != nil {
		v.st.drop()
	}
	v.mu.Unlock()
}

// start makes st (loaded, its keys counted) the view's state and starts
// following etcd from its revision; on a closing engine it ends the view.
func (s *watchSet) start(v *watchView, st *viewState) {
	ctx, cancel := context.WithCancel(s.e.ctx)
	v.mu.Lock()
	v.st, v.floor, v.ctx, v.cancel = st, st.rev, ctx, cancel
	v.mu.Unlock()
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.wg.Add(1)
	}
	s.mu.Unlock()
	close(v.ready)
	if closed {
		s.end(v, fmt.Errorf("%w: the engine is closed", ErrClosed))
		return
	}
	go v.run(ctx)
}

// run follows etcd for the view until it ends: its last subscriber left,
// the engine closed, its history was compacted or its budget passed. A
// broken watch is resumed from the view's revision after a pause.
func (v *watchView) run(ctx context.Context) {
	defer v.set.wg.Done()
	e := v.set.e
	// An engine that closes wakes a publish waiting for its subscriber.
	defer context.AfterFunc(ctx, func() {
		v.mu.Lock()
		v.drained.Broadcast()
		v.mu.Unlock()
	})()
	b := newBackoff(e.cfg.Clock)
	var err error
	for {
		v.mu.Lock()
		rev := v.st.rev
		v.mu.Unlock()
		err = v.st.watchFrom(ctx, e.cli, rev, func(wr clientv3.WatchResponse) error {
			v.mu.Lock()
			defer v.mu.Unlock()
			batch, err := v.st.batchOf(wr)
			if err != nil {
				return err
			}
			v.publishLocked(batch)
			b.reset()
			return nil
		})
		if ctx.Err() != nil || errors.Is(err, ErrCompacted) || errors.Is(err, ErrWatchBudget) {
			break
		}
		if b.wait(ctx) != nil {
			break
		}
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("%w: the engine is closed", ErrClosed)
	}
	v.set.end(v, err) // only drops the state when the last subscriber ended it
}

// join subscribes a watcher of prefix from revision from (0: with a
// snapshot, which it returns) and returns the revision the subscriber's
// batches start after. A resume the shared view cannot serve yet catches
// up first, emitting through emit.
func (s *watchSet) join(ctx context.Context, ks keys, prefix string, from int64, emit func(WatchBatch) error) (*watchSub, *watchSnapshot, int64, error) {
	id := viewID{ks.prefix, prefix}
	for {
		if s.e.ctx.Err() != nil {
			return nil, nil, 0, fmt.Errorf("%w: the engine is closed", ErrClosed)
		}
		s.mu.Lock()
		v := s.m[id]
		if v == nil {
			// The first watcher of the prefix loads its view.
			v, sub := s.newViewLocked(id)
			s.mu.Unlock()
			st := s.newState(ks, id)
			if err := st.load(ctx, s.e.cli, from); err != nil {
				st.drop()
				s.end(v, err)
				close(v.ready)
				return nil, nil, 0, err
			}
			s.start(v, st)
			if from > 0 {
				return sub, nil, from, nil
			}
			// The view may have moved on since its load: the snapshot is
			// of its state now, and the subscriber skips what it covers.
			v.mu.Lock()
			snap := v.st.capture()
			v.mu.Unlock()
			return sub, snap, snap.rev, nil
		}
		s.mu.Unlock()
		select {
		case <-v.ready:
		case <-ctx.Done():
			return nil, nil, 0, ctx.Err()
		}
		v.mu.Lock()
		switch {
		case v.err != nil:
			v.mu.Unlock()
			continue // ended: it is out of the set already
		case from == 0:
			sub, snap := v.addLocked(false), v.st.capture()
			v.mu.Unlock()
			return sub, snap, snap.rev, nil
		case from >= v.floor && from <= v.st.rev:
			sub := v.addLocked(true)
			v.mu.Unlock()
			return sub, nil, from, nil
		}
		v.mu.Unlock()
		return s.catchUp(ctx, ks, id, from, emit)
	}
}

// catchUp serves a resume from revision from on a view of its own until it
// can join the shared view (see the comment above).
func (s *watchSet) catchUp(ctx context.Context, ks keys, id viewID, from int64, emit func(WatchBatch) error) (*watchSub, *watchSnapshot, int64, error) {
	st := s.newState(ks, id)
	if err := st.load(ctx, s.e.cli, from); err != nil {
		st.drop()
		return nil, nil, 0, err
	}
	if sub, ok := s.tryJoin(st); ok {
		return sub, nil, from, nil
	}
	var sub *watchSub
	var at int64 // the revision it joined at
	joined := errors.New("joined")
	err := st.watchFrom(ctx, s.e.cli, st.rev, func(wr clientv3.WatchResponse) error {
		b, err := st.batchOf(wr)
		if err != nil {
			return err
		}
		if err := emit(b); err != nil {
			return err
		}
		at = st.rev // before tryJoin: a view it becomes moves st on
		var ok bool
		if sub, ok = s.tryJoin(st); ok {
			return joined
		}
		return nil
	})
	if err == joined {
		return sub, nil, at, nil
	}
	st.drop()
	return nil, nil, 0, err
}

// tryJoin subscribes a catching-up watcher whose own view st has reached
// a revision the shared view can continue from, and drops st; with no
// shared view, st becomes it.
func (s *watchSet) tryJoin(st *viewState) (*watchSub, bool) {
	s.mu.Lock()
	v := s.m[st.id]
	if v == nil {
		v, sub := s.newViewLocked(st.id)
		s.mu.Unlock()
		s.start(v, st)
		return sub, true
	}
	s.mu.Unlock()
	select {
	case <-v.ready:
	default:
		return nil, false // still loading: go on catching up
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.err != nil || st.rev < v.floor {
		return nil, false
	}
	// The ring holds every event of the shared view after st.rev, or the
	// shared view has not reached st.rev yet: the subscriber skips what
	// it has emitted (watchSet.watch).
	sub := v.addLocked(true)
	st.drop()
	return sub, true
}

// leave unsubscribes sub; the view ends with its last subscriber.
func (s *watchSet) leave(sub *watchSub) {
	v := sub.v
	s.mu.Lock()
	defer s.mu.Unlock()
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.subs, sub)
	sub.queue = nil
	v.drained.Broadcast()
	if len(v.subs) == 0 && v.err == nil {
		s.dropLocked(v.id, v)
		v.endLocked(errViewEnded)
	}
}

// watch runs one watcher: its snapshot or catch-up, then its view's
// batches after the revision it joined at, until ctx ends, emit fails or
// the subscription ends.
func (s *watchSet) watch(ctx context.Context, ks keys, prefix string, from int64, emit func(WatchBatch) error) error {
	sub, snap, skip, err := s.join(ctx, ks, prefix, from, emit)
	if err != nil {
		return err
	}
	defer s.leave(sub)
	if snap != nil {
		if err := snap.emit(emit); err != nil {
			return err
		}
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-sub.wake:
		}
		bs, err := sub.take()
		for _, b := range bs {
			if b.Revision <= skip {
				continue // emitted already (a catch-up, a ring, a snapshot)
			}
			if len(b.Events) > 0 && b.Events[0].Revision <= skip {
				b.Events = slices.DeleteFunc(slices.Clone(b.Events), func(ev WatchEvent) bool { return ev.Revision <= skip })
			}
			skip = b.Revision
			if err := emit(b); err != nil {
				return err
			}
		}
		if err != nil {
			return err
		}
	}
}

// watchSnapshot is a view's queues captured at one revision.
type watchSnapshot struct {
	rev    int64
	queues []capturedQueue
}

type capturedQueue struct {
	seg  string
	keys []watchKey
}

// capture returns the state's queues now; the caller holds the view's
// lock. The slices are shared with the state, which never changes them.
func (st *viewState) capture() *watchSnapshot {
	snap := &watchSnapshot{rev: st.rev, queues: make([]capturedQueue, 0, len(st.queues))}
	for seg, ks := range st.queues {
		snap.queues = append(snap.queues, capturedQueue{seg, ks})
	}
	return snap
}

// emit sends the snapshot in key order, in batches of snapshotChunk
// events, the last one SnapshotDone.
func (snap *watchSnapshot) emit(emit func(WatchBatch) error) error {
	slices.SortFunc(snap.queues, func(a, b capturedQueue) int { return cmp.Compare(a.seg+"/", b.seg+"/") })
	b := WatchBatch{Snapshot: true, Revision: snap.rev}
	for _, q := range snap.queues {
		name, election := segName(q.seg)
		held := heldOf(q.keys)
		for i, k := range q.keys {
			en := k.entry(i, held)
			t := EventQueued
			if en.holder {
				t = EventHeld
			}
			b.Events = append(b.Events, WatchEvent{Type: t, Name: name, Election: election, Entry: en, Revision: snap.rev})
			if len(b.Events) == snapshotChunk {
				if err := emit(b); err != nil {
					return err
				}
				b.Events = nil
			}
		}
	}
	b.SnapshotDone = true
	return emit(b)
}

// WatchLocks follows the queues of every name that begins with prefix —
// locks and elections — holders judged by the grant rule (holders). With
// from == 0 it first reports a snapshot of them; with from > 0 it
// continues after revision from (which must not be compacted, nor beyond
// the cluster's revision: ErrCompacted), reporting the changes after it.
// Watchers of one prefix share one view of it (watchview.go).
// It calls emit on the caller's goroutine, one batch at a time, and
// returns when ctx ends, emit fails (with emit's error), or the watch
// fails: ErrCompacted when etcd compacted history the watch still needed
// (the caller starts over with from == 0), ErrWatchBudget when the
// prefix's keys pass Config.MaxWatchKeys, another error for a watch that
// broke or fell behind (resume from the last batch's Revision).
func (e *Engine) WatchLocks(ctx context.Context, prefix string, from int64, emit func(WatchBatch) error) error {
	if from < 0 {
		return fmt.Errorf("%w: watch revision %d is negative", ErrInvalidArgument, from)
	}
	return e.watches.watch(ctx, e.keys, prefix, from, emit)
}
