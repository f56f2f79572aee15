package queue

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leasegate/leasegate/internal/clock"
)

// poolTTL is req's TTL in whole seconds: the class its leases are pooled in.
const poolTTL = 10

// newPoolEngine returns an engine with a pool of size leases per TTL on a
// fake clock.
func newPoolEngine(t *testing.T, size int) (*Engine, *clientv3.Client, *clock.Fake) {
	t.Helper()
	clk := newFakeClock()
	e, cli := newEngine(t, func(c *Config) { c.Clock, c.LeasePool = clk, size })
	return e, cli, clk
}

// leaseAlive reports whether etcd still knows lease id.
func leaseAlive(t *testing.T, cli *clientv3.Client, id clientv3.LeaseID) bool {
	t.Helper()
	resp, err := cli.TimeToLive(testCtx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	return resp.TTL > 0
}

// settle waits for the engine's background work (pool passes, revocations).
func settle(e *Engine) { e.tasks.Wait() }

func poolCount(e *Engine) (free, held int) { return e.pool.count(poolTTL) }

// pooled reports whether the engine's pool holds lease id, free or in
// quarantine.
func pooled(e *Engine, id clientv3.LeaseID) bool {
	e.pool.mu.Lock()
	defer e.pool.mu.Unlock()
	for _, c := range e.pool.classes {
		for _, l := range slices.Concat(c.free, c.held) {
			if l.id == id {
				return true
			}
		}
	}
	return false
}

// TestPooledLeaseIsReusedAfterQuarantine: a released lock's lease goes back
// to the pool and is handed out again only after the quarantine, with its
// deadline measured from the keepalive sent beside the enqueue.
func TestPooledLeaseIsReusedAfterQuarantine(t *testing.T) {
	e, _, clk := newPoolEngine(t, 2)
	first := mustAcquire(t, e, req("a")) // a miss: granted inline; the pass fills the pool
	settle(e)
	if free, held := poolCount(e); free != 2 || held != 0 {
		t.Fatalf("after the first acquire the pool has %d free, %d held; want 2, 0", free, held)
	}
	mustRelease(t, e, first)
	g := mustAcquire(t, e, req("b"))
	mustRelease(t, e, g)
	if free, held := poolCount(e); free != 1 || held != 2 {
		t.Fatalf("after two releases the pool has %d free, %d held; want 1, 2", free, held)
	}
	released := []clientv3.LeaseID{first.Lease, g.Lease}
	g2 := mustAcquire(t, e, req("c")) // the last free one: the released are in quarantine
	settle(e)
	if slices.Contains(released, g2.Lease) {
		t.Fatalf("a released lease was handed out again before its quarantine ended")
	}
	mustRelease(t, e, g2)

	clk.Advance(poolQuarantine)
	mustRelease(t, e, mustAcquire(t, e, req("d"))) // a miss, and the pass that refreshes the released leases
	settle(e)
	g4 := mustAcquire(t, e, req("e"))
	if !slices.Contains(released, g4.Lease) {
		t.Fatalf("acquire after the quarantine got lease %x; want one of the released %x", int64(g4.Lease), released)
	}
	if want := clk.Now().Add(g4.TTL); !g4.Deadline.Equal(want) {
		t.Errorf("deadline of a pooled lease = %s; want the keepalive's send time plus TTL, %s", g4.Deadline, want)
	}
	if _, err := e.Renew(testCtx(t), g4.Handle, g4.Token()); err != nil {
		t.Errorf("Renew of a lock on a recycled lease: %v", err)
	}
	// The earlier lock's id names the same lease: it renews and releases
	// nothing.
	if _, err := e.Renew(testCtx(t), g.Handle, g.Token()); !errors.Is(err, ErrReleased) {
		t.Errorf("Renew with the released lock id = %v; want ErrReleased", err)
	}
	if ok, err := e.Release(testCtx(t), g.Handle, g.Token()); ok || err != nil {
		t.Errorf("Release with the released lock id = %v, %v; want false, nil", ok, err)
	}
	mustRelease(t, e, g4)
}

// TestRenewInFlightKeepsLeaseOutOfPool: a lease whose renewal is between
// its proof and its keepalive on this engine is revoked at release, not
// pooled, so that keepalive can never land on another lock.
func TestRenewInFlightKeepsLeaseOutOfPool(t *testing.T) {
	e, cli, _ := newPoolEngine(t, 4)
	mustRelease(t, e, mustAcquire(t, e, req("fill")))
	settle(e)
	g := mustAcquire(t, e, req("a"))
	gate := newGate("renew", pointKeep)
	e.hooks = &pointHooks{fn: gate.hook}
	done := make(chan error, 1)
	go func() {
		_, err := e.Renew(withActor(testCtx(t), "renew"), g.Handle, g.Token())
		done <- err
	}()
	within(t, gate.arrived, 10*time.Second, "the renewal's proof")
	mustRelease(t, e, g)
	inPool := pooled(e, g.Lease)
	close(gate.open)
	if err := within(t, done, 10*time.Second, "the renewal"); err != nil && !errors.Is(err, ErrReleased) {
		t.Errorf("renewal racing the release: %v; want nil or ErrReleased", err)
	}
	requireRevoked(t, e, cli, g.Lease, inPool, "a release with a renewal in flight")
}

// filledPool runs one cycle on e, waits for the pool pass it starts, and
// returns the free leases of req's TTL class.
func filledPool(t *testing.T, e *Engine) []clientv3.LeaseID {
	t.Helper()
	mustRelease(t, e, mustAcquire(t, e, req("fill")))
	settle(e)
	e.pool.mu.Lock()
	defer e.pool.mu.Unlock()
	var ids []clientv3.LeaseID
	for _, l := range e.pool.classes[poolTTL].free {
		ids = append(ids, l.id)
	}
	return ids
}

// requireRevoked fails the test unless a released lock's lease id stayed
// out of the pool (inPool, as seen right after the release) and is revoked.
func requireRevoked(t *testing.T, e *Engine, cli *clientv3.Client, id clientv3.LeaseID, inPool bool, what string) {
	t.Helper()
	if inPool {
		t.Fatalf("the lease of %s went back to the pool", what)
	}
	settle(e)
	if leaseAlive(t, cli, id) {
		t.Errorf("the lease of %s is still alive; want it revoked", what)
	}
}

// TestTakenOverKeyLeaseIsRevoked: the lease of a key a retry took over is
// revoked at release, never pooled: the attempt it replaced may still be
// about to renew it.
func TestTakenOverKeyLeaseIsRevoked(t *testing.T) {
	e, cli, _ := newPoolEngine(t, 4)
	mustRelease(t, e, mustAcquire(t, e, req("fill")))
	settle(e)
	r := req("a")
	mustAcquire(t, e, r)
	g := mustAcquire(t, e, r) // the retry takes the key over
	if !g.Resumed {
		t.Fatalf("the retry did not resume the waiter")
	}
	mustRelease(t, e, g)
	requireRevoked(t, e, cli, g.Lease, pooled(e, g.Lease), "a released key that was taken over")
}

// TestPooledLeaseGoneFallsBackToGrant: when the pooled lease is gone (it
// was revoked behind the pool's back), the acquire grants a lease inline
// and succeeds; the caller never sees the miss.
func TestPooledLeaseGoneFallsBackToGrant(t *testing.T) {
	e, cli, _ := newPoolEngine(t, 2)
	pooled := filledPool(t, e)
	for _, id := range pooled {
		if _, err := cli.Revoke(testCtx(t), id); err != nil {
			t.Fatal(err)
		}
	}
	g := mustAcquire(t, e, req("a"))
	if slices.Contains(pooled, g.Lease) {
		t.Fatalf("the grant rides on a revoked pooled lease %x", int64(g.Lease))
	}
	if !leaseAlive(t, cli, g.Lease) {
		t.Fatalf("the grant's lease %x is not alive", int64(g.Lease))
	}
	if n := keyCount(t, e, cli, "a"); n != 1 {
		t.Errorf("%d keys under the name; want 1", n)
	}
	mustRelease(t, e, g)
}

// TestRenewProvesAgainAfterProofWindow: a renewal whose proof is older
// than proofWindow when its keepalive would go out proves again first.
func TestRenewProvesAgainAfterProofWindow(t *testing.T) {
	e, _, clk := newPoolEngine(t, 2)
	g := mustAcquire(t, e, req("a"))
	var proofs, keeps atomic.Int32
	e.hooks = &pointHooks{fn: func(_ context.Context, p string) {
		switch p {
		case pointProve:
			proofs.Add(1)
		case pointKeep:
			if keeps.Add(1) == 1 {
				clk.Advance(proofWindow + time.Millisecond)
			}
		}
	}}
	if _, err := e.Renew(testCtx(t), g.Handle, g.Token()); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if n := proofs.Load(); n != 2 {
		t.Errorf("a renewal whose proof outlived the window proved %d times; want 2", n)
	}
}

// TestClosedEngineRevokesPooledLeases: Close revokes the leases in the
// pool; after it a release revokes.
func TestClosedEngineRevokesPooledLeases(t *testing.T) {
	cli := shared.ClientFor(t)
	cfg := DefaultConfig()
	cfg.Prefix = "/test/closed-pool"
	cfg.LeasePool = 3
	e, err := New(cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ids := filledPool(t, e)
	if len(ids) != 3 {
		t.Fatalf("pool holds %d leases; want 3", len(ids))
	}
	e.Close()
	for _, id := range ids {
		if leaseAlive(t, cli, id) {
			t.Errorf("pooled lease %x outlived Close", int64(id))
		}
	}
}

// TestLeasePoolOff: with LeasePool 0 every acquire grants and every release
// revokes.
func TestLeasePoolOff(t *testing.T) {
	e, cli, _ := newPoolEngine(t, 0)
	g := mustAcquire(t, e, req("a"))
	mustRelease(t, e, g)
	settle(e)
	if leaseAlive(t, cli, g.Lease) {
		t.Errorf("with the pool off a released lease is still alive")
	}
	if free, held := poolCount(e); free+held != 0 {
		t.Errorf("with the pool off it holds %d leases", free+held)
	}
}

// TestLeasePoolConfig: Validate names a pool size out of range.
func TestLeasePoolConfig(t *testing.T) {
	for _, n := range []int{-1, MaxLeasePool + 1} {
		c := DefaultConfig()
		c.LeasePool = n
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "LeasePool") {
			t.Errorf("Validate with LeasePool %d = %v; want a LeasePool error", n, err)
		}
	}
	if got := DefaultConfig().LeasePool; got != 64 {
		t.Errorf("DefaultConfig().LeasePool = %d; want 64", got)
	}
}

// TestStaleRenewOnAnotherGatewayNeverReachesRecycledLease: a renewal on
// gateway B proves a lock, the lock is released on gateway A, and A's pool
// hands the lease to another lock after the quarantine. B's renewal, whose
// proof is now older than proofWindow, proves again, fails, and never sends
// its keepalive for the lease.
func TestStaleRenewOnAnotherGatewayNeverReachesRecycledLease(t *testing.T) {
	a, cli, clk := newPoolEngine(t, 2)
	b := peer(t, a, cli)
	mustRelease(t, a, mustAcquire(t, a, req("fill")))
	settle(a)
	g := mustAcquire(t, a, req("a"))

	gate := newGate("renew", pointKeep)
	var kept atomic.Int32
	b.hooks = &pointHooks{fn: gate.hook, onLease: func(_ context.Context, event string, id clientv3.LeaseID, _ int64) {
		if event == leaseRenewProof && id == g.Lease {
			kept.Add(1)
		}
	}}
	done := make(chan error, 1)
	go func() {
		_, err := b.Renew(withActor(testCtx(t), "renew"), g.Handle, g.Token())
		done <- err
	}()
	within(t, gate.arrived, 10*time.Second, "the renewal's proof")
	mustRelease(t, a, g)
	clk.Advance(2 * poolQuarantine) // past the quarantine, and past the proof window (half of it)
	var next Grant
	for i := 0; i < 4 && next.Lease != g.Lease; i++ {
		next = mustAcquire(t, a, req("b"))
		settle(a)
		if next.Lease != g.Lease {
			mustRelease(t, a, next)
		}
	}
	if next.Lease != g.Lease {
		t.Fatalf("the released lease %x was never handed out again", int64(g.Lease))
	}
	close(gate.open)
	if err := within(t, done, 10*time.Second, "the renewal"); !errors.Is(err, ErrReleased) {
		t.Errorf("stale renewal on the other gateway = %v; want ErrReleased", err)
	}
	if n := kept.Load(); n != 0 {
		t.Errorf("the stale renewal sent %d keepalives for a lease handed to another lock", n)
	}
	mustRelease(t, a, next)
}

// TestSessionLeaseIsNeverPooled: releasing a session's lock leaves the
// session lease alone; it never goes to the pool, where another lock would
// ride on it.
func TestSessionLeaseIsNeverPooled(t *testing.T) {
	e, cli, _ := newPoolEngine(t, 4)
	filledPool(t, e)
	s, err := e.OpenSession(testCtx(t), "c", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r := req("a")
	r.TTL, r.Session, r.SessionSecret = 0, s.Lease, s.Secret
	g := mustAcquire(t, e, r)
	mustRelease(t, e, g)
	if pooled(e, s.Lease) {
		t.Fatalf("a session's lease went to the pool when one of its locks was released")
	}
	// (No settle: the attempt lease's keeper runs until it idles out.)
	if !leaseAlive(t, cli, s.Lease) {
		t.Errorf("the session's lease died with the release of one of its locks")
	}
}

// TestRefusedSemaphoreTryKeepsLeaseOutOfPool: a semaphore's TryAcquire
// puts its key before it can see the name's limit; refused for another
// limit, it takes the key back, and the removal revokes the key's lease in
// the background. That lease must not also go back to the pool, where the
// next lock would take it and lose its key to the revocation.
func TestRefusedSemaphoreTryKeepsLeaseOutOfPool(t *testing.T) {
	e, cli, _ := newPoolEngine(t, 4)
	filledPool(t, e)
	holder := mustAcquire(t, e, semReq("s", 2))
	var taken []clientv3.LeaseID
	e.hooks = &pointHooks{onLease: func(_ context.Context, event string, id clientv3.LeaseID, _ int64) {
		if event == leaseTaken {
			taken = append(taken, id)
		}
	}}
	r := semReq("s", 3)
	if _, err := e.TryAcquire(testCtx(t), r); !errors.Is(err, ErrLimitMismatch) {
		t.Fatalf("TryAcquire(limit 3) on a semaphore of limit 2 = %v; want ErrLimitMismatch", err)
	}
	e.hooks = nil
	if len(taken) != 1 {
		t.Fatalf("the refused TryAcquire took %d pooled leases; want 1", len(taken))
	}
	requireRevoked(t, e, cli, taken[0], pooled(e, taken[0]), "a semaphore TryAcquire refused for its limit")
	// Whatever the pool holds now is alive: the next lock keeps its key.
	g := mustAcquire(t, e, req("after"))
	settle(e)
	if !leaseAlive(t, cli, g.Lease) {
		t.Fatalf("the lock acquired after the refused TryAcquire lost its lease %x", int64(g.Lease))
	}
	mustRelease(t, e, g)
	mustRelease(t, e, holder)
}

// TestPoolTakesAreCounted: every per-lock acquire counts where its lease
// came from — a miss while the pool is empty, a hit once a pass filled it,
// lapsed when the pooled lease was gone by the enqueue — and a session
// acquire, which takes none, counts nothing.
func TestPoolTakesAreCounted(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	clk := newFakeClock()
	e, cli := newEngine(t, func(c *Config) {
		c.Clock, c.LeasePool = clk, 4
		c.Telemetry = Telemetry{MeterProvider: mp, Cluster: "c0"}
	})
	counts := func() map[string]int64 {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(testCtx(t), &rm); err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != "leasegate.lease_pool.takes" {
					continue
				}
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					o, _ := dp.Attributes.Value("outcome")
					out[o.AsString()] += dp.Value
				}
			}
		}
		return out
	}
	mustRelease(t, e, mustAcquire(t, e, req("a"))) // empty pool: a miss, and a pass fills it
	settle(e)
	mustRelease(t, e, mustAcquire(t, e, req("b"))) // a hit
	settle(e)
	e.pool.mu.Lock()
	var free []clientv3.LeaseID
	for _, l := range e.pool.classes[poolTTL].free {
		free = append(free, l.id)
	}
	e.pool.mu.Unlock()
	if len(free) == 0 {
		t.Fatal("the pool has no free lease left to revoke")
	}
	for _, id := range free { // behind the pool's back
		if _, err := cli.Revoke(testCtx(t), id); err != nil {
			t.Fatal(err)
		}
	}
	mustRelease(t, e, mustAcquire(t, e, req("c"))) // the pooled lease is gone: lapsed
	s, err := e.OpenSession(testCtx(t), "c", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r := req("d")
	r.Session, r.SessionSecret = s.Lease, s.Secret
	mustRelease(t, e, mustAcquire(t, e, r)) // a session acquire: nothing
	got := counts()
	if len(got) != 3 || got[poolMiss] != 1 || got[poolHit] != 1 || got[poolLapsed] != 1 {
		t.Errorf("pool takes by outcome = %v; want 1 miss, 1 hit, 1 lapsed", got)
	}
}

// TestWaiterTickSendsNothingAfterGrant: a waiter's renewal tick that began
// before its grant (its caller's heartbeat still running) sends no
// keepalive once the wait has returned the grant: the grant may have been
// released meanwhile and its lease pooled, and a keepalive for it then
// would keep another lock alive.
func TestWaiterTickSendsNothingAfterGrant(t *testing.T) {
	e, _, clk := newPoolEngine(t, 4)
	filledPool(t, e)
	holder := mustAcquire(t, e, req("n"))
	inBeat, letBeat := make(chan struct{}), make(chan struct{})
	var beats atomic.Int32
	r := req("n")
	r.Heartbeat = func(ctx context.Context) error {
		if beats.Add(1) == 1 {
			close(inBeat)
			<-letBeat
		}
		return nil
	}
	w, err := e.Enqueue(testCtx(t), r)
	if err != nil {
		t.Fatal(err)
	}
	sent := make(chan struct{}, 16)
	e.hooks = &pointHooks{onLease: func(_ context.Context, event string, id clientv3.LeaseID, _ int64) {
		if event == leaseWaitKeep && id == w.q.h.Lease {
			sent <- struct{}{}
		}
	}}
	granted := make(chan Grant, 1)
	go func() {
		g, err := w.Wait(testCtx(t))
		if err != nil {
			t.Error(err)
		}
		granted <- g
	}()
	// The first tick, once the wait has armed it: its heartbeat stalls
	// until the grant is done with.
	for ticked := false; !ticked; {
		clk.Advance(time.Second)
		select {
		case <-inBeat:
			ticked = true
		case <-time.After(time.Millisecond):
		}
	}
	mustRelease(t, e, holder)
	g := <-granted
	mustRelease(t, e, g)
	settle(e)
	if !pooled(e, g.Lease) {
		t.Fatalf("the released grant's lease %x was not pooled; the test needs it to be", int64(g.Lease))
	}
	close(letBeat)
	// A tick that goes on sends at once: half a second is ample.
	select {
	case <-sent:
		t.Fatalf("the waiter's tick sent a keepalive for lease %x after the wait returned its grant", int64(g.Lease))
	case <-time.After(500 * time.Millisecond):
	}
}

// kick starts a pass of every class that needs one (the explorer's clock
// calls it when it moves time past a quarantine).
func (p *leasePool) kick(ctx context.Context) {
	now := p.e.cfg.Clock.Now()
	p.mu.Lock()
	var due []*leaseClass
	for _, c := range p.classes {
		if p.duePassLocked(c, now) {
			due = append(due, c)
		}
	}
	p.mu.Unlock()
	for _, c := range due {
		p.pass(ctx, c)
	}
}

// count reports the leases the pool holds of ttlSec: free and quarantined.
func (p *leasePool) count(ttlSec int64) (free, held int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.classes[ttlSec]; c != nil {
		return len(c.free), len(c.held)
	}
	return 0, 0
}
