package gateway_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc/health/grpc_health_v1"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
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
