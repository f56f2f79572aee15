// Package clock lets lease, deadline and backoff logic take time as a
// dependency, so tests drive it without sleeping.
package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock tells the time and makes timers.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer made by a Clock.
type Timer interface {
	// C delivers the fire time once.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did.
	Stop() bool
}

// AfterFuncer is a Clock that runs a function after a duration with no
// goroutine waiting for it meanwhile, as time.AfterFunc does. Real and Fake
// are AfterFuncers.
type AfterFuncer interface {
	// AfterFunc runs f on its own goroutine once d has passed. The
	// returned Timer's C is nil; Stop reports whether it stopped f from
	// running.
	AfterFunc(d time.Duration, f func()) Timer
}

// AfterFunc runs f on its own goroutine once c has moved d past now. On a
// clock that is not an AfterFuncer it falls back to one goroutine waiting
// on a timer. It never blocks.
func AfterFunc(c Clock, d time.Duration, f func()) Timer {
	if af, ok := c.(AfterFuncer); ok {
		return af.AfterFunc(d, f)
	}
	t := c.NewTimer(d)
	stop := make(chan struct{})
	go func() {
		select {
		case <-t.C():
			f()
		case <-stop:
		}
	}()
	return &fallbackTimer{t: t, stop: stop}
}

type fallbackTimer struct {
	t    Timer
	stop chan struct{}
}

func (t *fallbackTimer) C() <-chan time.Time { return nil }

func (t *fallbackTimer) Stop() bool {
	ok := t.t.Stop()
	if ok {
		close(t.stop)
	}
	return ok
}

// Real is the wall clock.
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// AfterFunc runs f on its own goroutine once d has passed; see AfterFunc.
func (realClock) AfterFunc(d time.Duration, f func()) Timer { return realTimer{time.AfterFunc(d, f)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }

// Fake is a manual clock for tests: time moves only when Advance is called.
// It is safe for concurrent use.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

// NewFake returns a Fake clock set to start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start}
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer that fires when the fake time reaches now+d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, at: f.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- f.now
		t.fired = true
		return t
	}
	f.timers = append(f.timers, t)
	return t
}

// AfterFunc runs f on its own goroutine when the fake time reaches now+d
// (at once, on a goroutine of its own, when d ≤ 0). It counts as pending
// until then.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, at: f.now.Add(d), fn: fn}
	if d <= 0 {
		t.fired = true
		go fn()
		return t
	}
	f.timers = append(f.timers, t)
	return t
}

// Advance moves the fake time forward by d and fires due timers in order.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	sort.Slice(f.timers, func(i, j int) bool { return f.timers[i].at.Before(f.timers[j].at) })
	var keep []*fakeTimer
	for _, t := range f.timers {
		if !t.at.After(f.now) {
			t.fired = true
			if t.fn != nil {
				go t.fn()
			} else {
				t.c <- f.now
			}
			continue
		}
		keep = append(keep, t)
	}
	f.timers = keep
	f.mu.Unlock()
}

// Pending reports how many timers wait to fire.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

type fakeTimer struct {
	f     *Fake
	at    time.Time
	c     chan time.Time // nil for AfterFunc
	fn    func()         // set for AfterFunc
	fired bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	if t.fired {
		return false
	}
	for i, o := range t.f.timers {
		if o == t {
			t.f.timers = append(t.f.timers[:i], t.f.timers[i+1:]...)
			break
		}
	}
	t.fired = true
	return true
}
