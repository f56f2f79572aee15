package queue

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/internal/clock"
)

// TestLossWaitSurvivesTheNextWaiterLeaving: a holder lost without a clean end keeps the name from everyone for its
// TTL (loss.go), also when the waiter that first saw the loss gives up
// during the wait: the next waiter (holder A, waiters B and C; A lost, B
// gives up) reads A's record and waits out the rest of A's belief.
func TestLossWaitSurvivesTheNextWaiterLeaving(t *testing.T) {
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

// TestLossWaitOutlivesTheGrantingGateway: a holder granted after a wait has its record in etcd, so a loss is waited
// out also when the gateway that granted it has gone away (a rolling
// restart) and the holder renewed through
// another one: the next TryAcquire, on any gateway, is refused for the
// holder's TTL.
func TestLossWaitOutlivesTheGrantingGateway(t *testing.T) {
	clk := newFakeClock() // never advanced: the holder's belief never ends
	granting, cli := newEngine(t, func(c *Config) { c.Clock = clk })
	other, err := New(cli, granting.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	first := mustAcquire(t, granting, req("r"))
	next := waitingFor(t, granting, req("r"))
	mustRelease(t, granting, first)
	b := <-next // granted after a wait: watched by granting's hub only
	granting.Close()
	if _, err := other.Renew(testCtx(t), b.Handle, b.Token()); err != nil {
		t.Fatalf("Renew through another gateway: %v", err)
	}
	expireNow(t, cli, b) // etcd revokes the renewed lease early
	res, err := other.TryAcquire(testCtx(t), req("r"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Acquired {
		t.Fatalf("TryAcquire granted %q (token %d) while its lost holder (token %d), renewed a moment ago, still believes it holds", "r", res.Grant.Token(), b.Token())
	}
}

// taskGate holds every background task named task at its start until
// opened, and reports each arrival.
type taskGate struct {
	pointHooks
	task    string
	arrived chan struct{}
	open    chan struct{}
}

type taskKey struct{}

func (g *taskGate) spawn(ctx context.Context, task string) context.Context {
	return context.WithValue(ctx, taskKey{}, task)
}

func (g *taskGate) at(ctx context.Context, point string) {
	if point == pointSpawned && ctx.Value(taskKey{}) == g.task {
		select {
		case g.arrived <- struct{}{}:
		default:
		}
		select {
		case <-g.open:
		case <-ctx.Done():
		}
	}
}

// TestLossWaitRecordedBeforeTheGrant: a holder granted after a wait
// has its record in etcd before its grant is answered, so the moment etcd
// ends its lease a TryAcquire on any other gateway is refused: nothing
// waits for the granting gateway to notice the loss and write it down.
func TestLossWaitRecordedBeforeTheGrant(t *testing.T) {
	clk := newFakeClock()
	granting, cli := newEngine(t, func(c *Config) { c.Clock = clk })
	other, err := New(cli, granting.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	first := mustAcquire(t, granting, req("w"))
	next := waitingFor(t, granting, req("w"))
	mustRelease(t, granting, first)
	b := <-next
	expireNow(t, cli, b)
	res, err := other.TryAcquire(testCtx(t), req("w"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Acquired {
		t.Fatalf("TryAcquire granted %q (token %d) before the loss of its holder (token %d) was recorded", "w", res.Grant.Token(), b.Token())
	}
}

// TestLossWaitOfAHolderGoneBeforeItsWatchBegins: a waiter the hub
// found first may lose its lease between that verdict and its grant's
// answer. Its record must be in etcd before the answer (granting): the
// write compares the key, so a waiter whose key went is never told it
// holds; and one told it holds has a record its loss leaves behind, which
// the next TryAcquire waits out.
func TestLossWaitOfAHolderGoneBeforeItsWatchBegins(t *testing.T) {
	clk := newFakeClock()
	e, cli := newEngine(t, func(c *Config) { c.Clock = clk })
	first := mustAcquire(t, e, req("z"))
	var armed atomic.Bool
	var b Grant
	e.hooks = &pointHooks{fn: func(ctx context.Context, point string) {
		if point != pointGrant || !armed.CompareAndSwap(true, false) {
			return
		}
		// etcd ends the waiter's lease right after the hub's verdict.
		e.hubs.mu.Lock()
		h := e.hubs.m[e.keys.namePrefix("z")]
		e.hubs.mu.Unlock()
		var key string
		h.mu.Lock()
		for k := range h.keys {
			key = k
		}
		h.mu.Unlock()
		kv, err := cli.Get(context.Background(), key)
		if err != nil || len(kv.Kvs) != 1 {
			t.Errorf("reading the waiter's key %q: %v", key, err)
			return
		}
		resp, err := cli.Revoke(context.Background(), clientv3.LeaseID(kv.Kvs[0].Lease))
		if err != nil {
			t.Error(err)
			return
		}
		for h.viewRev() < resp.Header.Revision {
			time.Sleep(time.Millisecond) // the hub applies the deletion
		}
	}}
	w, err := e.Enqueue(testCtx(t), req("z"))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		g   Grant
		err error
	}
	next := make(chan result, 1)
	go func() {
		g, err := w.Wait(testCtx(t))
		next <- result{g, err}
	}()
	armed.Store(true)
	mustRelease(t, e, first)
	got := <-next
	if got.err != nil {
		if !errors.Is(got.err, ErrLeaseLost) {
			t.Fatalf("the waiter whose lease ended at its grant: %v; want granted or ErrLeaseLost", got.err)
		}
		return // never told it holds
	}
	b = got.g
	settle(e)
	if recs, err := cli.Get(testCtx(t), e.cfg.Prefix+"/delays/", clientv3.WithPrefix()); err == nil {
		t.Logf("records after the loss: %d", len(recs.Kvs))
	}
	res, err := e.TryAcquire(testCtx(t), req("z"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Acquired {
		t.Fatalf("TryAcquire granted %q (token %d) while the holder just told it holds (token %d, until %s) believes", "z", res.Grant.Token(), b.Token(), b.Deadline)
	}
}

// TestLossWaitOfASessionLockRetriedElsewhere: a session's lock retried
// through another gateway (the SDK retries an acquire whose answer was
// lost; the retry takes the key over) keeps a holder record with the
// session's TTL, read from etcd on a gateway that never saw the session:
// when etcd ends the session's lease, the next TryAcquire is refused for
// the session's TTL.
func TestLossWaitOfASessionLockRetriedElsewhere(t *testing.T) {
	clk := newFakeClock()
	e, cli := newEngine(t, func(c *Config) { c.Clock = clk })
	other, err := New(cli, e.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	s := mustSession(t, e)
	r := req("sr")
	r.Session, r.SessionSecret = s.Lease, s.Secret
	mustAcquire(t, e, r)
	g := mustAcquire(t, other, r) // the same acquire, retried through another gateway
	if _, err := other.KeepAliveSession(testCtx(t), s.Lease, s.Secret); err != nil {
		t.Fatal(err)
	}
	if resp, err := cli.Get(testCtx(t), e.keys.holderRecord("sr", g.WaiterID)); err == nil && len(resp.Kvs) > 0 {
		t.Logf("holder record after the retry: %q", resp.Kvs[0].Value)
	}
	if _, err := cli.Revoke(testCtx(t), s.Lease); err != nil { // etcd ends the session early
		t.Fatal(err)
	}
	res, err := other.TryAcquire(testCtx(t), req("sr"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Acquired {
		t.Fatalf("TryAcquire granted %q while the session's holder (token %d), renewed a moment ago, still believes it holds", "sr", g.Token())
	}
}

// TestLossWaitIsTheGrantedTTL: etcd grants no lease shorter
// than its minimum (1.5 election timeouts, rounded up: 2 s with etcd's
// defaults), and the holder is told the TTL etcd granted (Grant.TTL) and
// believes for that long: the loss wait is that granted TTL, not the one
// the acquire asked for.
func TestLossWaitIsTheGrantedTTL(t *testing.T) {
	clk := newFakeClock()
	e, cli := newEngine(t, func(c *Config) { c.Clock = clk })
	r := req("short")
	r.TTL = time.Second
	g := mustAcquire(t, e, r)
	if g.TTL <= r.TTL {
		t.Skipf("etcd granted the TTL asked for (%s): nothing to show", g.TTL)
	}
	expireNow(t, cli, g)
	res, err := e.TryAcquire(testCtx(t), req("short"))
	if err != nil || res.Acquired {
		t.Fatalf("TryAcquire right after the loss = %+v, %v; want refused", res, err)
	}
	settle(e)
	clk.Advance(r.TTL) // the asked-for TTL has passed; the granted one has not
	res, err = e.TryAcquire(testCtx(t), req("short"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Acquired {
		t.Fatalf("TryAcquire %s after the loss granted the name; its holder was granted a %s TTL and may believe until then", r.TTL, g.TTL)
	}
}

// TestLockDelaySkewMargin: the loss wait is measured from a
// stamp on the clock of whichever gateway saw the loss first and read on
// every other gateway's clock; a gateway reading another's stamp adds
// MaxClockSkew. A gateway behind by up to that bound stamps the loss, and
// a gateway on time grants no earlier than the lost holder's TTL after
// the loss. (A waiter on the slow gateway sees the loss and gives up; a
// TryAcquire on the other is refused until then.)
func TestLockDelaySkewMargin(t *testing.T) {
	const skew = 3 * time.Second
	onTime := newFakeClock()
	behind := clock.NewFake(onTime.Now().Add(-skew))
	// The gateways' clocks disagree by as much as they are configured to.
	slow, cli := newEngine(t, func(c *Config) { c.Clock, c.MaxClockSkew = behind, skew })
	cfg := slow.Config()
	cfg.Clock = onTime
	other, err := New(cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	a := mustAcquire(t, other, req("sk"))
	wb, err := slow.Enqueue(testCtx(t), req("sk"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() { _, err := wb.Wait(ctx); done <- err }()
	awaitStamped(t, cli, slow.keys.delay("sk", a.WaiterID), expireNow(t, cli, a))
	cancel()
	<-done
	settle(slow)
	elapsed := a.TTL - skew + time.Millisecond
	onTime.Advance(elapsed)
	behind.Advance(elapsed)
	res, err := other.TryAcquire(testCtx(t), req("sk"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Acquired {
		t.Fatalf("TryAcquire granted the name %s after the loss; the lost holder (TTL %s) may believe for %s more", elapsed, a.TTL, a.TTL-elapsed)
	}
}

// TestLossWaitOfAStableRequestID: a request id used again after its
// lock was lost uncleanly (a worker's stable request id, a supported
// pattern) gets a record of its own key's incarnation: it does not wait
// out its own earlier loss twice, and when it is lost in turn, the next
// caller waits out its belief.
func TestLossWaitOfAStableRequestID(t *testing.T) {
	clk := newFakeClock()
	e, cli := newEngine(t, func(c *Config) { c.Clock = clk })
	r := req("stable")
	r.RequestID = "worker-7"
	first := mustAcquire(t, e, r)
	expireNow(t, cli, first)
	e.sweepOnce(testCtx(t), 0) // a gateway sees the loss (and stamps it)
	clk.Advance(time.Hour)     // any wait of that loss is long over
	got := make(chan Grant, 1)
	go func() {
		g, err := acquire(testCtx(t), e, r)
		if err != nil {
			t.Error(err)
		}
		got <- g
	}()
	var again Grant
	select {
	case again = <-got:
	case <-time.After(3 * time.Second):
		t.Errorf("the re-acquire of a free name, an hour after the request id's previous lock was lost, waits on its own holder record")
		for again.Token() == 0 {
			clk.Advance(time.Second)
			select {
			case again = <-got:
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	if resp, err := cli.Get(testCtx(t), e.keys.holderRecord("stable", again.WaiterID)); err == nil {
		if len(resp.Kvs) == 0 {
			t.Logf("the new holder (key created at %d) has no holder record", again.Revision)
		} else {
			t.Logf("the new holder (key created at %d) has a holder record created at %d: %q", again.Revision, resp.Kvs[0].CreateRevision, resp.Kvs[0].Value)
		}
	}
	expireNow(t, cli, again) // lost in turn, behind its back
	res, err := e.TryAcquire(testCtx(t), req("stable"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Acquired {
		t.Fatalf("TryAcquire granted the name at once beside its lost holder (token %d), which may still believe it holds", again.Token())
	}
}

// TestLossWaitBehindASemaphoreRelease: a semaphore of limit 2 with
// holders A and B and a waiter C: A's lease ends behind its back and, a
// moment later, B releases. C is first either way; it waits out A's loss
// (its belief), whatever order the hub applied the two revisions in.
func TestLossWaitBehindASemaphoreRelease(t *testing.T) {
	clk := newFakeClock()
	e, cli := newEngine(t, func(c *Config) { c.Clock = clk })
	sem := func() AcquireRequest { r := req("sem"); r.Limit = 2; return r }
	a, b := mustAcquire(t, e, sem()), mustAcquire(t, e, sem())
	rc := sem()
	cKey := e.keys.waiter("sem", WaiterID(rc.RequestID))
	isParked, open := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.hooks = &pointHooks{onPark: func(_ context.Context, p parked) {
		if p.own == cKey {
			once.Do(func() { close(isParked); <-open })
		}
	}}
	c := waitingFor(t, e, rc)
	<-isParked // C is about to wait for its hub's word
	expireNow(t, cli, a)
	rel, err := e.Release(testCtx(t), b.Handle, b.Token())
	if err != nil || !rel {
		t.Fatalf("release of B = %v, %v", rel, err)
	}
	e.hubs.mu.Lock()
	h := e.hubs.m[e.keys.namePrefix("sem")]
	e.hubs.mu.Unlock()
	for left := 3; left > 1; time.Sleep(time.Millisecond) { // the hub applies both revisions
		h.mu.Lock()
		left = len(h.keys)
		h.mu.Unlock()
	}
	close(open)
	notGranted(t, c, "while the lost holder A may still believe it holds")
}
