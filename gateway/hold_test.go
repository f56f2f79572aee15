package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// TestWatchHoldToldOfEvictionAtOnce: a holder's WatchHold stream says the
// moment an administrator evicts it — LOCK_EVICTED with the audit record's
// id — and its renewals say so too, over Connect and REST; a released lock
// is answered at once with LOCK_RELEASED.
func TestWatchHoldToldOfEvictionAtOnce(t *testing.T) {
	t.Parallel()
	g, user, admin, _ := adminFleet(t)
	ctx := ctxT(t)
	resp, err := user.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: "watched", TtlMs: 60000}))
	if err != nil || !resp.Msg.Acquired {
		t.Fatalf("TryAcquire = %v, %v", resp, err)
	}
	h := resp.Msg.Granted
	stream, err := user.WatchHold(ctx, connect.NewRequest(&v1.WatchHoldRequest{LockId: h.LockId, FencingToken: h.FencingToken}))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *v1.WatchHoldResponse, 1)
	go func() {
		if stream.Receive() {
			got <- stream.Msg()
		} else {
			t.Logf("watch ended: %v", stream.Err())
		}
		close(got)
	}()
	fr, err := admin.ForceRelease(ctx, connect.NewRequest(&v1.ForceReleaseRequest{Name: "watched", Reason: "worker hung", FencingToken: h.FencingToken}))
	if err != nil {
		t.Fatal(err)
	}
	var m *v1.WatchHoldResponse
	select {
	case m = <-got:
	case <-time.After(10 * time.Second): // a renewal of a 60 s lease is 20 s away
		t.Fatal("the holder's watch said nothing of its eviction")
	}
	if m == nil || m.Reason != v1.ErrorReason_LOCK_EVICTED || m.AuditId != fr.Msg.Audit.Id {
		t.Fatalf("watch = %v; want LOCK_EVICTED with audit %s", m, fr.Msg.Audit.Id)
	}
	_, err = user.Renew(ctx, connect.NewRequest(&v1.RenewRequest{LockId: h.LockId, FencingToken: h.FencingToken}))
	if codeOf(err) != connect.CodeFailedPrecondition || reasonOf(err) != v1.ErrorReason_LOCK_EVICTED.String() {
		t.Fatalf("Renew of an evicted lock = %v; want failed_precondition LOCK_EVICTED", err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.URL+"/api/v1/locks/renew",
		strings.NewReader(fmt.Sprintf(`{"lockId":%q,"fencingToken":%d}`, h.LockId, h.FencingToken)))
	req.Header.Set("Authorization", "Bearer "+userToken)
	req.Header.Set("Content-Type", "application/json")
	rr, err := g.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	_ = json.NewDecoder(rr.Body).Decode(&body)
	rr.Body.Close()
	if status := rr.StatusCode; status != http.StatusConflict || body["reason"] != "evicted" {
		t.Fatalf("REST renew of an evicted lock = %d %v; want 409 evicted", status, body)
	}

	// A lock released is answered at once.
	resp, err = user.TryAcquire(ctx, connect.NewRequest(&v1.TryAcquireRequest{Name: "let-go", TtlMs: 60000}))
	if err != nil || !resp.Msg.Acquired {
		t.Fatalf("TryAcquire = %v, %v", resp, err)
	}
	h = resp.Msg.Granted
	if _, err := user.Release(ctx, connect.NewRequest(&v1.ReleaseRequest{LockId: h.LockId, FencingToken: h.FencingToken})); err != nil {
		t.Fatal(err)
	}
	stream, err = user.WatchHold(ctx, connect.NewRequest(&v1.WatchHoldRequest{LockId: h.LockId, FencingToken: h.FencingToken}))
	if err != nil || !stream.Receive() || stream.Msg().Reason != v1.ErrorReason_LOCK_RELEASED {
		t.Fatalf("WatchHold of a released lock = %v, %v; want LOCK_RELEASED at once", err, stream.Err())
	}
}
