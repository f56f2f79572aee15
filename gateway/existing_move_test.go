package gateway_test

import (
	"testing"

	"connectrpc.com/connect"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/shard"
)

// TestExistingOnlyAnswersNoPlaceOfADrainingName: a waiter first on the
// cluster its name moved to still waits for the cluster the name drains
// from, where another caller holds it. Its place is not a grant:
// existing_only answers nothing for it until that holder has gone.
func TestExistingOnlyAnswersNoPlaceOfADrainingName(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 3)
	g0 := f.gateway(t, nil, 0, 1)
	g := f.gateway(t, nil, 0, 1, 2)
	moved := nameMovingToC2()
	held, err := g0.Client.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: moved, TtlMs: 30000, ClientId: "old"}))
	if err != nil || !held.Msg.Acquired {
		t.Fatalf("TryAcquire = %v, %v", held, err)
	}
	m, err := f.resharder(t).Apply(ctxT(t), []shard.Cluster{f.shardCluster(0), f.shardCluster(1), f.shardCluster(2)})
	if err != nil {
		t.Fatal(err)
	}
	awaitMap(t, g, m)
	w := startWaiter(t, g, &v1.AcquireRequest{Name: moved, TtlMs: 30000, ClientId: "next", RequestId: "next-1"})
	select {
	case <-w.positions:
	case gr := <-w.granted:
		t.Fatalf("the waiter was granted %v while %s held the name on %s", gr, "old", held.Msg.Granted.Shard)
	case err := <-w.err:
		t.Fatal(err)
	}
	ask, err := g.Client.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: moved, TtlMs: 30000, ClientId: "next", RequestId: "next-1", ExistingOnly: true}))
	if err != nil {
		t.Fatal(err)
	}
	if ask.Msg.Acquired {
		t.Fatalf("existing_only answered the waiter's place on %s as a grant (%v) while the name's holder on %s still holds it", ask.Msg.Granted.Shard, ask.Msg.Granted, held.Msg.Granted.Shard)
	}
	release(t, g0, held.Msg.Granted)
	gr := awaitGrant(t, w)
	again, err := g.Client.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: moved, TtlMs: 30000, ClientId: "next", RequestId: "next-1", ExistingOnly: true}))
	if err != nil || !again.Msg.Acquired || again.Msg.Granted.FencingToken != gr.FencingToken {
		t.Fatalf("existing_only after the grant = %v, %v; want the grant %v", again, err, gr)
	}
}

// TestExistingOnlyFindsASessionGrantOfADrainingName: a session granted a
// name whose answer was lost is asked for under its request id after the
// name moved to a cluster the session has no lease on yet. The grant is on
// the cluster the name drains from, where the session holds it: the ask
// finds it there, so that it can be given up, rather than failing for the
// lease the session lacks where no key of it can be.
func TestExistingOnlyFindsASessionGrantOfADrainingName(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 3)
	g0 := f.gateway(t, nil, 0, 1)
	ctx := ctxT(t)
	moved := nameMovingToC2()
	s, err := g0.Client.OpenSession(ctx, connect.NewRequest(&v1.OpenSessionRequest{ClientId: "sess", TtlMs: 30000}))
	if err != nil {
		t.Fatal(err)
	}
	try := &v1.TryAcquireRequest{Name: moved, SessionId: s.Msg.SessionId, ClientId: "sess", RequestId: "lost-answer"}
	held, err := g0.Client.TryAcquire(ctx, connect.NewRequest(try))
	if err != nil || !held.Msg.Acquired {
		t.Fatalf("TryAcquire in a session = %v, %v", held, err)
	}
	m, err := f.resharder(t).Apply(ctx, []shard.Cluster{f.shardCluster(0), f.shardCluster(1), f.shardCluster(2)})
	if err != nil {
		t.Fatal(err)
	}
	g := f.gateway(t, nil, 0, 1, 2)
	awaitMap(t, g, m)
	ask := &v1.TryAcquireRequest{Name: moved, SessionId: s.Msg.SessionId, ClientId: "sess", RequestId: "lost-answer", ExistingOnly: true}
	got, err := g.Client.TryAcquire(ctx, connect.NewRequest(ask))
	if err != nil || !got.Msg.Acquired || got.Msg.Granted.FencingToken != held.Msg.Granted.FencingToken {
		t.Fatalf("existing_only for a session's grant on %s after its name moved to c2 = %v, %v; want the grant %v", held.Msg.Granted.Shard, got, err, held.Msg.Granted)
	}
}
