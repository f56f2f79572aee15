package clock_test

import (
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/clock"
)

func TestFakeAfterFuncRunsWhenTheClockPassesIt(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(0, 0))
	ran := make(chan struct{})
	clock.AfterFunc(clk, time.Second, func() { close(ran) })
	stopped := clock.AfterFunc(clk, time.Second, func() { t.Error("a stopped AfterFunc ran") })
	if n := clk.Pending(); n != 2 {
		t.Fatalf("%d timers pending; want 2", n)
	}
	if !stopped.Stop() {
		t.Fatal("Stop of a pending AfterFunc = false; want true")
	}
	clk.Advance(999 * time.Millisecond)
	if n := clk.Pending(); n != 1 {
		t.Fatalf("%d timers pending a millisecond early; want 1", n)
	}
	clk.Advance(time.Millisecond)
	<-ran
	if n := clk.Pending(); n != 0 {
		t.Fatalf("%d timers pending after the AfterFunc ran; want 0", n)
	}
}

// notAfterFuncer hides Fake's AfterFunc, so AfterFunc takes its fallback.
type notAfterFuncer struct{ f *clock.Fake }

func (c notAfterFuncer) Now() time.Time                       { return c.f.Now() }
func (c notAfterFuncer) NewTimer(d time.Duration) clock.Timer { return c.f.NewTimer(d) }

func TestAfterFuncFallsBackToATimer(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(0, 0))
	ran := make(chan struct{})
	clock.AfterFunc(notAfterFuncer{clk}, time.Second, func() { close(ran) })
	if s := clock.AfterFunc(notAfterFuncer{clk}, time.Second, func() { t.Error("a stopped AfterFunc ran") }); !s.Stop() {
		t.Fatal("Stop = false; want true")
	}
	clk.Advance(time.Second)
	<-ran
}
