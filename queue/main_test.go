package queue

import (
	"context"
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

func mustAcquire(t testing.TB, e *Engine, r AcquireRequest) Grant {
	t.Helper()
	g, err := e.Acquire(testCtx(t), r)
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
