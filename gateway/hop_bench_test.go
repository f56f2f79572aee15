package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/client"
	"github.com/leasegate/leasegate/internal/gwtest"
	"github.com/leasegate/leasegate/internal/server"
	"github.com/leasegate/leasegate/internal/telemetry"
	"github.com/leasegate/leasegate/locks"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/queue"
)

// BenchmarkHop prices the gateway's hop: one uncontested TryAcquire +
// Release cycle (a lease of its own per lock) through each of the
// gateway's wires, and the same cycle on the fleet (locks.Router)
// in-process, which the gateway's handlers call. Every path runs against
// the same gateway over the shared embedded etcd, with one worker and
// with 16 concurrent workers (w16: one HTTP/2 connection per client,
// shared by the workers' streams). Each worker cycles over names of its
// own, so no cycle waits for another.
//
//	go test ./gateway -run '^$' -bench Hop -benchtime 1000x -count 2
//
// ns/op is wall time per cycle (with 16 workers, the inverse of the
// throughput), allocs/op and B/op are the whole process's (caller,
// gateway and etcd) and cpu-µs/cycle its CPU; net-cpu-µs/cycle is that
// less the process's idle CPU over the cycles' wall time. The hop is a
// path's figure less the fleet's. The gateway serves Prometheus metrics,
// as the leasegate binary does by default.
//
//   - fleet: locks.Router.TryAcquire and Held.Release in-process.
//   - sdk: the Go SDK (client.TryAcquire, Lock.Release): Connect, h2c.
//   - connect: a generated Connect client, binary protobuf, h2c.
//   - grpc: the generated client with connect.WithGRPC, h2c.
//   - rest: the REST API's JSON with net/http, h2c.
func BenchmarkHop(b *testing.B) {
	p, err := telemetry.New(context.Background(), telemetry.Config{Version: "bench", Metrics: true})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	g := gwtest.Start(b, shared, gwtest.Configure(func(c *server.Config) { c.Telemetry = p }))
	ctx := context.Background()
	const ttl = time.Minute
	paths := []struct {
		name  string
		cycle func() func(name string) error // a fresh client's cycle
	}{
		{"fleet", func() func(string) error { return fleetCycle(ctx, g.Server.Router(), ttl) }},
		{"sdk", func() func(string) error {
			sdk := g.SDK(b, client.WithClientID("bench"))
			return func(name string) error {
				l, err := sdk.TryAcquire(ctx, name, client.WithTTL(ttl))
				if err != nil {
					return err
				}
				return l.Release(ctx)
			}
		}},
		{"connect", func() func(string) error { return connectCycle(ctx, g) }},
		{"grpc", func() func(string) error { return connectCycle(ctx, g, connect.WithGRPC()) }},
		{"rest", func() func(string) error {
			hc := gwtest.H2C()
			b.Cleanup(hc.CloseIdleConnections)
			return restCycle(hc, g.URL, ttl)
		}},
	}
	for _, path := range paths {
		for _, workers := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/w%d", path.name, workers), func(b *testing.B) {
				measureHop(b, workers, path.cycle())
			})
		}
	}
}

// fleetCycle is the cycle on r, as the gateway's TryAcquire and Release
// handlers call it for an unauthenticated caller.
func fleetCycle(ctx context.Context, r *locks.Router, ttl time.Duration) func(string) error {
	var seq atomic.Int64
	return func(name string) error {
		a := locks.Acquire{Request: queue.AcquireRequest{Name: name, TTL: ttl, ClientID: "bench", Owner: "none/",
			RequestID: fmt.Sprintf("hop-%d", seq.Add(1)), MaxKeys: 10_000}}
		shard, res, err := r.TryAcquire(ctx, a)
		if err != nil {
			return err
		}
		if !res.Acquired {
			return fmt.Errorf("fleet TryAcquire(%q): not acquired", name)
		}
		h, err := r.Held(ctx, "", shard, res.Grant.Handle)
		if err != nil {
			return err
		}
		ok, err := h.Release(ctx, res.Grant.Token())
		if err == nil && !ok {
			err = fmt.Errorf("fleet Release(%q): not held", name)
		}
		return err
	}
}

// connectCycle is the cycle through a generated client of g with opts.
func connectCycle(ctx context.Context, g *gw, opts ...connect.ClientOption) func(string) error {
	c := g.ConnectClient(opts...)
	return func(name string) error {
		resp, err := c.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: name, TtlMs: time.Minute.Milliseconds(), ClientId: "bench"}))
		if err != nil {
			return err
		}
		gr := resp.Msg.Granted
		if !resp.Msg.Acquired || gr == nil {
			return fmt.Errorf("TryAcquire(%q): not acquired", name)
		}
		rel, err := c.Release(ctx, connect.NewRequest(&v1.ReleaseRequest{LockId: gr.LockId, FencingToken: gr.FencingToken}))
		if err == nil && !rel.Msg.Released {
			err = fmt.Errorf("Release(%q): not released", name)
		}
		return err
	}
}

// restCycle is the cycle through the REST API with hc.
func restCycle(hc *http.Client, url string, ttl time.Duration) func(string) error {
	return func(name string) error {
		var got struct {
			Acquired     bool   `json:"acquired"`
			LockID       string `json:"lockId"`
			FencingToken int64  `json:"fencingToken"`
		}
		body := fmt.Sprintf(`{"name":%q,"ttlMs":%d,"clientId":"bench"}`, name, ttl.Milliseconds())
		if err := restCall(hc, url+"/api/v1/locks/acquire", body, http.StatusOK, &got); err != nil {
			return err
		}
		if !got.Acquired {
			return fmt.Errorf("REST acquire of %s: not acquired", name)
		}
		body = fmt.Sprintf(`{"lockId":%q,"fencingToken":%d}`, got.LockID, got.FencingToken)
		return restCall(hc, url+"/api/v1/locks/release", body, http.StatusNoContent, nil)
	}
}

// measureHop warms cycle up, then runs b.N cycles on workers goroutines,
// each over 8 names of its own, and reports allocations and the process's
// CPU per cycle (by layer with LEASEGATE_BENCH_LAYERS=1, see
// hoplayers_test.go).
func measureHop(b *testing.B, workers int, cycle func(name string) error) {
	names := make([][]string, workers)
	for w := range names {
		for i := range 8 {
			names[w] = append(names[w], fmt.Sprintf("hop-%s-%d-%d", b.Name(), w, i))
		}
	}
	run := func(n int) error {
		var next atomic.Int64
		errs := make(chan error, workers)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := 0; next.Add(1) <= int64(n); i++ {
					if err := cycle(names[w][i%len(names[w])]); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		return <-errs
	}
	if err := run(20 * workers); err != nil {
		b.Fatal(err)
	}
	idle := idleCPU(300 * time.Millisecond)
	b.ReportAllocs()
	cpu := measureLoop(b, hopLayers, func() error { return run(b.N) })
	busy := cpu - time.Duration(idle*float64(b.Elapsed()))
	b.ReportMetric(float64(busy.Microseconds())/float64(b.N), "net-cpu-µs/cycle")
}

// idleCPU is the process's CPU per second of wall time over d while no
// cycle runs: etcd's raft ticks and lease checks, the gateway's
// background work. A cycle slowed by a loaded machine is charged more of
// it, which net-cpu-µs/cycle takes out again.
func idleCPU(d time.Duration) float64 {
	cpu0, t0 := cpuTime(), time.Now()
	time.Sleep(d)
	return float64(cpuTime()-cpu0) / float64(time.Since(t0))
}
