package clock_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/clock"
)

var errCause = errors.New("the cause")

func TestWithTimeoutCauseOnFakeClock(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(0, 0))
	ctx, cancel := clock.WithTimeoutCause(context.Background(), clk, time.Second, errCause)
	defer cancel()
	if _, ok := ctx.Deadline(); ok {
		t.Error("a fake-clock timeout reports a wall-clock deadline")
	}
	clk.Advance(999 * time.Millisecond)
	// Advance fires due timers before it returns: the timeout's timer still
	// pending is the proof that it did not fire early (the context itself
	// ends from another goroutine, so its Done alone could not show it).
	if n := clk.Pending(); n != 1 {
		t.Fatalf("%d timers pending a millisecond before the timeout; want the timeout's", n)
	}
	select {
	case <-ctx.Done():
		t.Fatal("the context ended before the fake clock reached its timeout")
	default:
	}
	clk.Advance(time.Millisecond)
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) || context.Cause(ctx) != errCause {
		t.Fatalf("after the timeout Err = %v, Cause = %v; want deadline exceeded, %v", ctx.Err(), context.Cause(ctx), errCause)
	}
}

func TestWithTimeoutCauseCancelledFirst(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(0, 0))
	ctx, cancel := clock.WithTimeoutCause(context.Background(), clk, time.Second, errCause)
	cancel()
	<-ctx.Done()
	clk.Advance(time.Hour)
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("cancelled before its timeout: Err = %v; want canceled", ctx.Err())
	}
}

func TestWithTimeoutCauseOnRealClock(t *testing.T) {
	t.Parallel()
	ctx, cancel := clock.WithTimeoutCause(context.Background(), clock.Real, time.Hour, errCause)
	defer cancel()
	if _, ok := ctx.Deadline(); !ok {
		t.Error("a wall-clock timeout reports no deadline")
	}
}

func TestSleepOnFakeClock(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(0, 0))
	done := make(chan bool)
	go func() { done <- clock.Sleep(context.Background(), clk, time.Second) }()
	for clk.Pending() == 0 {
		runtime.Gosched() // until Sleep's timer is armed
	}
	clk.Advance(time.Second)
	if passed := <-done; !passed {
		t.Fatal("Sleep = false once the clock passed d; want true")
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- clock.Sleep(ctx, clk, time.Second) }()
	for clk.Pending() == 0 {
		runtime.Gosched()
	}
	cancel()
	if passed := <-done; passed {
		t.Fatal("Sleep = true when ctx ended first; want false")
	}
	if n := clk.Pending(); n != 0 {
		t.Fatalf("Pending() = %d after a cancelled Sleep; want 0 (its timer stopped)", n)
	}
}
