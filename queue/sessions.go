package queue

import (
	"context"
	"strconv"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Session ends, for waiters.
//
// A session waiter's key rides on the attempt lease while it waits, so the
// session's end does not remove it: the waiter must learn it from the
// session record. Its safety does not depend on that: the grant moves the
// key onto the session lease in a transaction that proves the session
// (OwnerCmps), so a waiter whose session is gone is never granted. What
// the record's watch buys is promptness — a waiter deep in a queue learns
// at once that its session ended, not when it reaches the head.
//
// So the engine keeps one delete-only watch over every session record
// (<prefix>/sessions/) while it has session waiters, not one per waiter.
// A waiter registers with the revision its session was last proven at
// (its enqueue or takeover, which compared the record's secret). The
// watch started for the first waiter starts right after that revision;
// for a later one, the deletions already delivered since its revision are
// remembered (the last sessionMemory of them), so none is missed; a
// waiter older than that memory checks its record with one read. A failed
// watch is started again from a fresh revision, and every registered
// session is checked at that revision in the same read (a waiter that
// registers during that read may learn of its session's end only at its
// grant, whose transaction proves the session anyway).
const sessionMemory = 4096

type sessionSub struct {
	gone chan struct{}
	once sync.Once
}

func (s *sessionSub) end() { s.once.Do(func() { close(s.gone) }) }

type sessionWatch struct {
	e  *Engine
	mu sync.Mutex
	// subs are the registered waiters, by session lease.
	subs   map[clientv3.LeaseID]map[*sessionSub]struct{}
	n      int
	cancel context.CancelFunc // nil when no watch runs
	// Every deletion with a revision in (floor, seen] is in dead.
	floor, seen int64
	dead        map[clientv3.LeaseID]int64
	deadOrder   []clientv3.LeaseID
	wg          sync.WaitGroup
}

func newSessionWatch(e *Engine) *sessionWatch {
	return &sessionWatch{e: e, subs: map[clientv3.LeaseID]map[*sessionSub]struct{}{}}
}

// watch returns a channel closed once lease's session record is gone, for
// a waiter that saw it alive at revision aliveAt, and the func that ends
// the registration.
func (s *sessionWatch) watch(lease clientv3.LeaseID, aliveAt int64) (<-chan struct{}, func()) {
	sub := &sessionSub{gone: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.subs[lease] == nil {
		s.subs[lease] = map[*sessionSub]struct{}{}
	}
	s.subs[lease][sub] = struct{}{}
	s.n++
	switch {
	case s.cancel == nil:
		ctx, cancel := context.WithCancel(s.e.ctx)
		s.cancel = cancel
		s.floor, s.seen, s.dead, s.deadOrder = aliveAt, aliveAt, map[clientv3.LeaseID]int64{}, nil
		s.wg.Add(1)
		go s.run(ctx, aliveAt+1)
	case aliveAt >= s.floor:
		if rev, ok := s.dead[lease]; ok && rev > aliveAt {
			sub.end()
		}
	default:
		// Older than what is remembered: read the record once. Deletions
		// after the read are delivered to sub, registered before it.
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			ctx, cancel := s.e.opCtx()
			defer cancel()
			if resp, err := s.e.cli.Get(ctx, s.e.keys.session(lease), clientv3.WithCountOnly()); err == nil && resp.Count == 0 {
				sub.end()
			}
		}()
	}
	return sub.gone, func() { s.unregister(lease, sub) }
}

func (s *sessionWatch) unregister(lease clientv3.LeaseID, sub *sessionSub) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.subs[lease]
	if _, ok := m[sub]; !ok {
		return
	}
	delete(m, sub)
	if len(m) == 0 {
		delete(s.subs, lease)
	}
	if s.n--; s.n == 0 && s.cancel != nil {
		s.cancel()
		s.cancel = nil
	}
}

// run follows deletions of session records from rev until ctx ends,
// starting over from a fresh revision (and checking every registered
// session there) when the watch fails.
func (s *sessionWatch) run(ctx context.Context, rev int64) {
	defer s.wg.Done()
	prefix := s.e.cfg.Prefix + "/sessions/"
	b := newBackoff(s.e.cfg.Clock)
	for ctx.Err() == nil {
		wch, _, stop, err := s.e.openWatch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev), clientv3.WithFilterPut())
		if err == nil {
			for wr := range wch {
				if wr.Err() != nil {
					break
				}
				b.reset()
				for _, ev := range wr.Events {
					if ev.Type == mvccpb.DELETE {
						s.deleted(strings.TrimPrefix(string(ev.Kv.Key), prefix), ev.Kv.ModRevision)
					}
				}
			}
			stop()
		}
		if ctx.Err() != nil || b.wait(ctx) != nil {
			return
		}
		next, err := s.recheck(ctx, prefix)
		if err == nil {
			rev = next
		}
	}
}

// deleted records the deletion of the record of the session with hex id
// at rev and ends its waiters.
func (s *sessionWatch) deleted(id string, rev int64) {
	v, err := strconv.ParseUint(id, 16, 64)
	if err != nil {
		return
	}
	lease := clientv3.LeaseID(v)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = max(s.seen, rev)
	s.dead[lease] = rev
	s.deadOrder = append(s.deadOrder, lease)
	if len(s.deadOrder) > sessionMemory {
		old := s.deadOrder[0]
		s.deadOrder = s.deadOrder[1:]
		s.floor = max(s.floor, s.dead[old])
		delete(s.dead, old)
	}
	for sub := range s.subs[lease] {
		sub.end()
	}
}

// recheck reads every registered session's record at one revision, ends
// the waiters of those that are gone, and returns the revision to watch
// from.
func (s *sessionWatch) recheck(ctx context.Context, prefix string) (int64, error) {
	s.mu.Lock()
	leases := make([]clientv3.LeaseID, 0, len(s.subs))
	for l := range s.subs {
		leases = append(leases, l)
	}
	s.mu.Unlock()
	resp, err := s.e.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	at := resp.Header.Revision
	const chunk = 100 // below etcd's default limit of operations per transaction
	for i := 0; i < len(leases); i += chunk {
		part := leases[i:min(i+chunk, len(leases))]
		ops := make([]clientv3.Op, len(part))
		for j, l := range part {
			ops[j] = clientv3.OpGet(s.e.keys.session(l), clientv3.WithCountOnly(), clientv3.WithRev(at))
		}
		tr, err := s.e.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return 0, err
		}
		for j, l := range part {
			if tr.Responses[j].GetResponseRange().Count == 0 {
				s.deleted(strconv.FormatUint(uint64(l), 16), at)
			}
		}
	}
	s.mu.Lock()
	s.floor, s.seen = at, at
	s.dead, s.deadOrder = map[clientv3.LeaseID]int64{}, nil
	s.mu.Unlock()
	return at + 1, nil
}

func (s *sessionWatch) close() { s.wg.Wait() }
