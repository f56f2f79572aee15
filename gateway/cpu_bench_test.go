package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/leasegate/leasegate/client"
	"github.com/leasegate/leasegate/internal/gwtest"
	"github.com/leasegate/leasegate/internal/server"
	"github.com/leasegate/leasegate/internal/telemetry"
)

// BenchmarkCallCPU runs uncontested acquire+release cycles through a real
// gateway over real HTTP/2 on the embedded etcd, one cycle at a time, and
// reports the process's CPU per cycle: the caller, the gateway and etcd
// together, as the load generator's uncontested scenario measures them.
// The gateway serves Prometheus metrics, as the leasegate binary does by
// default.
//
//   - session: the Go SDK, a session per client, streaming Acquire.
//   - perlock: the Go SDK, a lease of its own per lock.
//   - rest-h2c: the REST API over HTTP/2 without TLS, one reused connection.
//   - rest-http1: the REST API over HTTP/1.1 with keep-alive.
//
// With LEASEGATE_BENCH_LAYERS=1 each sub-benchmark profiles its timed
// loop itself and logs the CPU by layer (see cpulayers_test.go); do not
// combine it with -cpuprofile, which takes the same profiler.
func BenchmarkCallCPU(b *testing.B) {
	p, err := telemetry.New(context.Background(), telemetry.Config{Version: "bench", Metrics: true})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	g := gwtest.Start(b, shared, gwtest.Configure(func(c *server.Config) { c.Telemetry = p }))
	sdk := g.SDK(b, client.WithClientID("bench"))
	ctx := context.Background()
	const ttl = time.Minute
	names := make([]string, 64)
	for i := range names {
		names[i] = fmt.Sprintf("cpu-%d", i)
	}

	b.Run("session", func(b *testing.B) {
		s, err := sdk.OpenSession(ctx, client.WithTTL(ttl))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close(ctx)
		measureCycles(b, func(i int) error {
			l, err := s.Acquire(ctx, names[i%len(names)])
			if err != nil {
				return err
			}
			return l.Release(ctx)
		})
	})
	b.Run("perlock", func(b *testing.B) {
		measureCycles(b, func(i int) error {
			l, err := sdk.Acquire(ctx, names[i%len(names)], client.WithTTL(ttl))
			if err != nil {
				return err
			}
			return l.Release(ctx)
		})
	})
	for _, proto := range []string{"h2c", "http1"} {
		b.Run("rest-"+proto, func(b *testing.B) {
			hc := gwtest.H2C()
			if proto == "http1" {
				hc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			}
			defer hc.CloseIdleConnections()
			measureCycles(b, func(i int) error {
				var got struct {
					Acquired     bool   `json:"acquired"`
					LockID       string `json:"lockId"`
					FencingToken int64  `json:"fencingToken"`
				}
				body := fmt.Sprintf(`{"name":%q,"ttlMs":%d,"clientId":"bench"}`, names[i%len(names)], ttl.Milliseconds())
				if err := restCall(hc, g.URL+"/api/v1/locks/acquire", body, http.StatusOK, &got); err != nil {
					return err
				}
				if !got.Acquired {
					return fmt.Errorf("acquire of %s: not acquired", names[i%len(names)])
				}
				body = fmt.Sprintf(`{"lockId":%q,"fencingToken":%d}`, got.LockID, got.FencingToken)
				return restCall(hc, g.URL+"/api/v1/locks/release", body, http.StatusNoContent, nil)
			})
		})
	}
}

// restCall posts body to url and decodes the answer into out.
func restCall(hc *http.Client, url, body string, want int, out any) error {
	resp, err := hc.Post(url, "application/json", bytes.NewBufferString(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("POST %s = %d %s; want %d", url, resp.StatusCode, raw, want)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}

// measureCycles warms up, then runs cycle b.N times and reports the
// process's CPU per cycle in microseconds.
func measureCycles(b *testing.B, cycle func(i int) error) {
	for i := range 100 {
		if err := cycle(i); err != nil {
			b.Fatal(err)
		}
	}
	measureLoop(b, layers, func() error {
		for i := 0; i < b.N; i++ {
			if err := cycle(i); err != nil {
				return err
			}
		}
		return nil
	})
}

// measureLoop times loop, which runs b.N cycles, and reports the
// process's CPU per cycle in microseconds. With LEASEGATE_BENCH_LAYERS=1
// it also prints the loop's CPU and allocations per cycle by the layers
// of by. It returns the loop's CPU.
func measureLoop(b *testing.B, by []layer, loop func() error) time.Duration {
	// The first run of a benchmark is one cycle: too short to sample.
	profiled := layersWanted && b.N >= 100
	var prof, allocs0 bytes.Buffer
	if profiled {
		runtime.GC() // the allocs profile is as of the last collection
		if err := pprof.Lookup("allocs").WriteTo(&allocs0, 0); err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(&prof); err != nil {
			b.Fatal(err)
		}
	}
	cpu0 := cpuTime()
	b.ResetTimer()
	err := loop()
	b.StopTimer()
	cpu := cpuTime() - cpu0
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/cycle")
	if !profiled {
		return cpu
	}
	pprof.StopCPUProfile()
	runtime.GC()
	var allocs1 bytes.Buffer
	if err := pprof.Lookup("allocs").WriteTo(&allocs1, 0); err != nil {
		b.Fatal(err)
	}
	ct, err := cpuTable(by, &prof, cpu, b.N)
	if err != nil {
		b.Fatal(err)
	}
	at, err := allocTable(by, &allocs0, &allocs1, b.N)
	if err != nil {
		b.Fatal(err)
	}
	// Printed, not logged: the testing package cuts a benchmark's log
	// short.
	fmt.Printf("%s: CPU by layer, %d cycles:\n%s\n%s: allocations by layer:\n%s\n", b.Name(), b.N, ct, b.Name(), at)
	return cpu
}

// layersWanted is LEASEGATE_BENCH_LAYERS=1. It samples allocations finely
// (every 4 KiB on average) for the whole process, so that the allocations
// table of a few thousand cycles is not noise.
var layersWanted = func() bool {
	if os.Getenv("LEASEGATE_BENCH_LAYERS") != "1" {
		return false
	}
	runtime.MemProfileRate = 4 << 10
	return true
}()
