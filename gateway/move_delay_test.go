package gateway_test

import (
	"testing"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/shard"
)

// TestLockDelayOutlivesAMove: a holder with a lock-delay whose lease
// expires keeps its name from everyone until the delay has passed — and,
// with the loss wait, for its TTL too — also when its name has just moved
// to another cluster: the new cluster's TryAcquire is refused with the
// draining cluster's delay, and an Acquire waits it out.
func TestLockDelayOutlivesAMove(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 3)
	g0 := f.gateway(t, nil, 0, 1)
	g := f.gateway(t, nil, 0, 1, 2)
	moved := nameMovingToC2()
	first, err := g0.Client.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: moved, TtlMs: 10000, ClientId: "slow", LockDelayMs: 60000}))
	if err != nil || !first.Msg.Acquired {
		t.Fatalf("TryAcquire = %v, %v", first, err)
	}
	m, err := f.resharder(t).Apply(ctxT(t), []shard.Cluster{f.shardCluster(0), f.shardCluster(1), f.shardCluster(2)})
	if err != nil {
		t.Fatal(err)
	}
	awaitMap(t, g, m)
	old := first.Msg.Granted.Shard
	cli := f.etcdOf(t, old)
	if _, err := cli.Revoke(ctxT(t), holderLease(t, cli, g.Prefix, moved)); err != nil { // the holder's lease expires
		t.Fatal(err)
	}
	again, err := g.Client.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: moved, TtlMs: 10000, ClientId: "next"}))
	if err != nil {
		t.Fatal(err)
	}
	if !again.Msg.Acquired && again.Msg.DelayUntil == nil {
		t.Errorf("TryAcquire after the name moved was refused without the delay's end: %v", again.Msg)
	}
	if again.Msg.Acquired {
		release(t, g, again.Msg.Granted)
		t.Errorf("TryAcquire after the name moved from %s granted it on %s at once; the expired holder's 60 s lock-delay (and its TTL's loss wait) was skipped", old, again.Msg.Granted.Shard)
	}
	if d, err := g.Client.Describe(ctxT(t), connect.NewRequest(&v1.DescribeRequest{Name: moved})); err != nil || d.Msg.DelayUntil == nil || !d.Msg.DelayUntil.AsTime().Equal(again.Msg.DelayUntil.AsTime()) {
		t.Errorf("Describe after the name moved = %v, %v; want the draining cluster's delay until %v", d, err, again.Msg.DelayUntil)
	}
	w := startWaiter(t, g, &v1.AcquireRequest{Name: moved, TtlMs: 10000, ClientId: "waits"})
	select {
	case gr := <-w.granted:
		if gr != nil {
			t.Errorf("Acquire after the name moved from %s granted it on %s within 5 s; the expired holder's 60 s lock-delay was skipped", old, gr.Shard)
		}
	case <-time.After(5 * time.Second):
	}
}
