package locks

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/etcdtest"
	"github.com/leasegate/leasegate/queue"
	"github.com/leasegate/leasegate/shard"
)

// TestListNamesParsesKeysFromTheRoot: the names the resharding sweep
// lists on a cluster are those with a waiter key in any of its engines —
// its own and every tenant's — and no others. The cluster's prefix ends
// in "/locks" and one tenant is named "locks", so their sessions, holds
// records and the rest sit under a ".../locks/" of their own (a handoff
// record's last segment even has a waiter id's shape); none of them
// passes for a name, which would keep a draining cluster from ever being
// swept empty.
func TestListNamesParsesKeysFromTheRoot(t *testing.T) {
	a := etcdtest.Start(t)
	cfg := DefaultRouterConfig()
	cfg.Prefix = "/names/locks"
	r, err := NewRouter(testCtx(t), a.Client(), shard.Map{Epoch: shard.MinEpoch, Clusters: []shard.Cluster{{Name: "a", Endpoints: []string{a.Endpoint()}}}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	b, _ := r.Backend("a")
	var want []string
	for _, tenant := range []string{"", "locks", "acme"} {
		e, err := b.Space(tenant)
		if err != nil {
			t.Fatal(err)
		}
		s, err := e.OpenSession(testCtx(t), "c", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.CloseSession(testCtx(t), s.Lease, s.Secret) })
		name := "in-" + tenant
		for i := range 2 { // held twice: a holds record beside the key
			res, err := e.TryAcquire(testCtx(t), queue.AcquireRequest{Name: name, TTL: 10 * time.Second, ClientID: "c", RequestID: fmt.Sprintf("%s-%d", name, i),
				Session: s.Lease, SessionSecret: s.Secret, Reentrant: true})
			if err != nil || !res.Acquired {
				t.Fatalf("tenant %q: TryAcquire(%q) = %+v, %v", tenant, name, res, err)
			}
		}
		res, err := e.TryAcquire(testCtx(t), queue.AcquireRequest{Name: "shared", TTL: 10 * time.Second, ClientID: "c", RequestID: "shared-" + tenant})
		if err != nil || !res.Acquired {
			t.Fatalf("tenant %q: TryAcquire(shared) = %+v, %v", tenant, res, err)
		}
		t.Cleanup(func() { _, _ = e.Release(testCtx(t), res.Grant.Handle, res.Grant.Token()) })
		want = append(want, name)
		// Records of other kinds, as their keys are laid out.
		for _, k := range []string{"/handoff/0123456789abcdef0123456789abcdef", "/audit/0000000001/x", "/delays/n/0123456789abcdef0123456789abcdef"} {
			if _, err := a.Client().Put(testCtx(t), b.TenantPrefix(tenant)+k, "x"); err != nil {
				t.Fatal(err)
			}
		}
	}
	want = append(want, "shared")
	got, err := Names{}.ListNames(testCtx(t), a.Client(), cfg.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("ListNames(%q) = %q; want %q", cfg.Prefix, got, want)
	}
}
