package scenario

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasegate/leasegate/loadtest/internal/stats"
	"github.com/leasegate/leasegate/loadtest/internal/system"
	"github.com/leasegate/leasegate/loadtest/internal/testbed"
)

// phase bounds one measured round.
type phase struct {
	label    string
	workers  int
	duration time.Duration
	warmup   time.Duration
	maxOps   int64
}

// errSamples counts errors and keeps the first few distinct messages.
type errSamples struct {
	mu  sync.Mutex
	n   atomic.Int64
	msg []string
}

func (s *errSamples) add(err error) {
	s.n.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.msg) >= 5 {
		return
	}
	m := err.Error()
	for _, x := range s.msg {
		if x == m {
			return
		}
	}
	s.msg = append(s.msg, m)
}

// window is the measured part of a round: from the end of warmup to the
// deadline or the moment the operation limit was reached.
type window struct {
	start, deadline time.Time
	limit           int64
	ops             atomic.Int64
	endNs           atomic.Int64 // set when the limit is reached
	cpu0            atomic.Int64
	etcd0           atomic.Int64 // the etcd process's CPU, where it has one
	extraCPU        func() time.Duration
	cpuTimer        *time.Timer
	prof            *Profiler
	bed             *testbed.Bed

	// etcd's counts at the window's start (set once warmup ends); ok is
	// false when they cannot be read.
	countMu sync.Mutex
	count0  etcdCounts
}

// etcdCounts are etcd's raft entries and lease keepalives so far.
type etcdCounts struct {
	writes, keepalives float64
	ok                 bool
}

func readCounts(b *testbed.Bed) etcdCounts {
	if b == nil {
		return etcdCounts{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	w, err := b.RaftIndex(ctx)
	if err != nil {
		return etcdCounts{}
	}
	k, err := b.Keepalives(ctx)
	if err != nil {
		return etcdCounts{}
	}
	return etcdCounts{writes: float64(w), keepalives: k, ok: true}
}

func (e *Env) newWindow(p phase, sysName string) *window {
	now := time.Now()
	w := &window{start: now.Add(p.warmup), limit: p.maxOps, extraCPU: e.extraCPU(sysName), prof: e.Prof, bed: e.Bed}
	w.deadline = w.start.Add(p.duration)
	w.cpu0.Store(int64(w.cpu()))
	w.cpuTimer = time.AfterFunc(p.warmup, func() {
		c := readCounts(w.bed)
		w.countMu.Lock()
		w.count0 = c
		w.countMu.Unlock()
		w.cpu0.Store(int64(w.cpu()))
		c0, _ := w.etcdCPU()
		w.etcd0.Store(int64(c0))
		w.prof.start(p.label)
	})
	return w
}

func (w *window) cpu() time.Duration { return testbed.CPU() + w.extraCPU() }

// etcdCPU is the bed's etcd process's CPU so far; ok is false when etcd
// is not a process of the bed's own.
func (w *window) etcdCPU() (cpu time.Duration, ok bool) {
	if w.bed == nil {
		return 0, false
	}
	return w.bed.EtcdCPU()
}

// admit reports whether an operation that ended at end counts, and counts
// it: every operation completed inside the window does, so throughput is
// completions per second of window, whenever each began.
func (w *window) admit(end time.Time) bool {
	if end.Before(w.start) || end.After(w.deadline) {
		return false
	}
	n := w.ops.Add(1)
	if n > w.limit {
		return false
	}
	if n == w.limit {
		w.endNs.Store(end.UnixNano())
	}
	return true
}

// open reports whether workers should start another operation.
func (w *window) open(now time.Time) bool {
	return now.Before(w.deadline) && w.ops.Load() < w.limit
}

// length is the measured window's length.
func (w *window) length() time.Duration {
	end := w.deadline
	if ns := w.endNs.Load(); ns != 0 {
		end = time.Unix(0, ns)
	}
	return max(end.Sub(w.start), time.Millisecond)
}

// tally accumulates one system's measurements over its rounds.
type tally struct {
	hist    *stats.Histogram
	errs    *errSamples
	seconds float64
	busy    time.Duration // CPU in the windows
	// etcdBusy is the etcd process's CPU in the windows, when the bed has
	// one (etcdSeen).
	etcdBusy time.Duration
	etcdSeen bool
	timeline []stats.RatePoint
	// etcd's raft entries and keepalives in the windows, while every
	// window could read them (countsOK), over countedOps operations.
	writes, keepalives float64
	countedOps         int64
	countsOK           bool
}

func newTally() *tally {
	return &tally{hist: stats.NewHistogram(), errs: &errSamples{}, countsOK: true}
}

// close adds a finished round: the workers' histograms, its timeline
// (appended after the earlier rounds' on one time axis) and its CPU.
func (t *tally) close(w *window, hs []*stats.Histogram, tl *stats.Timeline) {
	w.cpuTimer.Stop()
	var ops int64
	for _, h := range hs {
		ops += h.Count()
	}
	w.prof.stop(ops)
	t.busy += w.cpu() - time.Duration(w.cpu0.Load())
	if c1, ok := w.etcdCPU(); ok {
		t.etcdBusy += c1 - time.Duration(w.etcd0.Load())
		t.etcdSeen = true
	}
	w.countMu.Lock()
	c0 := w.count0
	w.countMu.Unlock()
	if c1 := readCounts(w.bed); c0.ok && c1.ok && t.countsOK {
		t.writes += c1.writes - c0.writes
		t.keepalives += c1.keepalives - c0.keepalives
		t.countedOps += ops
	} else {
		t.countsOK = false
	}
	for _, h := range hs {
		t.hist.Merge(h)
	}
	off := t.seconds
	for _, p := range tl.Rates(w.length()) {
		t.timeline = append(t.timeline, stats.RatePoint{Sec: off + p.Sec, PerSec: p.PerSec})
	}
	t.seconds += w.length().Seconds()
}

// run turns the tally into a Run.
func (t *tally) run(name, describe string, workers int) Run {
	r := Run{System: name, Describe: describe, Workers: workers, Seconds: t.seconds}
	r.Ops = t.hist.Count()
	if t.seconds > 0 {
		r.PerSec = float64(r.Ops) / t.seconds
	}
	r.Latency, r.Spectrum, r.Timeline = t.hist.Summary(), t.hist.Spectrum(), t.timeline
	r.Errors, r.ErrorSample = t.errs.n.Load(), t.errs.msg
	if r.Ops > 0 {
		v := float64(t.busy.Microseconds()) / float64(r.Ops)
		r.CPUPerOpUs = &v
	}
	if t.etcdSeen && r.Ops > 0 {
		v := float64(t.etcdBusy.Microseconds()) / float64(r.Ops)
		r.EtcdCPUPerOpUs = &v
	}
	if t.countsOK && t.countedOps > 0 {
		w, k := t.writes/float64(t.countedOps), t.keepalives/float64(t.countedOps)
		r.EtcdWritesPerOp, r.KeepalivesPerOp = &w, &k
	}
	return r
}

// closedLoop runs one round: p.workers workers, each repeating op back to
// back until the window closes, recording each operation's latency.
func (e *Env) closedLoop(ctx context.Context, p phase, sysName string, t *tally, op func(ctx context.Context, w int) error) {
	win := e.newWindow(p, sysName)
	tl := stats.NewTimeline(win.start, stats.StepFor(p.duration), p.duration)
	hs := make([]*stats.Histogram, p.workers)
	ctx, cancel := context.WithDeadline(ctx, win.deadline.Add(10*time.Second))
	defer cancel()
	e.Bar.Start(p.label, p.warmup+p.duration, p.maxOps, func() int64 { return min(win.ops.Load(), p.maxOps) })
	defer e.Bar.Done()
	var wg sync.WaitGroup
	for w := range p.workers {
		hs[w] = stats.NewHistogram()
		wg.Go(func() {
			for {
				begin := time.Now()
				if !win.open(begin) || ctx.Err() != nil {
					return
				}
				err := op(ctx, w)
				end := time.Now()
				if err != nil {
					if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
						return
					}
					if !end.Before(win.start) && end.Before(win.deadline) {
						t.errs.add(err)
					}
					pause(ctx, 5*time.Millisecond) // no hot loop on a failing system
					continue
				}
				if win.admit(end) {
					hs[w].Record(end.Sub(begin))
					tl.Add(end)
				}
			}
		})
	}
	wg.Wait()
	t.close(win, hs, tl)
}

// opened is a system with its clients, ready for rounds.
type opened struct {
	name    string
	sys     system.System
	clients []system.Client
}

func (o *opened) close() {
	closeClients(o.clients)
	_ = o.sys.Close()
}

// openAll opens each named system with n clients; skipped systems come
// back as notes.
func (e *Env) openAll(ctx context.Context, names []string, n int) ([]*opened, []string, error) {
	var out []*opened
	var notes []string
	for _, name := range names {
		sys, note, err := e.openSystem(name, n)
		if err == nil && sys == nil {
			notes = append(notes, note)
			continue
		}
		if err == nil {
			var cs []system.Client
			if cs, err = openClients(ctx, sys, n); err == nil {
				out = append(out, &opened{name: name, sys: sys, clients: cs})
				continue
			}
			_ = sys.Close()
		}
		for _, o := range out {
			o.close()
		}
		return nil, nil, err
	}
	return out, notes, nil
}

// rounds measures every system for Duration in Rounds interleaved slices
// (A B C A B C …), so that the machine's slow moments fall on all of them
// alike rather than on whichever ran then. Each slice has its own short
// warmup; the first has the full one.
func (e *Env) rounds(ctx context.Context, systems []*opened, total time.Duration, measure func(ctx context.Context, o *opened, p phase) error) error {
	e.measureIdle(ctx)
	n := max(e.Cfg.Rounds, 1)
	slice := max(total/time.Duration(n), 100*time.Millisecond)
	for r := range n {
		for _, o := range systems {
			if err := ctx.Err(); err != nil {
				return err
			}
			warm := min(e.Cfg.Warmup, 200*time.Millisecond)
			if r == 0 {
				warm = e.Cfg.Warmup
			}
			p := phase{warmup: warm, duration: slice, maxOps: max(e.Cfg.MaxRequests/int64(n), 1)}
			if err := measure(ctx, o, p); err != nil {
				return err
			}
			e.settle(ctx)
		}
	}
	return nil
}

// measureIdle measures the CPU this process burns while every opened system
// sits idle (etcd's ticks, session keepalives, the tail of opening the
// clients), over Config.IdleSample, and the etcd process's where the bed
// has one. CPU per operation includes this background; at low operation
// rates it is most of it.
func (e *Env) measureIdle(ctx context.Context) {
	etcd0, etcdOK := e.etcdCPU()
	c0, t0 := testbed.CPU(), time.Now()
	pause(ctx, max(e.Cfg.IdleSample, time.Millisecond))
	secs := time.Since(t0).Seconds()
	e.IdleCPU = append(e.IdleCPU, (testbed.CPU()-c0).Seconds()/secs)
	if etcd1, ok := e.etcdCPU(); ok && etcdOK {
		e.EtcdIdleCPU = append(e.EtcdIdleCPU, (etcd1-etcd0).Seconds()/secs)
	}
}

func (e *Env) etcdCPU() (time.Duration, bool) {
	if e.Bed == nil {
		return 0, false
	}
	return e.Bed.EtcdCPU()
}

// idleNote describes the last idle measurement, for a scenario's notes.
func (e *Env) idleNote(what string) string {
	if len(e.IdleCPU) == 0 {
		return ""
	}
	n := fmt.Sprintf("%s: with every system open and idle the process burnt %.2f CPU-s/s (etcd's ticks, session keepalives); CPU µs/op includes it.", what, e.IdleCPU[len(e.IdleCPU)-1])
	if len(e.EtcdIdleCPU) > 0 {
		n += fmt.Sprintf(" The etcd process burnt %.3f CPU-s/s meanwhile; etcd CPU µs/op includes that.", e.EtcdIdleCPU[len(e.EtcdIdleCPU)-1])
	}
	return n
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
