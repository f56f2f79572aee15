package sdktest_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/leasegate/leasegate/client"
	"github.com/leasegate/leasegate/internal/etcdtest"
	"github.com/leasegate/leasegate/internal/gwtest"
	"github.com/leasegate/leasegate/internal/netfault"
	"github.com/leasegate/leasegate/internal/server"
	"github.com/leasegate/leasegate/shard"
)

// startShardedGateway starts a gateway over two clusters, c0 (the shared
// member) and c1 (a member of the test's own, which the test may stop),
// with a breaker and request timeout short enough that a stopped shard
// fails fast. A lost lock's name is taken again at once (NoLossWait): what
// a session keeps and loses is under test, not the wait after a loss.
func startShardedGateway(t *testing.T) (*gateway, *etcdtest.Cluster) {
	t.Helper()
	c1 := etcdtest.Start(t)
	bc := shard.DefaultBreakerConfig()
	bc.ConsecutiveFailures = 3
	bc.OpenTimeout = 200 * time.Millisecond
	g := gwtest.Start(t, nil, gwtest.Clusters(
		server.Cluster{Name: "c0", Endpoints: []string{shared.Endpoint()}},
		server.Cluster{Name: "c1", Endpoints: []string{c1.Endpoint()}},
	), gwtest.NoLossWait(), gwtest.Configure(func(cfg *server.Config) {
		cfg.Fleet.Breaker = bc
		cfg.Fleet.RequestTimeout = 500 * time.Millisecond
	}))
	return g, c1
}

// nameOn returns a lock name that the ring over c0 and c1 puts on shard.
func nameOn(shardName, base string) string {
	ring, _ := shard.NewRing([]string{"c0", "c1"})
	for i := 0; ; i++ {
		if n := fmt.Sprintf("%s-%d", base, i); ring.Locate(n) == shardName {
			return n
		}
	}
}

// awaitShardServed waits, in real time, until the gateway takes a lock on
// a restarted shard again (its breaker lets calls through).
func awaitShardServed(t *testing.T, url, name string) {
	t.Helper()
	probe := newClient(t, []string{url}, client.WithRetryBackoff(10*time.Millisecond, 50*time.Millisecond))
	ctx := ctxT(t)
	for {
		l, err := probe.TryAcquire(ctx, name, client.WithTTL(5*time.Second))
		if err == nil {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the restarted shard is still not served: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // waiting out the breaker's open interval
	}
}

// A session over two shards with one stopped: the locks on the healthy
// shard keep renewing past the stopped shard's deadline, the locks on the
// stopped shard are lost exactly at theirs, and the session lives on. Once
// the shard is back, an acquire there replaces the lost lease; the lost
// lock is not revived.
func TestSessionShardOutageLosesOnlyItsLocks(t *testing.T) {
	t.Parallel()
	g, c1 := startShardedGateway(t)
	// Retries after a failed keepalive come 1 to 2 s apart, so that every
	// 2 s step of the fake clock below makes exactly one attempt due.
	c, clk, _, renewals := fakeTimeClient(t, []string{g.URL}, client.WithRetryBackoff(2*time.Second, 2*time.Second))
	ctx := ctxT(t)
	s, err := c.OpenSession(ctx, client.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Shards(); !reflect.DeepEqual(got, []string{"c0", "c1"}) {
		t.Fatalf("Shards() = %v; want [c0 c1]", got)
	}
	a0, err := s.Acquire(ctx, nameOn("c0", "keep"))
	if err != nil {
		t.Fatal(err)
	}
	a1, err := s.Acquire(ctx, nameOn("c1", "lose"))
	if err != nil {
		t.Fatal(err)
	}
	if a0.Shard() != "c0" || a1.Shard() != "c1" {
		t.Fatalf("locks on %s and %s; want c0 and c1", a0.Shard(), a1.Shard())
	}
	ttl, margin := s.TTL(), defaultMargin(s.TTL())

	c1.Stop()
	d1 := a1.Expires()
	clk.Advance(renewDue(ttl))
	r := await(t, renewals, "keepalive with c1 down")
	if !errors.Is(r.err, client.ErrUnavailable) {
		t.Fatalf("keepalive with c1 down reported %v; want c1 unconfirmed", r.err)
	}
	if got := a0.Expires(); !got.After(d1) || got.After(r.sent.Add(ttl-margin)) {
		t.Fatalf("c0 lock Expires %s after the keepalive sent at %s; want past %s, at most send time + TTL - margin", got, r.sent, d1)
	}
	if got := a1.Expires(); !got.Equal(d1) {
		t.Fatalf("c1 lock Expires %s; want unchanged %s while c1 is down", got, d1)
	}
	// Keepalives retry until c1's deadline; c0's lock rides on them.
	for clk.Now().Add(2 * time.Second).Before(d1) {
		clk.Advance(2 * time.Second)
		await(t, renewals, "keepalive retry")
		notDone(t, a1.Done(), "c1 lock's Done before its deadline")
	}
	clk.Advance(d1.Sub(clk.Now()))
	await(t, a1.Done(), "c1 lock's Done at its deadline") // the clock reads exactly d1
	if err := a1.Err(); !errors.Is(err, client.ErrLockLost) || !errors.Is(err, client.ErrSessionLost) || !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("c1 lock Err = %v; want ErrLockLost, ErrSessionLost and ErrUnavailable", err)
	}
	// c0's lock and the session live on past c1's deadline.
	notDone(t, a0.Done(), "c0 lock's Done after c1's deadline")
	notDone(t, s.Done(), "session Done after c1's deadline")
	if got := s.Shards(); !reflect.DeepEqual(got, []string{"c0"}) {
		t.Fatalf("Shards() after c1's loss = %v; want [c0]", got)
	}
	// The keepalives now leave c1 out and succeed.
	for i := 0; ; i++ {
		clk.Advance(2 * time.Second)
		if r := await(t, renewals, "keepalive of c0 alone"); r.err == nil {
			break
		}
		if i == 5 {
			t.Fatal("keepalives of c0 alone keep failing")
		}
	}
	if !a0.Expires().After(clk.Now()) || a0.Err() != nil {
		t.Fatalf("c0 lock Expires %s (now %s), Err %v; want live", a0.Expires(), clk.Now(), a0.Err())
	}

	// c1 returns. Its old lease may live on in etcd (a restart extends
	// leases), but the session has given it up: an acquire there gets a
	// fresh lease, and the lost lock stays lost.
	c1.Restart()
	awaitShardServed(t, g.URL, nameOn("c1", "probe"))
	b1, err := s.Acquire(ctx, nameOn("c1", "again"))
	if err != nil {
		t.Fatalf("Acquire on the returned shard = %v; want the session extended", err)
	}
	if !b1.Expires().After(clk.Now()) || b1.Err() != nil {
		t.Fatalf("new c1 lock Expires %s (now %s), Err %v; want live", b1.Expires(), clk.Now(), b1.Err())
	}
	if got := s.Shards(); !reflect.DeepEqual(got, []string{"c0", "c1"}) {
		t.Fatalf("Shards() after the extension = %v; want [c0 c1]", got)
	}
	if err := a1.Err(); !errors.Is(err, client.ErrLockLost) {
		t.Fatalf("old c1 lock Err = %v after the new lease; want still lost", err)
	}
	other := newClient(t, []string{g.URL})
	if l, err := other.TryAcquire(ctx, a1.Name()); err != nil {
		t.Fatalf("the lost lock's name is still taken after its lease was replaced: %v", err)
	} else if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	before := b1.Expires()
	for i := 0; ; i++ {
		clk.Advance(renewDue(ttl))
		if r := await(t, renewals, "keepalive of both shards"); r.err == nil {
			break
		}
		if i == 3 {
			t.Fatal("keepalives of both shards keep failing")
		}
	}
	if !b1.Expires().After(before) {
		t.Fatalf("new c1 lock Expires %s; want moved past %s by the keepalive", b1.Expires(), before)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*client.Lock{a0, b1} {
		if !errors.Is(l.Err(), client.ErrReleased) {
			t.Fatalf("lock %s Err after Close = %v; want ErrReleased", l.Name(), l.Err())
		}
	}
}

// A session opened while a shard is down covers the others; an acquire of
// a name on the missing shard, once it is back, extends the session to it,
// and the next keepalive renews both.
func TestSessionAcquireExtendsToMissingShard(t *testing.T) {
	t.Parallel()
	g, c1 := startShardedGateway(t)
	c, clk, _, renewals := fakeTimeClient(t, []string{g.URL})
	ctx := ctxT(t)
	c1.Stop()
	s, err := c.OpenSession(ctx, client.WithTTL(30*time.Second))
	if err != nil {
		t.Fatalf("OpenSession with c1 down = %v; want a session on c0", err)
	}
	if got := s.Shards(); !reflect.DeepEqual(got, []string{"c0"}) {
		t.Fatalf("Shards() = %v; want [c0]", got)
	}
	a0, err := s.TryAcquire(ctx, nameOn("c0", "here"))
	if err != nil {
		t.Fatal(err)
	}
	c1.Restart()
	awaitShardServed(t, g.URL, nameOn("c1", "probe"))
	a1, err := s.TryAcquire(ctx, nameOn("c1", "there"), client.WithRequestID("there-1"))
	if err != nil {
		t.Fatalf("TryAcquire on the shard the session lacked = %v; want the session extended", err)
	}
	if a1.RequestID() != "there-1" {
		// No key was written on the missing shard, so the id is kept.
		t.Fatalf("RequestID() of the extended lock = %q; want there-1", a1.RequestID())
	}
	if got := s.Shards(); !reflect.DeepEqual(got, []string{"c0", "c1"}) {
		t.Fatalf("Shards() after the extension = %v; want [c0 c1]", got)
	}
	if a1.Shard() != "c1" || a1.Session() != s || a1.TTL() != 30*time.Second {
		t.Fatalf("extended lock: shard %s, session %p, TTL %s; want c1, %p, 30s", a1.Shard(), a1.Session(), a1.TTL(), s)
	}
	before := a1.Expires()
	if want := clk.Now().Add(s.TTL() - defaultMargin(s.TTL())); before.After(want) {
		t.Fatalf("extended lock Expires %s; want at most now + TTL - margin = %s", before, want)
	}
	clk.Advance(renewDue(s.TTL()))
	if r := await(t, renewals, "keepalive"); r.err != nil {
		t.Fatalf("keepalive of both shards = %v", r.err)
	}
	if !a1.Expires().After(before) || !a0.Expires().After(before) {
		t.Fatalf("Expires after the keepalive: c0 %s, c1 %s; want both past %s", a0.Expires(), a1.Expires(), before)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// A session acquire whose shard the session lacks, while the gateway's
// link to that shard is silent, ends by its wait deadline (plus the SDK's
// grace): extending the session to the shard is part of the wait, not an
// extra round of calls bounded only by the request timeout.
func TestSessionAcquireOnSilentShardEndsByItsWaitDeadline(t *testing.T) {
	t.Parallel()
	c1 := etcdtest.Start(t)
	link, err := netfault.New("c1", strings.TrimPrefix(c1.Endpoint(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(link.Close)
	g := gwtest.Start(t, nil, gwtest.Clusters(
		server.Cluster{Name: "c0", Endpoints: []string{shared.Endpoint()}},
		server.Cluster{Name: "c1", Endpoints: []string{link.URL()}},
	), gwtest.Configure(func(cfg *server.Config) {
		cfg.Fleet.RequestTimeout = time.Second
	}))
	c := newClient(t, []string{g.URL}, client.WithRequestTimeout(4*time.Second))
	ctx := ctxT(t)
	link.Set(netfault.Fault{Blackhole: true})
	s, err := c.OpenSession(ctx, client.WithTTL(30*time.Second))
	if err != nil {
		t.Fatalf("OpenSession with c1 silent = %v; want a session on c0", err)
	}
	defer s.Close(ctx)
	if got := s.Shards(); !reflect.DeepEqual(got, []string{"c0"}) {
		t.Fatalf("Shards() = %v; want [c0]", got)
	}
	const wait = time.Second
	start := time.Now()
	_, err = s.Acquire(ctx, nameOn("c1", "silent"), client.WithWaitTimeout(wait))
	took := time.Since(start)
	t.Logf("Acquire returned after %s: %v", took.Round(time.Millisecond), err)
	if !errors.Is(err, client.ErrWaitTimeout) {
		t.Fatalf("Acquire on a silent shard = %v; want a wait timeout", err)
	}
	// The grace is 500 ms; a further 500 ms covers this machine's noise.
	// Unbounded, covering the shard takes the SDK's retries of a call the
	// gateway fails after its 1 s request timeout each time.
	if took > wait+time.Second {
		t.Fatalf("Acquire with wait timeout %s on a silent shard returned after %s; want by %s", wait, took.Round(time.Millisecond), wait+time.Second)
	}
}
