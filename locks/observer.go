package locks

import "context"

// Observer sees where the fleet sends one call, for the call's telemetry:
// the caller puts one in the call's context (WithObserver) and the fleet
// reports to it as it routes, so the record names the shard the fleet
// acted on, never one re-derived from the request.
type Observer interface {
	// Routed reports a name routed by the shard map: to t, or not at all
	// (err). A call that the map moved under it reports again.
	Routed(ctx context.Context, t Target, err error)
	// Found reports the shard a lock id named, found for the call.
	Found(ctx context.Context, shard string)
}

type observerKey struct{}

// WithObserver returns ctx carrying o.
func WithObserver(ctx context.Context, o Observer) context.Context {
	return context.WithValue(ctx, observerKey{}, o)
}

func routed(ctx context.Context, t Target, err error) {
	if o, ok := ctx.Value(observerKey{}).(Observer); ok {
		o.Routed(ctx, t, err)
	}
}

func found(ctx context.Context, shard string) {
	if o, ok := ctx.Value(observerKey{}).(Observer); ok {
		o.Found(ctx, shard)
	}
}
