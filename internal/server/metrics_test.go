package server_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/internal/server"
	"github.com/leasegate/leasegate/internal/telemetry"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
	"github.com/leasegate/leasegate/queue"
)

// scrape reads url's /metrics.
func scrape(tb testing.TB, url string) map[string]*dto.MetricFamily {
	tb.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return fams
}

// sample finds the metric of family name whose labels include want.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.Metric {
		for k, v := range want {
			found := false
			for _, lp := range m.Label {
				if lp.GetName() == k && lp.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		return m
	}
	return nil
}

// runWorkload drives a small scripted workload through a gateway: ten
// uncontested acquire+release cycles, a TryAcquire of a held name, a waiter
// granted on release, a renew, a renew of a lock whose lease lapsed
// (expired) and a renew over the tenant's renew rate.
func runWorkload(tb testing.TB, srv *server.Server) {
	tb.Helper()
	url := srv.URL()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := leasegatev1connect.NewLockServiceClient(http.DefaultClient, url)
	acquire := func(name string) *v1.Granted {
		tb.Helper()
		st, err := c.Acquire(ctx, connect.NewRequest(&v1.AcquireRequest{Name: name, TtlMs: 10000}))
		if err != nil {
			tb.Fatal(err)
		}
		defer st.Close()
		for st.Receive() {
			if g := st.Msg().GetGranted(); g != nil {
				return g
			}
		}
		tb.Fatalf("acquire %q: %v", name, st.Err())
		return nil
	}
	release := func(g *v1.Granted) {
		tb.Helper()
		if _, err := c.Release(ctx, connect.NewRequest(&v1.ReleaseRequest{LockId: g.LockId, FencingToken: g.FencingToken})); err != nil {
			tb.Fatal(err)
		}
	}
	for range 10 {
		release(acquire("jobs/nightly"))
	}
	held := acquire("jobs/held")
	if r, err := c.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: "jobs/held", TtlMs: 10000})); err != nil || r.Msg.Acquired {
		tb.Fatalf("TryAcquire of a held lock = %v, %v; want not acquired", r, err)
	}
	if _, err := c.Renew(ctx, connect.NewRequest(&v1.RenewRequest{LockId: held.LockId, FencingToken: held.FencingToken, TtlMs: 10000})); err != nil {
		tb.Fatal(err)
	}
	// A waiter, granted when the holder releases.
	st, err := c.Acquire(ctx, connect.NewRequest(&v1.AcquireRequest{Name: "jobs/held", TtlMs: 10000}))
	if err != nil {
		tb.Fatal(err)
	}
	defer st.Close()
	if !st.Receive() || st.Msg().GetQueued() == nil {
		tb.Fatalf("waiter: want a Queued event first, got %v %v", st.Msg(), st.Err())
	}
	release(held)
	var next *v1.Granted
	for next == nil && st.Receive() {
		next = st.Msg().GetGranted()
	}
	if next == nil {
		tb.Fatalf("waiter never granted: %v", st.Err())
	}
	// The waiter's lease lapses (revoked here, as etcd expires it), and
	// renewing it finds it expired: a lease loss.
	eng := srv.Engines()[0]
	keys, err := srv.Router().Backends()[0].Client.Get(ctx, queue.NamePrefix(eng.Config().Prefix, "jobs/held"), clientv3.WithPrefix())
	if err != nil || len(keys.Kvs) != 1 {
		tb.Fatalf("the granted waiter's key: %v, %d keys", err, len(keys.Kvs))
	}
	if _, err := srv.Router().Backends()[0].Client.Revoke(ctx, clientv3.LeaseID(keys.Kvs[0].Lease)); err != nil {
		tb.Fatal(err)
	}
	_, err = c.Renew(ctx, connect.NewRequest(&v1.RenewRequest{LockId: next.LockId, FencingToken: next.FencingToken, TtlMs: 10000}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		tb.Fatalf("renew of a lapsed lock: %v; want failed_precondition", err)
	}
	// The tenant renew rate (burst 13 in the test config: 11 releases and
	// 2 renewals so far) refuses this one.
	_, err = c.Renew(ctx, connect.NewRequest(&v1.RenewRequest{LockId: next.LockId, FencingToken: next.FencingToken, TtlMs: 10000}))
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		tb.Fatalf("renew over the rate: %v; want resource_exhausted", err)
	}
	// REST too.
	resp, err := http.Post(url+"/api/v1/locks/acquire", "application/json", strings.NewReader(`{"name":"jobs/rest","ttlMs":5000,"clientId":"t"}`))
	if err != nil {
		tb.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

func metricsGateway(tb testing.TB) *server.Server {
	tb.Helper()
	p, err := telemetry.New(context.Background(), telemetry.Config{Version: "v0.0.0-test", Metrics: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	if p.TracerProvider != nil {
		tb.Fatal("tracing is on with no OTEL_* variable set")
	}
	return startGateway(tb, p, workloadConfig)
}

// workloadConfig is the gateway configuration runWorkload expects.
func workloadConfig(c *server.Config) {
	c.KeyCountInterval = 100 * time.Millisecond
	// Renewals and releases share the renew budget: the workload's
	// 11 releases and 2 renewals fit, its next renewal does not.
	c.Gateway.Limits.TenantRenewRate, c.Gateway.Limits.TenantRenewBurst = 0.001, 13
}

// TestMetricsAfterWorkload checks /metrics after a scripted workload: the
// counts match what was done, the latencies are sane, and no label carries
// a lock name or id.
func TestMetricsAfterWorkload(t *testing.T) {
	t.Parallel()
	srv := metricsGateway(t)
	runWorkload(t, srv)
	time.Sleep(300 * time.Millisecond) // let the key count refresh
	fams := scrape(t, srv.URL())

	histCount := func(name string, labels map[string]string) (uint64, float64) {
		t.Helper()
		m := sample(fams, name, labels)
		if m == nil || m.Histogram == nil {
			t.Errorf("%s%v is missing", name, labels)
			return 0, 0
		}
		return m.Histogram.GetSampleCount(), m.Histogram.GetSampleSum()
	}
	main := map[string]string{"shard": "main"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{"shard": "main"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	if n, sum := histCount("leasegate_acquire_duration_seconds", with("mode", "immediate", "outcome", "ok")); n != 11 || sum <= 0 || sum > 11*5 {
		t.Errorf("immediate acquires: count %d, sum %gs; want 11 and a sane sum", n, sum)
	}
	if n, _ := histCount("leasegate_acquire_duration_seconds", with("mode", "queued", "outcome", "ok")); n != 1 {
		t.Errorf("queued acquires: count %d; want 1", n)
	}
	if n, _ := histCount("leasegate_acquire_duration_seconds", with("mode", "try", "outcome", "busy")); n != 1 {
		t.Errorf("busy try-acquires: count %d; want 1", n)
	}
	if n, _ := histCount("leasegate_acquire_duration_seconds", with("mode", "try", "outcome", "ok")); n != 1 {
		t.Errorf("REST acquires: count %d; want 1", n)
	}
	if n, _ := histCount("leasegate_wait_duration_seconds", with("outcome", "ok")); n != 1 {
		t.Errorf("waits: count %d; want 1", n)
	}
	if n, sum := histCount("leasegate_handoff_duration_seconds", main); n != 1 || sum <= 0 || sum > 5 {
		t.Errorf("handoffs: count %d, sum %gs; want 1 and a sane sum", n, sum)
	}
	if n, _ := histCount("leasegate_release_duration_seconds", with("outcome", "ok")); n != 11 {
		t.Errorf("releases: count %d; want 11", n)
	}
	if n, _ := histCount("leasegate_renew_duration_seconds", with("outcome", "ok")); n != 1 {
		t.Errorf("renews ok: count %d; want 1", n)
	}
	if n, _ := histCount("leasegate_etcd_request_duration_seconds", with("method", "Txn", "code", "OK")); n < 20 {
		t.Errorf("etcd Txn requests: count %d; want at least 20", n)
	}
	gauge := func(name string, labels map[string]string) float64 {
		t.Helper()
		m := sample(fams, name, labels)
		switch {
		case m == nil:
			t.Errorf("%s%v is missing", name, labels)
			return -1
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Counter != nil:
			return m.Counter.GetValue()
		}
		return -1
	}
	if v := gauge("leasegate_waiters", main); v != 0 {
		t.Errorf("waiters after the workload: %g; want 0", v)
	}
	if v := gauge("leasegate_lock_keys", main); v != 1 {
		t.Errorf("lock keys: %g; want 1 (the REST lock still held)", v)
	}
	if v := gauge("leasegate_breaker_state", main); v != 0 {
		t.Errorf("breaker state: %g; want 0 (closed)", v)
	}
	if v := gauge("leasegate_lease_losses_total", with("reason", "expired")); v != 1 {
		t.Errorf("lease losses (expired): %g; want 1", v)
	}
	if v := gauge("leasegate_rate_limit_rejections_total", map[string]string{"limit": "tenant_renew_rate"}); v != 1 {
		t.Errorf("rate-limit rejections: %g; want 1", v)
	}
	// Every acquire of the workload is per-lock, and each counts where its
	// lease came from: 11 immediate, 1 queued, 1 busy try, 1 REST.
	var takes float64
	for _, m := range fams["leasegate_lease_pool_takes_total"].GetMetric() {
		takes += m.GetCounter().GetValue()
	}
	if takes != 14 {
		t.Errorf("lease pool takes: %g; want 14, one per per-lock acquire", takes)
	}
	if v := gauge("leasegate_build_info", map[string]string{"version": "v0.0.0-test"}); v != 1 {
		t.Errorf("build info: %g; want 1", v)
	}
	// No label names a lock, a client or a lock id.
	for name, f := range fams {
		for _, m := range f.Metric {
			for _, lp := range m.Label {
				switch lp.GetName() {
				case "name", "lock", "lock_id", "client_id", "request_id":
					t.Errorf("%s has label %s", name, lp.GetName())
				}
				if strings.HasPrefix(lp.GetValue(), "jobs/") {
					t.Errorf("%s label %s=%q is a lock name", name, lp.GetName(), lp.GetValue())
				}
			}
		}
	}
}

// TestMetricsOffByFlag checks that without metrics there is no /metrics.
func TestMetricsOffByFlag(t *testing.T) {
	t.Parallel()
	p, err := telemetry.New(context.Background(), telemetry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if p.TracerProvider != nil || p.MeterProvider != nil || p.Metrics != nil {
		t.Fatalf("telemetry.New with nothing configured = %+v; want no providers", p)
	}
	srv := startGateway(t, p, nil)
	resp, err := http.Get(srv.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Errorf("GET /metrics with metrics off: %s; want an error status", resp.Status)
	}
}

// TestMetricsOfWaitingRESTAcquires: a REST acquire with waitTimeoutMs is
// labelled by how it went, as a stream is (immediate, queued), and one
// without it stays a try.
func TestMetricsOfWaitingRESTAcquires(t *testing.T) {
	t.Parallel()
	p, err := telemetry.New(context.Background(), telemetry.Config{Version: "v0.0.0-test", Metrics: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	srv := startGateway(t, p, func(*server.Config) {})
	post := func(body string) {
		t.Helper()
		resp, err := http.Post(srv.URL()+"/api/v1/locks/acquire", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s = %d", body, resp.StatusCode)
		}
	}
	post(`{"name":"jobs/held","ttlMs":30000}`)
	post(`{"name":"jobs/free","ttlMs":30000,"waitTimeoutMs":5000}`)
	post(`{"name":"jobs/held","ttlMs":30000,"waitTimeoutMs":200}`)
	fams := scrape(t, srv.URL())
	for _, c := range []struct{ mode, outcome string }{{"try", "ok"}, {"immediate", "ok"}, {"queued", "busy"}} {
		m := sample(fams, "leasegate_acquire_duration_seconds", map[string]string{"shard": "main", "mode": c.mode, "outcome": c.outcome})
		if m == nil || m.Histogram == nil || m.Histogram.GetSampleCount() != 1 {
			t.Errorf("REST acquires of mode %s, outcome %s: %v; want 1", c.mode, c.outcome, m)
		}
	}
}

// TestRESTWaitIsCountedAsAWaiter: a REST acquire that waits is a waiter as
// a streaming one is: leasegate_waiters counts it while it waits, and its
// wait is in leasegate_wait_duration_seconds once it is granted.
func TestRESTWaitIsCountedAsAWaiter(t *testing.T) {
	t.Parallel()
	srv := metricsGateway(t)
	url := srv.URL()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := leasegatev1connect.NewLockServiceClient(http.DefaultClient, url)
	st, err := c.Acquire(ctx, connect.NewRequest(&v1.AcquireRequest{Name: "rest/waited", TtlMs: 10000}))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var held *v1.Granted
	for held == nil && st.Receive() {
		held = st.Msg().GetGranted()
	}
	if held == nil {
		t.Fatalf("holder not granted: %v", st.Err())
	}
	type answer struct {
		body string
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := http.Post(url+"/api/v1/locks/acquire", "application/json",
			strings.NewReader(`{"name":"rest/waited","ttlMs":5000,"clientId":"t","waitTimeoutMs":15000}`))
		if err != nil {
			done <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		done <- answer{string(b), err}
	}()
	waiters := func() float64 {
		m := sample(scrape(t, url), "leasegate_waiters", map[string]string{"shard": "main"})
		if m == nil || m.Gauge == nil {
			return 0
		}
		return m.Gauge.GetValue()
	}
	// The gauge is what is awaited: the REST waiter shows in it, or the
	// test ends at its context.
	for waiters() != 1 {
		select {
		case a := <-done:
			t.Fatalf("the REST acquire answered before the holder released: %q, %v", a.body, a.err)
		case <-ctx.Done():
			t.Fatal("leasegate_waiters never counted the waiting REST acquire")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if _, err := c.Release(ctx, connect.NewRequest(&v1.ReleaseRequest{LockId: held.LockId, FencingToken: held.FencingToken})); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil || !strings.Contains(a.body, `"acquired":true`) {
		t.Fatalf("REST wait answered %q, %v; want acquired", a.body, a.err)
	}
	fams := scrape(t, url)
	if m := sample(fams, "leasegate_waiters", map[string]string{"shard": "main"}); m == nil || m.Gauge.GetValue() != 0 {
		t.Fatalf("leasegate_waiters after the grant: %v; want 0", m)
	}
	if m := sample(fams, "leasegate_wait_duration_seconds", map[string]string{"shard": "main", "outcome": "ok"}); m == nil || m.Histogram.GetSampleCount() != 1 {
		t.Fatalf("leasegate_wait_duration_seconds{outcome=ok}: %v; want one wait", m)
	}
	if m := sample(fams, "leasegate_acquire_duration_seconds", map[string]string{"shard": "main", "outcome": "ok", "mode": "queued"}); m == nil || m.Histogram.GetSampleCount() != 1 {
		t.Fatalf("leasegate_acquire_duration_seconds{mode=queued}: %v; want the REST acquire", m)
	}
}
