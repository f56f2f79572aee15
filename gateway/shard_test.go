package gateway_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/internal/etcdtest"
	"github.com/leasegate/leasegate/internal/gwtest"
	"github.com/leasegate/leasegate/internal/server"
	"github.com/leasegate/leasegate/internal/timingtest"
	"github.com/leasegate/leasegate/locks"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/shard"
)

// fleet is several etcd clusters, named c0, c1 …
type fleet struct {
	etcds  []*etcdtest.Cluster
	prefix string
}

func startFleet(t *testing.T, n int) *fleet {
	t.Helper()
	f := &fleet{prefix: gwtest.NewPrefix()}
	var wg sync.WaitGroup
	f.etcds = make([]*etcdtest.Cluster, n)
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); f.etcds[i] = etcdtest.Start(t) }()
	}
	wg.Wait()
	return f
}

func (f *fleet) cluster(i int) server.Cluster {
	return server.Cluster{Name: fmt.Sprintf("c%d", i), Endpoints: []string{f.etcds[i].Endpoint()}}
}

func (f *fleet) shardCluster(i int) shard.Cluster {
	c := f.cluster(i)
	return shard.Cluster{Name: c.Name, Endpoints: c.Endpoints}
}

// gateway starts a gateway over clusters idx (the first is home).
func (f *fleet) gateway(t *testing.T, adjust func(*server.Config), idx ...int) *gw {
	t.Helper()
	var clusters []server.Cluster
	for _, i := range idx {
		clusters = append(clusters, f.cluster(i))
	}
	return gwtest.Start(t, nil, gwtest.Prefix(f.prefix), gwtest.Clusters(clusters...), gwtest.Configure(adjust))
}

// awaitMap returns once g routes by m or a newer map.
func awaitMap(t *testing.T, g *gw, m shard.Map) {
	t.Helper()
	if err := g.Server.Router().AwaitNewer(ctxT(t), m.Epoch-1); err != nil {
		t.Fatal(err)
	}
}

func (f *fleet) resharder(t *testing.T) *shard.Resharder {
	return &shard.Resharder{Store: shard.NewStore(f.etcds[0].ClientFor(t), f.prefix), Prefix: f.prefix, Names: locks.Names{}}
}

// grantLog checks, per name, that holders never overlap and tokens only grow.
type grantLog struct {
	mu       sync.Mutex
	holder   map[string]int64
	last     map[string]int64
	grants   int
	problems []string
}

func newGrantLog() *grantLog {
	return &grantLog{holder: map[string]int64{}, last: map[string]int64{}}
}

func (l *grantLog) enter(name string, token int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h, ok := l.holder[name]; ok {
		l.problems = append(l.problems, fmt.Sprintf("%s: token %d granted while %d holds", name, token, h))
	}
	if token <= l.last[name] {
		l.problems = append(l.problems, fmt.Sprintf("%s: token %d after %d", name, token, l.last[name]))
	}
	l.holder[name], l.last[name] = token, token
	l.grants++
}

func (l *grantLog) leave(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.holder, name)
}

func TestReshardingUnderContention(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 4)
	g1 := f.gateway(t, nil, 0, 1, 2)
	g2 := f.gateway(t, nil, 0, 1, 2, 3) // knows c3's endpoints for when it joins
	gws := []*gw{g1, g2}
	names := make([]string, 24)
	for i := range names {
		names[i] = fmt.Sprintf("order:%d", i)
	}
	log := newGrantLog()
	ctx, stop := context.WithCancel(ctxT(t))
	var wg sync.WaitGroup
	var workerErrs sync.Map
	for w := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for ctx.Err() == nil {
				name := names[rng.IntN(len(names))]
				g := gws[rng.IntN(len(gws))]
				acquireHoldRelease(ctx, g, name, log, &workerErrs)
			}
		}()
	}
	rs := f.resharder(t)
	rs.Endpoints = map[string][]string{"c3": {f.etcds[3].Endpoint()}}
	waitGrants := func(n int) {
		for {
			log.mu.Lock()
			got := log.grants
			log.mu.Unlock()
			if got >= n {
				return
			}
			time.Sleep(20 * time.Millisecond) // progress poll of a running workload, not ordering
		}
	}
	waitGrants(100)
	// Add c3 mid-run, then remove c0 mid-run.
	if _, err := rs.Apply(ctx, []shard.Cluster{f.shardCluster(0), f.shardCluster(1), f.shardCluster(2), f.shardCluster(3)}); err != nil {
		t.Fatal(err)
	}
	sweepCtx, cancelSweep := context.WithTimeout(ctx, 30*time.Second)
	if _, err := rs.Sweep(sweepCtx, 100*time.Millisecond); err != nil {
		t.Fatalf("sweep after adding c3: %v", err)
	}
	cancelSweep()
	waitGrants(200)
	if _, err := rs.Apply(ctx, []shard.Cluster{f.shardCluster(1), f.shardCluster(2), f.shardCluster(3)}); err != nil {
		t.Fatal(err)
	}
	sweepCtx, cancelSweep = context.WithTimeout(ctx, 30*time.Second)
	if _, err := rs.Sweep(sweepCtx, 100*time.Millisecond); err != nil {
		t.Fatalf("sweep after removing c0: %v", err)
	}
	cancelSweep()
	waitGrants(300)
	stop()
	wg.Wait()
	for _, p := range log.problems {
		t.Error(p)
	}
	workerErrs.Range(func(k, v any) bool {
		t.Logf("transient error seen %d times: %v", v, k)
		return true
	})
	// After the change, names live only on c1..c3 and tokens carry epoch 3.
	for _, n := range names[:4] {
		d, err := g2.Client.Describe(ctxT(t), connect.NewRequest(&v1.DescribeRequest{Name: n}))
		if err != nil || d.Msg.Shard == "c0" {
			t.Fatalf("Describe(%q) = %v, %v; want a shard other than the removed c0", n, d, err)
		}
	}
}

// acquireHoldRelease takes name, records the grant, holds briefly and
// releases. Retryable errors (resharding, a stopping gateway) are counted.
func acquireHoldRelease(ctx context.Context, g *gw, name string, log *grantLog, errs *sync.Map) {
	actx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	stream, err := g.Client.Acquire(actx, connect.NewRequest(&v1.AcquireRequest{Name: name, TtlMs: 10000, WaitTimeoutMs: 15000}))
	if err != nil {
		return
	}
	var gr *v1.Granted
	for stream.Receive() {
		if x := stream.Msg().GetGranted(); x != nil {
			gr = x
		}
	}
	stream.Close()
	if gr == nil {
		if err := stream.Err(); err != nil && ctx.Err() == nil {
			key := connect.CodeOf(err).String() + " " + reasonOf(err)
			v, _ := errs.LoadOrStore(key, 0)
			errs.Store(key, v.(int)+1)
		}
		return
	}
	log.enter(name, gr.FencingToken)
	time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond) // the critical section's work
	log.leave(name)
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	_, _ = g.Client.Release(rctx, connect.NewRequest(&v1.ReleaseRequest{LockId: gr.LockId, FencingToken: gr.FencingToken}))
}

func TestStoppedClusterFailsFastOthersServe(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 2)
	bc := shard.DefaultBreakerConfig()
	bc.ConsecutiveFailures = 3
	bc.OpenTimeout = 300 * time.Millisecond
	g := f.gateway(t, func(c *server.Config) {
		c.Fleet.Breaker = bc
		c.Fleet.RequestTimeout = 500 * time.Millisecond
	}, 0, 1)
	ring, _ := shard.NewRing([]string{"c0", "c1"})
	var onC0, onC1 []string
	for i := 0; len(onC0) < 10 || len(onC1) < 10; i++ {
		n := fmt.Sprintf("job-%d", i)
		if ring.Locate(n) == "c0" {
			onC0 = append(onC0, n)
		} else {
			onC1 = append(onC1, n)
		}
	}
	f.etcds[1].Stop()
	try := func(name string) (time.Duration, error) {
		start := time.Now()
		resp, err := g.Client.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: name, TtlMs: 5000}))
		if err == nil && resp.Msg.Acquired {
			release(t, g, resp.Msg.Granted)
		}
		return time.Since(start), err
	}
	// c1's names fail, retryably; once the breaker opens they fail fast.
	for i := 0; i < 3; i++ {
		if _, err := try(onC1[i]); connect.CodeOf(err) != connect.CodeUnavailable {
			t.Fatalf("TryAcquire on the stopped cluster = %v; want unavailable", err)
		}
	}
	for i := 3; i < 6; i++ {
		d, err := try(onC1[i])
		if connect.CodeOf(err) != connect.CodeUnavailable || reasonOf(err) != "SHARD_UNAVAILABLE" {
			t.Fatalf("TryAcquire with the breaker open = %v (%q); want unavailable, SHARD_UNAVAILABLE", err, reasonOf(err))
		}
		// SHARD_UNAVAILABLE is the breaker's own answer; how fast it comes
		// is a timing judgement (internal/timingtest).
		if timingtest.Enabled() && d > 100*time.Millisecond {
			t.Errorf("fast-fail took %s; the breaker should answer without waiting on etcd", d)
		}
	}
	// c0's names keep working.
	for _, n := range onC0 {
		if _, err := try(n); err != nil {
			t.Fatalf("TryAcquire(%q) on the healthy cluster = %v", n, err)
		}
	}
	// Restart c1: half-open probes bring it back without a gateway restart.
	f.etcds[1].Restart()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := try(onC1[0])
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("c1 still failing after restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // waiting out the breaker's open interval
	}
}

func TestGatewayOnOldEpochCannotGrant(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 3)
	// g1 never follows the stored map; it only reloads when a cluster
	// refuses its enqueue.
	stale := f.gateway(t, func(c *server.Config) { c.Fleet.Watch = false }, 0, 1)
	fresh := f.gateway(t, nil, 0, 1, 2)
	moved := nameMovingToC2()
	holder := tryAcquire(t, stale, moved) // on its old cluster, epoch 1
	rs := f.resharder(t)
	m, err := rs.Apply(ctxT(t), []shard.Cluster{f.shardCluster(0), f.shardCluster(1), f.shardCluster(2)})
	if err != nil {
		t.Fatal(err)
	}
	awaitMap(t, fresh, m) // fresh follows the map in the background
	// Both gateways: a waiter for the moved name is not granted while the
	// old holder holds on the draining cluster.
	wStale := startWaiter(t, stale, &v1.AcquireRequest{Name: moved, TtlMs: 10000})
	wFresh := startWaiter(t, fresh, &v1.AcquireRequest{Name: moved, TtlMs: 10000})
	<-wStale.positions
	<-wFresh.positions
	res, err := fresh.Client.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: moved, TtlMs: 5000}))
	if err != nil || res.Msg.Acquired {
		t.Fatalf("TryAcquire while the old holder holds = %v, %v; want not acquired", res, err)
	}
	d, err := fresh.Client.Describe(ctxT(t), connect.NewRequest(&v1.DescribeRequest{Name: moved}))
	if err != nil || d.Msg.FencingToken != holder.FencingToken {
		t.Fatalf("Describe during drain = %v, %v; want the old holder %d", d, err, holder.FencingToken)
	}
	select {
	case gr := <-wStale.granted:
		t.Fatalf("stale gateway granted %d while the old holder holds", gr.FencingToken)
	case gr := <-wFresh.granted:
		t.Fatalf("fresh gateway granted %d while the old holder holds", gr.FencingToken)
	default:
	}
	// The old holder renews and releases on its old cluster as usual.
	if _, err := stale.Client.Renew(ctxT(t), connect.NewRequest(&v1.RenewRequest{LockId: holder.LockId, FencingToken: holder.FencingToken})); err != nil {
		t.Fatalf("Renew of the draining holder = %v", err)
	}
	release(t, stale, holder)
	var grants []*v1.Granted
	for _, w := range []*waiter{wStale, wFresh} {
		gr := <-w.granted
		if gr == nil {
			t.Fatalf("waiter ended without a grant: %v", <-w.err)
		}
		grants = append(grants, gr)
		if len(grants) == 1 {
			// Exactly one holder at a time: the other waiter must still wait.
			other := wFresh
			if w == wFresh {
				other = wStale
			}
			select {
			case <-other.granted:
				t.Fatal("both waiters granted at once")
			default:
			}
			if grants[0].Shard != "c2" || grants[0].FencingToken <= holder.FencingToken {
				t.Fatalf("grant on %s with token %d; want c2 and a token above %d", grants[0].Shard, grants[0].FencingToken, holder.FencingToken)
			}
			release(t, fresh, grants[0])
		}
	}
	if grants[1].FencingToken <= grants[0].FencingToken {
		t.Fatalf("tokens %d then %d; want increasing", grants[0].FencingToken, grants[1].FencingToken)
	}
	release(t, fresh, grants[1])
}

// A TryAcquire granted on a cluster a name then moves away from keeps its
// idempotency: a retry with the same request id finds its own grant, not
// the name busy (its own grant, draining) and "not acquired".
func TestTryAcquireRetryAfterReshardFindsItsGrant(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 3)
	g0 := f.gateway(t, nil, 0, 1)   // stores the map: c0, c1
	g := f.gateway(t, nil, 0, 1, 2) // knows c2's endpoints for when it joins
	moved := nameMovingToC2()
	// Before c2 joins: granted on the name's old cluster; the answer is lost.
	req := &v1.TryAcquireRequest{Name: moved, TtlMs: 10000, ClientId: "w", RequestId: "try-once"}
	first, err := g0.Client.TryAcquire(ctxT(t), connect.NewRequest(req))
	if err != nil || !first.Msg.Acquired {
		t.Fatalf("TryAcquire = %v, %v", first, err)
	}
	if _, err := f.resharder(t).Apply(ctxT(t), []shard.Cluster{f.shardCluster(0), f.shardCluster(1), f.shardCluster(2)}); err != nil {
		t.Fatal(err)
	}
	if first.Msg.Granted.Shard == "c2" {
		t.Fatalf("granted on %s before it joined", first.Msg.Granted.Shard)
	}
	again, err := g.Client.TryAcquire(ctxT(t), connect.NewRequest(req))
	if err != nil || !again.Msg.Acquired || again.Msg.Granted.FencingToken != first.Msg.Granted.FencingToken {
		t.Fatalf("the retried TryAcquire after the name moved = %v, %v; want the same grant (token %d)", again, err, first.Msg.Granted.FencingToken)
	}
	release(t, g, again.Msg.Granted)
}

// A session waiter on a name that moved resumes its place on the draining
// cluster, under the session's lease there — not the new cluster's, which
// its owner binding does not carry.
func TestSessionWaiterResumesOnDrainingCluster(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 3)
	g0 := f.gateway(t, nil, 0, 1)
	g := f.gateway(t, nil, 0, 1, 2)
	moved := nameMovingToC2()
	holder := tryAcquire(t, g0, moved)
	sess, err := g0.Client.OpenSession(ctxT(t), connect.NewRequest(&v1.OpenSessionRequest{ClientId: "w", TtlMs: 10000}))
	if err != nil {
		t.Fatal(err)
	}
	req := &v1.AcquireRequest{Name: moved, ClientId: "w", RequestId: "session-wait", SessionId: sess.Msg.SessionId}
	first := startWaiter(t, g0, req)
	if p := <-first.positions; p != 1 {
		t.Fatalf("position = %d; want 1", p)
	}
	g0.Stop() // its gateway stops: the waiter's key stays for a retry elsewhere
	if err := <-first.err; reasonOf(err) != "SHUTTING_DOWN" {
		t.Fatalf("the wait on a stopping gateway = %v; want SHUTTING_DOWN", err)
	}
	m, err := f.resharder(t).Apply(ctxT(t), []shard.Cluster{f.shardCluster(0), f.shardCluster(1), f.shardCluster(2)})
	if err != nil {
		t.Fatal(err)
	}
	awaitMap(t, g, m) // g follows the map in the background
	ext, err := g.Client.ExtendSession(ctxT(t), connect.NewRequest(&v1.ExtendSessionRequest{SessionId: sess.Msg.SessionId, Shards: []string{"c2"}, TtlMs: 10000, ClientId: "w"}))
	if err != nil {
		t.Fatal(err)
	}
	req.SessionId = ext.Msg.SessionId
	again := startWaiter(t, g, req)
	select {
	case p := <-again.positions:
		t.Logf("resumed at position %d", p)
	case err := <-again.err:
		t.Fatalf("the session waiter's retry after the name moved = %v; want it queued (resumed or anew)", err)
	}
	release(t, g, holder)
	gr := <-again.granted
	if gr == nil {
		t.Fatalf("no grant: %v", <-again.err)
	}
	if gr.Shard == "c2" {
		t.Fatalf("granted on %s; want the resumed waiter's own cluster", gr.Shard)
	}
	release(t, g, gr)
}

// nameMovingToC2 is the first name "moving-<i>" that the ring of c0, c1
// and c2 places on c2: one that moves when c2 joins c0 and c1.
func nameMovingToC2() string {
	next, _ := shard.NewRing([]string{"c0", "c1", "c2"})
	for i := 0; ; i++ {
		if n := fmt.Sprintf("moving-%d", i); next.Locate(n) == "c2" {
			return n
		}
	}
}
