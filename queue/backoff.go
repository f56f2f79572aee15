package queue

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/leasegate/leasegate/internal/clock"
)

// backoff spaces out retries against an unreachable etcd: 50 ms doubling to
// 2 s, with jitter.
type backoff struct {
	clock clock.Clock
	next  time.Duration
}

func newBackoff(c clock.Clock) *backoff { return &backoff{clock: c, next: 50 * time.Millisecond} }

func (b *backoff) reset() { b.next = 50 * time.Millisecond }

func (b *backoff) wait(ctx context.Context) error {
	d := b.next/2 + rand.N(b.next/2+1)
	b.next = min(b.next*2, 2*time.Second)
	t := b.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}
