package gateway_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/leasegate/leasegate/internal/gwtest"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// A gateway shut down with no time to spare (its context already done, so
// its connections are closed at once) still ends every open wait as a
// detach: the waiter's key stays, and its retry on another gateway under
// the same request id resumes its place, ahead of a waiter that queued
// after it. Closing the connections must never reach a wait before the
// detach does, which would take its key out of the queue.
func TestShutdownWithNoGraceKeepsQueuePlaces(t *testing.T) {
	t.Parallel()
	prefix := gwtest.NewPrefix()
	stay := gwtest.Start(t, shared, gwtest.Prefix(prefix))
	for i := range 8 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			name := fmt.Sprintf("kept-place-%d", i)
			leaving, err := gwtest.Launch(shared, gwtest.Prefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			defer leaving.Stop()
			held := tryAcquire(t, stay, name)
			first := &v1.AcquireRequest{Name: name, TtlMs: 30000, WaitTimeoutMs: 30000, ClientId: "first", RequestId: "first-" + name}
			w1 := waitWith(t, leaving.Client, first)
			if p := <-w1.positions; p != 1 {
				t.Fatalf("first waiter's position %d; want 1", p)
			}
			w2 := startWaiter(t, stay, &v1.AcquireRequest{Name: name, TtlMs: 30000, WaitTimeoutMs: 30000, ClientId: "second"})
			if p := <-w2.positions; p != 2 {
				t.Fatalf("second waiter's position %d; want 2", p)
			}
			done, cancel := context.WithCancel(context.Background())
			cancel()
			_ = leaving.Server.Shutdown(done)
			// With no grace the stream may be cut before its last message:
			// any end but a grant.
			if err := <-w1.err; err == nil {
				t.Fatal("the first waiter's stream ended cleanly at its gateway's shutdown; want an error to retry")
			}
			again := waitWith(t, stay.Client, first)
			if p := <-again.positions; p != 1 {
				t.Fatalf("the first waiter's retry elsewhere is at position %d; want 1, its place kept", p)
			}
			release(t, stay, held)
			g := <-again.granted
			if g == nil {
				t.Fatalf("the first waiter's retry ended without a grant: %v", <-again.err)
			}
			release(t, stay, g)
			if g2 := <-w2.granted; g2 == nil {
				t.Fatalf("the second waiter ended without a grant: %v", <-w2.err)
			} else {
				release(t, stay, g2)
			}
		})
	}
}
