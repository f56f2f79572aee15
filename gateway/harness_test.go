package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/leasegate/leasegate/internal/etcdtest"
	"github.com/leasegate/leasegate/internal/gwtest"
	"github.com/leasegate/leasegate/internal/server"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

var shared *etcdtest.Cluster

func TestMain(m *testing.M) {
	os.Exit(etcdtest.Main(m, func(c *etcdtest.Cluster) { shared = c }, closeFuzz))
}

// gw is a gateway started in-process on a free port.
type gw = gwtest.Gateway

// startGateway starts a gateway over the shared etcd under prefix (a fresh
// one when empty) and stops it at cleanup.
func startGateway(t *testing.T, prefix string) *gw {
	t.Helper()
	return gwtest.Start(t, shared, gwtest.Prefix(prefix))
}

// startGatewayWith starts a gateway over the shared etcd under a fresh
// prefix, with adjust applied, and stops it at cleanup.
func startGatewayWith(t *testing.T, adjust func(*server.Config)) *gw {
	t.Helper()
	return gwtest.Start(t, shared, gwtest.Configure(adjust))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func etcdClient(t *testing.T) *clientv3.Client { return shared.ClientFor(t) }

func tryAcquire(t *testing.T, g *gw, name string) *v1.Granted {
	t.Helper()
	resp, err := g.Client.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: name, TtlMs: 10000, ClientId: "holder"}))
	if err != nil || !resp.Msg.Acquired {
		t.Fatalf("TryAcquire(%q) = %v, %v; want acquired", name, resp, err)
	}
	return resp.Msg.Granted
}

func release(t *testing.T, g *gw, gr *v1.Granted) {
	t.Helper()
	resp, err := g.Client.Release(ctxT(t), connect.NewRequest(&v1.ReleaseRequest{LockId: gr.LockId, FencingToken: gr.FencingToken}))
	if err != nil || !resp.Msg.Released {
		t.Fatalf("Release = %v, %v; want released", resp, err)
	}
}

// waiter runs a streaming Acquire and reports its events.
type waiter struct {
	positions chan int64
	granted   chan *v1.Granted
	err       chan error
	cancel    context.CancelFunc
}

func startWaiter(t *testing.T, g *gw, req *v1.AcquireRequest) *waiter {
	t.Helper()
	return waitWith(t, g.Client, req)
}

// waitWith runs a streaming Acquire with client c; its context ends at
// t's cleanup at the latest.
func waitWith(t *testing.T, c leasegatev1connect.LockServiceClient, req *v1.AcquireRequest) *waiter {
	t.Helper()
	ctx, cancel := context.WithCancel(ctxT(t))
	t.Cleanup(cancel)
	w := &waiter{positions: make(chan int64, 64), granted: make(chan *v1.Granted, 1), err: make(chan error, 1), cancel: cancel}
	stream, err := c.Acquire(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer stream.Close()
		for stream.Receive() {
			switch ev := stream.Msg().Event.(type) {
			case *v1.AcquireResponse_Queued:
				w.positions <- ev.Queued.Position
			case *v1.AcquireResponse_Granted:
				w.granted <- ev.Granted
			}
		}
		w.err <- stream.Err()
		// A test awaiting a position or a grant fails instead of hanging.
		close(w.positions)
		close(w.granted)
	}()
	return w
}

func codeOf(err error) connect.Code { return connect.CodeOf(err) }

func reasonOf(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return ""
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if info, ok := v.(*errdetails.ErrorInfo); ok {
				return info.Reason
			}
		}
	}
	return ""
}

// limitOf is the limit a refusal names in its ErrorInfo metadata.
func limitOf(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return ""
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if info, ok := v.(*errdetails.ErrorInfo); ok {
				return info.Metadata[v1.MetadataLimit]
			}
		}
	}
	return ""
}

// postJSON sends a REST call and decodes the answer into a generic map.
func postJSON(t *testing.T, g *gw, path string, body string) (int, map[string]any) {
	t.Helper()
	resp, err := g.HTTP.Post(g.URL+path, "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if len(raw) == 0 {
		return resp.StatusCode, nil
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("POST %s answered non-JSON %q", path, raw)
	}
	return resp.StatusCode, out
}

// etcdClientFor dials the shared etcd outside a test (for fuzz set-up that
// lives as long as the process).
func etcdClientFor() (*clientv3.Client, error) { return etcdtest.NewClient(shared.Endpoint()) }
