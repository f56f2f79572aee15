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
	kv := newLateKV(cli.KV, true)
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
	kv.armed.Store(true)
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
