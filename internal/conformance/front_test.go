package conformance_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/internal/conformance"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

// bearer presents a bearer token on every request.
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// TestArrivalsTellAnsweredFromRefused checks, in each protocol a gateway
// speaks, that a front's arrivals mark the calls a gateway answered
// without error, and only those: a unary call refused, a stream that ends
// in an error, a stream that ends in a grant, a unary call answered.
// awaitLostInLease counts on it: a renewal refused by a dying gateway
// confirms nothing.
func TestArrivalsTellAnsweredFromRefused(t *testing.T) {
	h := startHarness(t)
	desc := h.Description()
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: bearer{desc.Tokens[conformance.TenantNormal], tr}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := &run{desc: desc, ctx: ctx, http: &http.Client{}}
	protocols := map[string][]connect.ClientOption{
		"connect":      nil,
		"connect-json": {connect.WithProtoJSON()},
		"grpc":         {connect.WithGRPC()},
		"grpc-web":     {connect.WithGRPCWeb()},
	}
	for name, opts := range protocols {
		t.Run(name, func(t *testing.T) {
			if err := r.control("POST", "/gateways/0/requests/reset", nil, nil); err != nil {
				t.Fatal(err)
			}
			rpc := leasegatev1connect.NewLockServiceClient(hc, desc.Gateways[0], opts...)
			lock := "arrivals-" + randomHex() + "/" + name
			calls(ctx, t, rpc, lock)
			var got struct {
				Arrivals map[string][]conformance.Arrival `json:"arrivals"`
			}
			if err := r.control("GET", "/gateways/0/requests", nil, &got); err != nil {
				t.Fatal(err)
			}
			want := map[string][]bool{
				"TryAcquire": {true},
				"Renew":      {false, true},
				"Acquire":    {false, true},
				"Release":    {true, true},
			}
			for method, oks := range want {
				var seen []bool
				for _, a := range got.Arrivals["/leasegate.v1.LockService/"+method] {
					seen = append(seen, a.OK)
				}
				if !slices.Equal(seen, oks) {
					t.Errorf("%s arrivals ok = %v; want %v (all: %+v)", method, seen, oks, got.Arrivals)
				}
			}
		})
	}
}

// calls makes, on a free name: a granted try-acquire; a renewal of a lock
// id that does not exist (refused) and one of the lock (answered); an
// acquire that times out waiting; a release; an acquire granted at once;
// its release.
func calls(ctx context.Context, t *testing.T, rpc leasegatev1connect.LockServiceClient, name string) {
	t.Helper()
	try, err := rpc.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: name, TtlMs: 5000}))
	if err != nil || !try.Msg.Acquired {
		t.Fatalf("TryAcquire(%q) = %v, %v; want a grant", name, try, err)
	}
	g := try.Msg.Granted
	if _, err := rpc.Renew(ctx, connect.NewRequest(&v1.RenewRequest{LockId: "no-such-lock", FencingToken: g.FencingToken, TtlMs: 5000})); err == nil {
		t.Fatal("Renew of a lock id that does not exist succeeded")
	}
	if _, err := rpc.Renew(ctx, connect.NewRequest(&v1.RenewRequest{LockId: g.LockId, FencingToken: g.FencingToken, TtlMs: 5000})); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if _, err := acquire(ctx, rpc, name, 300); err == nil {
		t.Fatal("Acquire of a held name with a 300 ms wait was granted")
	}
	if _, err := rpc.Release(ctx, connect.NewRequest(&v1.ReleaseRequest{LockId: g.LockId, FencingToken: g.FencingToken})); err != nil {
		t.Fatalf("Release: %v", err)
	}
	g, err = acquire(ctx, rpc, name, 0)
	if err != nil {
		t.Fatalf("Acquire of a free name: %v", err)
	}
	if _, err := rpc.Release(ctx, connect.NewRequest(&v1.ReleaseRequest{LockId: g.LockId, FencingToken: g.FencingToken})); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// acquire reads an Acquire stream to its end and returns its grant.
func acquire(ctx context.Context, rpc leasegatev1connect.LockServiceClient, name string, waitMs int64) (*v1.Granted, error) {
	st, err := rpc.Acquire(ctx, connect.NewRequest(&v1.AcquireRequest{Name: name, TtlMs: 5000, WaitTimeoutMs: waitMs}))
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var g *v1.Granted
	for st.Receive() {
		if m := st.Msg().GetGranted(); m != nil {
			g = m
		}
	}
	if err := st.Err(); err != nil {
		return nil, err
	}
	if g == nil {
		return nil, fmt.Errorf("the stream ended without a grant")
	}
	return g, nil
}
