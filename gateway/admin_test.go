package gateway_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/internal/gwtest"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

const (
	adminToken = "admin-token-0123456789"
	userToken  = "user-token-0123456789"
)

// adminFleet is a gateway over two shards with a tokens file: one admin
// and one plain user of tenant t1.
func adminFleet(t *testing.T) (*gw, leasegatev1connect.LockServiceClient, leasegatev1connect.AdminServiceClient, leasegatev1connect.AdminServiceClient) {
	t.Helper()
	f := startFleet(t, 2)
	g := gwtest.Start(t, nil, gwtest.Prefix(f.prefix), gwtest.Clusters(f.cluster(0), f.cluster(1)),
		gwtest.Tokens(adminToken+" t1 ops admin", userToken+" t1 app"))
	user := g.ConnectClient(gwtest.Bearer(userToken))
	return g, user,
		leasegatev1connect.NewAdminServiceClient(g.HTTP, g.URL, gwtest.Bearer(adminToken)),
		leasegatev1connect.NewAdminServiceClient(g.HTTP, g.URL, gwtest.Bearer(userToken))
}

func waitWith(t *testing.T, c leasegatev1connect.LockServiceClient, req *v1.AcquireRequest) *waiter {
	t.Helper()
	ctx, cancel := context.WithCancel(ctxT(t))
	w := &waiter{positions: make(chan int64, 64), granted: make(chan *v1.Granted, 1), err: make(chan error, 1), cancel: cancel}
	stream, err := c.Acquire(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer stream.Close()
		for stream.Receive() {
			switch ev := stream.Msg().Event.(type) {
			case *v1.AcquireResponse_Queued:
				w.positions <- ev.Queued.Position
			case *v1.AcquireResponse_Granted:
				w.granted <- ev.Granted
			}
		}
		w.err <- stream.Err()
		close(w.positions)
		close(w.granted)
	}()
	t.Cleanup(cancel)
	return w
}

func TestForceReleaseNeedsAdminFreesForTheNextWaiterAndIsAudited(t *testing.T) {
	_, user, admin, notAdmin := adminFleet(t)
	ctx := ctxT(t)
	name := "orders/42"
	hr, err := user.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: name, TtlMs: 30000, ClientId: "stuck-worker"}))
	if err != nil || !hr.Msg.Acquired {
		t.Fatal(hr, err)
	}
	h := hr.Msg.Granted
	w := waitWith(t, user, &v1.AcquireRequest{Name: name, TtlMs: 30000, ClientId: "next"})
	if p := <-w.positions; p != 1 {
		t.Fatalf("waiter at %d", p)
	}

	_, err = notAdmin.ForceRelease(ctx, connect.NewRequest(&v1.ForceReleaseRequest{Name: name, Reason: "r"}))
	if codeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("ForceRelease by a non-admin = %v; want permission_denied", err)
	}
	if _, err = notAdmin.ListAudit(ctx, connect.NewRequest(&v1.ListAuditRequest{})); codeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("ListAudit by a non-admin = %v; want permission_denied", err)
	}
	if _, err = admin.ForceRelease(ctx, connect.NewRequest(&v1.ForceReleaseRequest{Name: name})); codeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("ForceRelease without a reason = %v; want invalid_argument", err)
	}
	_, err = admin.ForceRelease(ctx, connect.NewRequest(&v1.ForceReleaseRequest{Name: name, Reason: "r", FencingToken: h.FencingToken + 1}))
	if codeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("ForceRelease of another token = %v; want failed_precondition", err)
	}
	if _, err := user.Renew(ctx, connect.NewRequest(&v1.RenewRequest{LockId: h.LockId, FencingToken: h.FencingToken})); err != nil {
		t.Fatalf("the holder lost its lock to refused force-releases: %v", err)
	}

	fr, err := admin.ForceRelease(ctx, connect.NewRequest(&v1.ForceReleaseRequest{Name: name, Reason: "worker hung in GC", FencingToken: h.FencingToken}))
	if err != nil {
		t.Fatal(err)
	}
	if m := fr.Msg; !m.Released || m.EvictedFencingToken != h.FencingToken || m.EvictedClientId != "stuck-worker" || m.Shard != h.Shard || m.Audit == nil {
		t.Fatalf("ForceRelease = %v", m)
	}
	var next *v1.Granted
	select {
	case next = <-w.granted:
	case <-time.After(30 * time.Second):
		t.Fatal("the next waiter was not granted")
	}
	if next.FencingToken <= h.FencingToken {
		t.Fatalf("next token %d is not above the evicted %d", next.FencingToken, h.FencingToken)
	}
	_, err = user.Renew(ctx, connect.NewRequest(&v1.RenewRequest{LockId: h.LockId, FencingToken: h.FencingToken}))
	if codeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("the evicted holder's Renew = %v; want failed_precondition", err)
	}
	rr, err := user.Release(ctx, connect.NewRequest(&v1.ReleaseRequest{LockId: h.LockId, FencingToken: h.FencingToken}))
	if err != nil || rr.Msg.Released {
		t.Fatalf("the evicted holder's Release = %v, %v; want released=false", rr, err)
	}
	d, err := user.Describe(ctx, connect.NewRequest(&v1.DescribeRequest{Name: name}))
	if err != nil || d.Msg.FencingToken != next.FencingToken {
		t.Fatalf("after the eviction Describe = %v, %v; want the next waiter holding", d, err)
	}

	// A free name: nothing evicted, nothing recorded.
	fr, err = admin.ForceRelease(ctx, connect.NewRequest(&v1.ForceReleaseRequest{Name: "free", Reason: "r"}))
	if err != nil || fr.Msg.Released || fr.Msg.Audit != nil {
		t.Fatalf("ForceRelease of a free name = %v, %v", fr, err)
	}
	la, err := admin.ListAudit(ctx, connect.NewRequest(&v1.ListAuditRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(la.Msg.Records) != 1 {
		t.Fatalf("ListAudit = %v; want one record", la.Msg)
	}
	r := la.Msg.Records[0]
	if r.Name != name || r.Action != "force_release" || r.Actor != "token/ops" || r.Reason != "worker hung in GC" ||
		r.EvictedFencingToken != h.FencingToken || r.EvictedClientId != "stuck-worker" || r.Shard != h.Shard || time.Since(r.At.AsTime()) > time.Minute {
		t.Fatalf("audit record %v", r)
	}
}

func TestListAuditPagesNewestFirstAcrossShards(t *testing.T) {
	_, user, admin, _ := adminFleet(t)
	ctx := ctxT(t)
	shards := map[string]bool{}
	const n = 9
	for i := range n {
		name := fmt.Sprintf("a/%d", i)
		g, err := user.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: name, TtlMs: 30000}))
		if err != nil {
			t.Fatal(err)
		}
		shards[g.Msg.Granted.Shard] = true
		if _, err := admin.ForceRelease(ctx, connect.NewRequest(&v1.ForceReleaseRequest{Name: name, Reason: fmt.Sprint(i)})); err != nil {
			t.Fatal(err)
		}
	}
	if len(shards) < 2 {
		t.Fatalf("names on %v only", shards)
	}
	var reasons []string
	tok := ""
	for range n + 1 {
		la, err := admin.ListAudit(ctx, connect.NewRequest(&v1.ListAuditRequest{PageSize: 2, PageToken: tok}))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range la.Msg.Records {
			reasons = append(reasons, r.Reason)
		}
		if tok = la.Msg.NextPageToken; tok == "" {
			break
		}
	}
	want := []string{"8", "7", "6", "5", "4", "3", "2", "1", "0"}
	if fmt.Sprint(reasons) != fmt.Sprint(want) {
		t.Fatalf("audit reasons %v; want %v (newest first)", reasons, want)
	}
}

func TestAdminRoleFromJWT(t *testing.T) {
	j := gwtest.NewJWTIssuer(t)
	g := gwtest.Start(t, shared, gwtest.JWTAuth(j))
	ctx := ctxT(t)
	for _, tc := range []struct {
		roles []string
		want  connect.Code
	}{{nil, connect.CodePermissionDenied}, {[]string{"reader"}, connect.CodePermissionDenied}, {[]string{"reader", "admin"}, 0}} {
		c := leasegatev1connect.NewAdminServiceClient(g.HTTP, g.URL, gwtest.Bearer(j.SignRoles(t, "t1", "alice", time.Minute, tc.roles)))
		_, err := c.ListAudit(ctx, connect.NewRequest(&v1.ListAuditRequest{}))
		if tc.want == 0 && err != nil || tc.want != 0 && codeOf(err) != tc.want {
			t.Errorf("ListAudit with roles %v = %v; want code %v", tc.roles, err, tc.want)
		}
	}
}

// A force-release racing with the holder's own release and re-acquire
// evicts only the holder it names: the new holder's key survives.
func TestForceReleaseRacingReleaseNeverEvictsTheNewHolder(t *testing.T) {
	_, user, admin, _ := adminFleet(t)
	ctx := ctxT(t)
	name := "race/1"
	evictions := 0
	for i := range 25 {
		gr, err := user.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: name, TtlMs: 30000, ClientId: fmt.Sprint("old", i)}))
		if err != nil || !gr.Msg.Acquired {
			t.Fatal(gr, err)
		}
		old := gr.Msg.Granted
		var wg sync.WaitGroup
		var fr *connect.Response[v1.ForceReleaseResponse]
		var ferr error
		wg.Go(func() {
			fr, ferr = admin.ForceRelease(ctx, connect.NewRequest(&v1.ForceReleaseRequest{Name: name, Reason: "race", FencingToken: old.FencingToken}))
		})
		var nw *v1.Granted
		wg.Go(func() {
			if _, err := user.Release(ctx, connect.NewRequest(&v1.ReleaseRequest{LockId: old.LockId, FencingToken: old.FencingToken})); err != nil {
				t.Error(err)
				return
			}
			r, err := user.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: name, TtlMs: 30000, ClientId: fmt.Sprint("new", i)}))
			if err == nil && r.Msg.Acquired {
				nw = r.Msg.Granted
			}
		})
		wg.Wait()
		switch {
		case ferr == nil && fr.Msg.Released:
			evictions++
			if fr.Msg.EvictedFencingToken != old.FencingToken {
				t.Fatalf("round %d evicted token %d; it named %d", i, fr.Msg.EvictedFencingToken, old.FencingToken)
			}
		case ferr != nil && codeOf(ferr) != connect.CodeFailedPrecondition:
			t.Fatalf("round %d: ForceRelease = %v", i, ferr)
		}
		if nw != nil {
			if _, err := user.Renew(ctx, connect.NewRequest(&v1.RenewRequest{LockId: nw.LockId, FencingToken: nw.FencingToken})); err != nil {
				t.Fatalf("round %d: the new holder lost its lock to a force-release of the old one: %v", i, err)
			}
			if _, err := user.Release(ctx, connect.NewRequest(&v1.ReleaseRequest{LockId: nw.LockId, FencingToken: nw.FencingToken})); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("%d of 25 force-releases won the race", evictions)
}
