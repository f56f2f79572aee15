package queue

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/leasegate/leasegate/internal/etcdtest"
	"github.com/leasegate/leasegate/internal/netfault"
)

// proxiedEngine returns an engine whose etcd traffic passes through a fault
// link, and the link.
func proxiedEngine(t *testing.T) (*Engine, *netfault.Link) {
	t.Helper()
	l, err := netfault.New("etcd", shared.Endpoint()[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	cli, err := etcdtest.NewClient(l.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	cfg := DefaultConfig()
	cfg.Prefix = fmt.Sprintf("/test/proxied-%d", prefixSeq.Add(1))
	e, err := New(cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e, l
}

// Hole 6: a renewal joined a keepalive already in flight, and was answered
// with that older request's send time as if it were its own. A client that
// measured its deadline from its own (later) send then outlived the lease.
func TestRenewalIsNeverCreditedWithAnOlderKeepalive(t *testing.T) {
	e, link := proxiedEngine(t)
	ctx := testCtx(t)
	lease, err := shared.ClientFor(t).Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	link.Set(netfault.Fault{ReplyDelay: 500 * time.Millisecond})
	first := make(chan time.Time, 1)
	go func() {
		_, sent, err := e.ka.renew(ctx, lease.ID)
		if err != nil {
			t.Error(err)
		}
		first <- sent
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !e.ka.inFlight(lease.ID) {
		if time.Now().After(deadline) {
			t.Fatal("the first keepalive was never sent")
		}
		time.Sleep(time.Millisecond)
	}
	// Let more than the join window pass: the stimulus, not a
	// synchronization.
	time.Sleep(3 * joinWindow)
	began := time.Now()
	_, sent, err := e.ka.renew(ctx, lease.ID)
	if err != nil {
		t.Fatal(err)
	}
	if sent.Before(began) {
		t.Fatalf("a renewal that began at %s was credited with a keepalive sent %s earlier", began.Format(time.StampMicro), began.Sub(sent))
	}
	if f := <-first; !f.Before(began) {
		t.Fatalf("the first renewal's send time %s is not before the second's start", f)
	}

	// Through Renew: Valid never exceeds what the lease owes from the call.
	g := mustAcquire(t, e, req("valid"))
	link.Set(netfault.Fault{ReplyDelay: 300 * time.Millisecond})
	began = e.cfg.Clock.Now()
	rn, err := e.Renew(ctx, g.Handle, g.Token())
	if err != nil {
		t.Fatal(err)
	}
	if began.Add(rn.Valid).After(rn.Deadline) {
		t.Fatalf("Renew = %+v from %s; want began+Valid ≤ Deadline", rn, began)
	}
}

// No head-of-line blocking on the shared keepalive streams. etcd answers a
// stream's requests in order, and a renewal of a lease that has expired but
// is not yet revoked waits for its revocation, which etcd rate-limits.
// While many leases expire at once, a live lease's renewal must not wait
// behind that.
func TestExpiredLeaseRenewalDoesNotHoldUpOthers(t *testing.T) {
	if testing.Short() {
		t.Skip("grants thousands of leases")
	}
	e, _ := newEngine(t)
	cli := shared.ClientFor(t)
	ctx := testCtx(t)
	// Enough leases expiring together to take etcd about two seconds to
	// revoke at its default rate of 1,000 per second.
	const n = 2000
	ids := make([]clientv3.LeaseID, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			resp, err := cli.Grant(ctx, 2)
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = resp.ID
		}()
	}
	wg.Wait()
	granted := time.Now()
	last := ids[n-1]
	live, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	// Once the last lease has expired, its renewal waits for etcd to
	// revoke the backlog ahead of it.
	time.Sleep(time.Until(granted.Add(2*time.Second + 200*time.Millisecond)))
	type answer struct {
		at  time.Time
		err error
	}
	stuck := make(chan answer, 1)
	go func() {
		_, _, err := e.ka.renew(ctx, last)
		stuck <- answer{time.Now(), err}
	}()
	for !e.ka.inFlight(last) {
		select {
		case x := <-stuck:
			// etcd had revoked the backlog before the renewal was sent (a
			// loaded machine): there is no stuck stream to test here.
			t.Skipf("the expired lease's renewal was answered at once (%v): etcd revoked the backlog before it was sent", x.err)
		case <-time.After(time.Millisecond):
		}
	}
	// One renewal queued right behind it on the same stream (it is sent
	// again elsewhere once it has waited stuckAfter), one sent once the
	// stream is stuck (it goes elsewhere at once).
	renewLive := func() (took time.Duration, at time.Time) {
		began := time.Now()
		if _, _, err := e.ka.renew(ctx, live.ID); err != nil {
			t.Errorf("renewal of a live lease: %v", err)
		}
		return time.Since(began), time.Now()
	}
	queuedBehind := make(chan time.Time, 1)
	go func() {
		took, at := renewLive()
		t.Logf("renewal queued behind it took %s", took)
		queuedBehind <- at
	}()
	time.Sleep(stuckAfter + 50*time.Millisecond) // the stimulus: the stream is now stuck
	took, liveAt := renewLive()
	x := <-stuck
	// Behind the expired lease's request, a live one would be answered
	// only after it, at the end of the revocation backlog (seconds). The
	// margin keeps goroutine wake-up order out of the verdict.
	t.Logf("renewal after the stream got stuck took %s; the expired lease's answer came %s after it", took, x.at.Sub(liveAt))
	for what, at := range map[string]time.Time{"sent once the stream was stuck": liveAt, "queued behind it": <-queuedBehind} {
		if !at.Before(x.at.Add(-200 * time.Millisecond)) {
			t.Errorf("a live lease's renewal %s was held up until the expired lease's answer", what)
		}
	}
	if x.err != errLeaseNotFound {
		t.Fatalf("renewal of the expired lease = %v; want errLeaseNotFound", x.err)
	}
}

// A keepalive failing at grant time (a leader change cuts the stream) must
// not throw the head waiter out of the queue and lose its FIFO place: the
// grant retries within the wait.
func TestGrantSurvivesAKeepaliveFailure(t *testing.T) {
	e, link := proxiedEngine(t)
	direct := peer(t, e, shared.ClientFor(t))
	ctx := testCtx(t)
	holder := mustAcquire(t, direct, req("x"))
	var once sync.Once
	healed := make(chan struct{})
	e.hooks = &pointHooks{fn: func(_ context.Context, p string) {
		if p != pointGrant {
			return
		}
		once.Do(func() {
			// The stream to etcd breaks as the grant renews the lease,
			// and comes back a moment later.
			link.Set(netfault.Fault{DropRate: 1})
			go func() {
				defer close(healed)
				time.Sleep(300 * time.Millisecond)
				link.Set(netfault.Fault{})
			}()
		})
	}}
	r := req("x")
	wctx, cancel := context.WithTimeoutCause(ctx, 20*time.Second, ErrWaitTimeout)
	defer cancel()
	w, err := e.Enqueue(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	// As after a wait with no renewal confirmed for more than half the
	// TTL: the grant must renew the lease before it answers.
	w.q.deadline = time.Time{}
	got := make(chan error, 1)
	go func() {
		g, err := w.Wait(wctx)
		if err == nil {
			_, err = e.Renew(ctx, g.Handle, g.Token())
		}
		got <- err
	}()
	mustRelease(t, direct, holder)
	if err := within(t, got, 30*time.Second, "the head waiter's grant"); err != nil {
		t.Fatalf("the head waiter after a keepalive failure at its grant: %v; want granted, its place kept", err)
	}
	<-healed
}

// countingEngine returns an engine whose etcd client counts every key that
// transactions return.
func countingEngine(t *testing.T) (*Engine, *atomic.Int64) {
	t.Helper()
	var keys atomic.Int64
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if tr, ok := reply.(*pb.TxnResponse); ok && err == nil {
			for _, r := range tr.Responses {
				keys.Add(int64(len(r.GetResponseRange().GetKvs())))
			}
		}
		return err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: []string{shared.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(count)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	cfg := DefaultConfig()
	cfg.Prefix = fmt.Sprintf("/test/counting-%d", prefixSeq.Add(1))
	e, err := New(cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e, &keys
}

// Draining a queue of N reads keys in proportion to N, not N² (every
// wake-up re-reading every key ahead): a grant needs only the key right
// ahead.
func TestDrainingAQueueReadsKeysInProportionToItsLength(t *testing.T) {
	e, keys := countingEngine(t)
	ctx := testCtx(t)
	holder := mustAcquire(t, e, req("q"))
	const n = 200
	var ws []*Waiter
	for i := 0; i < n; i++ {
		w, err := e.Enqueue(ctx, req("q"))
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	before := keys.Load()
	errs := make(chan error, n)
	for _, w := range ws {
		go func() {
			g, err := w.Wait(ctx)
			if err == nil {
				_, err = e.Release(ctx, g.Handle, g.Token())
			}
			errs <- err
		}()
	}
	mustRelease(t, e, holder)
	for range ws {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	read := keys.Load() - before
	t.Logf("draining %d waiters read %d keys (%.1f per waiter)", n, read, float64(read)/n)
	// Each waiter reads its own key and at most the one ahead per wake-up,
	// and wakes a handful of times; N² would be 20,000 here.
	if read > 8*n {
		t.Fatalf("draining %d waiters read %d keys; want at most %d (a few per waiter)", n, read, 8*n)
	}
}

// An enqueue whose answer is lost (the transaction applied, the reply never
// came) takes back what it wrote: a session lock granted into the void
// would otherwise hold the name for as long as the session lives.
func TestEnqueueWithLostAnswerLeavesNothing(t *testing.T) {
	e, link := proxiedEngine(t)
	direct := peer(t, e, shared.ClientFor(t))
	sess, stop := keptSession(t, direct)
	defer stop()
	var once sync.Once
	e.hooks = &pointHooks{fn: func(_ context.Context, p string) {
		if p == pointEnqueue {
			// From here on requests arrive and take effect, answers do
			// not.
			once.Do(func() { link.Set(netfault.Fault{LoseReplies: true}) })
		}
		if p == pointCleanup {
			link.Set(netfault.Fault{}) // the link heals before the take-back
		}
	}}
	for _, session := range []bool{true, false} {
		once = sync.Once{}
		r := req(fmt.Sprintf("lost-%v", session))
		if session {
			r.Session, r.SessionSecret = sess.Lease, sess.Secret
		}
		if _, err := e.cli.Get(testCtx(t), "/warm"); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(testCtx(t), time.Second)
		_, err := e.TryAcquire(ctx, r)
		cancel()

		if err == nil {
			t.Fatalf("TryAcquire with its answer lost = nil error")
		}
		other := req(r.Name)
		g, err := acquireWithin(testCtx(t), direct, other, 10*time.Second)
		if err != nil {
			t.Fatalf("the name after an acquire whose answer was lost (session %v): %v; want it free", session, err)
		}
		mustRelease(t, direct, g)
	}
}
