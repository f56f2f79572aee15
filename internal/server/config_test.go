package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/server"
	"github.com/leasegate/leasegate/queue"
)

// TestAttemptTTL: the configured attempt TTL reaches every engine, and one
// outside the engine's range is refused with the value and the range.
func TestAttemptTTL(t *testing.T) {
	t.Parallel()
	srv := startGateway(t, nil, func(c *server.Config) { c.Fleet.Queue.AttemptTTL = 3 * time.Second })
	for _, e := range srv.Engines() {
		if got := e.Config().AttemptTTL; got != 3*time.Second {
			t.Errorf("engine AttemptTTL = %s; want 3s", got)
		}
	}
	for _, bad := range []time.Duration{0, time.Second, 2500 * time.Millisecond, 6 * time.Minute} {
		cfg := server.DefaultConfig()
		cfg.Fleet.Queue.AttemptTTL = bad
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "AttemptTTL") {
			t.Errorf("Validate with AttemptTTL %s = %v; want an attempt TTL error", bad, err)
		}
	}
}

// TestMaxClockSkew: the configured clock-skew bound reaches every engine,
// and one outside the engine's range is refused with the value and the
// range.
func TestMaxClockSkew(t *testing.T) {
	t.Parallel()
	srv := startGateway(t, nil, func(c *server.Config) { c.Fleet.Queue.MaxClockSkew = 2 * time.Second })
	for _, e := range srv.Engines() {
		if got := e.Config().MaxClockSkew; got != 2*time.Second {
			t.Errorf("engine MaxClockSkew = %s; want 2s", got)
		}
	}
	for _, bad := range []time.Duration{-time.Millisecond, 2 * time.Minute} {
		cfg := server.DefaultConfig()
		cfg.Fleet.Queue.MaxClockSkew = bad
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "MaxClockSkew") || !strings.Contains(err.Error(), bad.String()) {
			t.Errorf("Validate with MaxClockSkew %s = %v; want a max clock skew error naming it", bad, err)
		}
	}
}

// TestLeasePool: the configured lease pool size reaches every engine, 0
// turns the pool off, and a size outside the engine's range is refused.
func TestLeasePool(t *testing.T) {
	t.Parallel()
	for _, size := range []int{0, 7} {
		srv := startGateway(t, nil, func(c *server.Config) { c.Fleet.Queue.LeasePool = size })
		for _, e := range srv.Engines() {
			if got := e.Config().LeasePool; got != size {
				t.Errorf("engine LeasePool = %d; want %d", got, size)
			}
		}
	}
	for _, bad := range []int{-1, queue.MaxLeasePool + 1} {
		cfg := server.DefaultConfig()
		cfg.Fleet.Queue.LeasePool = bad
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "LeasePool") {
			t.Errorf("Validate with LeasePool %d = %v; want a lease pool error", bad, err)
		}
	}
}

// TestBreakerOpenTimeout: the configured open period reaches every
// cluster's breaker, and one outside its range is refused.
func TestBreakerOpenTimeout(t *testing.T) {
	t.Parallel()
	srv := startGateway(t, nil, func(c *server.Config) { c.Fleet.Breaker.OpenTimeout = 3 * time.Second })
	bes := srv.Router().Backends()
	if len(bes) == 0 {
		t.Fatal("no backends")
	}
	for _, be := range bes {
		if got := be.Breaker.OpenTimeout(); got != 3*time.Second {
			t.Errorf("cluster %s: breaker open timeout = %s; want 3s", be.Name, got)
		}
	}
	for _, bad := range []time.Duration{time.Millisecond, 2 * time.Minute} {
		cfg := server.DefaultConfig()
		cfg.Fleet.Breaker.OpenTimeout = bad
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "breaker open timeout") {
			t.Errorf("Validate with BreakerOpenTimeout %s = %v; want a breaker open timeout error", bad, err)
		}
	}
}
