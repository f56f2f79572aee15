package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// TestSemaphoreAcrossGateways: two gateways over one etcd grant a name of
// limit 2 to two holders at once and never a third; Describe lists both;
// another limit is refused over Connect and REST while the name is held.
func TestSemaphoreAcrossGateways(t *testing.T) {
	t.Parallel()
	g1 := startGateway(t, "")
	g2 := startGateway(t, g1.Prefix)
	try := func(g *gw, limit int32) (*v1.TryAcquireResponse, error) {
		resp, err := g.Client.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: "pool", TtlMs: 10000, ClientId: "w", Limit: limit}))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}
	a, err := try(g1, 2)
	if err != nil || !a.Acquired {
		t.Fatalf("first TryAcquire = %v, %v; want acquired", a, err)
	}
	b, err := try(g2, 2)
	if err != nil || !b.Acquired {
		t.Fatalf("second TryAcquire on the other gateway = %v, %v; want acquired", b, err)
	}
	if c, err := try(g1, 2); err != nil || c.Acquired {
		t.Fatalf("third TryAcquire = %v, %v; want refused (2 hold)", c, err)
	}
	// A streaming waiter on the other gateway waits at position 1.
	w := startWaiter(t, g2, &v1.AcquireRequest{Name: "pool", TtlMs: 10000, ClientId: "third", Limit: 2})
	if p := <-w.positions; p != 1 {
		t.Fatalf("third acquirer's position = %d; want 1", p)
	}
	d, err := g1.Client.Describe(ctxT(t), connect.NewRequest(&v1.DescribeRequest{Name: "pool"}))
	if err != nil {
		t.Fatal(err)
	}
	m := d.Msg
	if m.Limit != 2 || len(m.Holders) != 2 || m.Waiters != 1 || !m.Held ||
		m.FencingToken != a.Granted.FencingToken || m.Holders[1].FencingToken != b.Granted.FencingToken {
		t.Fatalf("Describe = %v; want limit 2, holders %d and %d, 1 waiter", m, a.Granted.FencingToken, b.Granted.FencingToken)
	}
	// Another limit: failed_precondition naming the field and the limit.
	_, err = try(g2, 3)
	if codeOf(err) != connect.CodeFailedPrecondition || violatedField(err) != "limit" || reasonOf(err) != "LIMIT_MISMATCH" || !strings.Contains(err.Error(), "limit 2") {
		t.Fatalf("TryAcquire with limit 3 = %v (field %q, reason %q); want failed_precondition LIMIT_MISMATCH on field limit naming limit 2", err, violatedField(err), reasonOf(err))
	}
	status, body := postJSON(t, g1, "/api/v1/locks/acquire", `{"name":"pool","ttlMs":10000,"limit":1}`)
	e, _ := body["error"].(map[string]any)
	if status != http.StatusConflict || e["field"] != "limit" || e["code"] != "failed_precondition" {
		t.Fatalf("REST acquire with limit 1 = %d %v; want 409 failed_precondition on field limit", status, body)
	}
	status, body = postJSON(t, g1, "/api/v1/locks/acquire", `{"name":"x","ttlMs":10000,"limit":100000}`)
	if e, _ := body["error"].(map[string]any); status != http.StatusBadRequest || e["field"] != "limit" {
		t.Fatalf("REST acquire with limit 100000 = %d %v; want 400 on field limit", status, body)
	}
	// One release lets the waiter in.
	release(t, g1, a.Granted)
	if gr := <-w.granted; gr == nil || gr.FencingToken <= b.Granted.FencingToken {
		t.Fatalf("waiter's grant = %v; want a token above %d", gr, b.Granted.FencingToken)
	}
	// REST takes a slot of a semaphore too.
	release(t, g2, b.Granted)
	status, body = postJSON(t, g2, "/api/v1/locks/acquire", `{"name":"pool","ttlMs":10000,"limit":2}`)
	if status != http.StatusOK || body["acquired"] != true {
		t.Fatalf("REST acquire of a free slot = %d %v; want acquired", status, body)
	}
}

// TestReentrantAcrossGateways: a re-entrant acquire through a session that
// holds the name, on another gateway, returns a hold of the same lock — its
// token, a lock id of its own — with hold_count 2; the first release leaves
// the name held and a repeat of it drops nothing more, the second frees it;
// without a session reentrant is invalid_argument.
func TestReentrantAcrossGateways(t *testing.T) {
	t.Parallel()
	g1 := startGateway(t, "")
	g2 := startGateway(t, g1.Prefix)
	sess, err := g1.Client.OpenSession(ctxT(t), connect.NewRequest(&v1.OpenSessionRequest{ClientId: "re", TtlMs: 10000}))
	if err != nil {
		t.Fatal(err)
	}
	try := func(g *gw) *v1.Granted {
		resp, err := g.Client.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: "re", ClientId: "re", SessionId: sess.Msg.SessionId, Reentrant: true}))
		if err != nil || !resp.Msg.Acquired {
			t.Fatalf("re-entrant TryAcquire = %v, %v; want acquired", resp, err)
		}
		return resp.Msg.Granted
	}
	a := try(g1)
	b := try(g2)
	if a.HoldCount != 1 || b.HoldCount != 2 || b.LockId == a.LockId || b.FencingToken != a.FencingToken {
		t.Fatalf("grants: hold counts %d, %d; same lock id %v, same token %v; want 1, 2, a hold of its own of the same lock", a.HoldCount, b.HoldCount, a.LockId == b.LockId, a.FencingToken == b.FencingToken)
	}
	held := func() bool {
		d, err := g1.Client.Describe(ctxT(t), connect.NewRequest(&v1.DescribeRequest{Name: "re"}))
		if err != nil {
			t.Fatal(err)
		}
		return d.Msg.Held
	}
	release(t, g1, a)
	if !held() {
		t.Fatal("the name is free after one release of two holds")
	}
	// The same release again (its answer was lost): nothing more goes.
	if resp, err := g2.Client.Release(ctxT(t), connect.NewRequest(&v1.ReleaseRequest{LockId: a.LockId, FencingToken: a.FencingToken})); err != nil || resp.Msg.Released {
		t.Fatalf("a repeated release of a hold = %v, %v; want released false", resp, err)
	}
	if !held() {
		t.Fatal("a repeated release of one hold freed the name while another hold lives")
	}
	release(t, g2, b)
	if held() {
		t.Fatal("the name is still held after the last release")
	}
	_, err = g1.Client.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: "re", TtlMs: 10000, Reentrant: true}))
	if codeOf(err) != connect.CodeInvalidArgument || violatedField(err) != "reentrant" {
		t.Fatalf("re-entrant TryAcquire without a session = %v (field %q); want invalid_argument on reentrant", err, violatedField(err))
	}
}

// TestLockDelayOverTheWire: lock_delay_ms is bounded (invalid_argument on
// the field, over Connect and REST); after a holder with a lock-delay
// expires, Describe reports delay_until and TryAcquire is not acquired.
func TestLockDelayOverTheWire(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	_, err := g.Client.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: "ld", TtlMs: 10000, LockDelayMs: 60001}))
	if codeOf(err) != connect.CodeInvalidArgument || violatedField(err) != "lock_delay_ms" {
		t.Fatalf("TryAcquire with lock_delay_ms 60001 = %v; want invalid_argument on lock_delay_ms", err)
	}
	status, body := postJSON(t, g, "/api/v1/locks/acquire", `{"name":"ld","ttlMs":10000,"lockDelayMs":-1}`)
	if e, _ := body["error"].(map[string]any); status != http.StatusBadRequest || e["field"] != "lockDelayMs" {
		t.Fatalf("REST acquire with lockDelayMs -1 = %d %v; want 400 on field lockDelayMs", status, body)
	}
	// A holder that is never renewed expires; its 30 s delay then holds.
	cli := etcdClient(t)
	wctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	watch := cli.Watch(wctx, g.Prefix+"/locks/", clientv3.WithPrefix())
	resp, err := g.Client.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: "ld", TtlMs: 1000, LockDelayMs: 30000}))
	if err != nil || !resp.Msg.Acquired {
		t.Fatalf("TryAcquire = %v, %v; want acquired", resp, err)
	}
	for deleted := false; !deleted; {
		wr := <-watch
		for _, ev := range wr.Events {
			deleted = deleted || ev.Type == mvccpb.DELETE
		}
		if wr.Err() != nil {
			t.Fatal(wr.Err())
		}
	}
	d, err := g.Client.Describe(ctxT(t), connect.NewRequest(&v1.DescribeRequest{Name: "ld"}))
	if err != nil || d.Msg.Held || d.Msg.DelayUntil == nil || time.Until(d.Msg.DelayUntil.AsTime()) < 20*time.Second {
		t.Fatalf("Describe after the holder expired = %v, %v; want free with delay_until about 30 s ahead", d, err)
	}
	if r, err := g.Client.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: "ld", TtlMs: 10000})); err != nil || r.Msg.Acquired {
		t.Fatalf("TryAcquire during the lock-delay = %v, %v; want not acquired", r, err)
	}
}
