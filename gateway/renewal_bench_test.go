package gateway_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/leasegate/leasegate/gateway"
	"github.com/leasegate/leasegate/internal/etcdtest"
	"github.com/leasegate/leasegate/internal/gwtest"
	"github.com/leasegate/leasegate/locks"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/shard"
)

// keepAliveCounter counts LeaseKeepAlive requests sent to one cluster.
type keepAliveCounter struct{ n atomic.Int64 }

func (c *keepAliveCounter) interceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || method != "/etcdserverpb.Lease/LeaseKeepAlive" {
		return s, err
	}
	return countingStream{ClientStream: s, n: &c.n}, nil
}

type countingStream struct {
	grpc.ClientStream
	n *atomic.Int64
}

func (s countingStream) SendMsg(m any) error {
	s.n.Add(1)
	return s.ClientStream.SendMsg(m)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRenewalSpread renews K held leases through the gateway service,
// spread over 1 or 3 clusters, with a lease per lock or with sessions, and
// reports the keepalives each cluster receives, their balance (busiest ÷
// mean), keepalives per held lock per renewal round, and process CPU per
// 1,000 renewals (the process also runs the embedded etcd and the caller).
func BenchmarkRenewalSpread(b *testing.B) {
	etcds := []*etcdtest.Cluster{etcdtest.Start(b), etcdtest.Start(b), etcdtest.Start(b)}
	const held, sessions = 240, 12
	for _, n := range []int{1, 3} {
		for _, mode := range []string{"perlock", "session"} {
			b.Run(fmt.Sprintf("%s/clusters=%d", mode, n), func(b *testing.B) {
				counters := map[string]*keepAliveCounter{}
				m := shard.Map{Epoch: 1}
				for i := range n {
					name := fmt.Sprintf("c%d", i)
					m.Clusters = append(m.Clusters, shard.Cluster{Name: name, Endpoints: []string{etcds[i].Endpoint()}})
					counters[name] = &keepAliveCounter{}
				}
				rc := locks.DefaultRouterConfig()
				rc.Prefix = gwtest.NewPrefix()
				rc.Dial = func(name string, eps []string) (*clientv3.Client, error) {
					c := counters[name]
					return clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
						DialOptions: []grpc.DialOption{grpc.WithStreamInterceptor(c.interceptor)}})
				}
				home := etcds[0].ClientFor(b)
				r, err := locks.NewRouter(context.Background(), home, m, rc)
				if err != nil {
					b.Fatal(err)
				}
				defer r.Close()
				svc, err := gateway.NewService(gateway.DefaultConfig(), r, nil)
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				var locks []*v1.Granted
				var sessIDs []string
				for i := range held {
					req := &v1.TryAcquireRequest{Name: fmt.Sprintf("held-%d", i), TtlMs: 60000}
					if mode == "session" {
						if i%(held/sessions) == 0 {
							s, err := svc.OpenSession(ctx, connect.NewRequest(&v1.OpenSessionRequest{ClientId: "bench", TtlMs: 60000}))
							if err != nil {
								b.Fatal(err)
							}
							sessIDs = append(sessIDs, s.Msg.SessionId)
						}
						req.SessionId = sessIDs[len(sessIDs)-1]
					}
					res, err := svc.TryAcquire(ctx, connect.NewRequest(req))
					if err != nil || !res.Msg.Acquired {
						b.Fatalf("acquire: %v, %v", res, err)
					}
					locks = append(locks, res.Msg.Granted)
				}
				for _, c := range counters {
					c.n.Store(0)
				}
				cpu0 := cpuTime()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if mode == "session" {
						// One renewal call covers every lock of a session.
						if _, err := svc.KeepAliveSession(ctx, connect.NewRequest(&v1.KeepAliveSessionRequest{SessionId: sessIDs[i%len(sessIDs)]})); err != nil {
							b.Fatal(err)
						}
						continue
					}
					g := locks[i%len(locks)]
					if _, err := svc.Renew(ctx, connect.NewRequest(&v1.RenewRequest{LockId: g.LockId, FencingToken: g.FencingToken})); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				cpu := cpuTime() - cpu0
				var total, busiest int64
				for _, c := range counters {
					v := c.n.Load()
					total += v
					busiest = max(busiest, v)
				}
				mean := float64(total) / float64(n)
				b.ReportMetric(float64(total)/float64(b.N), "keepalives/op")
				b.ReportMetric(float64(busiest)/mean, "balance")
				// A renewal round renews every held lock once: per lock it
				// costs one keepalive, per session one per cluster.
				rounds := float64(b.N) / float64(len(locks))
				if mode == "session" {
					rounds = float64(b.N) / float64(len(sessIDs))
				}
				b.ReportMetric(float64(total)/rounds/float64(held), "keepalives/lock/round")
				b.ReportMetric(float64(cpu.Milliseconds())*1000/float64(b.N), "cpu-ms/1k-renewals")
				for _, id := range sessIDs {
					_, _ = svc.CloseSession(ctx, connect.NewRequest(&v1.CloseSessionRequest{SessionId: id}))
				}
				for _, g := range locks {
					_, _ = svc.Release(ctx, connect.NewRequest(&v1.ReleaseRequest{LockId: g.LockId, FencingToken: g.FencingToken}))
				}
			})
		}
	}
}
