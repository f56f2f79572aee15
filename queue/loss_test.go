package queue

import (
	"context"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// waitingFor enqueues r on e and waits for its grant in the background.
func waitingFor(t *testing.T, e *Engine, r AcquireRequest) <-chan Grant {
	t.Helper()
	w, err := e.Enqueue(testCtx(t), r)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan Grant, 1)
	ctx := testCtx(t)
	go func() {
		g, err := w.Wait(ctx)
		if err != nil && ctx.Err() == nil {
			t.Error(err)
		}
		out <- g
	}()
	return out
}

// notGranted fails if a grant arrives within a moment: a hub that grants
// does so within milliseconds of the event it acts on.
func notGranted(t *testing.T, ch <-chan Grant, what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("granted %s", what)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestLossWaitsOutTheLostHoldersBelief: a holder whose lease etcd ends
// before its release (an expiry, or a revocation no holder asked for) may
// still believe it holds for up to its TTL; the waiter behind it waits that
// TTL from the moment the loss was seen, as every gateway's Describe says,
// and is granted then.
func TestLossWaitsOutTheLostHoldersBelief(t *testing.T) {
	clk := newFakeClock()
	e, cli := newEngine(t, func(c *Config) { c.Clock = clk })
	h := mustAcquire(t, e, req("l"))
	next := waitingFor(t, e, req("l"))
	rev := expireNow(t, cli, h)
	stamp := awaitStamped(t, cli, e.keys.delay("l", h.WaiterID), rev)
	notGranted(t, next, "while the lost holder may still believe")
	other, err := New(cli, e.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	// Another engine adds the clock-skew margin to a stamp it did not make.
	if d, err := other.Describe(testCtx(t), "l"); err != nil || !d.DelayUntil.Equal(stamp.Add(h.TTL+e.cfg.MaxClockSkew)) {
		t.Fatalf("Describe during the wait = %+v, %v; want delay until %s", d, err, stamp.Add(h.TTL+e.cfg.MaxClockSkew))
	}
	clk.Advance(h.TTL - time.Millisecond)
	notGranted(t, next, "before the lost holder's TTL passed")
	clk.Advance(time.Millisecond)
	mustRelease(t, e, <-next)
}

// TestLossWaitOfASession: a session's lock lost with its session's lease
// waits the session's TTL; a session closed by its owner frees its locks at
// once.
func TestLossWaitOfASession(t *testing.T) {
	clk := newFakeClock()
	e, cli := newEngine(t, func(c *Config) { c.Clock = clk })
	for _, closed := range []bool{false, true} {
		s := mustSession(t, e)
		r := req("s")
		r.Session, r.SessionSecret = s.Lease, s.Secret
		h := mustAcquire(t, e, r)
		next := waitingFor(t, e, req("s"))
		if closed {
			if err := e.CloseSession(testCtx(t), s.Lease, s.Secret); err != nil {
				t.Fatal(err)
			}
			mustRelease(t, e, <-next)
			continue
		}
		resp, err := cli.Revoke(testCtx(t), s.Lease)
		if err != nil {
			t.Fatal(err)
		}
		awaitStamped(t, cli, e.keys.delay("s", h.WaiterID), resp.Header.Revision)
		notGranted(t, next, "while the lost session's holder may still believe")
		clk.Advance(s.TTL)
		mustRelease(t, e, <-next)
	}
}

// TestCleanEndsFreeAtOnce: a release, a force-release and an undelivered
// grant given up hand the name to the next waiter at once; so does any
// loss when losses do not wait.
func TestCleanEndsFreeAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name     string
		lossWait bool
		end      func(*testing.T, *Engine, *clientv3.Client, Grant)
	}{
		{"release", true, func(t *testing.T, e *Engine, _ *clientv3.Client, g Grant) { mustRelease(t, e, g) }},
		{"force-release", true, func(t *testing.T, e *Engine, _ *clientv3.Client, g Grant) {
			if _, err := e.ForceRelease(testCtx(t), ForceReleaseRequest{Name: g.Name, Reason: "r", Actor: "op", Token: g.Token()}); err != nil {
				t.Fatal(err)
			}
		}},
		{"give-up", true, func(t *testing.T, e *Engine, _ *clientv3.Client, g Grant) { e.Abandon(context.Background(), g) }},
		{"expiry without loss waits", false, func(t *testing.T, _ *Engine, cli *clientv3.Client, g Grant) { expireNow(t, cli, g) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock() // never advanced: nothing may wait on it
			e, cli := newEngine(t, func(c *Config) { c.Clock, c.LossWait = clk, tc.lossWait })
			h := mustAcquire(t, e, req("c"))
			next := waitingFor(t, e, req("c"))
			tc.end(t, e, cli, h)
			select {
			case g := <-next:
				mustRelease(t, e, g)
			case <-time.After(10 * time.Second):
				t.Fatal("the waiter was not granted after a clean end")
			}
		})
	}
}

// TestLossWaitBindsEveryCaller: a loss a waiter's gateway saw and recorded
// holds back a TryAcquire on another gateway after that waiter gave up, for
// the rest of the wait, and lets it in after.
func TestLossWaitBindsEveryCaller(t *testing.T) {
	clk := newFakeClock()
	e, cli := newEngine(t, func(c *Config) { c.Clock = clk })
	h := mustAcquire(t, e, req("b"))
	w, err := e.Enqueue(testCtx(t), req("b"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() { _, err := w.Wait(ctx); done <- err }()
	stamp := awaitStamped(t, cli, e.keys.delay("b", h.WaiterID), expireNow(t, cli, h))
	cancel() // the waiter gives up during the wait
	<-done
	settle(e)
	other, err := New(cli, e.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	res, err := other.TryAcquire(testCtx(t), req("b"))
	end := stamp.Add(h.TTL + e.cfg.MaxClockSkew) // the stamp is e's, read on other
	if err != nil || res.Acquired || !res.DelayedUntil.Equal(end) {
		t.Fatalf("TryAcquire on another gateway during the wait = %+v, %v; want refused until %s", res, err, end)
	}
	settle(other)
	clk.Advance(h.TTL)
	if res, err := other.TryAcquire(testCtx(t), req("b")); err != nil || res.Acquired || !res.DelayedUntil.Equal(end) {
		t.Fatalf("TryAcquire on another gateway within the skew margin = %+v, %v; want refused until %s", res, err, end)
	}
	settle(other)
	clk.Advance(e.cfg.MaxClockSkew)
	if res, err := other.TryAcquire(testCtx(t), req("b")); err != nil || !res.Acquired {
		t.Fatalf("TryAcquire after the wait = %+v, %v; want acquired", res, err)
	} else {
		mustRelease(t, other, res.Grant)
	}
}

// TestSweepStampsAndClearsOrphanedRecords: a record whose key went without
// a clean end, on a name nobody acquires again, is stamped by the sweep
// (its first sighting) and deleted by a later sweep once its wait is over;
// a live holder's record is left alone.
func TestSweepStampsAndClearsOrphanedRecords(t *testing.T) {
	clk := newFakeClock()
	e, cli := newEngine(t, func(c *Config) { c.Clock = clk })
	lost := mustAcquire(t, e, req("gone"))
	live := mustAcquire(t, e, req("held"))
	expireNow(t, cli, lost)
	records := func() map[string]string {
		resp, err := cli.Get(testCtx(t), e.cfg.Prefix+"/delays/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, kv := range resp.Kvs {
			out[string(kv.Key)] = string(kv.Value)
		}
		return out
	}
	gone, held := e.keys.holderRecord("gone", lost.WaiterID), e.keys.holderRecord("held", live.WaiterID)
	if r := records(); r[gone] == "" || r[held] == "" {
		t.Fatalf("records before the sweep = %v; want both holders'", r)
	}
	e.sweepOnce(testCtx(t), 0)
	r := records()
	if rec, ok := parseDelay(&mvccpb.KeyValue{Key: []byte(gone), Value: []byte(r[gone])}); !ok || !rec.expired.Equal(clk.Now().Truncate(time.Millisecond)) || rec.d != lost.TTL {
		t.Fatalf("the orphaned record after a sweep = %q; want it stamped now with the lost holder's TTL", r[gone])
	}
	clk.Advance(lost.TTL)
	e.sweepOnce(testCtx(t), 0)
	r = records()
	if _, ok := r[gone]; ok {
		t.Fatalf("the orphaned record outlived its wait and a sweep: %q", r[gone])
	}
	if r[held] == "" {
		t.Fatal("the sweep deleted a live holder's record")
	}
	mustRelease(t, e, live)
}
