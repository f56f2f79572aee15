package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasegate/leasegate/client"
	"github.com/leasegate/leasegate/internal/clock"
	"github.com/leasegate/leasegate/internal/gwtest"
	"github.com/leasegate/leasegate/internal/server"
)

// TestRefusalsExitByKind runs leasectl against gateways that refuse by
// policy, by cap and by rate, and checks each refusal's exit status and
// its one-line message.
func TestRefusalsExitByKind(t *testing.T) {
	t.Parallel()
	capped := startGateway(t, gwtest.Configure(func(c *server.Config) {
		// Without authentication every caller is the unnamed tenant "".
		c.Gateway.Policy.NamePrefixes = map[string][]string{"": {"orders/"}}
		c.Gateway.Limits.MaxKeysPerTenant = 1
	}))
	limited := startGateway(t, gwtest.Configure(func(c *server.Config) {
		// One acquire per 100 s, on a clock that stands still: the second
		// is refused with a 100 s hint, longer than --timeout, so the SDK
		// returns the refusal without waiting.
		c.Gateway.Limits.TenantAcquireRate = 0.01
		c.Gateway.Limits.TenantAcquireBurst = 1
		c.Gateway.Clock = clock.NewFake(time.Now())
	}))
	at := func(g *gateway) []string { return []string{"LEASEGATE_ENDPOINT=" + g.URL} }
	for _, g := range []*gateway{capped, limited} {
		if r := run(t, at(g), "try", "orders/1", "--ttl", "30s"); r.code != 0 {
			t.Fatalf("the first try exited %d: %s", r.code, r.stderr)
		}
	}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		code int
		want string
	}{
		{"name policy", at(capped), []string{"try", "jobs/1"}, exitRefused, "permission denied"},
		{"key cap", at(capped), []string{"try", "orders/2"}, exitLimited, "tenant_keys"},
		{"rate limit", at(limited), []string{"--timeout", "5s", "try", "orders/2"}, exitLimited, "retry in 1m40s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, tc.env, tc.args...)
			if r.code != tc.code || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("leasectl %q exited %d with stderr %q; want %d and one line mentioning %q", tc.args, r.code, r.stderr, tc.code, tc.want)
			}
			if twice := gwtest.SaidTwice(r.stderr); twice != "" {
				t.Errorf("leasectl %q: stderr %q says %q twice in a row", tc.args, r.stderr, twice)
			}
		})
	}
}

// Every kind of SDK error has its exit status, whatever wraps it.
func TestExitStatusByErrorKind(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int
	}{
		{client.ErrPermissionDenied, exitRefused},
		{client.ErrNotOwner, exitRefused},
		{&client.RateLimitError{Limit: "tenant_acquire_rate", RetryAfter: time.Second}, exitLimited},
		{&client.QuotaError{Limit: "tenant_keys"}, exitLimited},
		{client.ErrInternal, exitInternal},
		{client.ErrUnavailable, exitError},
		{client.ErrLockLost, exitLost},
		{client.ErrWaitTimeout, exitNotAcquired},
	} {
		err := fmt.Errorf("leasegate: try %q: %w", "x", tc.err)
		var stderr strings.Builder
		if got := exitCode(err, &stderr); got != tc.code || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("exitCode(%v) = %d, printed %q; want %d and one line", err, got, stderr.String(), tc.code)
		}
	}
}
