package gateway_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/gateway"
	"github.com/leasegate/leasegate/internal/clock"
	"github.com/leasegate/leasegate/internal/gwtest"
	"github.com/leasegate/leasegate/internal/server"
	"github.com/leasegate/leasegate/locks"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
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

// watchHoldPath is WatchHold's procedure path.
const watchHoldPath = "/leasegate.v1.LockService/WatchHold"

// TestWatchHoldStreamsCountAgainstTheTenantsStreamCap: a WatchHold stream
// is one of the tenant's open streams on a gateway, beside its waits,
// campaigns, observations and Watch streams, under MaxWaitersPerTenant.
// One caller holding one lock cannot open more than the cap leaves: past
// it a WatchHold is refused at once — resource_exhausted, QUOTA_EXCEEDED,
// limit tenant_waiters, the very refusal an Acquire at the cap gets — over
// Connect, gRPC and gRPC-Web alike, and an Acquire is refused while the
// watches have the places. An open one keeps its place until it ends, and
// its end frees it.
func TestWatchHoldStreamsCountAgainstTheTenantsStreamCap(t *testing.T) {
	t.Parallel()
	const limit = 3
	clk := clock.NewFake(time.Now())
	g := gwtest.Start(t, shared, gwtest.Clock(clk), gwtest.Configure(func(c *server.Config) {
		c.Gateway.Limits.MaxWaitersPerTenant = limit
		c.Fleet.RequestTimeout = time.Hour // the clock moves by whole beats
	}))
	h := tryAcquire(t, g, "watched-many")
	w := openWatch(t, g, "watched-", "") // one of the tenant's places, for the whole test
	w.snapshot(t, 1)
	hold := &v1.WatchHoldRequest{LockId: h.LockId, FencingToken: h.FencingToken}

	// Every stream is admitted or refused before its headers come; an
	// admitted one has armed its beat by then, so one beat of the clock
	// tells them apart.
	var streams, open []*rawStream
	for range 2 * limit {
		streams = append(streams, openRawStream(t, g.HTTP, g.URL, watchHoldPath, hold))
	}
	clk.Advance(gateway.HoldBeat)
	for i, s := range streams {
		switch m, end := s.nextHold(t); {
		case m != nil && m.Reason == v1.ErrorReason_ERROR_REASON_UNSPECIFIED:
			open = append(open, s)
		case m == nil && end.Error != nil && end.Error.Code == "resource_exhausted":
		default:
			t.Fatalf("WatchHold %d: %v, %+v; want a beat or a refusal", i, m, end.Error)
		}
	}
	if len(open) != limit-1 {
		t.Fatalf("%d WatchHold streams of one tenant open beside its Watch under MaxWaitersPerTenant %d; want %d", len(open), limit, limit-1)
	}

	// The refusal is the cap's, whatever the protocol, and the one a wait
	// gets.
	var refusal error
	if s, serr := g.Client.Acquire(ctxT(t), connect.NewRequest(&v1.AcquireRequest{Name: "waits-too", TtlMs: 10000})); serr == nil {
		for s.Receive() {
			t.Fatalf("an Acquire at the cap got %v", s.Msg())
		}
		refusal = s.Err()
	}
	if codeOf(refusal) != connect.CodeResourceExhausted || reasonOf(refusal) != "QUOTA_EXCEEDED" || limitOf(refusal) != "tenant_waiters" {
		t.Fatalf("an Acquire while the watches have the places: %v (%s, %s); want resource_exhausted, QUOTA_EXCEEDED, tenant_waiters", refusal, reasonOf(refusal), limitOf(refusal))
	}
	for name, opts := range map[string][]connect.ClientOption{"connect": nil, "grpc": {connect.WithGRPC()}, "grpc-web": {connect.WithGRPCWeb()}} {
		s, err := g.ConnectClient(opts...).WatchHold(ctxT(t), connect.NewRequest(hold))
		if err == nil {
			for s.Receive() {
				t.Fatalf("%s: a WatchHold past the cap got %v", name, s.Msg())
			}
			err = s.Err()
		}
		var ce, we *connect.Error
		errors.As(err, &ce)
		errors.As(refusal, &we)
		if codeOf(err) != connect.CodeResourceExhausted || reasonOf(err) != reasonOf(refusal) || limitOf(err) != limitOf(refusal) || ce == nil || ce.Message() != we.Message() {
			t.Fatalf("%s: a WatchHold past the cap: %v (%s, %s); want the Acquire's refusal %v", name, err, reasonOf(err), limitOf(err), refusal)
		}
	}

	// The lock's end ends the open watches, and frees their places: as
	// many watches of another lock open again.
	admin := leasegatev1connect.NewAdminServiceClient(g.HTTP, g.URL)
	if _, err := admin.ForceRelease(ctxT(t), connect.NewRequest(&v1.ForceReleaseRequest{Name: "watched-many", Reason: "count the watches"})); err != nil {
		t.Fatal(err)
	}
	for i, s := range open {
		if m, _ := s.nextHold(t); m == nil || m.Reason != v1.ErrorReason_LOCK_EVICTED {
			t.Fatalf("open WatchHold %d after the eviction: %v; want LOCK_EVICTED", i, m)
		}
		// The stream's end is written once its handler has returned,
		// its place given back.
		if m, end := s.nextHold(t); m != nil || end.Error != nil {
			t.Fatalf("open WatchHold %d after LOCK_EVICTED: %v, %+v; want its clean end", i, m, end.Error)
		}
	}
	h2 := tryAcquire(t, g, "watched-again")
	again := make([]*rawStream, limit-1)
	for i := range again {
		again[i] = openRawStream(t, g.HTTP, g.URL, watchHoldPath, &v1.WatchHoldRequest{LockId: h2.LockId, FencingToken: h2.FencingToken})
	}
	clk.Advance(gateway.HoldBeat)
	for i, s := range again {
		if m, end := s.nextHold(t); m == nil || m.Reason != v1.ErrorReason_ERROR_REASON_UNSPECIFIED {
			t.Fatalf("WatchHold %d once the first ones ended: %v, %+v; want it open (a beat)", i, m, end.Error)
		}
	}
	release(t, g, h2)
}

// TestWatchHoldHasOneWriter: a WatchHold stream is written by its handler
// alone, beats included, so no beat overlaps or follows the message that
// says how the lock ended and nothing is written once the handler has
// returned — also when the end and a beat fall due together. Each round
// races an eviction against the beat's timer; the stream says beats (no
// reason), then LOCK_EVICTED, then ends cleanly.
func TestWatchHoldHasOneWriter(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	cfg := gateway.DefaultConfig()
	cfg.Clock = clk
	o := &oneWriter{sameGoroutine: map[string]bool{watchHoldPath: true}}
	url := serveChecked(t, cfg, o, func(rc *locks.RouterConfig) {
		rc.Clock = clk
		rc.RequestTimeout = time.Hour // the clock moves by whole beats
	})
	hc := gwtest.H2C()
	c := leasegatev1connect.NewLockServiceClient(hc, url)
	admin := leasegatev1connect.NewAdminServiceClient(hc, url) // a loopback caller without credentials is the operator
	const rounds = 20
	for round := range rounds {
		name := fmt.Sprintf("beaten-%d", round)
		resp, err := c.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: name, TtlMs: 60000}))
		if err != nil || !resp.Msg.Acquired {
			t.Fatalf("TryAcquire = %v, %v", resp, err)
		}
		h := resp.Msg.Granted
		s := openRawStream(t, hc, url, watchHoldPath, &v1.WatchHoldRequest{LockId: h.LockId, FencingToken: h.FencingToken})
		if round == 0 {
			// A beat alone first: every round after races one.
			clk.Advance(gateway.HoldBeat)
			if m, end := s.nextHold(t); m == nil || m.Reason != v1.ErrorReason_ERROR_REASON_UNSPECIFIED {
				t.Fatalf("after a beat's time: %v, %+v; want a beat", m, end.Error)
			}
		}
		evicted := make(chan error, 1)
		go func() {
			_, err := admin.ForceRelease(ctxT(t), connect.NewRequest(&v1.ForceReleaseRequest{Name: name, Reason: "race a beat", FencingToken: h.FencingToken}))
			evicted <- err
		}()
		clk.Advance(gateway.HoldBeat)
		if err := <-evicted; err != nil {
			t.Fatal(err)
		}
		for {
			m, end := s.nextHold(t)
			if m == nil {
				t.Fatalf("round %d: the stream ended (%+v) before it said how the lock ended", round, end.Error)
			}
			if m.Reason == v1.ErrorReason_ERROR_REASON_UNSPECIFIED {
				continue // a beat, before the end
			}
			if m.Reason != v1.ErrorReason_LOCK_EVICTED {
				t.Fatalf("round %d: %v; want LOCK_EVICTED", round, m)
			}
			break
		}
		if m, end := s.nextHold(t); m != nil || end.Error != nil {
			t.Fatalf("round %d: after LOCK_EVICTED: %v, %+v; want the clean end and nothing else", round, m, end.Error)
		}
	}
	if n := o.check(t)[watchHoldPath]; n < 3*rounds {
		t.Fatalf("%d writes of WatchHold streams checked; want at least headers, end and trailer for each of %d", n, rounds)
	}
}
