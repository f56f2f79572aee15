package sdktest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/client"
	"github.com/leasegate/leasegate/internal/gwtest"
	"github.com/leasegate/leasegate/internal/server"
)

// Campaigns from clients of three gateways on one election: at most one
// leader at any time, each term's token above the last, and each leader
// reads itself (value, token, client id) through Leader while it leads.
func TestElectionAtMostOneLeaderAcrossGateways(t *testing.T) {
	t.Parallel()
	g1 := startGateway(t, "")
	gws := []*gateway{g1, startGateway(t, g1.Prefix), startGateway(t, g1.Prefix)}
	ctx := ctxT(t)
	var (
		mu      sync.Mutex
		leading int
		tokens  []int64
	)
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		c := newClient(t, []string{gws[i%3].URL}, client.WithClientID(fmt.Sprintf("c%d", i)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			el := c.Election("svc")
			for j := 0; j < 4; j++ {
				value := []byte(fmt.Sprintf("c%d-%d", i, j))
				l, err := el.Campaign(ctx, value, client.WithTTL(10*time.Second))
				if err != nil {
					t.Errorf("campaign: %v", err)
					return
				}
				mu.Lock()
				if leading++; leading > 1 {
					t.Errorf("%d leaders at once", leading)
				}
				tokens = append(tokens, l.Token())
				mu.Unlock()
				info, err := el.Leader(ctx)
				if err != nil || string(info.Value) != string(value) || info.Token != l.Token() || info.ClientID != fmt.Sprintf("c%d", i) {
					t.Errorf("Leader while leading = %+v, %v; want %s, token %d", info, err, value, l.Token())
				}
				mu.Lock()
				leading--
				mu.Unlock()
				if err := l.Resign(ctx); err != nil {
					t.Errorf("resign: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	if len(tokens) != 24 {
		t.Fatalf("%d terms; want 24", len(tokens))
	}
	if !slices.IsSorted(tokens) || len(slices.Compact(slices.Clone(tokens))) != len(tokens) {
		t.Fatalf("term tokens in the order elected = %v; want strictly increasing", tokens)
	}
	if _, err := newClient(t, []string{g1.URL}).Election("svc").Leader(ctx); !errors.Is(err, client.ErrNoLeader) {
		t.Fatalf("Leader after every term ended = %v; want ErrNoLeader", err)
	}
}

// revokeLeader revokes the lease of an election's leader key, as if etcd
// had expired it, and returns that lease.
func revokeLeader(tb testing.TB, prefix, election string) clientv3.LeaseID {
	tb.Helper()
	cli := shared.ClientFor(tb)
	resp, err := cli.Get(ctxT(tb), prefix+"/locks/%00election:"+election+"/", clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 {
		tb.Fatalf("read the leader of %q: %v (%d keys)", election, err, len(resp.Kvs))
	}
	lease := clientv3.LeaseID(resp.Kvs[0].Lease)
	if _, err := cli.Revoke(ctxT(tb), lease); err != nil {
		tb.Fatal(err)
	}
	return lease
}

// A leader whose lease lapsed is deposed: its Proclaim is refused with
// ErrLockLost, the value stays the new leader's, and its Context ends.
func TestElectionProclaimByDeposedLeaderRefused(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	ctx := ctxT(t)
	a := newClient(t, []string{g.URL}, client.WithClientID("a"))
	b := newClient(t, []string{g.URL}, client.WithClientID("b"))
	la, err := a.Election("svc").Campaign(ctx, []byte("a"), client.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := la.Proclaim(ctx, []byte("a2")); err != nil {
		t.Fatalf("Proclaim while leading: %v", err)
	}
	if info, err := a.Election("svc").Leader(ctx); err != nil || string(info.Value) != "a2" {
		t.Fatalf("Leader after Proclaim = %+v, %v; want a2", info, err)
	}
	queued := make(chan int64, 4)
	elected := make(chan *client.Leadership, 1)
	go func() {
		l, err := b.Election("svc").Campaign(ctx, []byte("b"), client.WithTTL(10*time.Second), client.WithOnQueued(func(p int64) { queued <- p }))
		if err != nil {
			t.Errorf("campaign b: %v", err)
		}
		elected <- l
	}()
	await(t, queued, "b queued")
	revokeLeader(t, g.Prefix, "svc")
	lb := await(t, elected, "b elected")
	if lb == nil {
		t.FailNow()
	}
	if lb.Token() <= la.Token() {
		t.Fatalf("b's token %d is not above a's %d", lb.Token(), la.Token())
	}
	err = la.Proclaim(ctx, []byte("stale"))
	if !errors.Is(err, client.ErrLockLost) || client.Reason(err) != client.ReasonStolen {
		t.Fatalf("Proclaim by the deposed leader = %v (reason %v); want ErrLockLost, LOCK_STOLEN", err, client.Reason(err))
	}
	if info, err := b.Election("svc").Leader(ctx); err != nil || string(info.Value) != "b" || info.Token != lb.Token() {
		t.Fatalf("Leader = %+v, %v; want b's value and token", info, err)
	}
	// The deposed leader's keeper learns it at its next renewal.
	await(t, la.Done(), "the deposed leader's Context")
	if !errors.Is(la.Err(), client.ErrLockLost) {
		t.Fatalf("deposed leader's Err = %v; want ErrLockLost", la.Err())
	}
	if err := lb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lb.Proclaim(ctx, []byte("late")); !errors.Is(err, client.ErrLockLost) {
		t.Fatalf("Proclaim after Resign = %v; want ErrLockLost", err)
	}
}

// An election and a lock of the same name are independent.
func TestElectionAndLockOfOneNameAreIndependent(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	ctx := ctxT(t)
	c := newClient(t, []string{g.URL})
	lock, err := c.TryAcquire(ctx, "x", client.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Election("x").Leader(ctx); !errors.Is(err, client.ErrNoLeader) {
		t.Fatalf("Leader of election x while lock x is held = %v; want ErrNoLeader", err)
	}
	l, err := c.Election("x").Campaign(ctx, []byte("v"), client.WithTTL(10*time.Second), client.WithWaitTimeout(5*time.Second))
	if err != nil {
		t.Fatalf("campaign for x while lock x is held: %v", err)
	}
	if d, err := c.Describe(ctx, "x"); err != nil || !d.Held || d.Token != lock.Token() {
		t.Fatalf("Describe(lock x) = %+v, %v; want the lock's holder", d, err)
	}
	// A leader id renews and releases through LockService as a lock id.
	if _, err := c.RenewByID(ctx, l.ID(), l.Token()); err != nil {
		t.Fatalf("RenewByID(leader id): %v", err)
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// observed runs Observe in the background and sends each state it yields
// ("none" or "value@token"); the iterator's final error, if any, too. The
// channel closes when the iteration ends.
func observed(ctx context.Context, el *client.Election) <-chan string {
	out := make(chan string, 64)
	go func() {
		defer close(out)
		for info, err := range el.Observe(ctx) {
			switch {
			case err != nil:
				out <- "error: " + err.Error()
			case info == nil:
				out <- "none"
			default:
				out <- fmt.Sprintf("%s@%d", info.Value, info.Token)
			}
		}
	}()
	return out
}

// Observe yields the state now, then every change, and follows a gateway
// that stops to the next endpoint.
func TestElectionObserve(t *testing.T) {
	t.Parallel()
	g1 := startGateway(t, "")
	g2 := startGateway(t, g1.Prefix)
	ctx := ctxT(t)
	c := newClient(t, []string{g2.URL})
	octx, stop := context.WithCancel(ctx)
	defer stop()
	obs := observed(octx, newClient(t, []string{g1.URL, g2.URL}, client.WithRetryBackoff(time.Millisecond, 10*time.Millisecond)).Election("svc"))
	if got := await(t, obs, "the first state"); got != "none" {
		t.Fatalf("first state = %s; want none", got)
	}
	a, err := c.Election("svc").Campaign(ctx, []byte("a"), client.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := await(t, obs, "a elected"), fmt.Sprintf("a@%d", a.Token()); got != want {
		t.Fatalf("state = %s; want %s", got, want)
	}
	if err := a.Proclaim(ctx, []byte("a2")); err != nil {
		t.Fatal(err)
	}
	if got, want := await(t, obs, "a proclaimed"), fmt.Sprintf("a2@%d", a.Token()); got != want {
		t.Fatalf("state = %s; want %s", got, want)
	}
	g1.Stop() // the observer moves to g2, where nothing changed: no event
	if err := a.Proclaim(ctx, []byte("a3")); err != nil {
		t.Fatal(err)
	}
	if got, want := await(t, obs, "a proclaimed after the gateway stopped"), fmt.Sprintf("a3@%d", a.Token()); got != want {
		t.Fatalf("state = %s; want %s", got, want)
	}
	b := make(chan *client.Leadership, 1)
	bQueued := make(chan int64, 4)
	go func() {
		l, err := c.Election("svc").Campaign(ctx, []byte("b"), client.WithTTL(10*time.Second), client.WithOnQueued(func(p int64) { bQueued <- p }))
		if err != nil {
			t.Errorf("campaign b: %v", err)
		}
		b <- l
	}()
	await(t, bQueued, "b queued") // b waits behind a: a's resignation hands over at once
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	lb := await(t, b, "b elected")
	if got, want := await(t, obs, "b elected"), fmt.Sprintf("b@%d", lb.Token()); got != want {
		t.Fatalf("state = %s; want %s", got, want)
	}
	if err := lb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if got := await(t, obs, "b resigned"); got != "none" {
		t.Fatalf("state = %s; want none", got)
	}
	stop()
	for got := range obs { // the iteration ends with its context
		t.Fatalf("after its context ended Observe yielded %s", got)
	}
}

// Failover figures, reported and not asserted: how long after a leader
// ends its next campaigner leads, when the leader resigns (bound by etcd's
// watch) and when its process dies (bound by the lease TTL). Run with -v.
func TestElectionFailoverFigures(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out lease TTLs")
	}
	t.Parallel()
	g := startGateway(t, "")
	ctx := ctxT(t)
	c := newClient(t, []string{g.URL})
	el := c.Election("failover")
	measure := func(end func(l *client.Leadership)) time.Duration {
		first, err := el.Campaign(ctx, []byte("first"), client.WithTTL(time.Second), client.WithManualRenew())
		if err != nil {
			t.Fatal(err)
		}
		queued := make(chan int64, 4)
		next := make(chan time.Time, 1)
		var second *client.Leadership
		go func() {
			l, err := el.Campaign(ctx, []byte("second"), client.WithTTL(10*time.Second), client.WithOnQueued(func(p int64) { queued <- p }))
			if err != nil {
				t.Errorf("campaign: %v", err)
			}
			second = l
			next <- time.Now()
		}()
		await(t, queued, "the successor queued")
		began := time.Now()
		end(first)
		took := await(t, next, "the successor elected").Sub(began)
		if err := second.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		return took
	}
	var resign, killed []time.Duration
	var ttl time.Duration
	for i := 0; i < 5; i++ {
		resign = append(resign, measure(func(l *client.Leadership) {
			if err := l.Resign(ctx); err != nil {
				t.Fatal(err)
			}
		}))
	}
	for i := 0; i < 2; i++ {
		// The leader's process dies: nobody renews, nobody resigns. (A
		// renewal right now makes the lease's remaining life a full TTL.)
		killed = append(killed, measure(func(l *client.Leadership) {
			ttl = l.TTL()
			if _, err := l.Renew(ctx); err != nil {
				t.Fatal(err)
			}
		}))
	}
	sort.Slice(resign, func(i, j int) bool { return resign[i] < resign[j] })
	t.Logf("failover after a clean resign (5 runs): min %s, median %s, max %s",
		resign[0].Round(time.Microsecond), resign[2].Round(time.Microsecond), resign[4].Round(time.Microsecond))
	t.Logf("failover after the leader's process died, lease TTL %s (asked 1s; 2 runs): %s, %s",
		ttl, killed[0].Round(time.Millisecond), killed[1].Round(time.Millisecond))
}

// A tenant's name policy allows or refuses an election by the election's
// own name, as it does a lock's, for every call.
func TestElectionNamePolicy(t *testing.T) {
	t.Parallel()
	g := gwtest.Start(t, shared, gwtest.Configure(func(c *server.Config) {
		c.Gateway.Policy.NamePrefixes = map[string][]string{"": {"orders/"}}
	}))
	c := newClient(t, []string{g.URL})
	ctx := ctxT(t)
	if _, err := c.Election("jobs/1").Campaign(ctx, nil); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("Campaign for a name the policy refuses = %v; want ErrPermissionDenied", err)
	}
	if _, err := c.Election("jobs/1").Leader(ctx); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("Leader of a name the policy refuses = %v; want ErrPermissionDenied", err)
	}
	for _, err := range c.Election("jobs/1").Observe(ctx) {
		if !errors.Is(err, client.ErrPermissionDenied) {
			t.Fatalf("Observe of a name the policy refuses yielded %v; want ErrPermissionDenied", err)
		}
	}
	l, err := c.Election("orders/1").Campaign(ctx, []byte("v"))
	if err != nil {
		t.Fatalf("Campaign for an allowed name: %v", err)
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// A campaign in a session rides on the session's lease: the term ends when
// the session closes, and the next campaigner leads.
func TestElectionInASession(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	ctx := ctxT(t)
	c := newClient(t, []string{g.URL})
	s, err := c.OpenSession(ctx, client.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Election("svc").Campaign(ctx, []byte("in-session"))
	if err != nil {
		t.Fatal(err)
	}
	if !l.Expires().Equal(s.Expires()) {
		t.Fatalf("the leadership's deadline %s is not its session's %s", l.Expires(), s.Expires())
	}
	if err := l.Proclaim(ctx, []byte("still")); err != nil {
		t.Fatalf("Proclaim in a session: %v", err)
	}
	queued := make(chan int64, 4)
	next := make(chan *client.Leadership, 1)
	go func() {
		n, err := c.Election("svc").Campaign(ctx, []byte("next"), client.WithTTL(10*time.Second), client.WithOnQueued(func(p int64) { queued <- p }))
		if err != nil {
			t.Errorf("campaign: %v", err)
		}
		next <- n
	}()
	await(t, queued, "the next campaigner queued")
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	await(t, l.Done(), "the session's leadership ending")
	n := await(t, next, "the next campaigner elected")
	if n == nil || n.Token() <= l.Token() {
		t.Fatalf("next term = %v; want a token above %d", n, l.Token())
	}
	if info, err := c.Election("svc").Leader(ctx); err != nil || string(info.Value) != "next" {
		t.Fatalf("Leader = %+v, %v; want next", info, err)
	}
	if err := n.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}
