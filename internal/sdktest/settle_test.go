package sdktest_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasegate/leasegate/client"
)

// TestGrantWhoseAnswerWasLostIsGivenUpWhateverElseUsesItsRequestID: a
// request id is a retry key of one name: the gateway keys a waiter by
// name and request id, so a session may hold one name under a request id
// and ask for another under the same id. A grant whose answer was lost is
// given up all the same: neither what the id holds on another name nor a
// later call under the id that is not a retry of the lost one (another
// name, other options) keeps it or ends its give-up.
func TestGrantWhoseAnswerWasLostIsGivenUpWhateverElseUsesItsRequestID(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	t.Run("held on another name", func(t *testing.T) {
		t.Parallel()
		ctx := ctxT(t)
		c, tr := lossyClient(t, g.URL)
		s := openSession(t, c)
		a, err := s.Acquire(ctx, "elsewhere/a", client.WithRequestID("job-7"))
		if err != nil {
			t.Fatal(err)
		}
		abandon(t, tr, "/Acquire", func(ctx context.Context) error {
			_, err := s.Acquire(ctx, "elsewhere/b", client.WithRequestID("job-7"))
			return err
		})
		awaitFree(t, g.URL, "elsewhere/b")
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a call on another name", func(t *testing.T) {
		t.Parallel()
		ctx := ctxT(t)
		c, tr := lossyClient(t, g.URL)
		s := openSession(t, c)
		// The give-up's ask (a TryAcquire) stays in flight until the
		// call on the other name has come.
		open := holdCalls(t, tr, "/TryAcquire")
		abandon(t, tr, "/Acquire", func(ctx context.Context) error {
			_, err := s.Acquire(ctx, "taken/b", client.WithRequestID("job-8"))
			return err
		})
		a, err := s.Acquire(ctx, "taken/a", client.WithRequestID("job-8"))
		if err != nil {
			t.Fatal(err)
		}
		open()
		awaitFree(t, g.URL, "taken/b")
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a call with other options", func(t *testing.T) {
		t.Parallel()
		ctx := ctxT(t)
		c, tr := lossyClient(t, g.URL)
		s := openSession(t, c)
		outer, err := s.Acquire(ctx, "options", client.WithReentrant())
		if err != nil {
			t.Fatal(err)
		}
		// A re-entrant hold whose answer was lost, its give-up's ask in
		// flight ...
		open := holdCalls(t, tr, "/TryAcquire")
		abandon(t, tr, "/Acquire", func(ctx context.Context) error {
			_, err := s.Acquire(ctx, "options", client.WithReentrant(), client.WithRequestID("job-9"))
			return err
		})
		// ... and a later call under its id without WithReentrant, which
		// waits behind the session's own lock and gives up.
		if _, err := s.Acquire(ctx, "options", client.WithRequestID("job-9"), client.WithWaitTimeout(200*time.Millisecond)); !errors.Is(err, client.ErrWaitTimeout) {
			t.Fatalf("a plain acquire behind the session's own lock = %v; want ErrWaitTimeout", err)
		}
		open()
		if err := outer.Release(ctx); err != nil {
			t.Fatal(err)
		}
		awaitFree(t, g.URL, "options")
	})
}

// holdCalls holds tr's calls to path until the function it returns is
// called (or the test ends).
func holdCalls(t *testing.T, tr *lostAnswers, path string) (open func()) {
	held := make(chan struct{})
	var once sync.Once
	open = func() {
		once.Do(func() {
			tr.mu.Lock()
			tr.hold = nil
			tr.mu.Unlock()
			close(held)
		})
	}
	t.Cleanup(open)
	tr.mu.Lock()
	tr.hold, tr.holdPath = held, path
	tr.mu.Unlock()
	return open
}

// lateCalls is a transport whose first call whose path late picks reaches
// the gateway late: the caller's attempt waits until its context ends and fails, and
// the request, already on its way, is delivered only at land — a call slow
// in the gateway or in etcd that takes effect after the caller gave up on
// it. Later calls pass.
type lateCalls struct {
	base http.RoundTripper
	late func(path string) bool

	mu      sync.Mutex
	armed   bool
	deliver chan struct{}
	seen    chan struct{} // receives when the call is held
	wg      sync.WaitGroup
	landed  int // calls the gateway answered
	once    sync.Once
}

func newLateCalls(base http.RoundTripper, late func(path string) bool) *lateCalls {
	return &lateCalls{base: base, late: late, armed: true, deliver: make(chan struct{}), seen: make(chan struct{}, 1)}
}

func (l *lateCalls) RoundTrip(r *http.Request) (*http.Response, error) {
	l.mu.Lock()
	armed := l.armed && l.late(r.URL.Path)
	if armed {
		l.armed = false
		l.wg.Add(1)
	}
	l.mu.Unlock()
	if !armed {
		return l.base.RoundTrip(r)
	}
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		l.wg.Done()
		return nil, err
	}
	late := r.Clone(context.WithoutCancel(r.Context()))
	late.Body, late.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	late.GetBody = nil
	go func() {
		defer l.wg.Done()
		<-l.deliver
		resp, err := l.base.RoundTrip(late)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		l.mu.Lock()
		if resp.StatusCode == http.StatusOK {
			l.landed++
		}
		l.mu.Unlock()
	}()
	select {
	case l.seen <- struct{}{}:
	default:
	}
	<-r.Context().Done()
	return nil, r.Context().Err()
}

// land disarms l and delivers the call it held, and waits for its answer;
// it returns how many the gateway answered.
func (l *lateCalls) land() int {
	l.mu.Lock()
	l.armed = false
	l.mu.Unlock()
	l.once.Do(func() { close(l.deliver) })
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.landed
}

// TestRetryOfAnAbandonedRequestIDKeepsItsGrantWhenTheGiveUpsReleaseLandsLate:
// a call that takes a give-up over waits out a release in flight, so the
// release never lands after the call's grant. A release the give-up stopped
// waiting for (its request timeout passed) may still be on its way: the
// retry that is then handed the same grant must keep it all the same.
func TestRetryOfAnAbandonedRequestIDKeepsItsGrantWhenTheGiveUpsReleaseLandsLate(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	ctx := ctxT(t)
	base := h2cTransport()
	t.Cleanup(base.CloseIdleConnections)
	late := newLateCalls(base, func(path string) bool { return strings.HasSuffix(path, "LockService/Release") })
	t.Cleanup(func() { late.land() })
	tr := &lostAnswers{base: late}
	c := newClient(t, []string{g.URL}, client.WithClientID("lossy"), client.WithRequestTimeout(time.Second),
		client.WithHTTPClient(&http.Client{Transport: tr}))
	s := openSession(t, c)
	abandon(t, tr, "/Acquire", func(ctx context.Context) error {
		_, err := s.Acquire(ctx, "late", client.WithRequestID("late-id"))
		return err
	})
	await(t, late.seen, "the give-up's release")
	l, err := s.Acquire(ctx, "late", client.WithRequestID("late-id"), client.WithWaitTimeout(15*time.Second))
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if n := late.land(); n == 0 {
		t.Log("the late release did not reach the gateway")
	}
	other := newClient(t, []string{g.URL}, client.WithClientID("other"))
	if o, err := other.TryAcquire(ctx, "late"); !errors.Is(err, client.ErrNotAcquired) {
		if o != nil {
			_ = o.Release(ctx)
		}
		t.Fatalf("another client's TryAcquire while the retry holds token %d (its Err: %v) = %v; want ErrNotAcquired: the give-up's late release freed the retry's grant", l.Token(), l.Err(), err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestCampaignAbandonedWhileQueuedNeverLeads: a campaign whose caller gave
// up while it waited in the queue leaves the queue at once (Acquire's
// promise, which Campaign shares). Nothing campaigns for it afterwards: it
// never leads, never publishes its value, and never stands before a
// campaigner who came later.
func TestCampaignAbandonedWhileQueuedNeverLeads(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	ctx := ctxT(t)
	lead := newClient(t, []string{g.URL}, client.WithClientID("lead"))
	term, err := lead.Election("abandoned").Campaign(ctx, []byte("lead"))
	if err != nil {
		t.Fatal(err)
	}
	c, tr := lossyClient(t, g.URL)
	// The session's client never gets a Release through: whatever it is
	// elected to, it keeps leading, so a term it should never have had
	// shows.
	holdCalls(t, tr, "LockService/Release")
	s := openSession(t, c)
	qctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_, err = s.Election("abandoned").Campaign(qctx, []byte("abandoned"), client.WithOnQueued(func(int64) { cancel() }))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a campaign cancelled while queued = %v; want context.Canceled", err)
	}
	if err := term.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	// Two campaigns in turn, each elected and resigning: whenever a
	// campaign for the abandoned one reached the queue, one of them finds it
	// leading.
	for _, who := range []string{"next", "last"} {
		other := newClient(t, []string{g.URL}, client.WithClientID(who))
		l, err := other.Election("abandoned").Campaign(ctx, []byte(who), client.WithWaitTimeout(12*time.Second))
		if err != nil {
			leader := "nobody"
			if li, lerr := other.Election("abandoned").Leader(ctx); lerr == nil {
				leader = string(li.Value)
			}
			t.Fatalf("campaign %q after the leader resigned = %v (the leader is %q); want elected: the campaign abandoned while queued campaigned on", who, err, leader)
		}
		if err := l.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRetryKeepsItsQueuePlaceWhenTheGiveUpsAskLandsLate: a call that takes
// a give-up over cuts its ask short and waits in the queue as a retry. An
// ask cut short may still take effect at the gateway (a TryAcquire under
// the id takes a waiting key back). The retry must keep the place it
// queued at all the same, ahead of a waiter who came after it.
func TestRetryKeepsItsQueuePlaceWhenTheGiveUpsAskLandsLate(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	ctx := ctxT(t)
	holder := newClient(t, []string{g.URL}, client.WithClientID("holder"))
	h, err := holder.Acquire(ctx, "place")
	if err != nil {
		t.Fatal(err)
	}
	base := h2cTransport()
	t.Cleanup(base.CloseIdleConnections)
	// The give-up's ask: any call but an Acquire stream and the session's
	// own.
	late := newLateCalls(base, func(path string) bool {
		return !strings.HasSuffix(path, "/Acquire") && !strings.Contains(path, "Session")
	})
	t.Cleanup(func() { late.land() })
	c := newClient(t, []string{g.URL}, client.WithClientID("late"), client.WithHTTPClient(&http.Client{Transport: late}))
	s := openSession(t, c)
	qctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if _, err := s.Acquire(qctx, "place", client.WithRequestID("place-id"), client.WithOnQueued(func(int64) { cancel() })); !errors.Is(err, context.Canceled) {
		t.Fatalf("an acquire cancelled while queued = %v; want context.Canceled", err)
	}
	await(t, late.seen, "the give-up's ask")

	type result struct {
		l   *client.Lock
		err error
	}
	queuedAs := func(ch chan struct{}) client.AcquireOption {
		return client.WithOnQueued(func(int64) {
			select {
			case ch <- struct{}{}:
			default:
			}
		})
	}
	retryQueued, retried := make(chan struct{}, 1), make(chan result, 1)
	go func() {
		l, err := s.Acquire(ctx, "place", client.WithRequestID("place-id"), queuedAs(retryQueued))
		retried <- result{l, err}
	}()
	await(t, retryQueued, "the retry queued")
	behind := newClient(t, []string{g.URL}, client.WithClientID("behind"))
	laterQueued, later := make(chan struct{}, 1), make(chan result, 1)
	go func() {
		l, err := behind.Acquire(ctx, "place", queuedAs(laterQueued))
		later <- result{l, err}
	}()
	await(t, laterQueued, "the later waiter queued")
	late.land() // the ask the retry cut short reaches the gateway now
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-retried:
		if r.err != nil {
			t.Fatalf("retry: %v", r.err)
		}
		if err := r.l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		r = await(t, later, "the later waiter's grant")
		if r.err != nil {
			t.Fatal(r.err)
		}
		if err := r.l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case r := <-later:
		if r.l != nil {
			_ = r.l.Release(ctx)
		}
		t.Fatalf("the waiter who queued after the retry was answered first (%v): the give-up's late ask took the retry's place", r.err)
	case <-time.After(20 * time.Second):
		t.Fatal("timed out waiting for a grant")
	}
}

// TestSessionAcquireAbandonedWhileQueuedNeverTakesTheName: an acquire
// cancelled while it waits behind a holder leaves the queue, and nothing
// asks for the name on its behalf afterwards: once the holder lets go, the
// name is freed.
func TestSessionAcquireAbandonedWhileQueuedNeverTakesTheName(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	ctx := ctxT(t)
	holder := newClient(t, []string{g.URL}, client.WithClientID("holder"))
	h, err := holder.Acquire(ctx, "abandoned-wait")
	if err != nil {
		t.Fatal(err)
	}
	base := h2cTransport()
	t.Cleanup(base.CloseIdleConnections)
	// The give-up's ask (any call but an Acquire stream and the session's
	// own) reaches the gateway only after the holder let go.
	late := newLateCalls(base, func(path string) bool {
		return !strings.HasSuffix(path, "/Acquire") && !strings.Contains(path, "Session")
	})
	t.Cleanup(func() { late.land() })
	c := newClient(t, []string{g.URL}, client.WithClientID("late"), client.WithHTTPClient(&http.Client{Transport: late}))
	s := openSession(t, c)
	qctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if _, err := s.Acquire(qctx, "abandoned-wait", client.WithOnQueued(func(int64) { cancel() })); !errors.Is(err, context.Canceled) {
		t.Fatalf("an acquire cancelled while queued = %v; want context.Canceled", err)
	}
	await(t, late.seen, "the give-up's ask")
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	late.land()
	// The stream's end may reach the gateway after the holder's release:
	// the waiting key is then granted and taken back, so the name is free
	// within a wait, not at once. A name taken for the give-up stays held
	// on the session's lease, beyond the wait.
	awaitFree(t, g.URL, "abandoned-wait")
}

// TestRetryOfAnAbandonedHoldKeepsItsHoldWhenTheGiveUpsReleaseLandsLate:
// a re-entered hold is named by its lock and its request id, so a hold
// taken again under the same request id, after the give-up released the
// lost one, has the released hold's lock id. The give-up's release that
// lands late (its first try's answer was lost) must not drop the hold the
// call taking the give-up over was granted.
func TestRetryOfAnAbandonedHoldKeepsItsHoldWhenTheGiveUpsReleaseLandsLate(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	ctx := ctxT(t)
	base := h2cTransport()
	t.Cleanup(base.CloseIdleConnections)
	late := newLateCalls(base, func(path string) bool { return strings.HasSuffix(path, "LockService/Release") })
	t.Cleanup(func() { late.land() })
	tr := &lostAnswers{base: late}
	c := newClient(t, []string{g.URL}, client.WithClientID("lossy"), client.WithRequestTimeout(time.Second),
		client.WithHTTPClient(&http.Client{Transport: tr}))
	s := openSession(t, c)
	outer, err := s.Acquire(ctx, "lateh", client.WithReentrant())
	if err != nil {
		t.Fatal(err)
	}
	abandon(t, tr, "/Acquire", func(ctx context.Context) error {
		_, err := s.Acquire(ctx, "lateh", client.WithReentrant(), client.WithRequestID("hold-id"))
		return err
	})
	await(t, late.seen, "the give-up's release")
	l, err := s.Acquire(ctx, "lateh", client.WithReentrant(), client.WithRequestID("hold-id"), client.WithWaitTimeout(15*time.Second))
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if n := late.land(); n == 0 {
		t.Log("the late release did not reach the gateway")
	}
	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	other := newClient(t, []string{g.URL}, client.WithClientID("other"))
	if o, err := other.TryAcquire(ctx, "lateh"); !errors.Is(err, client.ErrNotAcquired) {
		if o != nil {
			_ = o.Release(ctx)
		}
		t.Fatalf("another client's TryAcquire while the retry's hold (token %d, Err %v) keeps the lock = %v; want ErrNotAcquired: the give-up's late release dropped the retry's hold", l.Token(), l.Err(), err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
