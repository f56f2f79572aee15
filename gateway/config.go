package gateway

import (
	"fmt"
	"time"
)

// Config configures the gateway's API.
type Config struct {
	// DefaultTTL applies when a request leaves ttl_ms at 0. Default 30 s.
	DefaultTTL time.Duration
	// MaxWaitTimeout caps wait_timeout_ms. Default 1 h.
	MaxWaitTimeout time.Duration
	// MaxBodyBytes caps a request body or message. Default 64 KiB.
	MaxBodyBytes int64
	// RequestTimeout bounds each unary call's work against etcd. Default 10 s.
	RequestTimeout time.Duration
	// Auth configures authentication; empty means a single, unnamed tenant.
	Auth AuthConfig
	// Policy restricts the names tenants may lock.
	Policy Policy
	// Limits bounds rates, queues and waits per tenant and client.
	Limits Limits
	// Telemetry configures traces and metrics; the zero value (the
	// default) records none.
	Telemetry Telemetry
	// IDKeys signs and verifies lock and session ids. Every gateway of a
	// fleet must share it. Nil draws a key for this process alone: its ids
	// are refused by any other process, and by this one after a restart.
	IDKeys IDKeyring
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		DefaultTTL:     30 * time.Second,
		MaxWaitTimeout: time.Hour,
		MaxBodyBytes:   64 << 10,
		RequestTimeout: 10 * time.Second,
		Limits:         DefaultLimits(),
	}
}

// Validate reports the first field outside its allowed range.
func (c Config) Validate() error {
	switch {
	case c.DefaultTTL < time.Second:
		return fmt.Errorf("gateway: DefaultTTL %s is below 1s", c.DefaultTTL)
	case c.MaxWaitTimeout <= 0:
		return fmt.Errorf("gateway: MaxWaitTimeout %s must be positive", c.MaxWaitTimeout)
	case c.MaxBodyBytes < 1<<10 || c.MaxBodyBytes > 16<<20:
		return fmt.Errorf("gateway: MaxBodyBytes %d is outside 1 KiB to 16 MiB", c.MaxBodyBytes)
	case c.RequestTimeout <= 0:
		return fmt.Errorf("gateway: RequestTimeout %s must be positive", c.RequestTimeout)
	}
	return nil
}
