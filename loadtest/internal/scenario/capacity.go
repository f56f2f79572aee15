package scenario

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/loadtest/internal/stats"
	"github.com/leasegate/leasegate/loadtest/internal/testbed"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

// capacitySessionTTL is the session TTL of the capacity fill: long, so that
// keepalives starved of CPU while the machine is saturated still land.
const capacitySessionTTL = 60 * time.Second

// Capacity fills the gateway with session locks — distinct names spread
// over every cluster, CapacityWorkers TryAcquire calls in flight over
// CapacitySessions sessions — until CapacityTarget locks are held, the time
// bound passes or the process's resident memory reaches MaxRSS, and reports
// the count reached and the memory per held lock.
//
// It speaks the generated Connect client (protobuf over HTTP/2) rather than
// the SDK: the SDK keeps an object per held lock, which in this one process
// would be counted as the gateway's memory.
func (e *Env) Capacity(ctx context.Context) (*Capacity, error) {
	cfg := e.Cfg
	out := &Capacity{Target: cfg.CapacityTarget, Sessions: cfg.CapacitySessions, Workers: cfg.CapacityWorkers}
	if e.Bed.Embedded() {
		out.Notes = append(out.Notes, "Memory is this process's: the gateway and the three embedded etcd members (the load generator keeps nothing per lock, but its own baseline is in the totals).")
	} else {
		out.Notes = append(out.Notes, "External gateway: memory per lock is not measured (it lives in another process); only the etcd database size of the --etcd cluster is.")
	}
	hc := h2cClient()
	defer hc.CloseIdleConnections()
	rpc := leasegatev1connect.NewLockServiceClient(hc, e.Bed.Gateways[0])

	runtime.GC()
	heap0, rss0 := heapInUse(), testbed.RSS()
	sessions, stopKeep, err := openRawSessions(ctx, rpc, cfg.CapacitySessions)
	if err != nil {
		return nil, err
	}
	defer stopKeep()
	if !e.Bed.Embedded() {
		defer closeRawSessions(rpc, sessions)
	}

	var (
		held, next atomic.Int64
		errs       errSamples
		stopReason atomic.Value
		stopping   atomic.Bool
		workers    sync.WaitGroup
		hs         = make([]*stats.Histogram, cfg.CapacityWorkers)
	)
	// Stopping lets the calls in flight finish: a lock whose grant is
	// cancelled half-way would be neither counted nor known to be free.
	end := func(reason string) {
		stopReason.CompareAndSwap(nil, reason)
		stopping.Store(true)
	}
	start := time.Now()
	out.Samples = append(out.Samples, CapacitySample{Held: 0, RSSBytes: testbed.RSS(), HeapB: int64(heap0)})
	e.Bar.Start(fmt.Sprintf("capacity → %d locks", cfg.CapacityTarget), cfg.CapacityDuration, cfg.CapacityTarget, held.Load)
	tag := time.Now().UnixNano() % 1e6
	for w := range hs {
		hs[w] = stats.NewHistogram()
		workers.Go(func() {
			for !stopping.Load() && ctx.Err() == nil {
				n := next.Add(1) - 1
				if n >= cfg.CapacityTarget {
					end(fmt.Sprintf("reached the target of %d", cfg.CapacityTarget))
					return
				}
				t := time.Now()
				resp, err := rpc.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{
					Name: fmt.Sprintf("cap%d-%d", tag, n), SessionId: sessions[n%int64(len(sessions))], ClientId: "capacity",
				}))
				if err != nil {
					if ctx.Err() == nil {
						errs.add(err)
						pause(ctx, 10*time.Millisecond)
					}
					continue
				}
				hs[w].Record(time.Since(t))
				if resp.Msg.Acquired {
					held.Add(1)
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { workers.Wait(); close(done) }()
	t := time.NewTicker(time.Second)
	cancelled := ctx.Done()
monitor:
	for {
		select {
		case <-done:
			break monitor
		case <-cancelled:
			end("cancelled")
			cancelled = nil
		case now := <-t.C:
			s := CapacitySample{Seconds: now.Sub(start).Seconds(), Held: held.Load(), RSSBytes: testbed.RSS(), HeapB: int64(heapInUse())}
			out.Samples = append(out.Samples, s)
			switch {
			case s.RSSBytes >= cfg.MaxRSS:
				end(fmt.Sprintf("resident memory reached the %d MiB bound", cfg.MaxRSS>>20))
			case now.Sub(start) >= cfg.CapacityDuration:
				end(fmt.Sprintf("the %s time bound passed", cfg.CapacityDuration))
			case errs.n.Load() > 1000 && errs.n.Load() > held.Load()/10:
				end("too many errors")
			}
		}
	}
	t.Stop()
	e.Bar.Done()
	elapsed := time.Since(start)
	out.StopReason, _ = stopReason.Load().(string)
	out.Held, out.Seconds = held.Load(), elapsed.Seconds()
	out.PerSec = float64(out.Held) / out.Seconds
	out.Errors, out.ErrorSample = errs.n.Load(), errs.msg
	all := stats.NewHistogram()
	for _, h := range hs {
		all.Merge(h)
	}
	out.Latency = all.Summary()

	runtime.GC()
	heap1, rss1 := heapInUse(), testbed.RSS()
	out.RSSBytes = rss1
	out.Samples = append(out.Samples, CapacitySample{Seconds: elapsed.Seconds(), Held: out.Held, RSSBytes: rss1, HeapB: int64(heap1)})
	if out.Held > 0 {
		if e.Bed.Embedded() {
			out.HeapPerLock = float64(int64(heap1)-int64(heap0)) / float64(out.Held)
			out.RSSPerLock = float64(rss1-rss0) / float64(out.Held)
		}
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		db, _, err := e.Bed.EtcdDBSize(dctx)
		cancel()
		if err == nil {
			out.EtcdDBBytes = db
			out.EtcdDBPerLock = float64(db) / float64(out.Held)
		} else {
			out.Notes = append(out.Notes, "etcd database size unavailable: "+err.Error())
		}
	}
	e.logf("capacity    held %d locks in %.0fs (%.0f/s), stopped: %s; heap %.0f B/lock, RSS %.0f B/lock, etcd db %.0f B/lock, errors %d",
		out.Held, out.Seconds, out.PerSec, out.StopReason, out.HeapPerLock, out.RSSPerLock, out.EtcdDBPerLock, out.Errors)
	return out, nil
}

func heapInUse() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// h2cClient speaks HTTP/2 without TLS, as the SDK's default client does.
func h2cClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{
		Protocols:   &p,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}}
}

// openRawSessions opens n sessions and keeps them alive every TTL/3 until
// the returned stop is called.
func openRawSessions(ctx context.Context, rpc leasegatev1connect.LockServiceClient, n int) ([]string, func(), error) {
	ids := make([]string, n)
	for i := range ids {
		resp, err := rpc.OpenSession(ctx, connect.NewRequest(&v1.OpenSessionRequest{ClientId: "capacity", TtlMs: capacitySessionTTL.Milliseconds()}))
		if err != nil {
			return nil, nil, fmt.Errorf("capacity: open session: %w", err)
		}
		ids[i] = resp.Msg.SessionId
	}
	kctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			next := capacitySessionTTL / 3
			for {
				select {
				case <-kctx.Done():
					return
				case <-time.After(next):
				}
				cctx, c := context.WithTimeout(kctx, 10*time.Second)
				_, err := rpc.KeepAliveSession(cctx, connect.NewRequest(&v1.KeepAliveSessionRequest{SessionId: id}))
				c()
				next = capacitySessionTTL / 3
				if err != nil {
					next = 2 * time.Second
				}
			}
		})
	}
	return ids, func() { cancel(); wg.Wait() }, nil
}

func closeRawSessions(rpc leasegatev1connect.LockServiceClient, ids []string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, id := range ids {
		_, _ = rpc.CloseSession(ctx, connect.NewRequest(&v1.CloseSessionRequest{SessionId: id}))
	}
}
