//go:build linux

package chaos

import (
	"fmt"
	"syscall"
	"time"
	"unsafe"
)

// monotonic reads CLOCK_MONOTONIC. Every process on the machine reads the
// same clock, and Go's own monotonic readings (time.Now) come from it on
// Linux, so a reading taken in a child process can be placed on this
// process's timeline exactly, give or take the reading's own cost.
func monotonic() int64 {
	var ts syscall.Timespec
	_, _, _ = syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1 /* CLOCK_MONOTONIC */, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

// monoClock maps CLOCK_MONOTONIC readings onto this process's time.Time
// values (which carry Go's monotonic reading, so comparisons with them use
// the same clock).
type monoClock struct {
	ref     time.Time
	refMono int64
	// err bounds the mapping's error: half the narrowest bracket of
	// time.Now calls around a reading.
	err time.Duration
}

func newMonoClock() monoClock {
	var best monoClock
	for i := range 16 {
		a := time.Now()
		m := monotonic()
		b := time.Now()
		if w := b.Sub(a); i == 0 || w/2 < best.err {
			best = monoClock{ref: a.Add(w / 2), refMono: m, err: w / 2}
		}
	}
	return best
}

// at places a CLOCK_MONOTONIC reading on this process's timeline.
func (c monoClock) at(mono int64) time.Time { return c.ref.Add(time.Duration(mono - c.refMono)) }

// runMono is the mono role: it prints one CLOCK_MONOTONIC reading, for
// TestMonoClock.
func runMono() error {
	_, err := fmt.Println(monotonic())
	return err
}
