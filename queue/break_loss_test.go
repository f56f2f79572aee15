package queue

import (
	"context"
	"testing"
)

// TestBreakLossWaitForgottenWhenTheNextWaiterLeaves: a holder lost without
// a clean end keeps the name from everyone for its TTL (loss.go). A queue
// holder A, waiters B and C: A's lease ends behind its back, B becomes
// first and starts waiting out A's TTL, and then B gives up (its caller
// went away, its wait timed out). C must still wait out A's belief; it is
// granted at once, because its hub remembers only the last key ahead that
// left (B, a clean give-up) and never looked at the records.
func TestBreakLossWaitForgottenWhenTheNextWaiterLeaves(t *testing.T) {
	for _, two := range []bool{false, true} {
		name := map[bool]string{false: "one gateway", true: "two gateways"}[two]
		t.Run(name, func(t *testing.T) {
			clk := newFakeClock() // never advanced: A's TTL never passes
			e, cli := newEngine(t, func(c *Config) { c.Clock = clk })
			ec := e
			if two {
				other, err := New(cli, e.Config())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(other.Close)
				ec = other
			}
			a := mustAcquire(t, e, req("n"))
			wb, err := e.Enqueue(testCtx(t), req("n"))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(testCtx(t))
			done := make(chan error, 1)
			go func() { _, err := wb.Wait(ctx); done <- err }()
			c := waitingFor(t, ec, req("n"))
			// etcd ends A's lease early: A believes it holds for up to a TTL.
			rev := expireNow(t, cli, a)
			awaitStamped(t, cli, e.keys.delay("n", a.WaiterID), rev)
			notGranted(t, c, "while B waits out A's belief")
			cancel() // B gives up during the wait
			<-done
			notGranted(t, c, "while the lost holder A may still believe it holds (its TTL has not passed)")
		})
	}
}
