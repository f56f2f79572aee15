package gateway_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/internal/gwtest"
	"github.com/leasegate/leasegate/internal/server"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

// TestBreakWatchHoldStreamsAreUncapped: every other stream a tenant opens
// on a gateway — a wait, a campaign, a Watch — counts against
// MaxWaitersPerTenant, so one tenant cannot pin a gateway's goroutines and
// memory without bound. WatchHold streams count against nothing (the
// renew rate, unlimited by default, admits each one): one caller holding
// one lock opens as many as it likes, each two goroutines and an engine
// subscription for as long as the lock is held. (The streams are told
// apart when the lock is evicted: an open one says LOCK_EVICTED, a refused
// one was refused at once.)
func TestBreakWatchHoldStreamsAreUncapped(t *testing.T) {
	t.Parallel()
	const limit = 2
	g := gwtest.Start(t, shared, gwtest.Configure(func(c *server.Config) {
		c.Gateway.Limits.MaxWaitersPerTenant = limit
	}))
	h := tryAcquire(t, g, "watched-many")
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	const streams = 5 * limit
	ends := make(chan *v1.WatchHoldResponse, streams)
	refused := make(chan error, streams)
	for range streams {
		s, err := g.Client.WatchHold(ctx, connect.NewRequest(&v1.WatchHoldRequest{LockId: h.LockId, FencingToken: h.FencingToken}))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer s.Close()
			for s.Receive() {
				if m := s.Msg(); m.Reason != v1.ErrorReason_ERROR_REASON_UNSPECIFIED {
					ends <- m
					return
				}
			}
			refused <- s.Err()
		}()
	}
	admin := leasegatev1connect.NewAdminServiceClient(g.HTTP, g.URL)
	if _, err := admin.ForceRelease(ctxT(t), connect.NewRequest(&v1.ForceReleaseRequest{Name: "watched-many", Reason: "count the watches"})); err != nil {
		t.Fatal(err)
	}
	open := 0
	for range streams {
		select {
		case <-ends:
			open++
		case err := <-refused:
			if codeOf(err) != connect.CodeResourceExhausted {
				t.Fatalf("a WatchHold ended with %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a WatchHold stream said nothing of the eviction")
		}
	}
	if open > limit {
		t.Fatalf("%d WatchHold streams of one tenant were open at once on a gateway whose MaxWaitersPerTenant is %d; want those past the cap refused", open, limit)
	}
}
