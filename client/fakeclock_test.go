package client

import (
	"slices"
	"sync"
	"time"
)

// fakeClock is a manual Clock for the SDK's own tests: time moves only when
// Advance is called. The SDK module keeps its own rather than import the
// server's (internal/clock), so that it requires nothing of the server.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	// made, when set, receives the duration of every timer made, unless
	// it is full.
	made chan time.Duration
}

func newFakeClock(start time.Time) *fakeClock { return &fakeClock{now: start} }

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer that fires when the fake time reaches now+d; a d
// of zero or less fires at once.
func (f *fakeClock) NewTimer(d time.Duration) Timer {
	if f.made != nil {
		select {
		case f.made <- d:
		default:
		}
	}
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

// Advance moves the fake time forward by d and fires due timers in order.
func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	slices.SortStableFunc(f.timers, func(a, b *fakeTimer) int { return a.at.Compare(b.at) })
	keep := f.timers[:0]
	for _, t := range f.timers {
		if t.at.After(f.now) {
			keep = append(keep, t)
			continue
		}
		t.fired = true
		t.c <- f.now
	}
	clear(f.timers[len(keep):])
	f.timers = keep
}

type fakeTimer struct {
	f     *fakeClock
	at    time.Time
	c     chan time.Time
	fired bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	if t.fired {
		return false
	}
	t.f.timers = slices.DeleteFunc(t.f.timers, func(o *fakeTimer) bool { return o == t })
	t.fired = true
	return true
}
