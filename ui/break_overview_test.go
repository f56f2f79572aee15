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

// TestBreakOverviewCountsSemaphoreHoldersAsWaiting: every view of holders
// judges them by the grant rule (queue/limit.go), but the console's
// overview counts each name's first key as its one holder and every other
// key as waiting: a semaphore of limit 3 with three holders and nobody
// waiting is shown as one held name and two waiters.
func TestBreakOverviewCountsSemaphoreHoldersAsWaiting(t *testing.T) {
	t.Parallel()
	const tok = "sem-token-0123456789"
	g := startGateway(t, gwtest.Tokens(tok+" acme alice"))
	c := g.ConnectClient(gwtest.Bearer(tok))
	for i := range 3 {
		resp, err := c.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: "pool", TtlMs: 60_000, ClientId: fmt.Sprintf("slot-%d", i), Limit: 3}))
		if err != nil || !resp.Msg.Acquired {
			t.Fatalf("TryAcquire slot %d = %v, %v", i, resp, err)
		}
	}
	resp, body := get(t, g, ui.APIPrefix+"overview", map[string]string{"Authorization": "Bearer " + tok})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET overview = %d %s", resp.StatusCode, body)
	}
	var o ui.Overview
	if err := json.Unmarshal([]byte(body), &o); err != nil {
		t.Fatal(err)
	}
	var waiting int64
	for _, s := range o.Shards {
		if s.Waiting != nil {
			waiting += *s.Waiting
		}
	}
	if waiting != 0 {
		t.Fatalf("the overview shows %d waiting for a semaphore of limit 3 with 3 holders and no waiter; want 0", waiting)
	}
}
