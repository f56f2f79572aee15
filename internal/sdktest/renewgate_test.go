package sdktest_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/leasegate/leasegate/client"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

// heldRenewals holds every Renew request at the transport until the test
// lets it through, and counts how many are held at once.
type heldRenewals struct {
	base    http.RoundTripper
	arrived chan string // the lock id of each renewal, as it arrives
	pass    chan struct{}

	mu      sync.Mutex
	held    int
	maxHeld int
}

func (h *heldRenewals) RoundTrip(r *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(r.URL.Path, leasegatev1connect.LockServiceRenewProcedure) {
		return h.base.RoundTrip(r)
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	r.Body.Close()
	var req v1.RenewRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("renew request body: %w", err)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	h.mu.Lock()
	h.held++
	h.maxHeld = max(h.maxHeld, h.held)
	h.mu.Unlock()
	h.arrived <- req.LockId
	select {
	case <-h.pass:
	case <-r.Context().Done():
	}
	h.mu.Lock()
	h.held--
	h.mu.Unlock()
	return h.base.RoundTrip(r)
}

// A process holding many per-lock leases would lose every lock at once when
// its gateway slowed down if every due renewal went out at once: the
// requests beyond the HTTP/2 stream limit dial connections of their own,
// and all of them miss their timeouts (docs/capacity.md). So the SDK sends
// at most WithMaxRenewals at a time and lets the lease closest to its
// deadline go first. Here every renewal is due while the gateway (real, over real
// etcd) is held up: no more than the bound may reach it, the rest must go
// in deadline order as turns free up, and no lock may be lost.
func TestRenewalsInFlightAreBoundedMostUrgentFirst(t *testing.T) {
	t.Parallel()
	const (
		locks = 12
		bound = 3
		ttl   = 30 * time.Second // etcd's real TTL: far beyond the test
		step  = 500 * time.Millisecond
	)
	g := startGateway(t, "")
	clk := newFakeClock()
	base := h2cTransport()
	t.Cleanup(base.CloseIdleConnections)
	tr := &heldRenewals{base: base, arrived: make(chan string, locks), pass: make(chan struct{})}
	renewed := make(chan error, locks)
	c := newClient(t, []string{g.URL},
		client.WithClock(clk),
		client.WithHTTPClient(&http.Client{Transport: tr}),
		client.WithMaxRenewals(bound),
		client.WithOnRenew(func(_ time.Time, err error) { renewed <- err }))
	ctx := ctxT(t)

	// Lock i is granted at t0 + i×step: its deadline is i steps later
	// than lock 0's, and none is due for renewal before the last grant.
	var held []*client.Lock
	order := map[string]int{}
	for i := range locks {
		l, err := c.Acquire(ctx, fmt.Sprintf("bounded-%d", i), client.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		held = append(held, l)
		order[l.ID()] = i
		clk.Advance(step)
	}
	// Every renewal is now due; no deadline has passed.
	clk.Advance(renewDue(ttl))
	first := map[int]bool{}
	for range bound {
		first[order[await(t, tr.arrived, "a renewal")]] = true
	}
	// The others wait in the client, not at the gateway.
	for end := time.Now().Add(20 * time.Second); c.RenewalsWaiting() != locks-bound; {
		if time.Now().After(end) {
			t.Fatalf("%d renewals wait in the client; want %d", c.RenewalsWaiting(), locks-bound)
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case id := <-tr.arrived:
		t.Fatalf("renewal of lock %d reached the gateway while %d were in flight", order[id], bound)
	default:
	}

	// Each turn that ends admits the waiting renewal whose lease is
	// closest to its deadline: the earliest granted lock not yet sent.
	next := 0
	for range locks - bound {
		tr.pass <- struct{}{}
		for first[next] {
			next++
		}
		if got := order[await(t, tr.arrived, "the next renewal")]; got != next {
			t.Fatalf("renewal of lock %d went next; want lock %d, the closest to its deadline", got, next)
		}
		next++
	}
	for range bound {
		tr.pass <- struct{}{}
	}
	for range locks {
		if err := await(t, renewed, "a renewal's answer"); err != nil {
			t.Fatalf("renewal failed: %v", err)
		}
	}
	tr.mu.Lock()
	maxHeld := tr.maxHeld
	tr.mu.Unlock()
	if maxHeld != bound {
		t.Fatalf("%d renewals were at the gateway at once; want %d", maxHeld, bound)
	}
	for i, l := range held {
		if err := l.Err(); err != nil {
			t.Fatalf("lock %d lost: %v", i, err)
		}
	}
}
