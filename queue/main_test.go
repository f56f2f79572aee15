package queue

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/internal/etcdtest"
)

// shared is one embedded etcd for the package; every test works under its
// own key prefix.
var shared *etcdtest.Cluster

func TestMain(m *testing.M) {
	os.Exit(etcdtest.Main(m, func(c *etcdtest.Cluster) { shared = c }))
}

var prefixSeq atomic.Int64

// newEngine returns an engine under a prefix of its own, with cfg's
// adjustments applied to the defaults.
func newEngine(t testing.TB, adjust ...func(*Config)) (*Engine, *clientv3.Client) {
	t.Helper()
	cli := shared.ClientFor(t)
	cfg := DefaultConfig()
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	cfg.Prefix = fmt.Sprintf("/test/%s-%d", name, prefixSeq.Add(1))
	for _, f := range adjust {
		f(&cfg)
	}
	e, err := New(cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e, cli
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var reqSeq atomic.Int64

func req(name string) AcquireRequest {
	return AcquireRequest{Name: name, TTL: 10 * time.Second, ClientID: "c", RequestID: fmt.Sprintf("req-%d", reqSeq.Add(1))}
}

// acquire is one streaming acquire as the gateway makes it: Enqueue, then
// Wait, both under ctx.
func acquire(ctx context.Context, e *Engine, r AcquireRequest) (Grant, error) {
	w, err := e.Enqueue(ctx, r)
	if err != nil {
		return Grant{}, err
	}
	return w.Wait(ctx)
}

// acquireWithin is acquire bounded by d as the gateway bounds a wait, the
// enqueue included: its context ends with ErrWaitTimeout as the cause, and
// a call that failed once it had ended returns ErrWaitTimeout.
func acquireWithin(ctx context.Context, e *Engine, r AcquireRequest, d time.Duration) (Grant, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, d, ErrWaitTimeout)
	defer cancel()
	g, err := acquire(ctx, e, r)
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, ErrWaitTimeout) {
		return Grant{}, cause
	}
	return g, err
}

func mustAcquire(t testing.TB, e *Engine, r AcquireRequest) Grant {
	t.Helper()
	g, err := acquire(testCtx(t), e, r)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", r.Name, err)
	}
	return g
}

func mustRelease(t testing.TB, e *Engine, g Grant) {
	t.Helper()
	ok, err := e.Release(testCtx(t), g.Handle, g.Token())
	if err != nil || !ok {
		t.Fatalf("Release(%q) = %v, %v; want true, nil", g.Name, ok, err)
	}
}

// keyCount counts the keys under the engine's lock prefix for name.
func keyCount(t testing.TB, e *Engine, cli *clientv3.Client, name string) int64 {
	t.Helper()
	resp, err := cli.Get(testCtx(t), e.keys.namePrefix(name), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// queuedSignal returns an OnQueued callback and a channel of the positions
// it reported.
func queuedSignal() (func(int64), chan int64) {
	ch := make(chan int64, 64)
	return func(p int64) { ch <- p }, ch
}
