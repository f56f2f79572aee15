package locks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasegate/leasegate/internal/clock"
	"github.com/leasegate/leasegate/shard"
)

// errCallTimeout is the cause of the fleet's own per-call timeout
// (RouterConfig.RequestTimeout).
var errCallTimeout = errors.New("request timeout")

// Bound bounds one call's work against etcd by RouterConfig.RequestTimeout
// on the router's clock. A cluster that has not answered by then fails
// the call unavailable, "did not answer in time", not with the caller's
// deadline.
func (r *Router) Bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return clock.WithTimeoutCause(ctx, r.cfg.Clock, r.cfg.RequestTimeout, errCallTimeout)
}

// RequestTimeout is RouterConfig.RequestTimeout: how long one bounded call
// may work against etcd.
func (r *Router) RequestTimeout() time.Duration { return r.cfg.RequestTimeout }

// call runs fn on b through its breaker and its Reach and notes a refusal
// (or a half-open probe) on ctx's span. Every failure of the cluster reads
// as shard.ErrShardUnavailable with a message naming the shard (failure).
func (b *Backend) call(ctx context.Context, fn func(context.Context) error) error {
	err := b.Call(ctx, fn)
	noteBreaker(ctx, b, err)
	return b.failure(ctx, err)
}

// freeing runs fn on b past its breaker but not past its Reach: for the
// calls that can only free what a caller holds (a release, a resignation,
// a session's revocation). A holder letting go is not made to wait out a
// breaker's open interval, nor to wait for a connection longer than any
// call does. Its errors read as call's.
func (b *Backend) freeing(ctx context.Context, fn func(context.Context) error) error {
	return b.failure(ctx, b.Reach.Call(ctx, fn))
}

// failure is err, of a call on b under ctx, as the fleet reports it: the
// breaker's or the Reach's refusal as it is, the fleet's own request
// timeout as "did not answer in time", and an etcd or transport failure
// without its internals, all unavailable (retryable); any other error as
// it is.
func (b *Backend) failure(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, shard.ErrShardUnavailable):
		return shard.Unavailable(err)
	case errors.Is(context.Cause(ctx), errCallTimeout):
		return shard.Unavailable(fmt.Errorf("shard %q did not answer in time", b.Name))
	case ctx.Err() == nil && shard.IsClusterFailure(err):
		return shard.Unavailable(&clusterFailure{shard: b.Name, err: err})
	}
	return err
}

// clusterFailure is an etcd or transport failure of a shard's cluster: its
// message names the shard and keeps etcd's words for the logs, while
// errors.Is still sees them.
type clusterFailure struct {
	shard string
	err   error
}

func (e *clusterFailure) Error() string {
	return fmt.Sprintf("shard %q: its etcd cluster failed the call; retry", e.shard)
}

func (e *clusterFailure) Unwrap() error { return e.err }

// noteBreaker adds a "breaker" event to ctx's span when a shard's breaker
// refused a call or let a half-open probe through.
func noteBreaker(ctx context.Context, b *Backend, err error) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	st := b.Breaker.State()
	decision := "allowed"
	if errors.Is(err, shard.ErrShardUnavailable) {
		decision = "refused"
	} else if st == shard.StateClosed {
		return
	}
	span.AddEvent("breaker", trace.WithAttributes(attribute.String("leasegate.shard", b.Name),
		attribute.String("leasegate.breaker.state", st.String()), attribute.String("leasegate.breaker.decision", decision)))
}

// do runs fn on t's cluster through its breaker (Backend.call) and
// returns fn's value.
func do[T any](ctx context.Context, t Target, fn func(context.Context) (T, error)) (T, error) {
	return via(ctx, t.Backend.call, fn)
}

// via runs fn by run (Backend.call or Backend.freeing) and returns fn's
// value.
func via[T any](ctx context.Context, run func(context.Context, func(context.Context) error) error, fn func(context.Context) (T, error)) (T, error) {
	var v T
	err := run(ctx, func(ctx context.Context) error {
		var err error
		v, err = fn(ctx)
		return err
	})
	return v, err
}
