package gateway

import (
	"context"
	"time"

	"github.com/leasegate/leasegate/internal/clock"
)

// clockOf is cfg's clock, the wall clock when none is set.
func clockOf(cfg Config) clock.Clock {
	if cfg.Clock == nil {
		return clock.Real
	}
	return cfg.Clock
}

// withTimeout bounds ctx by d on the gateway's clock; the context ends
// with cause.
func (s *Service) withTimeout(ctx context.Context, d time.Duration, cause error) (context.Context, context.CancelFunc) {
	return clock.WithTimeoutCause(ctx, s.clk, d, cause)
}
