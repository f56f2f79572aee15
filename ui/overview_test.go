package ui_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/internal/gwtest"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/ui"
)

// TestOverviewShowsATenantItsOwnFigures: the overview counts a tenant's
// caller's own locks and waiters only — its admin's too — and leaves out
// the process's metrics (renewals, session keepalives, handoff latency),
// which cover every tenant; the operator (the operator role) sees every
// tenant's figures and the metrics. Each tenant holds and queues a
// different number, so a figure of one leaking into another's shows.
func TestOverviewShowsATenantItsOwnFigures(t *testing.T) {
	t.Parallel()
	const (
		acmeTok  = "acme-token-0123456789"
		adminTok = "acme-admin-token-0123456789"
		otherTok = "other-token-0123456789"
		opTok    = "operator-token-0123456789"
	)
	g := startGateway(t, gwtest.Tokens(acmeTok+" acme alice", adminTok+" acme root admin", otherTok+" other bob", opTok+" ops carol operator"))
	acme := g.ConnectClient(gwtest.Bearer(acmeTok))
	other := g.ConnectClient(gwtest.Bearer(otherTok))
	type figures struct{ held, waiting int64 }
	// One handoff and one renewal, so the metrics hold figures to leak.
	h := hold(t, other, "handoff", "first")
	next := enqueue(t, other, "handoff", "second")
	if _, err := other.Renew(ctxT(t), connect.NewRequest(&v1.RenewRequest{LockId: h.LockId, FencingToken: h.FencingToken})); err != nil {
		t.Fatal(err)
	}
	release(t, other, h)
	release(t, other, next.await(t))
	for i := range 3 {
		hold(t, acme, fmt.Sprintf("a/%d", i), "acme-holder")
	}
	for i := range 2 {
		w := enqueue(t, acme, "a/0", fmt.Sprintf("acme-waiter-%d", i))
		t.Cleanup(w.cancel)
	}
	for i := range 5 {
		hold(t, other, fmt.Sprintf("o/%d", i), "other-holder")
	}
	w := enqueue(t, other, "o/1", "other-waiter")
	t.Cleanup(w.cancel)
	acmeWant, otherWant := figures{3, 2}, figures{5, 1}

	overview := func(token string) ui.Overview {
		t.Helper()
		resp, body := get(t, g, ui.APIPrefix+"overview", map[string]string{"Authorization": "Bearer " + token})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET overview = %d %s", resp.StatusCode, body)
		}
		var o ui.Overview
		if err := json.Unmarshal([]byte(body), &o); err != nil {
			t.Fatal(err)
		}
		return o
	}
	sum := func(o ui.Overview) (f figures) {
		for _, s := range o.Shards {
			if s.Held == nil || s.Waiting == nil {
				t.Fatalf("shard %s has no counts: %s", s.Name, s.CountError)
			}
			f.held += *s.Held
			f.waiting += *s.Waiting
		}
		return f
	}
	for _, tc := range []struct {
		who, token string
		want       figures
	}{
		{"acme's caller", acmeTok, acmeWant},
		{"acme's admin", adminTok, acmeWant},
		{"other's caller", otherTok, otherWant},
	} {
		o := overview(tc.token)
		if o.Scope != ui.ScopeTenant {
			t.Errorf("%s: scope %q; want %q", tc.who, o.Scope, ui.ScopeTenant)
		}
		if got := sum(o); got != tc.want {
			t.Errorf("%s sees %d held and %d waiting; want its tenant's own %d and %d", tc.who, got.held, got.waiting, tc.want.held, tc.want.waiting)
		}
		if !o.Metrics || o.SessionKeepalives != nil || o.Handoff != nil {
			t.Errorf("%s: metrics %v, session keepalives %v, handoff %v; want the gateway's metrics said to exist but none of the process-wide figures", tc.who, o.Metrics, o.SessionKeepalives, o.Handoff)
		}
		for _, s := range o.Shards {
			if s.Renewals != nil {
				t.Errorf("%s: shard %s shows %d renewals, every tenant's; want none", tc.who, s.Name, *s.Renewals)
			}
		}
	}
	o := overview(opTok)
	if got, want := sum(o), (figures{acmeWant.held + otherWant.held, acmeWant.waiting + otherWant.waiting}); o.Scope != ui.ScopeProcess || got != want {
		t.Errorf("the operator: scope %q, %d held and %d waiting; want scope %q and every tenant's %d and %d", o.Scope, got.held, got.waiting, ui.ScopeProcess, want.held, want.waiting)
	}
	if o.SessionKeepalives == nil || o.Handoff == nil {
		t.Errorf("the operator: session keepalives %v, handoff %v; want the process's metrics", o.SessionKeepalives, o.Handoff)
	}
	for _, s := range o.Shards {
		if s.Renewals == nil {
			t.Errorf("the operator: shard %s has no renewal count", s.Name)
		}
	}
}
