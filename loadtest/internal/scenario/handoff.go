package scenario

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasegate/leasegate/loadtest/internal/stats"
	"github.com/leasegate/leasegate/loadtest/internal/system"
)

// delayedSystems are compared in the delayed-release handoff: the gateway
// and Mutex hand over, etcd-put is one write on the same cluster, the unit
// a handoff is measured in.
var delayedSystems = []string{GatewaySession, Mutex, EtcdPut}

// DelayedHandoff is the handoff when the release comes well after the
// waiter's place is confirmed, so the waiter is settled in line (its watch
// in place) when the holder lets go.
type DelayedHandoff struct {
	// DelayMs is the time from the waiter's confirmed enqueue to the
	// holder's release.
	DelayMs float64 `json:"delay_ms"`
	// Runs' Latency is release sent → the waiter's grant received; for
	// etcd-put it is one Put's latency.
	Runs  []Run    `json:"runs"`
	Notes []string `json:"notes,omitempty"`
}

// DelayedHandoff measures, for the gateway and Mutex, one holder and one
// waiter on a name: the holder holds, the waiter asks, and the holder
// releases ReleaseDelay after the waiter's enqueue was acknowledged; the
// figure is the time from the release being sent to the grant reaching the
// waiter. etcd-put, in the same interleaved rounds, is the latency of one
// Put on the same cluster: the least a handoff that needs one write can
// take.
func (e *Env) DelayedHandoff(ctx context.Context) (*DelayedHandoff, error) {
	out := &DelayedHandoff{DelayMs: float64(e.Cfg.ReleaseDelay) / float64(time.Millisecond)}
	names, err := e.Bed.HomeNames(ctx, "h", 1)
	if err != nil {
		return nil, err
	}
	systems, notes, err := e.openAll(ctx, delayedSystems, 2)
	if err != nil {
		return nil, err
	}
	out.Notes = notes
	tallies := map[*opened]*tally{}
	// A Mutex handoff after a settled enqueue can take 100 ms (see
	// docs/benchmarks.md): give every system a second at least, so that
	// even a short run sees a few.
	err = e.rounds(ctx, systems, max(e.Cfg.Duration, time.Second), func(ctx context.Context, o *opened, p phase) error {
		t := tallies[o]
		if t == nil {
			t = newTally()
			tallies[o] = t
		}
		p.workers = 1
		p.label = fmt.Sprintf("handoff after %s %s", e.Cfg.ReleaseDelay, o.name)
		e.delayedRound(ctx, o, names[0], p, t)
		return nil
	})
	for _, o := range systems {
		if t := tallies[o]; t != nil {
			r := t.run(o.name, o.sys.Describe(), 1)
			out.Runs = append(out.Runs, r)
			e.logf("handoff+%-4s %-17s %6d samples  p50 %.2fms  p99 %.2fms  errors %d",
				e.Cfg.ReleaseDelay, o.name, r.Ops, r.Latency.P50Ms, r.Latency.P99Ms, r.Errors)
		}
		o.close()
	}
	if err != nil {
		return out, err
	}
	return out, ctx.Err()
}

// delayedRound runs one round of one system: handoffs (or Puts) back to
// back until the window closes.
func (e *Env) delayedRound(ctx context.Context, o *opened, name string, p phase, t *tally) {
	win := e.newWindow(p, o.name)
	tl := stats.NewTimeline(win.start, stats.StepFor(p.duration), p.duration)
	h := stats.NewHistogram()
	ctx, cancel := context.WithDeadline(ctx, win.deadline.Add(30*time.Second))
	defer cancel()
	e.Bar.Start(p.label, p.warmup+p.duration, p.maxOps, win.ops.Load)
	defer e.Bar.Done()
	for win.open(time.Now()) && ctx.Err() == nil {
		var d time.Duration
		var end time.Time
		var err error
		if o.name == EtcdPut {
			begin := time.Now()
			_, err = o.clients[0].Acquire(ctx, name, nil)
			end = time.Now()
			d = end.Sub(begin)
		} else {
			d, end, err = e.delayedOnce(ctx, o.clients[0], o.clients[1], name)
		}
		if err != nil {
			if ctx.Err() == nil {
				t.errs.add(err)
				pause(ctx, 5*time.Millisecond)
			}
			continue
		}
		if win.admit(end) {
			h.Record(d)
			tl.Add(end)
		}
	}
	t.close(win, []*stats.Histogram{h}, tl)
}

// delayedOnce makes one handoff from holder to waiter, the release sent
// ReleaseDelay after the waiter's place was confirmed, and returns the
// time from the release being sent to the waiter's grant, and when that
// grant arrived.
func (e *Env) delayedOnce(ctx context.Context, holder, waiter system.Client, name string) (time.Duration, time.Time, error) {
	h, err := holder.Acquire(ctx, name, nil)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("holder acquire: %w", err)
	}
	type grant struct {
		h   system.Held
		at  time.Time
		err error
	}
	queued := make(chan time.Time, 1)
	granted := make(chan grant, 1)
	go func() {
		wh, err := waiter.Acquire(ctx, name, func() { queued <- time.Now() })
		granted <- grant{wh, time.Now(), err}
	}()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var sent time.Time
	select {
	case at := <-queued:
		// The scenario's hold: the release lands ReleaseDelay after the
		// waiter's enqueue was acknowledged.
		if d := time.Until(at.Add(e.Cfg.ReleaseDelay)); d > 0 {
			time.Sleep(d)
		}
		sent = time.Now()
		if err := h.Release(rctx); err != nil {
			g := <-granted
			release(rctx, g.h)
			return 0, time.Time{}, fmt.Errorf("holder release: %w", err)
		}
	case g := <-granted:
		_ = h.Release(rctx)
		release(rctx, g.h)
		return 0, time.Time{}, fmt.Errorf("the waiter's acquire ended before it was queued: %v", g.err)
	}
	g := <-granted
	if g.err != nil {
		return 0, time.Time{}, fmt.Errorf("waiter acquire: %w", g.err)
	}
	d := g.at.Sub(sent)
	if err := g.h.Release(rctx); err != nil {
		return 0, time.Time{}, fmt.Errorf("waiter release: %w", err)
	}
	return d, g.at, nil
}

func release(ctx context.Context, h system.Held) {
	if h != nil {
		_ = h.Release(ctx)
	}
}

// drainSystems are compared in the drain: streaming waiters in the
// gateway, and the same chain of concurrency.Mutex waiters.
var drainSystems = []string{GatewaySession, Mutex}

// Drain is a queue of waiters on one name emptied by releases alone.
type Drain struct {
	// Waiters is the queue's length behind the holder.
	Waiters int        `json:"waiters"`
	Runs    []DrainRun `json:"runs"`
	Notes   []string   `json:"notes,omitempty"`
}

// DrainRun is one system's drains.
type DrainRun struct {
	System   string `json:"system"`
	Describe string `json:"describe"`
	// Seconds holds each drain's time: from the holder's release until the
	// last waiter released, in the order they ran.
	Seconds []float64 `json:"seconds"`
	// MedianS is their median; PerHandoffMs divides it by the waiters.
	MedianS      float64  `json:"median_s"`
	PerHandoffMs float64  `json:"per_handoff_ms"`
	Errors       int64    `json:"errors"`
	ErrorSample  []string `json:"error_sample,omitempty"`
}

// Drain queues DrainWaiters clients (each with a session of its own, and a
// streaming Acquire for the gateway) behind a holder on one name; once
// every waiter's place is confirmed the holder releases, and each waiter
// releases as soon as it is granted. The figure is the time from the
// holder's release to the last waiter's release. Systems take turns, Rounds
// times.
func (e *Env) Drain(ctx context.Context) (*Drain, error) {
	n := e.Cfg.DrainWaiters
	out := &Drain{Waiters: n}
	names, err := e.Bed.HomeNames(ctx, "q", 1)
	if err != nil {
		return nil, err
	}
	systems, notes, err := e.openAll(ctx, drainSystems, n+1)
	if err != nil {
		return nil, err
	}
	out.Notes = notes
	runs := map[*opened]*DrainRun{}
	for _, o := range systems {
		runs[o] = &DrainRun{System: o.name, Describe: o.sys.Describe()}
	}
	e.measureIdle(ctx)
	for r := range max(e.Cfg.Rounds, 1) {
		for _, o := range systems {
			if ctx.Err() != nil {
				break
			}
			dr := runs[o]
			e.Bar.Start(fmt.Sprintf("drain %s ×%d (round %d)", o.name, n, r+1), 0, 0, func() int64 { return 0 })
			d, err := e.drainOnce(ctx, o, names[0])
			e.Bar.Done()
			if err != nil {
				dr.Errors++
				if len(dr.ErrorSample) < 3 {
					dr.ErrorSample = append(dr.ErrorSample, err.Error())
				}
			} else {
				dr.Seconds = append(dr.Seconds, d.Seconds())
			}
			e.settle(ctx)
		}
	}
	for _, o := range systems {
		dr := runs[o]
		if len(dr.Seconds) > 0 {
			s := slices.Clone(dr.Seconds)
			slices.Sort(s)
			dr.MedianS = s[len(s)/2]
			if len(s)%2 == 0 {
				dr.MedianS = (s[len(s)/2-1] + s[len(s)/2]) / 2
			}
			dr.PerHandoffMs = dr.MedianS * 1000 / float64(n)
		}
		out.Runs = append(out.Runs, *dr)
		e.logf("drain       %-17s waiters=%-4d median %.3fs (%.2f ms per handoff) over %d drains, errors %d",
			o.name, n, dr.MedianS, dr.PerHandoffMs, len(dr.Seconds), dr.Errors)
		o.close()
	}
	return out, ctx.Err()
}

// drainOnce runs one drain of o's clients (the first holds) on name.
func (e *Env) drainOnce(ctx context.Context, o *opened, name string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	n := len(o.clients) - 1
	h, err := o.clients[0].Acquire(ctx, name, nil)
	if err != nil {
		return 0, fmt.Errorf("holder: %w", err)
	}
	var (
		queued, done atomic.Int64
		allQueued    = make(chan struct{})
		finished     = make(chan struct{})
		lastEnd      atomic.Int64
		errs         errSamples
		wg           sync.WaitGroup
	)
	for i := 1; i <= n; i++ {
		wg.Go(func() {
			defer func() {
				if done.Add(1) == int64(n) {
					close(finished)
				}
			}()
			wh, err := o.clients[i].Acquire(ctx, name, func() {
				if queued.Add(1) == int64(n) {
					close(allQueued)
				}
			})
			if err != nil {
				errs.add(err)
				return
			}
			if err := wh.Release(ctx); err != nil {
				errs.add(err)
				return
			}
			lastEnd.Store(time.Now().UnixNano())
		})
	}
	select {
	case <-allQueued:
	case <-finished:
	case <-ctx.Done():
	}
	t0 := time.Now()
	rerr := h.Release(context.WithoutCancel(ctx))
	wg.Wait()
	switch {
	case rerr != nil:
		return 0, fmt.Errorf("holder release: %w", rerr)
	case errs.n.Load() > 0:
		return 0, fmt.Errorf("%d waiters failed, e.g. %s", errs.n.Load(), errs.msg[0])
	case queued.Load() != int64(n):
		return 0, fmt.Errorf("only %d of %d waiters were confirmed in line before the release", queued.Load(), n)
	}
	return time.Unix(0, lastEnd.Load()).Sub(t0), nil
}
