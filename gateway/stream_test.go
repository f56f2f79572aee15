package gateway_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/health/grpc_health_v1"

	"github.com/leasegate/leasegate/internal/clock"
	"github.com/leasegate/leasegate/internal/gwtest"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

func TestStreamingFIFOWithPositionsAndIncreasingTokens(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	holder := tryAcquire(t, g, "fifo")
	const n = 5
	var ws []*waiter
	for i := 0; i < n; i++ {
		w := startWaiter(t, g, &v1.AcquireRequest{Name: "fifo", TtlMs: 10000, ClientId: "w"})
		if p := <-w.positions; p != int64(i+1) {
			t.Fatalf("waiter %d first position = %d; want %d", i, p, i+1)
		}
		ws = append(ws, w)
	}
	release(t, g, holder)
	prev := holder.FencingToken
	for i, w := range ws {
		gr := <-w.granted
		if gr.FencingToken <= prev {
			t.Fatalf("waiter %d token %d not above %d", i, gr.FencingToken, prev)
		}
		// Nobody behind must have been granted ahead of this waiter.
		for j := i + 1; j < n; j++ {
			select {
			case <-ws[j].granted:
				t.Fatalf("waiter %d granted before waiter %d", j, i)
			default:
			}
		}
		prev = gr.FencingToken
		release(t, g, gr)
		if err := <-w.err; err != nil {
			t.Fatalf("waiter %d stream ended with %v", i, err)
		}
	}
	for i, w := range ws {
		last := int64(i + 1)
		for len(w.positions) > 0 {
			p := <-w.positions
			if p >= last {
				t.Fatalf("waiter %d position went from %d to %d; want decreasing", i, last, p)
			}
			last = p
		}
	}
}

func TestDisconnectedWaiterLeavesQueue(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	holder := tryAcquire(t, g, "disc")
	gone := startWaiter(t, g, &v1.AcquireRequest{Name: "disc", TtlMs: 10000})
	<-gone.positions
	next := startWaiter(t, g, &v1.AcquireRequest{Name: "disc", TtlMs: 10000})
	if p := <-next.positions; p != 2 {
		t.Fatalf("second waiter position = %d; want 2", p)
	}
	gone.cancel() // the client goes away mid-wait
	<-gone.err
	// The waiter's key must be gone: only the holder and the next remain.
	cli := etcdClient(t)
	deadline := ctxT(t)
	for {
		resp, err := cli.Get(deadline, g.Prefix+"/locks/disc/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count == 2 {
			break
		}
		// The gateway deletes the key as soon as it sees the stream end;
		// watch for that delete instead of polling blindly.
		wc := cli.Watch(deadline, g.Prefix+"/locks/disc/", clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		<-wc
	}
	release(t, g, holder)
	gr := <-next.granted
	if gr.FencingToken <= holder.FencingToken {
		t.Fatalf("token %d not above %d", gr.FencingToken, holder.FencingToken)
	}
	release(t, g, gr)
}

// A wait ends by its wait timeout, on the gateway's clock: a fake one here,
// so the wait ends when the clock passes the timeout and not before.
func TestWaitTimeoutIsDeadlineExceeded(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	g := gwtest.Start(t, shared, gwtest.Clock(clk))
	holder := tryAcquire(t, g, "wait")
	w := startWaiter(t, g, &v1.AcquireRequest{Name: "wait", TtlMs: 10000, WaitTimeoutMs: 5000})
	// The wait's timer starts before it is enqueued, so before its
	// position is reported.
	if p := <-w.positions; p != 1 {
		t.Fatalf("waiter position = %d; want 1", p)
	}
	pending := clk.Pending()
	clk.Advance(5*time.Second - time.Millisecond)
	// Advance fires due timers before it returns: every timer still
	// pending proves the wait's did not fire early (an early end would
	// reach w.err only after the stream carried it).
	if n := clk.Pending(); n != pending {
		t.Fatalf("%d of %d timers fired a millisecond before the wait timeout", pending-n, pending)
	}
	select {
	case err := <-w.err:
		t.Fatalf("the wait ended %v before its timeout", err)
	default:
	}
	clk.Advance(time.Millisecond)
	err := <-w.err
	if codeOf(err) != connect.CodeDeadlineExceeded || reasonOf(err) != "WAIT_TIMEOUT" {
		t.Fatalf("timed-out wait ended with %v (reason %q); want deadline_exceeded, WAIT_TIMEOUT", err, reasonOf(err))
	}
	// The answer does not wait for the waiter's key to be deleted (a
	// stalled cluster must not delay it), so the key goes soon after.
	deadline := time.Now().Add(5 * time.Second)
	for {
		d, err := g.Client.Describe(ctxT(t), connect.NewRequest(&v1.DescribeRequest{Name: "wait"}))
		if err == nil && d.Msg.Waiters == 0 && d.Msg.FencingToken == holder.FencingToken {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Describe 5s after the timeout = %v, %v; want the holder only", d, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	release(t, g, holder)
}

func TestRetryOnAnotherGatewayKeepsPlace(t *testing.T) {
	t.Parallel()
	g1 := startGateway(t, "")
	g2 := startGateway(t, g1.Prefix)
	holder := tryAcquire(t, g2, "resume")
	w1 := startWaiter(t, g1, &v1.AcquireRequest{Name: "resume", TtlMs: 10000, RequestId: "job-7-attempt"})
	<-w1.positions
	w2 := startWaiter(t, g2, &v1.AcquireRequest{Name: "resume", TtlMs: 10000})
	if p := <-w2.positions; p != 2 {
		t.Fatalf("w2 position = %d; want 2", p)
	}
	g1.Stop() // SIGTERM-style stop: waits end retryably, places are kept
	err := <-w1.err
	if codeOf(err) != connect.CodeUnavailable || reasonOf(err) != "SHUTTING_DOWN" {
		t.Fatalf("wait on a stopping gateway ended with %v (%q); want unavailable, SHUTTING_DOWN", err, reasonOf(err))
	}
	retry := startWaiter(t, g2, &v1.AcquireRequest{Name: "resume", TtlMs: 10000, RequestId: "job-7-attempt"})
	if p := <-retry.positions; p != 1 {
		t.Fatalf("retried waiter position = %d; want 1 (its old place)", p)
	}
	release(t, g2, holder)
	first := <-retry.granted
	select {
	case <-w2.granted:
		t.Fatal("w2 granted before the resumed waiter")
	default:
	}
	release(t, g2, first)
	second := <-w2.granted
	if second.FencingToken <= first.FencingToken {
		t.Fatalf("tokens %d then %d; want increasing", first.FencingToken, second.FencingToken)
	}
	release(t, g2, second)
}

func TestRestartedGatewayRenewsAndReleasesOldLocks(t *testing.T) {
	t.Parallel()
	g1 := startGateway(t, "")
	prefix := g1.Prefix
	held := tryAcquire(t, g1, "restart")
	g1.Stop()
	g2 := startGateway(t, prefix)
	rn, err := g2.Client.Renew(ctxT(t), connect.NewRequest(&v1.RenewRequest{LockId: held.LockId, FencingToken: held.FencingToken}))
	if err != nil || rn.Msg.TtlMs != 10000 {
		t.Fatalf("Renew after restart = %v, %v", rn, err)
	}
	release(t, g2, held)
}

func TestGRPCAndGRPCWebProtocols(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	for _, tc := range []struct {
		name string
		opt  connect.ClientOption
	}{{"grpc", connect.WithGRPC()}, {"grpc-web", connect.WithGRPCWeb()}, {"connect-json", connect.WithProtoJSON()}} {
		t.Run(tc.name, func(t *testing.T) {
			c := leasegatev1connect.NewLockServiceClient(g.HTTP, g.URL, tc.opt)
			stream, err := c.Acquire(ctxT(t), connect.NewRequest(&v1.AcquireRequest{Name: "proto-" + tc.name, TtlMs: 5000}))
			if err != nil {
				t.Fatal(err)
			}
			var gr *v1.Granted
			for stream.Receive() {
				gr = stream.Msg().GetGranted()
			}
			if err := stream.Err(); err != nil || gr == nil {
				t.Fatalf("Acquire over %s = %v, %v", tc.name, gr, err)
			}
			if _, err := c.Release(ctxT(t), connect.NewRequest(&v1.ReleaseRequest{LockId: gr.LockId, FencingToken: gr.FencingToken})); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestHealthServing(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	hc := connect.NewClient[grpc_health_v1.HealthCheckRequest, grpc_health_v1.HealthCheckResponse](g.HTTP, g.URL+"/grpc.health.v1.Health/Check", connect.WithGRPC())
	resp, err := hc.CallUnary(ctxT(t), connect.NewRequest(&grpc_health_v1.HealthCheckRequest{Service: "leasegate.v1.LockService"}))
	if err != nil || resp.Msg.Status != grpc_health_v1.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v; want SERVING", resp, err)
	}
	hr, err := g.HTTP.Get(g.URL + "/healthz")
	if err != nil || hr.StatusCode != http.StatusOK {
		t.Fatalf("/healthz = %v, %v; want 200", hr, err)
	}
	hr.Body.Close()
	_ = context.Background()
}
