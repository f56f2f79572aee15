package locks

import (
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/etcdtest"
	"github.com/leasegate/leasegate/queue"
	"github.com/leasegate/leasegate/shard"
)

// The tenant engines a backend caches are bounded: past the bound, idle
// engines are closed to make room, and a busy one — here one with a wait
// in progress — never is.
func TestTenantEnginesAreBounded(t *testing.T) {
	a := etcdtest.Start(t)
	cfg := DefaultRouterConfig()
	cfg.Prefix = "/tenants"
	cfg.MaxTenantEngines = 3
	r, err := NewRouter(testCtx(t), a.Client(), shard.Map{Epoch: shard.MinEpoch, Clusters: []shard.Cluster{{Name: "a", Endpoints: []string{a.Endpoint()}}}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	b, _ := r.Backend("a")
	defer func(d time.Duration) { idleTenant = d }(idleTenant)
	idleTenant = 0 // any engine without work counts as idle

	busy, err := b.TenantEngine("busy")
	if err != nil {
		t.Fatal(err)
	}
	held, err := busy.Acquire(testCtx(t), queue.AcquireRequest{Name: "n", TTL: 10 * time.Second, ClientID: "c", RequestID: "h"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := busy.Enqueue(testCtx(t), queue.AcquireRequest{Name: "n", TTL: 10 * time.Second, ClientID: "c", RequestID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { _, err := w.Wait(testCtx(t)); waited <- err }()

	for i := 0; i < 50; i++ {
		if _, err := b.TenantEngine(string(rune('a'+i%26)) + string(rune('a'+i/26))); err != nil {
			t.Fatal(err)
		}
		if n := b.tenantEngines(); n > cfg.MaxTenantEngines {
			t.Fatalf("after %d tenants: %d engines cached; want at most %d", i+1, n, cfg.MaxTenantEngines)
		}
	}
	again, err := b.TenantEngine("busy")
	if err != nil || again != busy {
		t.Fatalf("the busy tenant's engine was replaced (closed under its wait)")
	}
	if _, err := busy.Release(testCtx(t), held.Handle, held.Token()); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("the wait in the busy engine: %v", err)
	}
}
