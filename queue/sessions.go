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
// session's end does not remove it: the waiter learns it from the session
// record. Safety does not depend on that — the grant's move onto the
// session lease proves the session (ownerCmps) — but promptness does: a
// waiter deep in a queue learns at once that its session ended, not at
// the head.
//
// So the engine keeps one delete-only watch over the session records of a
// key space (<prefix>/sessions/) while the space has session waiters. A
// waiter registers with the revision its session was last proven at (its
// enqueue or takeover). The watch started for the first waiter starts
// right after that revision; for a later one, the deletions delivered
// since its revision are remembered (the last sessionMemory of them), so
// none is missed; a waiter older than that memory reads its record once.
// A failed watch is started again from a fresh revision, and every
// registered session is checked at that revision in the same read (a
// waiter that registers during that read may learn of its session's end
// only at its grant, whose transaction proves the session anyway).
const sessionMemory = 4096

type sessionSub struct {
	gone chan struct{}
	once sync.Once
}

func (s *sessionSub) end() { s.once.Do(func() { close(s.gone) }) }

// sessionWatch is an engine's watches of session records: one per space
// (by its prefix) while the space has session waiters.
type sessionWatch struct {
	e *Engine
	perSpace[string, sessionSpace]
}

// sessionSpace is one space's watch and its waiters, guarded by the
// sessionWatch's mu.
type sessionSpace struct {
	keys keys
	// subs are the registered waiters, by session lease.
	subs   map[clientv3.LeaseID]map[*sessionSub]struct{}
	n      int
	cancel context.CancelFunc
	// Every deletion with a revision in (floor, seen] is in dead.
	floor, seen int64
	dead        map[clientv3.LeaseID]int64
	deadOrder   []clientv3.LeaseID
}

// watch returns a channel closed once the record of lease's session in
// the space ks is gone, for a waiter that saw it alive at revision
// aliveAt, and the func that ends the registration.
func (s *sessionWatch) watch(ks keys, lease clientv3.LeaseID, aliveAt int64) (<-chan struct{}, func()) {
	sub := &sessionSub{gone: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	sp, _ := s.getLocked(ks.prefix, func() *sessionSpace {
		return &sessionSpace{keys: ks, subs: map[clientv3.LeaseID]map[*sessionSub]struct{}{}}
	})
	if sp.subs[lease] == nil {
		sp.subs[lease] = map[*sessionSub]struct{}{}
	}
	sp.subs[lease][sub] = struct{}{}
	sp.n++
	switch {
	case sp.cancel == nil:
		ctx, cancel := context.WithCancel(s.e.ctx)
		sp.cancel = cancel
		sp.floor, sp.seen, sp.dead, sp.deadOrder = aliveAt, aliveAt, map[clientv3.LeaseID]int64{}, nil
		s.wg.Add(1)
		go s.run(ctx, sp, aliveAt+1)
	case aliveAt >= sp.floor:
		if rev, ok := sp.dead[lease]; ok && rev > aliveAt {
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
			if resp, err := s.e.cli.Get(ctx, ks.session(lease), clientv3.WithCountOnly()); err == nil && resp.Count == 0 {
				sub.end()
			}
		}()
	}
	return sub.gone, func() { s.unregister(sp, lease, sub) }
}

func (s *sessionWatch) unregister(sp *sessionSpace, lease clientv3.LeaseID, sub *sessionSub) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := sp.subs[lease]
	if _, ok := m[sub]; !ok {
		return
	}
	delete(m, sub)
	if len(m) == 0 {
		delete(sp.subs, lease)
	}
	if sp.n--; sp.n == 0 {
		sp.cancel()
		s.dropLocked(sp.keys.prefix, sp)
	}
}

// run follows deletions of the session records of sp's space from rev
// until ctx ends, starting over from a fresh revision (and checking every
// registered session there) when the watch fails.
func (s *sessionWatch) run(ctx context.Context, sp *sessionSpace, rev int64) {
	defer s.wg.Done()
	prefix := sp.keys.sessions()
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
						s.deleted(sp, strings.TrimPrefix(string(ev.Kv.Key), prefix), ev.Kv.ModRevision)
					}
				}
			}
			stop()
		}
		if ctx.Err() != nil || b.wait(ctx) != nil {
			return
		}
		next, err := s.recheck(ctx, sp)
		if err == nil {
			rev = next
		}
	}
}

// deleted records the deletion of the record of the session with hex id,
// in sp's space, at rev and ends its waiters.
func (s *sessionWatch) deleted(sp *sessionSpace, id string, rev int64) {
	v, err := strconv.ParseUint(id, 16, 64)
	if err != nil {
		return
	}
	lease := clientv3.LeaseID(v)
	s.mu.Lock()
	defer s.mu.Unlock()
	sp.seen = max(sp.seen, rev)
	sp.dead[lease] = rev
	sp.deadOrder = append(sp.deadOrder, lease)
	if len(sp.deadOrder) > sessionMemory {
		old := sp.deadOrder[0]
		sp.deadOrder = sp.deadOrder[1:]
		sp.floor = max(sp.floor, sp.dead[old])
		delete(sp.dead, old)
	}
	for sub := range sp.subs[lease] {
		sub.end()
	}
}

// recheck reads every registered session's record of sp's space at one
// revision, ends the waiters of those that are gone, and returns the
// revision to watch from.
func (s *sessionWatch) recheck(ctx context.Context, sp *sessionSpace) (int64, error) {
	s.mu.Lock()
	leases := make([]clientv3.LeaseID, 0, len(sp.subs))
	for l := range sp.subs {
		leases = append(leases, l)
	}
	s.mu.Unlock()
	resp, err := s.e.cli.Get(ctx, sp.keys.sessions(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	at := resp.Header.Revision
	const chunk = 100 // below etcd's default limit of operations per transaction
	for i := 0; i < len(leases); i += chunk {
		part := leases[i:min(i+chunk, len(leases))]
		ops := make([]clientv3.Op, len(part))
		for j, l := range part {
			ops[j] = clientv3.OpGet(sp.keys.session(l), clientv3.WithCountOnly(), clientv3.WithRev(at))
		}
		tr, err := s.e.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return 0, err
		}
		for j, l := range part {
			if tr.Responses[j].GetResponseRange().Count == 0 {
				s.deleted(sp, strconv.FormatUint(uint64(l), 16), at)
			}
		}
	}
	s.mu.Lock()
	sp.floor, sp.seen = at, at
	sp.dead, sp.deadOrder = map[clientv3.LeaseID]int64{}, nil
	s.mu.Unlock()
	return at + 1, nil
}
