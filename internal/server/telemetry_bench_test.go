package server_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/leasegate/leasegate/internal/telemetry"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

func h2c() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

// BenchmarkTelemetryOverhead runs an uncontested acquire (streaming, granted
// at once) and release through three gateways over the same etcd, one
// cycle on each per iteration in rotating order so that they share the
// machine's noise: telemetry off, metrics only (the default of
// cmd/leasegate) and metrics plus tracing (every span sampled, batched to
// an exporter that drops them). It reports each variant's mean and the
// ratios to "off" of the mean, p50 and p99.
//
//	go test ./internal/server -run '^$' -bench TelemetryOverhead -benchtime 2000x
func BenchmarkTelemetryOverhead(b *testing.B) {
	ctx := context.Background()
	metricsOnly, err := telemetry.New(ctx, telemetry.Config{Metrics: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = metricsOnly.Shutdown(ctx) })
	traced, err := telemetry.New(ctx, telemetry.Config{Metrics: true})
	if err != nil {
		b.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	traced.TracerProvider = tp
	b.Cleanup(func() { _ = tp.Shutdown(ctx); _ = traced.Shutdown(ctx) })

	variants := []struct {
		name string
		p    *telemetry.Providers
	}{{"off", nil}, {"metrics", metricsOnly}, {"traces", traced}}
	clients := make([]leasegatev1connect.LockServiceClient, len(variants))
	for i, v := range variants {
		srv := startGateway(b, v.p, nil)
		clients[i] = leasegatev1connect.NewLockServiceClient(h2c(), srv.URL(), connect.WithGRPC())
	}
	cycle := func(c leasegatev1connect.LockServiceClient, name string) time.Duration {
		start := time.Now()
		st, err := c.Acquire(ctx, connect.NewRequest(&v1.AcquireRequest{Name: name, TtlMs: 10000}))
		if err != nil {
			b.Fatal(err)
		}
		var g *v1.Granted
		for g == nil && st.Receive() {
			g = st.Msg().GetGranted()
		}
		st.Close()
		if g == nil {
			b.Fatalf("no grant: %v", st.Err())
		}
		if _, err := c.Release(ctx, connect.NewRequest(&v1.ReleaseRequest{LockId: g.LockId, FencingToken: g.FencingToken})); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	for i, c := range clients { // warm up connections and leases
		for range 20 {
			cycle(c, fmt.Sprintf("bench/warm/%d", i))
		}
	}
	times := make([][]time.Duration, len(variants))
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		for k := range variants {
			i := (n + k) % len(variants)
			times[i] = append(times[i], cycle(clients[i], "bench/uncontested"))
		}
	}
	b.StopTimer()
	stats := func(ts []time.Duration) (mean, p50, p99 float64) {
		s := slices.Clone(ts)
		slices.Sort(s)
		var sum time.Duration
		for _, t := range s {
			sum += t
		}
		return float64(sum) / float64(len(s)), float64(s[len(s)/2]), float64(s[min(len(s)-1, len(s)*99/100)])
	}
	offMean, offP50, offP99 := stats(times[0])
	b.ReportMetric(offMean, "off-ns/cycle")
	for i, v := range variants[1:] {
		mean, p50, p99 := stats(times[i+1])
		b.ReportMetric(mean, v.name+"-ns/cycle")
		b.ReportMetric(mean/offMean, v.name+"/off-mean")
		b.ReportMetric(p50/offP50, v.name+"/off-p50")
		b.ReportMetric(p99/offP99, v.name+"/off-p99")
	}
}
