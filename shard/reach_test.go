package shard

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/connectivity"

	"github.com/leasegate/leasegate/internal/clock"
)

// fakeConn is a client connection whose state the test sets. It stands in
// for the gRPC connection only: what the Reach does with the state is
// what is tested, and the gateway's tests run it over real etcd.
type fakeConn struct {
	mu      sync.Mutex
	st      connectivity.State
	changed chan struct{}
	resets  int
}

func newFakeConn(st connectivity.State) *fakeConn {
	return &fakeConn{st: st, changed: make(chan struct{})}
}

func (c *fakeConn) set(st connectivity.State) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.st = st
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *fakeConn) GetState() connectivity.State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st
}

func (c *fakeConn) WaitForStateChange(ctx context.Context, source connectivity.State) bool {
	for {
		c.mu.Lock()
		st, ch := c.st, c.changed
		c.mu.Unlock()
		if st != source {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

func (c *fakeConn) Connect() {}

func (c *fakeConn) ResetConnectBackoff() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.resets++
}

// eventually waits, at most 5 s, for cond to hold.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func wantUnavailable(t *testing.T, what string, err error, words string) {
	t.Helper()
	if !errors.Is(err, ErrShardUnavailable) || !strings.Contains(err.Error(), `"c1"`) || !strings.Contains(err.Error(), words) {
		t.Fatalf("%s = %v; want ErrShardUnavailable naming cluster \"c1\" and saying %q", what, err, words)
	}
}

const reachTimeout = time.Second

func newTestReach(t *testing.T, conn *fakeConn, probe func(context.Context) error) (*Reach, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	r := NewReach("c1", conn, ReachConfig{ConnectTimeout: reachTimeout, Clock: clk, Probe: probe})
	t.Cleanup(r.Close)
	return r, clk
}

// A call on a cluster without a connection waits for one only until the
// connection has been down for ConnectTimeout, then fails naming the
// cluster, and every later call fails at once, without calling fn, until
// the connection is back. Reconnect resets the backoff and waits a whole
// ConnectTimeout.
func TestReachBoundsTheWaitForAConnection(t *testing.T) {
	conn := newFakeConn(connectivity.Ready)
	r, clk := newTestReach(t, conn, nil)
	eventually(t, "ready", r.Ready)
	if err := r.Call(context.Background(), func(context.Context) error { return nil }); err != nil {
		t.Fatalf("Call with the connection ready = %v", err)
	}
	conn.set(connectivity.TransientFailure)
	eventually(t, "down", func() bool { return !r.Ready() })

	// A call begun while down waits, and is let through when it is back.
	done := make(chan error, 1)
	go func() { done <- r.Call(context.Background(), func(context.Context) error { return nil }) }()
	eventually(t, "the call waiting", func() bool { return clk.Pending() >= 2 }) // the loss timer and the call's
	clk.Advance(reachTimeout / 2)
	conn.set(connectivity.Ready)
	if err := <-done; err != nil {
		t.Fatalf("Call let through when the connection came back = %v", err)
	}

	// Down for good: the waiting call fails at ConnectTimeout after the
	// connection went down, and later calls at once.
	conn.set(connectivity.TransientFailure)
	eventually(t, "down", func() bool { return !r.Ready() })
	go func() {
		done <- r.Call(context.Background(), func(context.Context) error { t.Error("fn called without a connection"); return nil })
	}()
	eventually(t, "the call waiting", func() bool { return clk.Pending() >= 2 })
	clk.Advance(reachTimeout)
	wantUnavailable(t, "Call without a connection", <-done, "no connection to etcd")
	called := false
	err := r.Call(context.Background(), func(context.Context) error { called = true; return nil })
	wantUnavailable(t, "Call long after the connection went down", err, "refuse or drop")
	if called {
		t.Fatal("fn was called without a connection")
	}

	// Reconnect: backoff reset, the whole timeout waited.
	before := func() int { conn.mu.Lock(); defer conn.mu.Unlock(); return conn.resets }()
	go func() { done <- r.Reconnect(context.Background()) }()
	eventually(t, "the reconnect waiting", func() bool { return clk.Pending() >= 1 })
	if after := func() int { conn.mu.Lock(); defer conn.mu.Unlock(); return conn.resets }(); after <= before {
		t.Error("Reconnect did not reset the connection's backoff")
	}
	clk.Advance(reachTimeout - time.Millisecond)
	conn.set(connectivity.Ready)
	if err := <-done; err != nil {
		t.Fatalf("Reconnect with the connection back before its timeout = %v", err)
	}
}

// A running call is ended when its connection goes down and stays down for
// ConnectTimeout, and only then: a connection back in time leaves it be.
func TestReachEndsCallsOnALostConnection(t *testing.T) {
	conn := newFakeConn(connectivity.Ready)
	r, clk := newTestReach(t, conn, nil)
	eventually(t, "ready", r.Ready)
	running := func() (chan struct{}, chan error) {
		started, done := make(chan struct{}), make(chan error, 1)
		go func() {
			done <- r.Call(context.Background(), func(ctx context.Context) error {
				close(started)
				<-ctx.Done()
				return ctx.Err()
			})
		}()
		<-started
		return started, done
	}

	_, done := running()
	conn.set(connectivity.Connecting)
	eventually(t, "down", func() bool { return !r.Ready() })
	clk.Advance(reachTimeout / 2)
	conn.set(connectivity.Ready)
	eventually(t, "up", r.Ready)
	clk.Advance(reachTimeout)
	select {
	case err := <-done:
		t.Fatalf("a call whose connection came back in time ended: %v", err)
	case <-time.After(50 * time.Millisecond):
	}

	conn.set(connectivity.TransientFailure)
	eventually(t, "down", func() bool { return !r.Ready() })
	clk.Advance(reachTimeout)
	wantUnavailable(t, "a call whose connection did not come back", <-done, "lost and not regained")
}

// A connection that is up but silent: calls unanswered for half of
// ConnectTimeout make the Reach probe; a probe unanswered for the other
// half ends them and fails new ones at once; a probe answered makes the
// cluster usable again.
func TestReachGivesUpOnASilentConnection(t *testing.T) {
	var mu sync.Mutex
	answer := false
	probes := 0
	probe := func(ctx context.Context) error {
		mu.Lock()
		probes++
		ok := answer
		mu.Unlock()
		if ok {
			return nil
		}
		<-ctx.Done()
		return ctx.Err()
	}
	conn := newFakeConn(connectivity.Ready)
	r, clk := newTestReach(t, conn, probe)
	eventually(t, "ready", r.Ready)

	done := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		done <- r.Call(context.Background(), func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		})
	}()
	<-started
	// Tick the watcher until it probes and the probe times out.
	for i := 0; ; i++ {
		select {
		case err := <-done:
			wantUnavailable(t, "a call on a silent connection", err, "answered neither calls nor a probe")
			if r.Ready() {
				t.Fatal("a silent cluster is still usable")
			}
			goto silent
		default:
		}
		if i > 1000 {
			t.Fatal("the silent connection's call was never ended")
		}
		clk.Advance(reachTimeout / 20)
		time.Sleep(time.Millisecond) // let the watcher take its tick
	}
silent:
	err := r.Call(context.Background(), func(context.Context) error { t.Error("fn called on a silent cluster"); return nil })
	wantUnavailable(t, "a call on a cluster found silent", err, "has not answered")

	mu.Lock()
	answer = true
	mu.Unlock()
	for i := 0; !r.Ready(); i++ {
		if i > 1000 {
			t.Fatal("an answered probe did not make the cluster usable")
		}
		clk.Advance(reachTimeout / 10)
		time.Sleep(time.Millisecond)
	}
	if err := r.Call(context.Background(), func(context.Context) error { return nil }); err != nil {
		t.Fatalf("Call once the probe was answered = %v", err)
	}
}

// Calls that answer, however slowly, are never cut short: a probe the
// member answers clears the suspicion.
func TestReachLeavesASlowClusterBe(t *testing.T) {
	conn := newFakeConn(connectivity.Ready)
	r, clk := newTestReach(t, conn, func(context.Context) error { return nil })
	eventually(t, "ready", r.Ready)
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- r.Call(context.Background(), func(ctx context.Context) error {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	for range 100 { // ten timeouts of silence from the call, answered probes
		clk.Advance(reachTimeout / 10)
		time.Sleep(time.Millisecond)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("a slow call on a cluster that answers probes = %v", err)
	}
}
