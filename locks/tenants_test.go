package locks

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/internal/etcdtest"
	"github.com/leasegate/leasegate/queue"
	"github.com/leasegate/leasegate/shard"
)

// One engine serves a cluster however many tenants are active: with three
// tenants each holding the same name and each with a session waiter behind
// its holder, every waiter's key rides on one attempt lease, and etcd
// holds exactly one lease of the attempt lease's TTL. Each tenant's name
// is its own lock all the same: all three are held at once.
func TestOneEnginePerClusterServesEveryTenant(t *testing.T) {
	a := etcdtest.Start(t)
	cfg := DefaultRouterConfig()
	cfg.Prefix = "/one-engine"
	cfg.Queue.AttemptTTL = 7 * time.Second // no other lease of the test has this TTL
	r, err := NewRouter(testCtx(t), a.Client(), shard.Map{Epoch: shard.MinEpoch, Clusters: []shard.Cluster{{Name: "a", Endpoints: []string{a.Endpoint()}}}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	b, _ := r.Backend("a")
	cli := a.Client()
	if b.Engine.Prefix() != cfg.Prefix {
		t.Fatalf("the cluster's engine acts in %q; want the unnamed tenant's %q", b.Engine.Prefix(), cfg.Prefix)
	}

	ctx, cancel := context.WithCancel(testCtx(t))
	tenants := []string{"t1", "t2", "t3"}
	waited := make(chan error, len(tenants))
	for _, tenant := range tenants {
		tt, err := r.Route("n", tenant)
		if err != nil {
			t.Fatal(err)
		}
		e := tt.Engine
		held, err := e.TryAcquire(ctx, queue.AcquireRequest{Name: "n", TTL: 10 * time.Second, ClientID: "c", RequestID: "holder"})
		if err != nil || !held.Acquired {
			t.Fatalf("tenant %s: TryAcquire(n) = %+v, %v; want it held (another tenant's holder is not its)", tenant, held, err)
		}
		t.Cleanup(func() { _, _ = e.Release(testCtx(t), held.Grant.Handle, held.Grant.Token()) })
		// The tenant's keys are where they always were: under
		// <prefix>/t/<tenant>, in the engine's layout.
		key := cfg.Prefix + "/t/" + tenant + "/locks/n/" + queue.WaiterID("holder")
		if resp, err := cli.Get(ctx, key, clientv3.WithCountOnly()); err != nil || resp.Count != 1 {
			t.Fatalf("tenant %s's holder key %s: %v, %v; want it there", tenant, key, resp, err)
		}
		s, err := e.OpenSession(ctx, "c", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.CloseSession(testCtx(t), s.Lease, s.Secret) })
		w, err := e.Enqueue(ctx, queue.AcquireRequest{Name: "n", TTL: 10 * time.Second, ClientID: "c", RequestID: "waiter", Session: s.Lease, SessionSecret: s.Secret})
		if err != nil {
			t.Fatal(err)
		}
		go func() { _, err := w.Wait(ctx); waited <- err }()
	}
	t.Cleanup(func() {
		cancel()
		for range tenants {
			if err := <-waited; !errors.Is(err, context.Canceled) {
				t.Errorf("a session waiter ended with %v; want it cancelled, never granted", err)
			}
		}
	})

	attempt := map[clientv3.LeaseID]bool{}
	for _, tenant := range tenants {
		resp, err := cli.Get(testCtx(t), queue.NamePrefix(b.TenantPrefix(tenant), "n"), clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 2 {
			t.Fatalf("tenant %s has %d keys of n; want its holder and its waiter", tenant, len(resp.Kvs))
		}
		attempt[clientv3.LeaseID(resp.Kvs[1].Lease)] = true // the waiter's, created second
	}
	if len(attempt) != 1 {
		t.Errorf("the session waiters of %d tenants ride on %d attempt leases; want 1 (one engine)", len(tenants), len(attempt))
	}
	if n := leasesOfTTL(t, cli, cfg.Queue.AttemptTTL); n != 1 {
		t.Errorf("etcd holds %d leases of the attempt TTL %s with %d tenants active; want 1 (one engine per cluster)", n, cfg.Queue.AttemptTTL, len(tenants))
	}
}

// leasesOfTTL counts the live leases etcd granted with ttl.
func leasesOfTTL(t *testing.T, cli *clientv3.Client, ttl time.Duration) int {
	t.Helper()
	ls, err := cli.Leases(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range ls.Leases {
		resp, err := cli.TimeToLive(testCtx(t), l.ID)
		if err != nil {
			t.Fatal(fmt.Errorf("lease %x: %w", l.ID, err))
		}
		if resp.GrantedTTL == int64(ttl/time.Second) {
			n++
		}
	}
	return n
}
