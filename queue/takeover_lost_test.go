package queue

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// lossyKV applies every transaction and, when armed, loses the answer of
// the next one that puts key: what a timeout or a broken connection does
// to a call etcd had already applied.
type lossyKV struct {
	clientv3.KV
	key    string
	lose   atomic.Bool
	onLose func() // called as an answer is lost, if set
}

type lossyTxn struct {
	clientv3.Txn
	kv   *lossyKV
	puts bool // its Then puts kv.key
}

func (k *lossyKV) Txn(ctx context.Context) clientv3.Txn {
	return &lossyTxn{Txn: k.KV.Txn(context.WithoutCancel(ctx)), kv: k}
}

func (t *lossyTxn) If(cs ...clientv3.Cmp) clientv3.Txn { t.Txn = t.Txn.If(cs...); return t }
func (t *lossyTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	for _, op := range ops {
		t.puts = t.puts || op.IsPut() && string(op.KeyBytes()) == t.kv.key
	}
	t.Txn = t.Txn.Then(ops...)
	return t
}
func (t *lossyTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }
func (t *lossyTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	if err == nil && t.puts && t.kv.lose.CompareAndSwap(true, false) {
		if t.kv.onLose != nil {
			t.kv.onLose()
		}
		return nil, errors.New("the answer was lost (applied)")
	}
	return resp, err
}

// engineThrough is an engine with e's config whose etcd client sends its
// KV calls through wrap (a client of its own, to e's cluster).
func engineThrough(t *testing.T, e *Engine, wrap func(clientv3.KV) clientv3.KV) *Engine {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: shared.ClientFor(t).Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	cli.KV = wrap(cli.KV)
	le, err := New(cli, e.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(le.Close)
	return le
}

// cleanups reports on the returned channel each cleanup of le that ends.
func cleanups(le *Engine) <-chan struct{} {
	cleaned := make(chan struct{}, 16)
	le.hooks = &pointHooks{fn: func(_ context.Context, p string) {
		if p == pointCleaned {
			cleaned <- struct{}{}
		}
	}}
	return cleaned
}

// TestTakeoverWithALostAnswerIsTakenBack: a session waiter retried (the SDK
// retries an acquire with its request id) whose takeover etcd applied but
// whose answer was lost is taken back: the key, owned by no attempt, is
// removed, on a gateway that always has another session waiter keeping its
// attempt lease alive too, and the name is free once its holder leaves.
func TestTakeoverWithALostAnswerIsTakenBack(t *testing.T) {
	const attemptTTL = 2 * time.Second
	cli := shared.ClientFor(t)
	lossy, err := clientv3.New(clientv3.Config{Endpoints: cli.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lossy.Close() })
	r := req("orphan")
	kv := &lossyKV{KV: lossy.KV}
	lossy.KV = kv
	e, _ := newEngine(t, func(c *Config) { c.AttemptTTL = attemptTTL })
	cfg := e.Config()
	kv.key = e.keys.waiter("orphan", WaiterID(r.RequestID))
	le, err := New(lossy, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(le.Close)
	le.hooks = &pointHooks{fn: func(_ context.Context, p string) {
		if p == pointTakeover {
			kv.lose.Store(true)
		}
	}}
	s, err := le.OpenSession(testCtx(t), "c", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	holder := mustAcquire(t, e, req("orphan"))
	// Another session waiter keeps the gateway busy: it references the
	// attempt lease for as long as it waits.
	busyHolder := mustAcquire(t, e, req("busy"))
	busy := req("busy")
	busy.Session, busy.SessionSecret = s.Lease, s.Secret
	busyCtx, stopBusy := context.WithCancel(testCtx(t))
	t.Cleanup(stopBusy)
	go func() { _, _ = acquire(busyCtx, le, busy) }()

	r.Session, r.SessionSecret = s.Lease, s.Secret
	w, err := le.Enqueue(testCtx(t), r)
	if err != nil {
		t.Fatal(err)
	}
	firstCtx, stopFirst := context.WithCancelCause(testCtx(t))
	firstDone := make(chan error, 1)
	go func() { _, err := w.Wait(firstCtx); firstDone <- err }()
	// The SDK retries the acquire (its stream broke); etcd applies the
	// takeover and the answer is lost; the caller then gives up.
	if _, err := acquire(testCtx(t), le, r); err == nil {
		t.Fatal("the retried acquire whose answer was lost succeeded")
	}
	stopFirst(ErrDetached)
	<-firstDone
	mustRelease(t, e, holder)
	deadline := time.Now().Add(4 * attemptTTL)
	for time.Now().Before(deadline) {
		if free(t, e, "orphan") {
			stopBusy()
			mustRelease(t, e, busyHolder)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	if resp, err := cli.Get(testCtx(t), e.keys.namePrefix("orphan"), clientv3.WithPrefix()); err == nil && len(resp.Kvs) > 0 {
		le.att.mu.Lock()
		att := le.att.id
		le.att.mu.Unlock()
		t.Logf("the name's key rides on lease %x; the gateway's attempt lease is %x", resp.Kvs[0].Lease, int64(att))
	}
	stopBusy()
	mustRelease(t, e, busyHolder)
	t.Fatalf("the name is still held %s after its only waiter's retry failed (AttemptTTL %s): a key of nobody's rides on the busy gateway's attempt lease", 4*attemptTTL, attemptTTL)
}

// TestGrantMoveWithALostAnswerIsTakenBack: a session waiter's grant moves
// its key onto the session lease; when etcd applies the move, its answer
// is lost and the caller gives up at that moment, the move is in doubt. The
// attempt's cleanup must take the key back wherever it rides: a key left
// on the session lease would hold the name, granted to nobody, for as long
// as the session lives.
func TestGrantMoveWithALostAnswerIsTakenBack(t *testing.T) {
	cli := shared.ClientFor(t)
	e, _ := newEngine(t)
	var kv *lossyKV
	le := engineThrough(t, e, func(in clientv3.KV) clientv3.KV { kv = &lossyKV{KV: in}; return kv })
	cleaned := cleanups(le)
	s, err := le.OpenSession(testCtx(t), "c", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	holder := mustAcquire(t, e, req("moved"))
	r := req("moved")
	r.Session, r.SessionSecret = s.Lease, s.Secret
	key := e.keys.waiter("moved", WaiterID(r.RequestID))
	kv.key = key
	w, err := le.Enqueue(testCtx(t), r)
	if err != nil {
		t.Fatal(err)
	}
	ctx, giveUp := context.WithCancel(testCtx(t))
	kv.onLose = giveUp
	kv.lose.Store(true) // the next put of the key is the grant's move
	done := make(chan error, 1)
	go func() { _, err := w.Wait(ctx); done <- err }()
	mustRelease(t, e, holder)
	if err := <-done; err == nil {
		t.Fatal("the wait whose grant's answer was lost succeeded")
	}
	<-cleaned
	resp, err := cli.Get(testCtx(t), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) > 0 {
		t.Fatalf("the waiter's key is still there after its cleanup, on lease %x (the session's is %x)", resp.Kvs[0].Lease, int64(s.Lease))
	}
	if !free(t, e, "moved") {
		t.Fatal("the name is held after its only waiter gave up")
	}
}

// TestReentryWithALostAnswerIsGivenUp: a re-entrant acquire whose hold
// etcd added while its answer was lost must give that hold up: left, it
// would keep the name held through the session after the holder's own
// release, granted to a caller that never heard of it.
func TestReentryWithALostAnswerIsGivenUp(t *testing.T) {
	cli := shared.ClientFor(t)
	e, _ := newEngine(t)
	var kv *lossyKV
	le := engineThrough(t, e, func(in clientv3.KV) clientv3.KV { kv = &lossyKV{KV: in}; return kv })
	s := mustSession(t, e)
	outer := req("reheld")
	outer.Session, outer.SessionSecret, outer.Reentrant = s.Lease, s.Secret, true
	g := mustAcquire(t, e, outer)
	hkey := e.keys.holds("reheld", g.WaiterID, g.Revision)
	kv.key = hkey
	kv.lose.Store(true)
	inner := outer
	inner.RequestID = "inner-" + outer.RequestID
	wctx, stop := context.WithTimeout(testCtx(t), 10*time.Second)
	defer stop()
	watch := cli.Watch(wctx, hkey)
	if _, err := acquire(testCtx(t), le, inner); err == nil {
		t.Fatal("the re-entrant acquire whose answer was lost succeeded")
	}
	// The lost hold's write, then its give-up.
	for seen := 0; seen < 2; {
		wr, ok := <-watch
		if !ok {
			t.Fatalf("the hold added without an answer was not given up within 10s (%d writes of its record seen)", seen)
		}
		seen += len(wr.Events)
	}
	mustRelease(t, e, g)
	if !free(t, e, "reheld") {
		t.Fatal("the name is still held after its only delivered hold was released")
	}
}

// lateKV holds the next transaction that puts key (or nests one) once
// armed, until proceed is closed — or, with atDeadline, until its caller's
// context ends (the engine's RequestTimeout). If the caller's context
// ended meanwhile, the caller is told so and the transaction is applied
// only when land is closed: what etcd does with a write whose caller
// cancelled it or timed out in flight (a leader paused with the proposal
// in its log), which it may still apply after every cleanup has looked.
type lateKV struct {
	clientv3.KV
	key                    string
	atDeadline             bool
	armed                  atomic.Bool
	entered, proceed, land chan struct{}
	late                   chan struct{} // closed once a late write was applied
	wasLate                atomic.Bool
}

// newLateKV wraps in; see lateKV.
func newLateKV(in clientv3.KV, atDeadline bool) *lateKV {
	return &lateKV{KV: in, atDeadline: atDeadline, entered: make(chan struct{}), proceed: make(chan struct{}),
		land: make(chan struct{}), late: make(chan struct{})}
}

type lateTxn struct {
	clientv3.Txn
	kv   *lateKV
	ctx  context.Context
	puts bool
}

func (k *lateKV) Txn(ctx context.Context) clientv3.Txn {
	return &lateTxn{Txn: k.KV.Txn(context.WithoutCancel(ctx)), kv: k, ctx: ctx}
}

func (t *lateTxn) If(cs ...clientv3.Cmp) clientv3.Txn { t.Txn = t.Txn.If(cs...); return t }
func (t *lateTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	for _, op := range ops {
		t.puts = t.puts || op.IsTxn() || op.IsPut() && string(op.KeyBytes()) == t.kv.key
	}
	t.Txn = t.Txn.Then(ops...)
	return t
}
func (t *lateTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }
func (t *lateTxn) Commit() (*clientv3.TxnResponse, error) {
	if !t.puts || !t.kv.armed.CompareAndSwap(true, false) {
		return t.Txn.Commit()
	}
	close(t.kv.entered)
	if t.kv.atDeadline {
		<-t.ctx.Done()
	} else {
		<-t.kv.proceed
	}
	if err := t.ctx.Err(); err != nil {
		t.kv.wasLate.Store(true)
		go func() {
			defer close(t.kv.late)
			<-t.kv.land
			_, _ = t.Txn.Commit()
		}()
		return nil, err
	}
	return t.Txn.Commit()
}

// TestAnEnqueueItsCallerLeftIsAnswered: a session acquire of a free name
// puts its key straight onto the session lease. When its caller goes while
// the transaction is in flight, etcd may still apply it after the
// attempt's cleanup found nothing to take back: the key would hold the
// name, granted to nobody, for the session's life. The enqueue's write is
// answered whatever its caller does, so the attempt knows its key and
// gives it up.
func TestAnEnqueueItsCallerLeftIsAnswered(t *testing.T) {
	cli := shared.ClientFor(t)
	e, _ := newEngine(t)
	var kv *lateKV
	le := engineThrough(t, e, func(in clientv3.KV) clientv3.KV {
		kv = newLateKV(in, false)
		return kv
	})
	cleaned := cleanups(le)
	s, err := le.OpenSession(testCtx(t), "c", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r := req("left")
	r.Session, r.SessionSecret = s.Lease, s.Secret
	key := e.keys.waiter("left", WaiterID(r.RequestID))
	kv.key = key
	kv.armed.Store(true)
	ctx, leave := context.WithCancel(testCtx(t))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if g, err := acquire(ctx, le, r); err == nil {
			le.Abandon(context.Background(), g) // as a gateway gives up a grant it cannot send
		}
	}()
	<-kv.entered
	leave()
	close(kv.proceed)
	<-done
	<-cleaned
	if kv.wasLate.Load() {
		close(kv.land)
		<-kv.late
	}
	resp, err := cli.Get(testCtx(t), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) > 0 {
		t.Fatalf("the key of an enqueue whose caller left is there, on lease %x (the session's is %x)", resp.Kvs[0].Lease, int64(s.Lease))
	}
	if !free(t, e, "left") {
		t.Fatal("the name is held after its only caller left")
	}
}
