package queue

import (
	"fmt"
	"strings"
	"time"

	"github.com/leasegate/leasegate/internal/clock"
)

// DefaultPrefix is the etcd key prefix of an engine, and of leasegate in
// every cluster, when none is configured.
const DefaultPrefix = "/leasegate"

// The TTL range of every engine; a Config may narrow it, never widen it.
// The gateway refuses TTLs outside it before they reach an engine.
const (
	// MinLeaseTTL is the shortest lease: etcd leases are whole seconds.
	MinLeaseTTL = time.Second
	// MaxLeaseTTL is the longest lease, and so the longest a name stays
	// blocked by a holder that died without releasing it.
	MaxLeaseTTL = 24 * time.Hour
)

// DefaultMaxWatchKeys is Config.MaxWatchKeys' default: at about 100 bytes
// a key (docs/security.md, "Limits"), some 10 MiB of views per key space.
const DefaultMaxWatchKeys = 100_000

// MaxLeasePool is the largest Config.LeasePool.
const MaxLeasePool = 4096

// Config configures an Engine.
type Config struct {
	// Prefix is the etcd key prefix of the engine's own key space; Space
	// serves others. Default DefaultPrefix. It must start with '/' and not
	// end with one.
	Prefix string
	// MinTTL is the shortest lease a caller may ask for. Default and
	// lowest MinLeaseTTL (1 s). etcd raises TTLs below its own minimum
	// (about 1.5 × the election timeout); the effective TTL is reported.
	MinTTL time.Duration
	// MaxTTL is the longest lease a caller may ask for. Default and
	// highest MaxLeaseTTL (24 h).
	MaxTTL time.Duration
	// RequestTimeout bounds each etcd request the engine makes on its own
	// behalf (cleanup after a cancelled wait, re-reads). Default 5 s.
	RequestTimeout time.Duration
	// AttemptTTL is the TTL of the attempt lease a session waiter's key
	// rides on until it is granted: how long a waiter whose gateway stopped
	// keeps its place for a retry elsewhere, and the bound on how long it
	// can block the name once nobody serves it. Default 10 s; 2 s to 5 min.
	AttemptTTL time.Duration
	// LeasePool is how many per-lock leases the engine keeps granted ahead
	// of need, per TTL (leasepool.go): an acquire takes one instead of
	// granting a lease on its path, and a clean release gives it back
	// instead of revoking it. Default 64; 0 disables the pool (every
	// acquire grants, every release revokes); at most MaxLeasePool.
	LeasePool int
	// LossWait makes a holder lost without a clean end (its lease expired,
	// or etcd revoked it early) keep the name from everyone for its TTL
	// after the loss was first seen, so that no grant comes while the lost
	// holder may still believe it holds (loss.go). Default true; false
	// frees the name as soon as the key goes, relying on fencing alone.
	LossWait bool
	// MaxWatchKeys bounds the keys the engine's WatchLocks views of one
	// key space hold in memory together (watchview.go): watchers of one
	// prefix share a view, and a view whose keys would pass the bound is
	// refused with ErrWatchBudget before it is read (one that grows past it
	// ends with it). Default DefaultMaxWatchKeys; 0 disables the bound.
	MaxWatchKeys int
	// MaxClockSkew bounds how far the clocks of the gateways over one
	// cluster may disagree: a lock-delay or a loss wait stamped by another
	// gateway lasts this much longer here, so that it ends no sooner than
	// on the stamping gateway's clock. Default 500 ms; 0 to 1 min.
	MaxClockSkew time.Duration
	// Clock is the time source for deadlines and wait timeouts. Default the
	// wall clock.
	Clock clock.Clock
	// Telemetry configures spans and metrics; the zero value (the default)
	// records none.
	Telemetry Telemetry
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Prefix:         DefaultPrefix,
		MinTTL:         MinLeaseTTL,
		MaxTTL:         MaxLeaseTTL,
		RequestTimeout: 5 * time.Second,
		AttemptTTL:     10 * time.Second,
		LeasePool:      64,
		LossWait:       true,
		MaxClockSkew:   500 * time.Millisecond,
		MaxWatchKeys:   DefaultMaxWatchKeys,
		Clock:          clock.Real,
	}
}

// Validate reports the first field outside its allowed range.
func (c Config) Validate() error {
	switch {
	case !strings.HasPrefix(c.Prefix, "/") || strings.HasSuffix(c.Prefix, "/"):
		return fmt.Errorf("queue: Prefix %q must start with '/' and not end with one", c.Prefix)
	case c.MinTTL < MinLeaseTTL:
		return fmt.Errorf("queue: MinTTL %s is below %s (etcd leases are whole seconds)", c.MinTTL, MinLeaseTTL)
	case c.MaxTTL < c.MinTTL:
		return fmt.Errorf("queue: MaxTTL %s is below MinTTL %s", c.MaxTTL, c.MinTTL)
	case c.MaxTTL > MaxLeaseTTL:
		return fmt.Errorf("queue: MaxTTL %s is above %s", c.MaxTTL, MaxLeaseTTL)
	case c.RequestTimeout <= 0:
		return fmt.Errorf("queue: RequestTimeout %s must be positive", c.RequestTimeout)
	case c.AttemptTTL < 2*time.Second || c.AttemptTTL > 5*time.Minute || c.AttemptTTL%time.Second != 0:
		return fmt.Errorf("queue: AttemptTTL %s is outside 2s to 5m in whole seconds", c.AttemptTTL)
	case c.LeasePool < 0 || c.LeasePool > MaxLeasePool:
		return fmt.Errorf("queue: LeasePool %d is outside 0 (off) to %d", c.LeasePool, MaxLeasePool)
	case c.MaxWatchKeys < 0:
		return fmt.Errorf("queue: MaxWatchKeys %d is negative (0 disables the bound)", c.MaxWatchKeys)
	case c.MaxClockSkew < 0 || c.MaxClockSkew > time.Minute:
		return fmt.Errorf("queue: MaxClockSkew %s is outside 0 to 1m", c.MaxClockSkew)
	case c.Clock == nil:
		return fmt.Errorf("queue: Clock is nil")
	}
	return nil
}

// ttlSeconds validates a requested TTL and rounds it up to whole seconds.
func (c Config) ttlSeconds(ttl time.Duration) (int64, error) {
	if ttl < c.MinTTL || ttl > c.MaxTTL {
		return 0, fmt.Errorf("%w: ttl %s is outside the allowed range %s to %s", ErrInvalidTTL, ttl, c.MinTTL, c.MaxTTL)
	}
	return int64((ttl + time.Second - 1) / time.Second), nil
}
