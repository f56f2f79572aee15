package shard

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ScopeName is the instrumentation scope of the per-shard instruments:
// the breaker transitions here, and the gauges package locks exports.
const ScopeName = "github.com/leasegate/leasegate/shard"

// TransitionCounter counts leasegate_breaker_transitions_total{shard, to}.
type TransitionCounter struct {
	c metric.Int64Counter
}

// BreakerTransitions returns a counter of breaker state changes; set its
// OnStateChange as BreakerConfig.OnStateChange.
func BreakerTransitions(mp metric.MeterProvider) (*TransitionCounter, error) {
	c, err := mp.Meter(ScopeName).Int64Counter("leasegate.breaker.transitions",
		metric.WithDescription("Circuit breaker state changes per shard, by the state entered."))
	if err != nil {
		return nil, err
	}
	return &TransitionCounter{c: c}, nil
}

// OnStateChange counts one change; it has BreakerConfig.OnStateChange's
// signature.
func (t *TransitionCounter) OnStateChange(cluster string, _, to State) {
	t.c.Add(context.Background(), 1, metric.WithAttributes(attribute.String("shard", cluster), attribute.String("to", to.String())))
}

// Touch exports zero counts for cluster, so that rates and increases have
// a series to start from before the first change.
func (t *TransitionCounter) Touch(cluster string) {
	for _, s := range []State{StateClosed, StateHalfOpen, StateOpen} {
		t.c.Add(context.Background(), 0, metric.WithAttributes(attribute.String("shard", cluster), attribute.String("to", s.String())))
	}
}
