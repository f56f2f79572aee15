package locks

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/leasegate/leasegate/internal/clock"
	"github.com/leasegate/leasegate/shard"
)

// MetricsConfig configures Router.RegisterMetrics.
type MetricsConfig struct {
	// CountEvery is how often each cluster's lock keys are counted.
	// Default 15 s; at least 100 ms.
	CountEvery time.Duration
	// CountTimeout bounds one count. Default 5 s.
	CountTimeout time.Duration
}

// RegisterMetrics exports, per cluster the map hashes names over:
//
//	leasegate_breaker_state{shard}  0 closed, 1 half-open, 2 open
//	leasegate_lock_keys{shard}      holder and waiter keys in the cluster
//
// The lock keys are counted with a count-only range read per cluster every
// CountEvery in the background and the cached value is exported, so a
// scrape never reaches etcd, and the figure is the cluster's, whichever
// gateway reports it (query it with max by (shard)). It covers the unnamed
// tenant and every tenant the cluster's engine has served lately
// (queue.Engine.CountAllLocks). The returned function stops the counting
// and unregisters the gauges; call it before Close.
func (r *Router) RegisterMetrics(mp metric.MeterProvider, cfg MetricsConfig) (stop func(), err error) {
	if cfg.CountEvery <= 0 {
		cfg.CountEvery = 15 * time.Second
	}
	cfg.CountEvery = max(cfg.CountEvery, 100*time.Millisecond)
	if cfg.CountTimeout <= 0 {
		cfg.CountTimeout = 5 * time.Second
	}
	// The gauges keep the scope they were first exported under, so the
	// series a dashboard reads do not change.
	m := mp.Meter(shard.ScopeName)
	state, err := m.Int64ObservableGauge("leasegate.breaker.state",
		metric.WithDescription("Circuit breaker state per shard: 0 closed, 1 half-open, 2 open."))
	if err != nil {
		return nil, err
	}
	keys, err := m.Int64ObservableGauge("leasegate.lock.keys",
		metric.WithDescription("Holder and waiter keys per shard (held locks plus waiters), counted every few seconds."))
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	counts := map[string]int64{}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		mu.Lock()
		defer mu.Unlock()
		for _, b := range r.Backends() {
			if b == nil {
				continue
			}
			at := metric.WithAttributes(attribute.String("shard", b.Name))
			o.ObserveInt64(state, int64(b.Breaker.State()), at)
			if n, ok := counts[b.Name]; ok {
				o.ObserveInt64(keys, n, at)
			}
		}
		return nil
	}, state, keys)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			for _, b := range r.Backends() {
				if b == nil {
					continue
				}
				cctx, ccancel := context.WithTimeout(ctx, cfg.CountTimeout)
				n, err := b.Engine.CountAllLocks(cctx)
				ccancel()
				mu.Lock()
				if err == nil {
					counts[b.Name] = n
				} else {
					delete(counts, b.Name) // no figure beats a stale one
				}
				mu.Unlock()
			}
			if !clock.Sleep(ctx, clock.Real, cfg.CountEvery) {
				return
			}
		}
	}()
	return func() {
		cancel()
		wg.Wait()
		_ = reg.Unregister()
	}, nil
}
