package gateway

import (
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasegate/leasegate/queue"
)

// ttl_ms is refused by the gateway outside the engine's range, naming the
// field, so no TTL an engine would refuse reaches one.
func TestTTLRange(t *testing.T) {
	s := &Service{cfg: DefaultConfig()}
	hi := queue.MaxLeaseTTL.Milliseconds()
	for _, tc := range []struct {
		ms   int64
		want time.Duration // 0: refused
	}{
		{0, s.cfg.DefaultTTL},
		{queue.MinLeaseTTL.Milliseconds(), queue.MinLeaseTTL},
		{queue.MinLeaseTTL.Milliseconds() - 1, 0},
		{hi, queue.MaxLeaseTTL},
		{hi + 1, 0},
		{-1, 0},
	} {
		got, err := s.ttl("ttl_ms", tc.ms, true)
		if tc.want != 0 {
			if err != nil || got != tc.want {
				t.Errorf("ttl(%d) = %s, %v; want %s", tc.ms, got, err, tc.want)
			}
			continue
		}
		var fe *fieldError
		if !errors.As(err, &fe) || fe.field != "ttl_ms" || toConnect(err).Code() != connect.CodeInvalidArgument {
			t.Errorf("ttl(%d) = %s, %v; want invalid_argument naming ttl_ms", tc.ms, got, err)
		}
	}
}

// The gateway's default TTL must lie in the engine's range.
func TestDefaultTTLWithinEngineRange(t *testing.T) {
	for _, d := range []time.Duration{queue.MinLeaseTTL - time.Millisecond, queue.MaxLeaseTTL + time.Second} {
		c := DefaultConfig()
		c.DefaultTTL = d
		if err := c.Validate(); err == nil {
			t.Errorf("Validate with DefaultTTL %s = nil; want an error", d)
		}
	}
}
