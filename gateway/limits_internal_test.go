package gateway

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/clock"
)

// A full limiter table drops its least recently used bucket, not every
// bucket: a client that spent its budget is not given a new one because
// others came along.
func TestFullLimiterTableKeepsActiveBudgets(t *testing.T) {
	// Not parallel: it sets the package variable maxLimiterKeys.
	defer func(n int) { maxLimiterKeys = n }(maxLimiterKeys)
	maxLimiterKeys = 10
	l := newLimiter(Limits{ClientAcquireRate: 0.001, ClientAcquireBurst: 1}, clock.NewFake(time.Unix(0, 0)))
	// The spender comes first, so a table that dropped its oldest entry
	// rather than its least recently used one would drop the spender.
	spender := Identity{Tenant: "t", Subject: "spender", Method: "token"}
	if err := l.acquire(spender); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 9; i++ {
		_ = l.acquire(Identity{Tenant: "t", Subject: fmt.Sprintf("other-%d", i), Method: "token"})
	}
	if err := l.acquire(spender); err == nil {
		t.Fatal("second acquire within a burst of 1 was allowed")
	}
	_ = l.acquire(Identity{Tenant: "t", Subject: "newcomer", Method: "token"}) // the table is full
	if err := l.acquire(spender); err == nil {
		t.Fatal("a newcomer filling the table gave the spender a fresh budget")
	}
}
