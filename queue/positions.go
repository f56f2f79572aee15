package queue

import (
	"context"
	"errors"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Queue positions.
//
// A waiter watches only its predecessor, so by itself it would learn that
// someone further ahead left only when its predecessor goes. To report
// positions as they change without every waiter watching the whole queue,
// the engine keeps one delete-only watch per name that has local waiters
// and fans its events out in memory. Grants never depend on this feed: it
// only moves position reports, and any doubt about it (a failed watch, a
// slow subscriber) makes the waiters re-read.

// posEvent is one deletion under a name.
type posEvent struct {
	createRev int64 // create revision of the deleted key
	rev       int64 // revision of the deletion
}

// posSub is one waiter's subscription to its name's feed.
type posSub struct {
	events chan posEvent
	resync chan struct{}
}

func (s *posSub) signalResync() {
	select {
	case s.resync <- struct{}{}:
	default:
	}
}

type nameFeed struct {
	subs   map[*posSub]struct{}
	rev    int64 // highest revision delivered
	cancel context.CancelFunc
}

type positionHub struct {
	e     *Engine
	mu    sync.Mutex
	feeds map[string]*nameFeed
	wg    sync.WaitGroup
}

func newPositionHub(e *Engine) *positionHub {
	return &positionHub{e: e, feeds: make(map[string]*nameFeed)}
}

// subscribe registers a waiter that has read the queue at readRev. If the
// feed has already delivered events past readRev, the waiter is told to
// re-read at once, so nothing is missed.
func (h *positionHub) subscribe(prefix string, readRev int64) *posSub {
	s := &posSub{events: make(chan posEvent, 256), resync: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.feeds[prefix]
	if f == nil {
		ctx, cancel := context.WithCancel(h.e.ctx)
		f = &nameFeed{subs: make(map[*posSub]struct{}), rev: readRev, cancel: cancel}
		h.feeds[prefix] = f
		h.wg.Add(1)
		go h.run(ctx, prefix, f, readRev+1)
	} else if f.rev > readRev {
		s.signalResync()
	}
	f.subs[s] = struct{}{}
	return s
}

func (h *positionHub) unsubscribe(prefix string, s *posSub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.feeds[prefix]
	if f == nil {
		return
	}
	delete(f.subs, s)
	if len(f.subs) == 0 {
		f.cancel()
		delete(h.feeds, prefix)
	}
}

// run watches prefix for deletions from rev and fans them out until ctx
// ends, restarting the watch (and asking every waiter to re-read) when it
// fails.
func (h *positionHub) run(ctx context.Context, prefix string, f *nameFeed, rev int64) {
	defer h.wg.Done()
	b := newBackoff(h.e.cfg.Clock)
	for ctx.Err() == nil {
		if h.e.testHookBeforeFeedWatch != nil {
			h.e.testHookBeforeFeedWatch()
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := h.e.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev),
			clientv3.WithFilterPut(), clientv3.WithPrevKV())
		next, err := h.pump(wch, f)
		cancel()
		if next > rev {
			rev = next
		}
		if ctx.Err() != nil {
			return
		}
		h.resyncAll(f)
		if errors.Is(err, rpctypes.ErrCompacted) {
			// History is gone; start from now. Waiters re-read anyway.
			if resp, gerr := h.e.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); gerr == nil {
				rev = resp.Header.Revision + 1
				continue
			}
		}
		if b.wait(ctx) != nil {
			return
		}
	}
}

// pump delivers events until the watch ends; it returns the revision to
// resume from and the watch's error.
func (h *positionHub) pump(wch clientv3.WatchChan, f *nameFeed) (int64, error) {
	var next int64
	for wr := range wch {
		if err := wr.Err(); err != nil {
			return next, err
		}
		for _, ev := range wr.Events {
			if ev.Type != mvccpb.DELETE || ev.PrevKv == nil {
				continue
			}
			pe := posEvent{createRev: ev.PrevKv.CreateRevision, rev: ev.Kv.ModRevision}
			h.deliver(f, pe)
			next = pe.rev + 1
		}
	}
	return next, errors.New("watch closed")
}

func (h *positionHub) deliver(f *nameFeed, pe posEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f.rev = max(f.rev, pe.rev)
	for s := range f.subs {
		select {
		case s.events <- pe:
		default:
			s.signalResync() // too slow: re-read instead
		}
	}
}

func (h *positionHub) resyncAll(f *nameFeed) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range f.subs {
		s.signalResync()
	}
}

func (h *positionHub) close() { h.wg.Wait() }
