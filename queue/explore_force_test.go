package queue

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestExploreForceRelease runs the explorer with an administrator among
// the actors: a quarter of the mode's schedules, each with an evictor and
// a lock taker that reuses its request id (so a key can be deleted and
// re-created under the same name while a force-release is between its
// read and its delete).
func TestExploreForceRelease(t *testing.T) {
	cfg := exploreMode()
	cfg.schedules /= 4
	explore(t, cfg, 0, (*world).castForce)
}

// castForce picks a reacquirer or a holder, an evictor, and up to two
// actors of the usual menu.
func (w *world) castForce() {
	if w.rng.IntN(2) == 0 {
		w.add(w.reacquirer("r0"))
	} else {
		w.add(w.holder("h0", w.rng.IntN(2) == 0))
	}
	w.add(w.evictor("f1"))
	menu := []func(i int){
		func(i int) { w.add(w.holder(fmt.Sprintf("h%d", i), false)) },
		func(i int) { w.add(w.reacquirer(fmt.Sprintf("r%d", i))) },
		func(i int) { w.addImpatient(fmt.Sprintf("i%d", i)) },
		func(i int) { w.add(w.evictor(fmt.Sprintf("f%d", i))) },
		func(i int) { w.add(w.expirer(fmt.Sprintf("e%d", i))) },
	}
	for i := 2; i < 2+w.rng.IntN(3); i++ {
		menu[w.rng.IntN(len(menu))](i)
	}
}

// evictor force-releases the key it reads first, naming its token, as an
// operator does from what ListLocks showed. The eviction stands, for the
// checks, for an expiry of that key — and of that key alone: a
// force-release that deleted any other key (a newer holder's, or the same
// key re-created by a retry) is a holder's key deleted by someone else.
func (w *world) evictor(name string) actorSpec {
	e := w.engine()
	return actorSpec{name: name, mayVanish: true, run: func(ctx context.Context) {
		w.step(ctx, "evict")
		resp, err := w.sch.cli.Get(ctx, e.keys.namePrefix(w.name), clientv3.WithFirstCreate()...)
		if err != nil || len(resp.Kvs) == 0 {
			return
		}
		if _, err := decodeValue(resp.Kvs[0].Value); err != nil {
			w.violate("%s: decode the first key: %v", name, err)
			return
		}
		first := entryOf(resp.Kvs[0])
		// The key is about to go (by this eviction, or it is gone
		// already: the first key changes only by its deletion).
		w.mu.Lock()
		w.expiredRev[first.Revision]++
		w.mu.Unlock()
		fr := ForceReleaseRequest{Name: w.name, Reason: "explore", Actor: name, Token: first.Token}
		for try := 0; try < 2; try++ {
			res, err := e.ForceRelease(ctx, fr)
			switch {
			case err == nil && res.Released && res.Evicted.Revision != first.Revision:
				w.violate("%s: evicted the key created at %d; it named the one created at %d", name, res.Evicted.Revision, first.Revision)
			case err == nil && res.Released && try > 0:
				w.violate("%s: a force-release retried after a lost answer evicted again", name)
			case err != nil && !errors.Is(err, ErrHolderChanged) && !errors.Is(err, context.Canceled):
				w.violate("%s: force release: %v", name, err)
			}
			if err != nil && ctx.Err() != nil {
				// The caller went: if the key is still there, it was not
				// evicted, and its holder may hold it on.
				rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				resp, gerr := w.sch.cli.Get(rctx, string(resp.Kvs[0].Key))
				cancel()
				if gerr == nil && len(resp.Kvs) > 0 && resp.Kvs[0].CreateRevision == first.Revision {
					// Only this evictor's mark goes: another evictor may
					// still evict the key.
					w.mu.Lock()
					w.expiredRev[first.Revision]--
					w.mu.Unlock()
				}
				return
			}
			if err != nil || !w.lostAnswer(ctx) {
				return
			}
			// The answer was lost: the same eviction again.
			w.step(ctx, "evict-retry")
		}
	}}
}
