package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/leasegate/leasegate/internal/server"
)

// TestAttemptTTL: the configured attempt TTL reaches every engine, and one
// outside the engine's range is refused with the value and the range.
func TestAttemptTTL(t *testing.T) {
	t.Parallel()
	srv := startGateway(t, nil, func(c *server.Config) { c.AttemptTTL = 3 * time.Second })
	for _, e := range srv.Engines() {
		if got := e.Config().AttemptTTL; got != 3*time.Second {
			t.Errorf("engine AttemptTTL = %s; want 3s", got)
		}
	}
	for _, bad := range []time.Duration{0, time.Second, 2500 * time.Millisecond, 6 * time.Minute} {
		cfg := server.DefaultConfig()
		cfg.AttemptTTL = bad
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "attempt TTL") {
			t.Errorf("Validate with AttemptTTL %s = %v; want an attempt TTL error", bad, err)
		}
	}
}
