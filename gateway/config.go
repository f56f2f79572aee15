package gateway

import (
	"fmt"
	"net/url"
	"time"

	"github.com/leasegate/leasegate/internal/clock"
	"github.com/leasegate/leasegate/queue"
)

// Config configures the gateway's API.
type Config struct {
	// DefaultTTL applies when a request leaves ttl_ms at 0. Default 30 s;
	// queue.MinLeaseTTL to queue.MaxLeaseTTL (1 s to 24 h).
	DefaultTTL time.Duration
	// MaxWaitTimeout caps wait_timeout_ms. Default 1 h.
	MaxWaitTimeout time.Duration
	// MaxBodyBytes caps a request body or message. Default 64 KiB.
	MaxBodyBytes int64
	// Auth configures authentication; empty means a single, unnamed tenant.
	Auth AuthConfig
	// Authenticator, when set, is used in place of one NewService would build
	// from Auth, which must be its configuration (NewAuthenticator): a process
	// can check its credential files before it starts anything else. The
	// service owns it: it closes it at Shutdown, or if NewService fails.
	// Default nil.
	Authenticator *Authenticator
	// Policy restricts the names tenants may lock.
	Policy Policy
	// Limits bounds rates, queues and waits per tenant and client.
	Limits Limits
	// Telemetry configures traces and metrics; the zero value (the
	// default) records none.
	Telemetry Telemetry
	// CORSOrigins lists the origins (scheme://host[:port], or "*") whose
	// browser pages may call the gateway. A request carrying any other
	// Origin than the gateway's own is refused. Default none.
	CORSOrigins []string
	// CheckLoopbackHost refuses requests whose Host is not a loopback name
	// or address; set it when the listener accepts only local peers, so a
	// web page whose DNS name rebinds to 127.0.0.1 cannot reach it.
	CheckLoopbackHost bool
	// BodyReadTimeout bounds receiving a request body. Default 10 s.
	BodyReadTimeout time.Duration
	// SendTimeout bounds writing one answer, or one streamed message, to a
	// client: a client that stops reading is given up on. Default 10 s.
	SendTimeout time.Duration
	// IDKeys signs and verifies lock and session ids. Every gateway of a
	// fleet must share it. Nil draws a key for this process alone: its ids
	// are refused by any other process, and by this one after a restart.
	IDKeys IDKeyring
	// AuditMaxRecords bounds the force-release audit records kept per
	// tenant and shard. 0 means queue.DefaultAuditMaxRecords (1,000).
	AuditMaxRecords int
	// AuditMaxAge bounds how long a force-release audit record is kept.
	// 0 means queue.DefaultAuditMaxAge (90 days).
	AuditMaxAge time.Duration
	// Clock tells the time for every timeout, expiry and rate the gateway
	// computes (request and wait timeouts, health-check caching, key-count
	// refreshes, rate-limit buckets, Auth.ReloadInterval); connection deadlines
	// stay on the wall clock, which the network enforces them by. Default (and
	// when nil) the wall clock; tests pass a fake.
	Clock clock.Clock
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		DefaultTTL:      30 * time.Second,
		MaxWaitTimeout:  time.Hour,
		MaxBodyBytes:    64 << 10,
		BodyReadTimeout: 10 * time.Second,
		SendTimeout:     10 * time.Second,
		Limits:          DefaultLimits(),
		Clock:           clock.Real,
	}
}

// Validate reports the first field outside its allowed range.
func (c Config) Validate() error {
	switch {
	case c.DefaultTTL < queue.MinLeaseTTL || c.DefaultTTL > queue.MaxLeaseTTL:
		return fmt.Errorf("gateway: DefaultTTL %s is outside %s to %s", c.DefaultTTL, queue.MinLeaseTTL, queue.MaxLeaseTTL)
	case c.MaxWaitTimeout <= 0:
		return fmt.Errorf("gateway: MaxWaitTimeout %s must be positive", c.MaxWaitTimeout)
	case c.MaxBodyBytes < 1<<10 || c.MaxBodyBytes > 16<<20:
		return fmt.Errorf("gateway: MaxBodyBytes %d is outside 1 KiB to 16 MiB", c.MaxBodyBytes)
	case c.BodyReadTimeout <= 0 || c.BodyReadTimeout > 10*time.Minute:
		return fmt.Errorf("gateway: BodyReadTimeout %s is outside (0, 10m]", c.BodyReadTimeout)
	case c.SendTimeout <= 0 || c.SendTimeout > 10*time.Minute:
		return fmt.Errorf("gateway: SendTimeout %s is outside (0, 10m]", c.SendTimeout)
	case c.AuditMaxRecords < 0:
		return fmt.Errorf("gateway: AuditMaxRecords %d must not be negative", c.AuditMaxRecords)
	case c.AuditMaxAge < 0:
		return fmt.Errorf("gateway: AuditMaxAge %s must not be negative", c.AuditMaxAge)
	}
	if err := c.Auth.validate(); err != nil {
		return err
	}
	for _, o := range c.CORSOrigins {
		if u, err := url.Parse(o); o != "*" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "") {
			return fmt.Errorf("gateway: CORS origin %q: want scheme://host[:port] or *", o)
		}
	}
	return nil
}
