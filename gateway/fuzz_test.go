package gateway_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/leasegate/leasegate/gateway"
	"github.com/leasegate/leasegate/internal/gwtest"
	"github.com/leasegate/leasegate/locks"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
	"github.com/leasegate/leasegate/queue"
	"github.com/leasegate/leasegate/shard"
)

// fuzzKeys signs the ids of the fuzz targets.
var fuzzKeys = func() *gateway.IDKeys {
	k, err := gateway.NewIDKeys(gateway.IDKey{ID: 7, Secret: []byte(strings.Repeat("k", gateway.MinIDKeyLen))})
	if err != nil {
		panic(err)
	}
	return k
}()

func FuzzDecodeLockID(f *testing.F) {
	h := queue.Handle{Name: "orders/42", WaiterID: strings.Repeat("ab", 16), Lease: 7, Revision: 99, Epoch: 1}
	f.Add(gateway.EncodeLockID(fuzzKeys, gateway.LockID{Shard: "c0", Handle: h}))
	f.Add(gateway.EncodeLockID(fuzzKeys, gateway.LockID{Tenant: "acme", Shard: "c1", Handle: h}))
	f.Add("")
	f.Add("AQ")
	f.Add("!!!")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := gateway.DecodeLockID(fuzzKeys, s)
		if err != nil {
			if !errors.Is(err, gateway.ErrMalformedID) {
				t.Fatalf("DecodeLockID error %v is not ErrMalformedID", err)
			}
			if len(s) > 8 && strings.Contains(err.Error(), s) {
				t.Fatalf("DecodeLockID error echoes its input")
			}
			return
		}
		again, err := gateway.DecodeLockID(fuzzKeys, gateway.EncodeLockID(fuzzKeys, id))
		if err != nil || again != id {
			t.Fatalf("round trip of %+v = %+v, %v", id, again, err)
		}
	})
}

// FuzzLockIDBody signs arbitrary bodies, so the parser behind the
// integrity check is fuzzed too.
func FuzzLockIDBody(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 2, 'c', '0'})
	f.Fuzz(func(t *testing.T, body []byte) {
		id, err := gateway.DecodeLockID(fuzzKeys, gateway.SealLockIDBody(fuzzKeys, body))
		if err != nil {
			if !errors.Is(err, gateway.ErrMalformedID) {
				t.Fatalf("DecodeLockID error %v is not ErrMalformedID", err)
			}
			return
		}
		again, err := gateway.DecodeLockID(fuzzKeys, gateway.EncodeLockID(fuzzKeys, id))
		if err != nil || again != id {
			t.Fatalf("round trip of %+v = %+v, %v", id, again, err)
		}
	})
}

func FuzzDecodeSessionID(f *testing.F) {
	f.Add(gateway.EncodeSessionID(fuzzKeys, gateway.SessionID{Tenant: "a", Leases: []gateway.ShardLease{{Shard: "c0", Lease: 5}}}))
	f.Add("")
	f.Add("AQAB")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := gateway.DecodeSessionID(fuzzKeys, s)
		if err != nil {
			if !errors.Is(err, gateway.ErrMalformedID) {
				t.Fatalf("DecodeSessionID error %v is not ErrMalformedID", err)
			}
			return
		}
		if _, err := gateway.DecodeSessionID(fuzzKeys, gateway.EncodeSessionID(fuzzKeys, id)); err != nil {
			t.Fatalf("re-encoded session id does not decode: %v", err)
		}
	})
}

// fuzzTarget is one service over the shared etcd with one lock held, which
// no rejected request may disturb.
type fuzzTarget struct {
	cli     *clientv3.Client
	router  *locks.Router
	srv     *httptest.Server
	svc     leasegatev1connect.LockServiceClient // the service, through its handler
	rest    http.Handler
	holder  *v1.Granted
	checked string
}

var (
	fuzzOnce sync.Once
	fuzzT    *fuzzTarget
	fuzzErr  error
)

func fuzzService(t testing.TB) *fuzzTarget {
	fuzzOnce.Do(func() {
		cli, err := etcdClientFor()
		if err != nil {
			fuzzErr = err
			return
		}
		rc := locks.DefaultRouterConfig()
		rc.Prefix = gwtest.NewPrefix()
		rc.Watch = false
		rc.Dial = func(string, []string) (*clientv3.Client, error) { return etcdClientFor() }
		router, err := locks.NewRouter(context.Background(), cli,
			shard.Map{Epoch: shard.MinEpoch, Clusters: []shard.Cluster{{Name: "main", Endpoints: cli.Endpoints()}}}, rc)
		if err != nil {
			fuzzErr = err
			return
		}
		cfg := gateway.DefaultConfig()
		cfg.IDKeys = fuzzKeys
		svc, err := gateway.NewService(cfg, router, nil)
		if err != nil {
			fuzzErr = err
			return
		}
		h := svc.Handler()
		srv := httptest.NewServer(h)
		ft := &fuzzTarget{cli: cli, router: router, srv: srv, svc: leasegatev1connect.NewLockServiceClient(srv.Client(), srv.URL), rest: h}
		fuzzT = ft
		r, err := ft.svc.TryAcquire(context.Background(), connect.NewRequest(&v1.TryAcquireRequest{Name: "fuzz-held", TtlMs: 3600_000}))
		if err != nil {
			fuzzErr = err
			return
		}
		ft.holder = r.Msg.Granted
	})
	if fuzzErr != nil {
		t.Fatal(fuzzErr)
	}
	return fuzzT
}

// closeFuzz releases what the fuzz set-up opened; TestMain calls it.
func closeFuzz() {
	if fuzzT != nil {
		fuzzT.srv.Close()
		fuzzT.router.Close()
		fuzzT.cli.Close()
	}
}

// stillHeld fails t if the held lock changed hands.
func (f *fuzzTarget) stillHeld(t *testing.T) {
	d, err := f.svc.Describe(context.Background(), connect.NewRequest(&v1.DescribeRequest{Name: "fuzz-held"}))
	if err != nil || d.Msg.FencingToken != f.holder.FencingToken {
		t.Fatalf("the held lock was disturbed: %v, %v", d, err)
	}
}

func FuzzRESTRequests(f *testing.F) {
	for _, s := range []struct{ path, body string }{
		{"acquire", `{"name":"x","ttlMs":30000,"clientId":"w"}`},
		{"acquire", `{"name":"","ttlMs":3}`},
		{"acquire", `{"name":"x","ttlMs":"30000"}`},
		{"acquire", `{"name":"fuzz-held","ttlMs":30000}`},
		{"acquire", `[1,2,3]`},
		{"renew", `{"lockId":"AAAA","fencingToken":1,"ttlMs":30000}`},
		{"release", `{"lockId":"","fencingToken":-1}`},
		{"release", `{"lockId":"x","fencingToken":1e99}`},
		{"nope", `{}`},
	} {
		f.Add(s.path, s.body)
	}
	f.Fuzz(func(t *testing.T, path, body string) {
		ft := fuzzService(t)
		req := (&http.Request{
			Method: http.MethodPost, URL: &url.URL{Path: "/api/v1/locks/" + path},
			Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body)), Host: "gateway",
		}).WithContext(context.Background())
		rec := httptest.NewRecorder()
		ft.rest.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("POST %s %q answered %d %s", path, body, rec.Code, rec.Body)
		}
		if rec.Code >= 400 && !strings.Contains(rec.Body.String(), `"error"`) {
			t.Fatalf("POST %s %q answered %d without a JSON error body", path, body, rec.Code)
		}
		ft.stillHeld(t)
	})
}

func FuzzConnectHandlers(f *testing.F) {
	seed, _ := proto.Marshal(&v1.TryAcquireRequest{Name: "n", TtlMs: 5000})
	f.Add(uint8(0), seed)
	f.Add(uint8(1), []byte{0x0a, 0x02, 'h', 'i', 0x10, 0x01})
	f.Add(uint8(2), []byte{})
	f.Add(uint8(3), []byte{0x0a, 0xff})
	f.Fuzz(func(t *testing.T, which uint8, raw []byte) {
		ft := fuzzService(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		switch which % 6 {
		case 0:
			m := &v1.TryAcquireRequest{}
			if proto.Unmarshal(raw, m) != nil {
				return
			}
			var r *connect.Response[v1.TryAcquireResponse]
			if r, err = ft.svc.TryAcquire(ctx, connect.NewRequest(m)); err == nil && r.Msg.Acquired {
				_, _ = ft.svc.Release(ctx, connect.NewRequest(&v1.ReleaseRequest{LockId: r.Msg.Granted.LockId, FencingToken: r.Msg.Granted.FencingToken}))
			}
		case 1:
			m := &v1.RenewRequest{}
			if proto.Unmarshal(raw, m) != nil {
				return
			}
			_, err = ft.svc.Renew(ctx, connect.NewRequest(m))
		case 2:
			m := &v1.ReleaseRequest{}
			if proto.Unmarshal(raw, m) != nil {
				return
			}
			_, err = ft.svc.Release(ctx, connect.NewRequest(m))
		case 3:
			m := &v1.DescribeRequest{}
			if proto.Unmarshal(raw, m) != nil {
				return
			}
			_, err = ft.svc.Describe(ctx, connect.NewRequest(m))
		case 4:
			m := &v1.CheckFenceRequest{}
			if proto.Unmarshal(raw, m) != nil {
				return
			}
			_, err = ft.svc.CheckFence(ctx, connect.NewRequest(m))
		case 5:
			m := &v1.KeepAliveSessionRequest{}
			if proto.Unmarshal(raw, m) != nil {
				return
			}
			_, err = ft.svc.KeepAliveSession(ctx, connect.NewRequest(m))
		}
		if err == nil {
			ft.stillHeld(t)
			return
		}
		switch connect.CodeOf(err) {
		case connect.CodeInternal, connect.CodeUnknown, connect.CodeDataLoss, connect.CodeUnimplemented:
			t.Fatalf("handler %d answered %v", which%6, err)
		}
		ft.stillHeld(t)
	})
}
