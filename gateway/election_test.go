package gateway_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc/health/grpc_health_v1"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
	"github.com/leasegate/leasegate/queue"
	"github.com/leasegate/leasegate/shard"
)

func electionClient(g *gw, opts ...connect.ClientOption) leasegatev1connect.ElectionServiceClient {
	return leasegatev1connect.NewElectionServiceClient(g.HTTP, g.URL, opts...)
}

// campaign runs a Campaign stream until it is elected.
func campaign(t *testing.T, ec leasegatev1connect.ElectionServiceClient, req *v1.CampaignRequest) *v1.Elected {
	t.Helper()
	stream, err := ec.Campaign(ctxT(t), connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	for stream.Receive() {
		if el := stream.Msg().GetElected(); el != nil {
			return el
		}
	}
	t.Fatalf("Campaign(%q) ended without an election: %v", req.Name, stream.Err())
	return nil
}

// The wire: codes and reasons of every election call, leader ids through
// LockService, and the service in health and reflection.
func TestElectionServiceOverConnectAndGRPC(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	for _, proto := range []struct {
		name string
		opts []connect.ClientOption
	}{{"connect", nil}, {"grpc", []connect.ClientOption{connect.WithGRPC()}}, {"grpc-web", []connect.ClientOption{connect.WithGRPCWeb()}}} {
		t.Run(proto.name, func(t *testing.T) {
			ec := electionClient(g, proto.opts...)
			lc := g.ConnectClient(proto.opts...)
			ctx := ctxT(t)
			name := "svc-" + proto.name
			_, err := ec.Leader(ctx, connect.NewRequest(&v1.LeaderRequest{Name: name}))
			if codeOf(err) != connect.CodeNotFound {
				t.Fatalf("Leader with nobody leading = %v; want not_found", err)
			}
			el := campaign(t, ec, &v1.CampaignRequest{Name: name, Value: []byte("v1"), TtlMs: 10000, ClientId: "me"})
			lr, err := ec.Leader(ctx, connect.NewRequest(&v1.LeaderRequest{Name: name}))
			if err != nil || string(lr.Msg.Leader.GetValue()) != "v1" || lr.Msg.Leader.GetFencingToken() != el.FencingToken || lr.Msg.Leader.GetClientId() != "me" {
				t.Fatalf("Leader = %v, %v; want v1, token %d, client me", lr, err, el.FencingToken)
			}
			if _, err := ec.Proclaim(ctx, connect.NewRequest(&v1.ProclaimRequest{LeaderId: el.LeaderId, Value: []byte("v2")})); err != nil {
				t.Fatalf("Proclaim: %v", err)
			}
			// A leader id is a lock id: LockService renews it.
			if _, err := lc.Renew(ctx, connect.NewRequest(&v1.RenewRequest{LockId: el.LeaderId, FencingToken: el.FencingToken})); err != nil {
				t.Fatalf("Renew(leader id): %v", err)
			}
			// A lock id is not a leader id.
			lock := tryAcquire(t, g, name)
			if _, err := ec.Resign(ctx, connect.NewRequest(&v1.ResignRequest{LeaderId: lock.LockId})); codeOf(err) != connect.CodeInvalidArgument {
				t.Fatalf("Resign(lock id) = %v; want invalid_argument", err)
			}
			if _, err := ec.Proclaim(ctx, connect.NewRequest(&v1.ProclaimRequest{LeaderId: "not-an-id"})); codeOf(err) != connect.CodeInvalidArgument || violatedField(err) != "leader_id" || !strings.Contains(err.Error(), "leader_id: ") || strings.Contains(err.Error(), "lock_id") {
				t.Fatalf("Proclaim(malformed leader id) = %v (field %q); want invalid_argument naming leader_id alone", err, violatedField(err))
			}
			if _, err := ec.Proclaim(ctx, connect.NewRequest(&v1.ProclaimRequest{LeaderId: lock.LockId})); codeOf(err) != connect.CodeInvalidArgument {
				t.Fatalf("Proclaim(lock id) = %v; want invalid_argument", err)
			}
			release(t, g, lock)
			big := make([]byte, v1.MaxValueBytes+1)
			if _, err := ec.Proclaim(ctx, connect.NewRequest(&v1.ProclaimRequest{LeaderId: el.LeaderId, Value: big})); codeOf(err) != connect.CodeInvalidArgument {
				t.Fatalf("Proclaim of %d bytes = %v; want invalid_argument", len(big), err)
			}
			rr, err := ec.Resign(ctx, connect.NewRequest(&v1.ResignRequest{LeaderId: el.LeaderId}))
			if err != nil || !rr.Msg.Resigned {
				t.Fatalf("Resign = %v, %v; want resigned", rr, err)
			}
			if rr, err = ec.Resign(ctx, connect.NewRequest(&v1.ResignRequest{LeaderId: el.LeaderId})); err != nil || rr.Msg.Resigned {
				t.Fatalf("second Resign = %v, %v; want not resigned, no error", rr, err)
			}
			_, err = ec.Proclaim(ctx, connect.NewRequest(&v1.ProclaimRequest{LeaderId: el.LeaderId, Value: []byte("late")}))
			if codeOf(err) != connect.CodeFailedPrecondition || reasonOf(err) != "LOCK_EXPIRED" || !strings.Contains(err.Error(), "not the leader") {
				t.Fatalf("Proclaim after Resign = %v (reason %q); want failed_precondition, LOCK_EXPIRED, not the leader", err, reasonOf(err))
			}
			if _, err := ec.Leader(ctx, connect.NewRequest(&v1.LeaderRequest{Name: "bad\nname"})); codeOf(err) != connect.CodeInvalidArgument {
				t.Fatalf("Leader(bad name) = %v; want invalid_argument", err)
			}
		})
	}
	hc := connect.NewClient[grpc_health_v1.HealthCheckRequest, grpc_health_v1.HealthCheckResponse](g.HTTP, g.URL+"/grpc.health.v1.Health/Check", connect.WithGRPC())
	resp, err := hc.CallUnary(ctxT(t), connect.NewRequest(&grpc_health_v1.HealthCheckRequest{Service: leasegatev1connect.ElectionServiceName}))
	if err != nil || resp.Msg.Status != grpc_health_v1.HealthCheckResponse_SERVING {
		t.Fatalf("health of %s = %v, %v; want SERVING", leasegatev1connect.ElectionServiceName, resp, err)
	}
}

// An observer's stream reports the state now and each change, and a
// shutdown ends it with unavailable (SHUTTING_DOWN).
func TestObserveStreamsUntilShutdown(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	ec := electionClient(g)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	stream, err := ec.Observe(ctx, connect.NewRequest(&v1.ObserveRequest{Name: "svc"}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().Leader != nil {
		t.Fatalf("first observation = %v, %v; want no leader", stream.Msg(), stream.Err())
	}
	el := campaign(t, ec, &v1.CampaignRequest{Name: "svc", Value: []byte("a"), TtlMs: 10000})
	if !stream.Receive() || string(stream.Msg().Leader.GetValue()) != "a" || stream.Msg().Leader.GetFencingToken() != el.FencingToken {
		t.Fatalf("observation = %v, %v; want a at token %d", stream.Msg(), stream.Err(), el.FencingToken)
	}
	g.Server.Service().Shutdown()
	if stream.Receive() {
		t.Fatalf("observation after shutdown: %v", stream.Msg())
	}
	if err := stream.Err(); codeOf(err) != connect.CodeUnavailable || reasonOf(err) != "SHUTTING_DOWN" {
		t.Fatalf("Observe ended with %v (reason %q); want unavailable, SHUTTING_DOWN", err, reasonOf(err))
	}
}

// An observer follows its election when the shard map moves it: it keeps
// reporting the leader on the draining shard, and the first leader on the
// new one.
func TestObserveFollowsAnElectionThatMoves(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 2)
	f.gateway(t, nil, 0) // the first gateway stores the map: c0 alone
	g := f.gateway(t, nil, 0, 1)
	next, _ := shard.NewRing([]string{"c0", "c1"})
	var name string
	for i := 0; name == ""; i++ {
		if n := fmt.Sprintf("moving-%d", i); next.Locate(queue.ElectionName(n)) == "c1" {
			name = n
		}
	}
	ec := electionClient(g)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	stream, err := ec.Observe(ctx, connect.NewRequest(&v1.ObserveRequest{Name: name}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	observed := make(chan *v1.Leader, 16)
	go func() {
		defer close(observed)
		for stream.Receive() {
			observed <- stream.Msg().Leader
		}
	}()
	next1 := func(what string) *v1.Leader {
		t.Helper()
		select {
		case l, ok := <-observed:
			if !ok {
				t.Fatalf("Observe ended while waiting for %s: %v", what, stream.Err())
			}
			return l
		case <-time.After(20 * time.Second):
			t.Fatalf("timed out waiting for %s", what)
		}
		return nil
	}
	if l := next1("the first state"); l != nil {
		t.Fatalf("first state = %v; want nobody leading", l)
	}
	a := campaign(t, ec, &v1.CampaignRequest{Name: name, Value: []byte("a"), TtlMs: 10000})
	if l := next1("a elected"); l.GetFencingToken() != a.FencingToken || a.Shard != "c0" {
		t.Fatalf("state = %v (a on %s); want a, on c0", l, a.Shard)
	}
	m, err := f.resharder(t).Apply(ctxT(t), []shard.Cluster{f.shardCluster(0), f.shardCluster(1)})
	if err != nil {
		t.Fatal(err)
	}
	awaitMap(t, g, m)
	// b campaigns on c1, where it is elected only once c0 has let go.
	bStream, err := ec.Campaign(ctx, connect.NewRequest(&v1.CampaignRequest{Name: name, Value: []byte("b"), TtlMs: 10000}))
	if err != nil {
		t.Fatal(err)
	}
	defer bStream.Close()
	if !bStream.Receive() || bStream.Msg().GetQueued() == nil {
		t.Fatalf("b's first message = %v, %v; want queued behind a", bStream.Msg(), bStream.Err())
	}
	if _, err := ec.Resign(ctx, connect.NewRequest(&v1.ResignRequest{LeaderId: a.LeaderId})); err != nil {
		t.Fatal(err)
	}
	var b *v1.Elected
	for b == nil && bStream.Receive() {
		b = bStream.Msg().GetElected()
	}
	if b == nil || b.Shard != "c1" || b.FencingToken <= a.FencingToken {
		t.Fatalf("b elected = %v, %v; want on c1 with a token above a's %d", b, bStream.Err(), a.FencingToken)
	}
	// An observer that had not routed again yet may report the moment
	// between the two terms; then it must find b on c1.
	l := next1("b elected")
	if l == nil {
		l = next1("b elected, after nobody")
	}
	if l.GetFencingToken() != b.FencingToken || string(l.GetValue()) != "b" {
		t.Fatalf("state = %v; want b at token %d", l, b.FencingToken)
	}
	if _, err := ec.Resign(ctx, connect.NewRequest(&v1.ResignRequest{LeaderId: b.LeaderId})); err != nil {
		t.Fatal(err)
	}
	if l := next1("b resigned"); l != nil {
		t.Fatalf("state after b resigned = %v; want nobody leading", l)
	}
}
