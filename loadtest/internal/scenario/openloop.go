package scenario

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasegate/leasegate/loadtest/internal/stats"
)

// openLoopSystems are compared in the open-loop scenario.
var openLoopSystems = []string{Direct, GatewaySession, Mutex, RedsyncAlways, RedsyncEverysec}

// drainGrace is how long arrivals still queued or in flight at the end of
// an open-loop round are given to finish.
const drainGrace = 5 * time.Second

// OpenLoop offers uncontested cycles at a fixed rate, whatever the system's
// latency, to a pool of Workers clients, and measures each cycle from its
// intended start: a slow response delays no later arrival, so the tail is
// not hidden (no coordinated omission).
func (e *Env) OpenLoop(ctx context.Context) (*OpenLoop, error) {
	out := &OpenLoop{}
	names, err := e.Bed.HomeNames(ctx, "o", e.Cfg.Workers)
	if err != nil {
		return nil, err
	}
	systems, notes, err := e.openAll(ctx, openLoopSystems, e.Cfg.Workers)
	if err != nil {
		return nil, err
	}
	out.Notes = notes
	acc := map[*opened]*openTally{}
	err = e.rounds(ctx, systems, e.Cfg.Duration, func(ctx context.Context, o *opened, p phase) error {
		t := acc[o]
		if t == nil {
			t = &openTally{tally: newTally(), svc: stats.NewHistogram()}
			acc[o] = t
		}
		p.label = fmt.Sprintf("openloop %s %.0f/s", o.name, e.Cfg.Rate)
		e.openLoop(ctx, o, names, p, t)
		return nil
	})
	if n := e.idleNote("open loop"); n != "" {
		out.Notes = append(out.Notes, n)
	}
	for _, o := range systems {
		if t := acc[o]; t != nil {
			r := OpenRun{Run: t.run(o.name, o.sys.Describe(), e.Cfg.Workers), Rate: e.Cfg.Rate}
			r.Service = t.svc.Summary()
			r.Delayed, r.Unfinished = t.delayed.Load(), t.unfinished.Load()
			out.Runs = append(out.Runs, r)
			e.logf("open-loop   %-17s rate=%-5.0f %8.0f cycles/s  p50 %.2fms  p99 %.2fms  p99.9 %.2fms  delayed %d  errors %d",
				o.name, r.Rate, r.PerSec, r.Latency.P50Ms, r.Latency.P99Ms, r.Latency.P999Ms, r.Delayed, r.Errors)
		}
		o.close()
	}
	if err != nil {
		return out, err
	}
	return out, ctx.Err()
}

// openTally adds the open loop's own counts to a tally.
type openTally struct {
	*tally
	svc                 *stats.Histogram
	delayed, unfinished atomic.Int64
}

type arrival struct{ intended time.Time }

// openLoop runs one round: arrivals every 1/Rate from the end of warmup's
// start, for warmup + duration, each served by the next free client.
func (e *Env) openLoop(ctx context.Context, o *opened, names []string, p phase, t *openTally) {
	rate := e.Cfg.Rate
	interval := time.Duration(float64(time.Second) / rate)
	total := min(int64((p.warmup+p.duration)/interval), p.maxOps+int64(p.warmup/interval))
	win := e.newWindow(p, o.name)
	start := win.start.Add(-p.warmup)
	tl := stats.NewTimeline(win.start, stats.StepFor(p.duration), p.duration+drainGrace)

	jobs := make(chan arrival, total)
	var (
		served atomic.Int64
		mu     sync.Mutex
		lat    = stats.NewHistogram()
	)
	measured := func(a arrival) bool { return !a.intended.Before(win.start) }
	lateOnly := func(a arrival, end time.Time) {
		t.unfinished.Add(1)
		if measured(a) {
			mu.Lock()
			lat.Record(end.Sub(a.intended))
			mu.Unlock()
		}
	}
	dctx, cancel := context.WithDeadline(ctx, win.deadline.Add(drainGrace))
	defer cancel()
	e.Bar.Start(fmt.Sprintf("open-loop %s @%.0f/s", o.name, rate), p.warmup+p.duration, 0, served.Load)
	defer e.Bar.Done()
	var wg sync.WaitGroup
	for w := range o.clients {
		wg.Go(func() {
			for a := range jobs {
				if dctx.Err() != nil {
					lateOnly(a, time.Now())
					continue
				}
				began := time.Now()
				err := cycle(dctx, o.clients[w], names[w], nil)
				end := time.Now()
				switch {
				case err != nil && dctx.Err() != nil:
					lateOnly(a, end)
				case err != nil:
					if measured(a) {
						t.errs.add(err)
					}
				default:
					served.Add(1)
					if !measured(a) {
						continue
					}
					if began.Sub(a.intended) > time.Millisecond {
						t.delayed.Add(1)
					}
					mu.Lock()
					lat.Record(end.Sub(a.intended))
					t.svc.Record(end.Sub(began))
					mu.Unlock()
					tl.Add(end)
				}
			}
		})
	}
	// The schedule: arrival i is due at start + i×interval and is handed
	// over then, or at once if the process fell behind; never skipped.
	for i := range total {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			pause(ctx, d)
		}
		if ctx.Err() != nil {
			break
		}
		jobs <- arrival{intended: due}
	}
	close(jobs)
	wg.Wait()
	t.close(win, []*stats.Histogram{lat}, tl)
}
