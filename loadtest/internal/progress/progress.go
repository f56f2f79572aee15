// Package progress draws a one-line progress bar with rate and ETA on a
// terminal, for load-test runs long enough to wonder about.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// Bar tracks a run made of phases planned in advance. The zero value is not
// usable; a disabled Bar (New with enabled false) does nothing.
type Bar struct {
	w       io.Writer
	enabled bool
	planned time.Duration // sum of every phase's planned length
	spent   time.Duration // planned length of the phases already done

	mu    sync.Mutex
	stop  chan struct{}
	done  chan struct{}
	label string
	begin time.Time
	plan  time.Duration
	limit int64
	count func() int64
}

// IsTerminal reports whether f is a character device (a terminal).
func IsTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// New returns a bar writing to w for a run of the planned length; it draws
// nothing unless enabled.
func New(w io.Writer, enabled bool, planned time.Duration) *Bar {
	return &Bar{w: w, enabled: enabled, planned: planned}
}

// Start begins a phase of planned length plan and at most limit operations
// (0: no limit), whose progress count reports. It redraws four times a
// second until Done.
func (b *Bar) Start(label string, plan time.Duration, limit int64, count func() int64) {
	if !b.enabled {
		return
	}
	b.Done()
	b.mu.Lock()
	b.label, b.begin, b.plan, b.limit, b.count = label, time.Now(), plan, limit, count
	b.stop, b.done = make(chan struct{}), make(chan struct{})
	stop, done := b.stop, b.done
	b.mu.Unlock()
	go func() {
		defer close(done)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				b.draw()
			}
		}
	}()
}

// Done ends the current phase and clears the line.
func (b *Bar) Done() {
	if !b.enabled {
		return
	}
	b.mu.Lock()
	stop, done := b.stop, b.done
	b.stop, b.done = nil, nil
	if stop != nil {
		b.spent += b.plan
	}
	b.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
		fmt.Fprint(b.w, "\r\033[K")
	}
}

func (b *Bar) draw() {
	b.mu.Lock()
	defer b.mu.Unlock()
	fmt.Fprint(b.w, "\r\033[K"+Line(b.label, time.Since(b.begin), b.plan, b.count(), b.limit, b.planned-b.spent))
}

// Line renders one state: the phase label, a 24-cell bar of the phase's
// progress (by time, or by count when closer to its limit), the count and
// its rate, and the ETA of the whole run (what is left of this phase plus
// the phases after it, left after this one's plan).
func Line(label string, elapsed, plan time.Duration, n, limit int64, left time.Duration) string {
	frac := 0.0
	if plan > 0 {
		frac = float64(elapsed) / float64(plan)
	}
	if limit > 0 {
		frac = max(frac, float64(n)/float64(limit))
	}
	frac = min(max(frac, 0), 1)
	const cells = 24
	full := int(frac * cells)
	bar := strings.Repeat("=", full) + strings.Repeat(" ", cells-full)
	if full < cells {
		bar = bar[:full] + ">" + bar[full+1:]
	}
	rate := 0.0
	if elapsed > 0 {
		rate = float64(n) / elapsed.Seconds()
	}
	phaseLeft := time.Duration((1 - frac) * float64(plan))
	eta := max(left-plan, 0) + phaseLeft
	return fmt.Sprintf("%-32s [%s] %3.0f%% %9d ops %8.0f/s  ETA %s", label, bar, frac*100, n, rate, eta.Round(time.Second))
}
