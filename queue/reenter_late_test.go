package queue

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// abandonHooks reports on done each Abandon's background give-up that ends.
type abandonHooks struct {
	pointHooks
	done chan struct{}
}

type abandonTaskKey struct{}

func (h *abandonHooks) spawn(ctx context.Context, task string) context.Context {
	return context.WithValue(ctx, abandonTaskKey{}, task)
}

func (h *abandonHooks) end(ctx context.Context) {
	if ctx.Value(abandonTaskKey{}) == "abandon" {
		h.done <- struct{}{}
	}
}

// expiringKV holds the next transaction that puts key until its context
// ends (the engine's RequestTimeout), answers its caller with that error,
// and applies it only when land is closed: a write etcd applies after its
// request timed out (a leader paused with the proposal in its log).
type expiringKV struct {
	clientv3.KV
	key   string
	armed chan struct{} // closed to arm; taken once
	land  chan struct{}
	late  chan struct{} // closed once the late write was applied
}

type expiringTxn struct {
	clientv3.Txn
	kv   *expiringKV
	ctx  context.Context
	puts bool
}

func (k *expiringKV) Txn(ctx context.Context) clientv3.Txn {
	return &expiringTxn{Txn: k.KV.Txn(context.WithoutCancel(ctx)), kv: k, ctx: ctx}
}
func (t *expiringTxn) If(cs ...clientv3.Cmp) clientv3.Txn { t.Txn = t.Txn.If(cs...); return t }
func (t *expiringTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	for _, op := range ops {
		t.puts = t.puts || op.IsPut() && string(op.KeyBytes()) == t.kv.key
	}
	t.Txn = t.Txn.Then(ops...)
	return t
}
func (t *expiringTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }
func (t *expiringTxn) Commit() (*clientv3.TxnResponse, error) {
	if !t.puts {
		return t.Txn.Commit()
	}
	select {
	case <-t.kv.armed:
		t.kv.armed = make(chan struct{}) // once
	default:
		return t.Txn.Commit()
	}
	<-t.ctx.Done()
	go func() {
		defer close(t.kv.late)
		<-t.kv.land
		_, _ = t.Txn.Commit()
	}()
	return nil, t.ctx.Err()
}

// TestAReentryAppliedAfterItsTimeoutIsGivenUp: a re-entrant acquire whose
// hold transaction etcd applies only after the engine's RequestTimeout
// answered it with an error. The give-up (Abandon) runs before the write
// lands and finds no hold; the write must not land after it, or the hold,
// granted to nobody, keeps the name through the session after its only
// delivered hold is released.
func TestAReentryAppliedAfterItsTimeoutIsGivenUp(t *testing.T) {
	e, _ := newEngine(t)
	cfg := e.Config()
	cfg.RequestTimeout = 300 * time.Millisecond
	cli, err := clientv3.New(clientv3.Config{Endpoints: shared.ClientFor(t).Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	kv := &expiringKV{KV: cli.KV, armed: make(chan struct{}), land: make(chan struct{}), late: make(chan struct{})}
	cli.KV = kv
	le, err := New(cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(le.Close)
	hooks := &abandonHooks{done: make(chan struct{}, 4)}
	le.hooks = hooks
	s := mustSession(t, e)
	outer := req("latehold")
	outer.Session, outer.SessionSecret, outer.Reentrant = s.Lease, s.Secret, true
	g := mustAcquire(t, e, outer)
	kv.key = e.keys.holds("latehold", g.WaiterID, g.Revision)
	close(kv.armed)
	inner := outer
	inner.RequestID = "inner-" + outer.RequestID
	if _, err := acquire(testCtx(t), le, inner); err == nil {
		t.Fatal("the re-entrant acquire whose write timed out succeeded")
	}
	<-hooks.done // the give-up looked, before the write landed
	close(kv.land)
	<-kv.late
	mustRelease(t, e, g)
	if !free(t, e, "latehold") {
		t.Fatal("the name is still held after its only delivered hold was released: a hold written after its give-up leaked")
	}
}
