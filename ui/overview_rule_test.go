package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/internal/gwtest"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
	"github.com/leasegate/leasegate/ui"
)

// TestOverviewCountsHoldersByTheGrantRule: the overview judges every
// name's holders by the engine's grant rule — a semaphore of limit N has
// up to N holders, only the keys behind them wait — and counts only
// waiter keys, parsed from each engine's root down: a cluster prefix that
// ends in "/locks" and a tenant named "locks", whose sessions, holds
// records and every other record sit under a ".../locks/" of their own,
// add no phantom name or waiter. Each name of the table is a different
// shape (a lock with a queue, semaphores full, not full, full with a
// queue, a session's re-entered lock), so a count by any other rule — the
// first key holds and every other waits, every key waits but one per
// name — comes out different in the tenant's figures and the operator's.
func TestOverviewCountsHoldersByTheGrantRule(t *testing.T) {
	t.Parallel()
	const (
		hostileTok = "locks-token-0123456789"
		acmeTok    = "acme-token-0123456789"
		opTok      = "operator-token-0123456789"
	)
	g := startGateway(t, gwtest.Prefix(gwtest.NewPrefix()+"/locks"),
		gwtest.Tokens(hostileTok+" locks mallory", acmeTok+" acme alice", opTok+" ops carol operator"))
	type shape struct {
		name           string
		limit, holders int
		waiters        int
	}
	type figures struct{ held, waiting int64 }
	fill := func(tok string, shapes []shape) figures {
		c := g.ConnectClient(gwtest.Bearer(tok))
		var f figures
		for _, s := range shapes {
			for i := range s.holders {
				resp, err := c.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: s.name, TtlMs: 60_000, ClientId: fmt.Sprintf("holder-%d", i), Limit: int32(s.limit)}))
				if err != nil || !resp.Msg.Acquired {
					t.Fatalf("TryAcquire(%q, limit %d) holder %d = %v, %v", s.name, s.limit, i, resp, err)
				}
			}
			for i := range s.waiters {
				queueBehind(t, c, s.name, fmt.Sprintf("waiter-%d", i), s.limit)
			}
			f.held++
			f.waiting += int64(s.waiters)
		}
		// A session with a lock held twice: a session record and a holds
		// record beside the lock's one key.
		sess, err := c.OpenSession(ctxT(t), connect.NewRequest(&v1.OpenSessionRequest{ClientId: "session", TtlMs: 60_000}))
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			resp, err := c.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: "reentered", ClientId: "session", SessionId: sess.Msg.SessionId, Reentrant: true}))
			if err != nil || !resp.Msg.Acquired {
				t.Fatalf("re-entrant TryAcquire = %v, %v", resp, err)
			}
		}
		f.held++
		return f
	}
	hostile := fill(hostileTok, []shape{
		{"lock", 1, 1, 2},
		{"full", 3, 3, 0},
		{"part", 3, 2, 0},
		{"queue", 2, 2, 3},
	})
	acme := fill(acmeTok, []shape{
		{"pool", 4, 4, 1},
		{"x", 1, 1, 0},
	})

	sum := func(tok string) (figures, string) {
		t.Helper()
		resp, body := get(t, g, ui.APIPrefix+"overview", map[string]string{"Authorization": "Bearer " + tok})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET overview = %d %s", resp.StatusCode, body)
		}
		var o ui.Overview
		if err := json.Unmarshal([]byte(body), &o); err != nil {
			t.Fatal(err)
		}
		var f figures
		for _, s := range o.Shards {
			if s.Held == nil || s.Waiting == nil {
				t.Fatalf("shard %s has no counts: %s", s.Name, s.CountError)
			}
			f.held, f.waiting = f.held+*s.Held, f.waiting+*s.Waiting
		}
		return f, o.Scope
	}
	for _, tc := range []struct {
		who, tok, scope string
		want            figures
	}{
		{"tenant locks", hostileTok, ui.ScopeTenant, hostile},
		{"tenant acme", acmeTok, ui.ScopeTenant, acme},
		{"the operator", opTok, ui.ScopeProcess, figures{hostile.held + acme.held, hostile.waiting + acme.waiting}},
	} {
		if got, scope := sum(tc.tok); got != tc.want || scope != tc.scope {
			t.Errorf("%s: the overview (scope %q) shows %d held and %d waiting; want scope %q, %d held and %d waiting", tc.who, scope, got.held, got.waiting, tc.scope, tc.want.held, tc.want.waiting)
		}
	}
}

// queueBehind starts an Acquire of name with limit for clientID, returns
// once the gateway says it is queued, and ends it at the test's end.
func queueBehind(t *testing.T, c leasegatev1connect.LockServiceClient, name, clientID string, limit int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	st, err := c.Acquire(ctx, connect.NewRequest(&v1.AcquireRequest{Name: name, TtlMs: 60_000, ClientId: clientID, WaitTimeoutMs: 60_000, Limit: int32(limit)}))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Receive() || st.Msg().GetQueued() == nil {
		t.Fatalf("Acquire(%q, limit %d) for %s = %v, %v; want queued", name, limit, clientID, st.Msg(), st.Err())
	}
	t.Cleanup(func() { _ = st.Close() })
}
