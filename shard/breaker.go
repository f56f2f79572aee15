package shard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/sony/gobreaker/v2"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// State is a circuit breaker's state. The values are stable, so they can be
// exported as a metric gauge.
type State int

// Breaker states.
const (
	// StateClosed: calls pass; failures are counted.
	StateClosed State = 0
	// StateHalfOpen: up to HalfOpenProbes calls pass to probe the cluster;
	// the rest fail fast.
	StateHalfOpen State = 1
	// StateOpen: every call fails fast with ErrShardUnavailable.
	StateOpen State = 2
)

// String returns "closed", "half-open" or "open".
func (s State) String() string {
	switch s {
	case StateClosed:
		return "closed"
	case StateHalfOpen:
		return "half-open"
	case StateOpen:
		return "open"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

func stateOf(s gobreaker.State) State {
	switch s {
	case gobreaker.StateHalfOpen:
		return StateHalfOpen
	case gobreaker.StateOpen:
		return StateOpen
	}
	return StateClosed
}

// ratioBuckets is how many buckets the failure-ratio window rolls in.
const ratioBuckets = 10

// BreakerConfig configures a [Breaker]. A zero field takes its default;
// [DefaultBreakerConfig] spells them out.
type BreakerConfig struct {
	// ConsecutiveFailures opens the breaker after this many cluster failures
	// in a row while closed. Default 5.
	ConsecutiveFailures uint32

	// FailureRatio, if > 0, also opens the breaker when at least this
	// fraction of the calls completed within Window were cluster failures
	// (once MinCalls have completed there). Range [0, 1]; default 0 (off).
	// Without it the breaker keeps no window, so a slow trickle of calls to
	// a dead cluster still trips it after ConsecutiveFailures.
	FailureRatio float64

	// MinCalls is how many calls must complete within Window before
	// FailureRatio is applied. Default 20.
	MinCalls uint32

	// Window is the rolling window of FailureRatio, kept in 10 buckets.
	// Default 10 s; at least 10 ms.
	Window time.Duration

	// OpenTimeout is how long the breaker stays open before it lets probes
	// through (half-open). Default 1 s: the usual trip is an etcd leader
	// election (writes fail until a new leader is elected, about an
	// election timeout), and every second the breaker stays open after the
	// cluster recovers is a second of refused acquires and renewals — a
	// holder whose renewals are refused past its deadline loses its lock.
	// A dead cluster costs one probe call per OpenTimeout per gateway.
	OpenTimeout time.Duration

	// HalfOpenProbes is how many probes the half-open breaker lets through;
	// that many successes in a row close it, and one failure opens it again.
	// Default 1.
	HalfOpenProbes uint32

	// Probe, if set, is the breaker's own probe of its cluster: a caller
	// that finds the breaker half-open runs Probe, bounded by ProbeTimeout,
	// instead of its call, and its call only if the probe closed the
	// breaker. A probe then costs its caller at most ProbeTimeout however
	// dead the cluster, never the caller's own timeout, and a probe's
	// verdict rests on a call that should take milliseconds rather than
	// on whatever the caller had to do. It should be one cheap read that
	// needs the cluster's leader. Default nil: the first caller's own call
	// is the probe.
	Probe func(ctx context.Context) error

	// ProbeTimeout bounds Probe. Default 1 s.
	ProbeTimeout time.Duration

	// OnStateChange, if set, is called on every state change, including
	// open → half-open, which is reported when OpenTimeout elapses rather
	// than when the next call happens to arrive. It runs synchronously with
	// the breaker's lock held: it must return quickly and must not call the
	// Breaker's methods. Default nil.
	OnStateChange func(cluster string, from, to State)
}

// DefaultBreakerConfig returns the defaults: trip after 5 consecutive
// failures, no ratio trip, 1 s open, 1 half-open probe.
func DefaultBreakerConfig() BreakerConfig {
	return BreakerConfig{
		ConsecutiveFailures: 5,
		MinCalls:            20,
		Window:              10 * time.Second,
		OpenTimeout:         time.Second,
		HalfOpenProbes:      1,
		ProbeTimeout:        time.Second,
	}
}

// Validate reports the first field outside its allowed range. Zero fields
// are valid (they mean the default).
func (c BreakerConfig) Validate() error {
	switch {
	case c.FailureRatio < 0 || c.FailureRatio > 1 || math.IsNaN(c.FailureRatio):
		return fmt.Errorf("shard: breaker FailureRatio %v out of range [0, 1]", c.FailureRatio)
	case c.Window < 0 || (c.Window > 0 && c.Window < 10*time.Millisecond):
		return fmt.Errorf("shard: breaker Window %v out of range: want ≥ 10ms, or 0 for the default", c.Window)
	case c.OpenTimeout < 0:
		return fmt.Errorf("shard: breaker OpenTimeout %v is negative: want > 0, or 0 for the default", c.OpenTimeout)
	case c.ProbeTimeout < 0:
		return fmt.Errorf("shard: breaker ProbeTimeout %v is negative: want > 0, or 0 for the default", c.ProbeTimeout)
	}
	return nil
}

// Breaker is the circuit breaker in front of one etcd cluster. It counts
// only cluster-health failures (see [IsClusterFailure]); the caller giving
// up and etcd's semantic answers never trip it. Safe for concurrent use.
type Breaker struct {
	cluster string
	cfg     BreakerConfig
	cb      *gobreaker.CircuitBreaker[struct{}]
}

// NewBreaker returns a closed breaker for the named cluster; the name
// appears in its errors and is passed to OnStateChange.
func NewBreaker(cluster string, cfg BreakerConfig) (*Breaker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cluster == "" {
		return nil, errors.New("shard: breaker cluster name is empty")
	}
	d := DefaultBreakerConfig()
	cfg.ConsecutiveFailures = cmp.Or(cfg.ConsecutiveFailures, d.ConsecutiveFailures)
	cfg.MinCalls = cmp.Or(cfg.MinCalls, d.MinCalls)
	cfg.Window = cmp.Or(cfg.Window, d.Window)
	cfg.OpenTimeout = cmp.Or(cfg.OpenTimeout, d.OpenTimeout)
	cfg.HalfOpenProbes = cmp.Or(cfg.HalfOpenProbes, d.HalfOpenProbes)
	cfg.ProbeTimeout = cmp.Or(cfg.ProbeTimeout, d.ProbeTimeout)
	b := &Breaker{cluster: cluster, cfg: cfg}
	st := gobreaker.Settings{
		Name:          cluster,
		MaxRequests:   cfg.HalfOpenProbes,
		Timeout:       cfg.OpenTimeout,
		ReadyToTrip:   b.readyToTrip,
		OnStateChange: b.onStateChange,
		IsSuccessful:  isSuccessful,
		IsExcluded:    isExcluded,
	}
	if cfg.FailureRatio > 0 {
		st.Interval = cfg.Window
		st.BucketPeriod = cfg.Window / ratioBuckets
	}
	b.cb = gobreaker.NewCircuitBreaker[struct{}](st)
	return b, nil
}

// Cluster returns the name of the cluster the breaker guards.
func (b *Breaker) Cluster() string { return b.cluster }

// OpenTimeout returns how long the breaker stays open before it probes
// (BreakerConfig.OpenTimeout, its default filled in).
func (b *Breaker) OpenTimeout() time.Duration { return b.cfg.OpenTimeout }

// State returns the current state, for metrics and health reporting.
func (b *Breaker) State() State { return stateOf(b.cb.State()) }

// Execute calls fn(ctx) if the breaker lets it, and returns fn's error
// unchanged. When the breaker is open, or half-open with all probes in
// flight, it returns at once, without calling fn, an error wrapping both
// [ErrShardUnavailable] and gobreaker.ErrOpenState or
// gobreaker.ErrTooManyRequests. If ctx is already done, Execute returns
// ctx.Err() and neither calls fn nor counts the call.
//
// fn should be one bounded etcd call (or a few): give it its own timeout so
// a hung cluster surfaces as a failure. Do not run waits whose expiry is a
// normal outcome (a waiter's watch) through Execute: their deadline would
// be counted against the cluster.
//
// With a Probe configured, a caller that finds the breaker half-open runs
// the probe first (at most ProbeTimeout) and fn only once the probe has
// closed the breaker; a failed probe is returned as an error wrapping
// ErrShardUnavailable.
func (b *Breaker) Execute(ctx context.Context, fn func(ctx context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.cfg.Probe != nil && b.cb.State() == gobreaker.StateHalfOpen {
		if err := b.probe(ctx); err != nil {
			return err
		}
	}
	err := b.run(ctx, fn)
	if v, ok := err.(*verdict); ok {
		return v.err
	}
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		return fmt.Errorf("%w: cluster %q: %w", ErrShardUnavailable, b.cluster, err)
	}
	return err
}

// probe runs the configured probe as the half-open breaker's request.
func (b *Breaker) probe(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, b.cfg.ProbeTimeout)
	defer cancel()
	err := b.run(pctx, b.cfg.Probe)
	var v *verdict
	switch {
	case err == nil:
		return nil
	case errors.As(err, &v) && v.kind == excluded:
		return v.err // the caller went away; the probe counted for nothing
	case errors.As(err, &v) && errors.Is(v.err, ErrShardUnavailable):
		return v.err // it names the cluster already
	case errors.As(err, &v):
		return fmt.Errorf("%w: cluster %q: its probe failed: %w", ErrShardUnavailable, b.cluster, v.err)
	}
	// Open again, or another caller's probe is in flight.
	return fmt.Errorf("%w: cluster %q: %w", ErrShardUnavailable, b.cluster, err)
}

// run passes fn(ctx) through gobreaker; a failure comes back as a
// *verdict, classified by ctx.
func (b *Breaker) run(ctx context.Context, fn func(context.Context) error) error {
	_, err := b.cb.Execute(func() (struct{}, error) {
		if err := fn(ctx); err != nil {
			return struct{}{}, &verdict{err: err, kind: classify(ctx, err)}
		}
		return struct{}{}, nil
	})
	return err
}

func (b *Breaker) readyToTrip(c gobreaker.Counts) bool {
	if c.ConsecutiveFailures >= b.cfg.ConsecutiveFailures {
		return true
	}
	if b.cfg.FailureRatio <= 0 {
		return false
	}
	done := c.TotalSuccesses + c.TotalFailures // excluded calls do not count
	return done >= b.cfg.MinCalls && float64(c.TotalFailures) >= b.cfg.FailureRatio*float64(done)
}

// onStateChange runs under gobreaker's lock.
func (b *Breaker) onStateChange(_ string, from, to gobreaker.State) {
	if to == gobreaker.StateOpen {
		// gobreaker moves to half-open lazily, on the next call or State().
		// Poke it when the timeout has passed so the hook (and so metrics)
		// see half-open on time. The margin covers gobreaker's strict
		// "expiry before now" test. A stale poke is harmless.
		time.AfterFunc(b.cfg.OpenTimeout+time.Millisecond, func() { b.cb.State() })
	}
	if b.cfg.OnStateChange != nil {
		b.cfg.OnStateChange(b.cluster, stateOf(from), stateOf(to))
	}
}

// outcome is how a failed call counts.
type outcome int

const (
	failure  outcome = iota // the cluster is unhealthy
	excluded                // says nothing about the cluster
	answered                // the cluster answered; the answer was "no"
)

// verdict carries fn's error through gobreaker together with its
// classification: IsSuccessful and IsExcluded see only the error, and the
// classification needs the caller's context too.
type verdict struct {
	err  error
	kind outcome
}

func (v *verdict) Error() string { return v.err.Error() }
func (v *verdict) Unwrap() error { return v.err }

func isSuccessful(err error) bool {
	v, ok := err.(*verdict)
	return err == nil || ok && v.kind == answered
}

func isExcluded(err error) bool {
	v, ok := err.(*verdict)
	return ok && v.kind == excluded
}

// classify decides how fn's non-nil error counts. A caller that cancelled
// is excluded whatever the error; a caller whose deadline expired during the
// call is not: the cluster failed to answer within the budget.
func classify(ctx context.Context, err error) outcome {
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		return excluded
	case IsClusterFailure(err):
		return failure
	case errors.Is(err, context.Canceled), grpcCode(err) == codes.Canceled:
		// fn cancelled its own work, or the client is closing.
		return excluded
	}
	return answered
}

// IsClusterFailure reports whether err says the cluster is unhealthy rather
// than answering: ErrShardUnavailable (a Reach found no connection),
// context.DeadlineExceeded, a gRPC or etcd error with code
// Unavailable or DeadlineExceeded (no leader, leader changed, request timed
// out, connection lost, server stopped …), or etcd's "database space
// exceeded", "too many requests" and "corrupt cluster". Semantic answers
// (key or lease not found, compacted revision, permission denied) and
// cancellation are not failures. The gateway can use it to choose a
// retryable code.
func IsClusterFailure(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrShardUnavailable) {
		return true
	}
	switch grpcCode(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	case codes.ResourceExhausted, codes.DataLoss:
		// Only etcd's own: gRPC also says ResourceExhausted for a
		// message over the client's size limit, which is the caller's fault.
		return isEtcdServerError(err)
	}
	return false
}

// grpcCode returns the gRPC code carried by err (etcd's converted errors
// included), or codes.Unknown.
func grpcCode(err error) codes.Code {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code()
	}
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	return codes.Unknown
}

func isEtcdServerError(err error) bool {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return true
	}
	s, ok := status.FromError(err)
	return ok && strings.Contains(s.Message(), "etcdserver: ")
}
