//go:build linux

package chaos

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/leasegate/leasegate/client"
)

// Semaphores in the run.
//
// Semaphore workers (Config.SemaphoreWorkers) acquire a few names as
// semaphores, each with the limit the harness gave it for the run (2 or
// 3), hold briefly and release; every other worker takes its slots in a
// session, the rest with a lease per lock, as the stable workers do. Each
// acquire records its limit (AcquireOp.Limit), and the lock checkers judge
// a name by the limit its grants recorded: at most N holders believed
// they held it at once (belief), each grant's key had fewer than N keys
// ahead of it left before the grant was answered (exclusion), holders
// never share a token, tokens grow in grant order (tokenOrder), FIFO among
// waiters that stayed, no stuck waiters, nothing left behind. Holders do
// not write the fenced register: a semaphore's concurrent holders are not
// ordered by their tokens (docs/semaphores.md), so one register per name
// would refuse them by design.

// semaphore is one name the workload takes as a semaphore.
type semaphore struct {
	name  string
	limit int
}

// pickSemaphores chooses three semaphore names, on both clusters of the
// initial map, with limits 2, 3 and 2.
func (h *Harness) pickSemaphores() []semaphore {
	r := h.ring()
	per := map[string]int{}
	var out []semaphore
	for i := 0; len(out) < 3; i++ {
		n := fmt.Sprintf("sem-%02d", i)
		if c := r.Locate(n); per[c] < 2 {
			per[c]++
			out = append(out, semaphore{name: n, limit: 2 + len(out)%2})
		}
	}
	return out
}

// runSemaphores adds the semaphore workers to wg; they run until ctx ends.
func (h *Harness) runSemaphores(ctx context.Context, wg *sync.WaitGroup) error {
	for i := range h.cfg.SemaphoreWorkers {
		who := fmt.Sprintf("s%d", i)
		s, err := h.newSDK(who, nil)
		if err != nil {
			return err
		}
		wg.Go(func() { h.runSemaphoreWorker(ctx, s, who, i%2 == 1) })
	}
	return nil
}

// runSemaphoreWorker acquires a random semaphore, holds it for 20 to
// 120 ms and releases it, until ctx ends. With withSession its slots ride
// on a session, opened again when lost.
func (h *Harness) runSemaphoreWorker(ctx context.Context, s *sdk, who string, withSession bool) {
	role := "semaphore"
	if withSession {
		role = "semaphore-session"
	}
	var sess *client.Session
	closeSess := func(ctx context.Context) {
		if sess != nil {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_ = sess.Close(cctx)
			cancel()
			sess = nil
		}
	}
	defer closeSess(context.Background())
	pause := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	for ctx.Err() == nil {
		if withSession && (sess == nil || sess.Err() != nil) {
			closeSess(ctx)
			var err error
			if sess, err = s.base.OpenSession(ctx, client.WithTTL(h.cfg.TTL)); err != nil {
				sess = nil
				pause(100 * time.Millisecond)
				continue
			}
		}
		sem := h.semaphores[mrand.IntN(len(h.semaphores))]
		wait := time.Second + time.Duration(mrand.Int64N(int64(3*time.Second)))
		l, op := h.acquireWith(ctx, s, acquireSpec{who: who, role: role, name: sem.name, limit: sem.limit, wait: wait, session: sess})
		if l == nil {
			var reason string
			h.Hist.update(func() { reason = op.Reason })
			if reason == client.ReasonSessionLost.String() {
				closeSess(ctx) // a shard the session has no lease on, or it lapsed
			}
			pause(50 * time.Millisecond)
			continue
		}
		select {
		case <-l.Done():
			h.lost(l, op)
		case <-time.After(time.Duration(20+mrand.IntN(100)) * time.Millisecond):
			h.letGo(l, op) // its id is not offered to the replaying adversary, whose calls are written for locks
		}
	}
}

// SemaphoreCount is what the workload did with one semaphore.
type SemaphoreCount struct {
	// Limit is the semaphore's limit for the run.
	Limit int
	// Acquires, Granted and Lost count its acquires, those granted, and
	// the grants lost before release; Mismatch those refused for another
	// limit (none expected: every caller gives the same one).
	Acquires, Granted, Lost, Mismatch int
	// MaxHolders is the most holders that believed they held it at once
	// (goal: Limit reached, never exceeded).
	MaxHolders int
	// Violations counts the violations on its name.
	Violations int
}

// semaphoreFigures counts, per semaphore, what ops and vs show.
func semaphoreFigures(sems []semaphore, ops []AcquireOp, vs []Violation) map[string]*SemaphoreCount {
	out := map[string]*SemaphoreCount{}
	for _, s := range sems {
		out[s.name] = &SemaphoreCount{Limit: s.limit}
	}
	type edge struct {
		at time.Time
		d  int
	}
	edges := map[string][]edge{}
	for _, op := range ops {
		sc := out[op.Name]
		if sc == nil {
			continue
		}
		sc.Acquires++
		if op.Outcome == outError && strings.Contains(op.Err, client.ErrLimitMismatch.Error()) {
			sc.Mismatch++
		}
		if op.Outcome != outGranted {
			continue
		}
		sc.Granted++
		if op.Lost {
			sc.Lost++
		}
		if to := op.believedUntil(); !to.IsZero() && to.After(op.Complete) {
			edges[op.Name] = append(edges[op.Name], edge{op.Complete, 1}, edge{to, -1})
		}
	}
	for name, es := range edges {
		// An end at the same instant as a start comes first, as in belief.
		sort.Slice(es, func(i, j int) bool { return es[i].at.Before(es[j].at) || es[i].at.Equal(es[j].at) && es[i].d < es[j].d })
		n := 0
		for _, e := range es {
			n += e.d
			out[name].MaxHolders = max(out[name].MaxHolders, n)
		}
	}
	for _, v := range vs {
		if sc := out[v.Name]; sc != nil {
			sc.Violations++
		}
	}
	return out
}
