package scenario

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasegate/leasegate/loadtest/internal/stats"
	"github.com/leasegate/leasegate/loadtest/internal/system"
)

// contendedSystems are compared in the contended scenario. The direct-txn
// floor cannot wait, so it has no place here.
var contendedSystems = []string{GatewaySession, Mutex, RedsyncAlways, RedsyncEverysec}

// Contended runs Waiters clients per name over Names names: each client
// acquires its name, holds it for Hold, releases it and queues again. It
// measures handoffs (a release until the next waiter holds), FIFO order,
// mutual exclusion as the clients see it, and how evenly the grants spread
// over the clients. Then it runs the delayed-release handoff
// (DelayedHandoff), the drain of a long queue (Drain) and the gateway's
// memory per queued waiter (WaiterMemory).
func (e *Env) Contended(ctx context.Context) (*Contended, error) {
	out := &Contended{Names: e.Cfg.Names, Waiters: e.Cfg.Waiters, HoldMs: float64(e.Cfg.Hold) / float64(time.Millisecond)}
	names, err := e.Bed.HomeNames(ctx, "c", e.Cfg.Names)
	if err != nil {
		return nil, err
	}
	n := e.Cfg.Names * e.Cfg.Waiters
	systems, notes, err := e.openAll(ctx, contendedSystems, n)
	if err != nil {
		return nil, err
	}
	out.Notes = notes
	acc := map[*opened]*contendTally{}
	err = e.rounds(ctx, systems, e.Cfg.Duration, func(ctx context.Context, o *opened, p phase) error {
		t := acc[o]
		if t == nil {
			t = &contendTally{tally: newTally(), handoff: stats.NewHistogram(), grants: make([]int64, n)}
			acc[o] = t
		}
		p.workers = n
		p.label = fmt.Sprintf("contended %s %d×%d", o.name, e.Cfg.Names, e.Cfg.Waiters)
		e.contended(ctx, o, names, p, t)
		return nil
	})
	if n := e.idleNote("contended"); n != "" {
		out.Notes = append(out.Notes, n)
	}
	for _, o := range systems {
		if t := acc[o]; t != nil {
			r := t.result(o, n)
			out.Runs = append(out.Runs, r)
			e.logf("contended   %-17s %6.0f grants/s  handoff p50 %.2fms p99 %.2fms  fifo violations %d/%d  overlaps %d  fairness %.3f  errors %d",
				o.name, r.PerSec, r.Handoff.P50Ms, r.Handoff.P99Ms, r.FIFOViolations, r.FIFOChecked, r.Overlaps, r.Fairness, r.Errors)
		}
		o.close()
	}
	if err != nil {
		return out, err
	}
	if out.Delayed, err = e.DelayedHandoff(ctx); err != nil {
		return out, fmt.Errorf("delayed handoff: %w", err)
	}
	if out.Drain, err = e.Drain(ctx); err != nil {
		return out, fmt.Errorf("drain: %w", err)
	}
	if out.WaiterMemory, err = e.WaiterMemory(ctx); err != nil {
		return out, fmt.Errorf("waiter memory: %w", err)
	}
	return out, ctx.Err()
}

// contendTally accumulates a system's contended rounds.
type contendTally struct {
	*tally
	handoff                       *stats.Histogram
	grants                        []int64
	checked, violations, overlaps atomic.Int64
}

func (t *contendTally) result(o *opened, n int) ContendedRun {
	r := ContendedRun{Run: t.run(o.name, o.sys.Describe(), n)}
	r.Handoff, r.HandoffSpectrum, r.HandoffBins = t.handoff.Summary(), t.handoff.Spectrum(), t.handoff.Distribution(10)
	r.FIFOChecked, r.FIFOViolations, r.Overlaps = t.checked.Load(), t.violations.Load(), t.overlaps.Load()
	r.Fairness = stats.Jain(t.grants)
	r.MinGrants, r.MaxGrants = t.grants[0], t.grants[0]
	for _, g := range t.grants {
		r.MinGrants, r.MaxGrants = min(r.MinGrants, g), max(r.MaxGrants, g)
	}
	return r
}

// lineState is what the clients of one name see of its line.
type lineState struct {
	mu        sync.Mutex
	holder    int // client index, or -1
	releaseAt time.Time
	lastGrant time.Time
	waiting   map[int]*waiterState
}

type waiterState struct {
	start    time.Time
	enqueued time.Time // zero until the system confirms the place
}

// grantFacts is what one grant tells.
type grantFacts struct {
	handoff  time.Duration // 0: not a handoff
	checked  bool          // someone else was waiting
	violated bool          // … and was in line before this client asked
	overlap  bool
}

// granted records client w's grant at t1 and reports what it tells.
func (s *lineState) granted(w int, me *waiterState, t1 time.Time) grantFacts {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.waiting, w)
	var f grantFacts
	f.overlap = s.holder >= 0
	s.holder = w
	// A handoff: the previous holder began its release after it was
	// granted, and this client was already asking before that grant, so it
	// was in line through the whole hold whatever the system reports.
	if !s.releaseAt.IsZero() && s.releaseAt.After(s.lastGrant) && me.start.Before(s.lastGrant) {
		f.handoff = t1.Sub(s.releaseAt)
	}
	f.checked = len(s.waiting) > 0
	for _, o := range s.waiting {
		if !o.enqueued.IsZero() && o.enqueued.Before(me.start) {
			f.violated = true
			break
		}
	}
	s.lastGrant = t1
	return f
}

// contended runs one round of one system.
func (e *Env) contended(ctx context.Context, o *opened, names []string, p phase, t *contendTally) {
	n := p.workers
	win := e.newWindow(p, o.name)
	tl := stats.NewTimeline(win.start, stats.StepFor(p.duration), p.duration)
	lines := make([]*lineState, len(names))
	for i := range lines {
		lines[i] = &lineState{holder: -1, waiting: map[int]*waiterState{}}
	}
	waits := make([]*stats.Histogram, n)
	handoffs := make([]*stats.Histogram, n)
	ctx, cancel := context.WithDeadline(ctx, win.deadline.Add(30*time.Second))
	defer cancel()
	e.Bar.Start(p.label, p.warmup+p.duration, p.maxOps, win.ops.Load)
	defer e.Bar.Done()
	var wg sync.WaitGroup
	for w := range n {
		waits[w], handoffs[w] = stats.NewHistogram(), stats.NewHistogram()
		wg.Go(func() {
			line, lname := lines[w%len(names)], names[w%len(names)]
			for ctx.Err() == nil && win.open(time.Now()) {
				e.contendOnce(ctx, o.clients[w], w, line, lname, win, func(begin, t1 time.Time, f grantFacts) {
					if !win.admit(t1) {
						return
					}
					t.grants[w]++
					waits[w].Record(t1.Sub(begin))
					tl.Add(t1)
					if f.handoff > 0 {
						handoffs[w].Record(f.handoff)
					}
					if f.checked {
						t.checked.Add(1)
					}
					if f.violated {
						t.violations.Add(1)
					}
					if f.overlap {
						t.overlaps.Add(1)
					}
				}, t.errs)
			}
		})
	}
	wg.Wait()
	t.close(win, waits, tl)
	for _, h := range handoffs {
		t.handoff.Merge(h)
	}
}

// contendOnce queues client w for its name once, holds, and releases.
func (e *Env) contendOnce(ctx context.Context, c system.Client, w int, line *lineState, name string, win *window,
	record func(begin, t1 time.Time, f grantFacts), errs *errSamples) {
	begin := time.Now()
	me := &waiterState{start: begin}
	line.mu.Lock()
	line.waiting[w] = me
	line.mu.Unlock()
	h, err := c.Acquire(ctx, name, func() {
		now := time.Now()
		line.mu.Lock()
		me.enqueued = now
		line.mu.Unlock()
	})
	t1 := time.Now()
	if err != nil {
		line.mu.Lock()
		delete(line.waiting, w)
		line.mu.Unlock()
		if ctx.Err() == nil {
			errs.add(fmt.Errorf("acquire %s: %w", name, err))
			pause(ctx, 5*time.Millisecond)
		}
		return
	}
	record(begin, t1, line.granted(w, me, t1))
	if e.Cfg.Hold > 0 {
		time.Sleep(e.Cfg.Hold)
	}
	line.mu.Lock()
	line.holder = -1
	line.releaseAt = time.Now()
	line.mu.Unlock()
	// The release must go through even after the run's context ends, or
	// the line behind it would wait for the TTL.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := h.Release(rctx); err != nil && t1.Before(win.deadline) {
		errs.add(fmt.Errorf("release %s: %w", name, err))
	}
}
