package shard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var errSemantic = errors.New("compare failed")

type transition struct{ from, to State }

// newTestBreaker returns a breaker whose state changes are sent on the
// returned channel.
func newTestBreaker(t *testing.T, cfg BreakerConfig) (*Breaker, <-chan transition) {
	t.Helper()
	ch := make(chan transition, 64)
	cfg.OnStateChange = func(cluster string, from, to State) {
		if cluster != "c1" {
			t.Errorf("OnStateChange cluster = %q; want c1", cluster)
		}
		ch <- transition{from, to}
	}
	b, err := NewBreaker("c1", cfg)
	if err != nil {
		t.Fatalf("NewBreaker(c1, %+v) = %v", cfg, err)
	}
	return b, ch
}

func awaitState(t *testing.T, ch <-chan transition, want State) {
	t.Helper()
	select {
	case tr := <-ch:
		if tr.to != want {
			t.Fatalf("state change %v→%v; want →%v", tr.from, tr.to, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no state change to %v within 10s", want)
	}
}

func fail(err error) func(context.Context) error {
	return func(context.Context) error { return err }
}

func TestIsClusterFailure(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{fmt.Errorf("%w: cluster \"c1\": no connection to etcd", ErrShardUnavailable), true},
		{context.DeadlineExceeded, true},
		{fmt.Errorf("get: %w", context.DeadlineExceeded), true},
		{rpctypes.ErrNoLeader, true},
		{rpctypes.ErrGRPCNoLeader, true},
		{fmt.Errorf("txn: %w", rpctypes.ErrLeaderChanged), true},
		{rpctypes.ErrTimeout, true},
		{rpctypes.ErrTimeoutDueToConnectionLost, true},
		{rpctypes.ErrStopped, true},
		{rpctypes.ErrGRPCDeadlineExceeded, true},
		{status.Error(codes.Unavailable, "connection refused"), true},
		{status.Error(codes.DeadlineExceeded, "slow"), true},
		{rpctypes.ErrNoSpace, true},
		{rpctypes.ErrTooManyRequests, true},
		{rpctypes.ErrCorrupt, true},
		{status.Error(codes.ResourceExhausted, "grpc: received message larger than max"), false},
		{context.Canceled, false},
		{status.Error(codes.Canceled, "grpc: the client connection is closing"), false},
		{rpctypes.ErrKeyNotFound, false},
		{rpctypes.ErrLeaseNotFound, false},
		{rpctypes.ErrGRPCLeaseNotFound, false},
		{rpctypes.ErrCompacted, false},
		{rpctypes.ErrPermissionDenied, false},
		{errSemantic, false},
	}
	for _, tt := range tests {
		if got := IsClusterFailure(tt.err); got != tt.want {
			t.Errorf("IsClusterFailure(%v) = %v; want %v", tt.err, got, tt.want)
		}
	}
}

func TestBreakerConfigValidate(t *testing.T) {
	tests := []struct {
		cfg  BreakerConfig
		want string // "" for valid, else a substring of the error
	}{
		{BreakerConfig{}, ""},
		{DefaultBreakerConfig(), ""},
		{BreakerConfig{FailureRatio: 0.5, Window: time.Second}, ""},
		{BreakerConfig{FailureRatio: -0.1}, "FailureRatio -0.1"},
		{BreakerConfig{FailureRatio: 1.5}, "FailureRatio 1.5"},
		{BreakerConfig{FailureRatio: math.NaN()}, "FailureRatio NaN"},
		{BreakerConfig{Window: time.Millisecond}, "Window 1ms"},
		{BreakerConfig{Window: -time.Second}, "Window -1s"},
		{BreakerConfig{OpenTimeout: -time.Second}, "OpenTimeout -1s"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if (err == nil) != (tt.want == "") || err != nil && !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate(%+v) = %v; want %q", tt.cfg, err, tt.want)
		}
	}
}

func TestBreakerTripsOnConsecutiveFailures(t *testing.T) {
	b, states := newTestBreaker(t, BreakerConfig{OpenTimeout: time.Hour})
	ctx := context.Background()
	for range 4 {
		if err := b.Execute(ctx, fail(context.DeadlineExceeded)); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Execute(failing fn) = %v; want fn's error", err)
		}
	}
	// A success resets the run; so do semantic answers.
	if err := b.Execute(ctx, fail(nil)); err != nil {
		t.Fatalf("Execute(ok fn) = %v; want nil", err)
	}
	for range 4 {
		b.Execute(ctx, fail(rpctypes.ErrNoLeader))
	}
	b.Execute(ctx, fail(rpctypes.ErrKeyNotFound))
	for range 4 {
		b.Execute(ctx, fail(rpctypes.ErrNoLeader))
	}
	if s := b.State(); s != StateClosed {
		t.Fatalf("State() after runs of 4 failures = %v; want closed", s)
	}
	b.Execute(ctx, fail(rpctypes.ErrNoLeader))
	awaitState(t, states, StateOpen)

	called := false
	err := b.Execute(ctx, func(context.Context) error { called = true; return nil })
	if called || !errors.Is(err, ErrShardUnavailable) || !errors.Is(err, gobreaker.ErrOpenState) || !strings.Contains(err.Error(), `"c1"`) {
		t.Fatalf("Execute on open breaker = %v (fn called: %v); want ErrShardUnavailable wrapping ErrOpenState naming c1, fn not called", err, called)
	}
}

func TestBreakerIgnoresAnswersAndCancellation(t *testing.T) {
	b, _ := newTestBreaker(t, BreakerConfig{ConsecutiveFailures: 2, OpenTimeout: time.Hour})
	for _, err := range []error{rpctypes.ErrKeyNotFound, rpctypes.ErrLeaseNotFound, rpctypes.ErrCompacted, errSemantic, context.Canceled} {
		for range 10 {
			if got := b.Execute(context.Background(), fail(err)); got != err {
				t.Fatalf("Execute(fn returning %v) = %v; want it unchanged", err, got)
			}
		}
	}
	// The caller cancels mid-call: even a timeout-looking error is excluded.
	for range 10 {
		ctx, cancel := context.WithCancel(context.Background())
		b.Execute(ctx, func(ctx context.Context) error {
			cancel()
			return status.Error(codes.Unavailable, "transport closing")
		})
	}
	if s := b.State(); s != StateClosed {
		t.Fatalf("State() after answers and cancellations = %v; want closed", s)
	}
	// A done context is not even tried.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	if err := b.Execute(ctx, func(context.Context) error { called = true; return nil }); err != context.Canceled || called {
		t.Fatalf("Execute(cancelled ctx) = %v, fn called %v; want context.Canceled, not called", err, called)
	}
	// The caller's deadline expiring during a call counts against the cluster.
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		b.Execute(ctx, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
		cancel()
	}
	if s := b.State(); s != StateOpen {
		t.Fatalf("State() after 2 deadline failures = %v; want open", s)
	}
}

func TestBreakerHalfOpen(t *testing.T) {
	b, states := newTestBreaker(t, BreakerConfig{ConsecutiveFailures: 1, OpenTimeout: 20 * time.Millisecond})
	ctx := context.Background()

	b.Execute(ctx, fail(context.DeadlineExceeded))
	awaitState(t, states, StateOpen)
	awaitState(t, states, StateHalfOpen) // reported without any call

	// One probe at a time: a second call while it is in flight fails fast.
	inProbe, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		done <- b.Execute(ctx, func(context.Context) error { close(inProbe); <-release; return context.DeadlineExceeded })
	}()
	<-inProbe
	if err := b.Execute(ctx, fail(nil)); !errors.Is(err, ErrShardUnavailable) || !errors.Is(err, gobreaker.ErrTooManyRequests) {
		t.Fatalf("Execute during probe = %v; want ErrShardUnavailable wrapping ErrTooManyRequests", err)
	}
	close(release)
	<-done
	awaitState(t, states, StateOpen) // failed probe re-opens
	awaitState(t, states, StateHalfOpen)

	if err := b.Execute(ctx, fail(rpctypes.ErrLeaseNotFound)); err != rpctypes.ErrLeaseNotFound {
		t.Fatalf("probe = %v; want ErrLeaseNotFound", err)
	}
	awaitState(t, states, StateClosed) // an answer proves the cluster is back
	if s := b.State(); s != StateClosed {
		t.Fatalf("State() = %v; want closed", s)
	}
}

func TestBreakerFailureRatio(t *testing.T) {
	b, states := newTestBreaker(t, BreakerConfig{
		ConsecutiveFailures: 1000,
		FailureRatio:        0.5,
		MinCalls:            10,
		Window:              time.Hour,
		OpenTimeout:         time.Hour,
	})
	ctx := context.Background()
	// 1 failure in 3 stays below the ratio however many calls there are.
	for i := range 30 {
		if i%3 == 0 {
			b.Execute(ctx, fail(context.DeadlineExceeded))
		} else {
			b.Execute(ctx, fail(nil))
		}
	}
	if s := b.State(); s != StateClosed {
		t.Fatalf("State() at 1/3 failures = %v; want closed", s)
	}
	// Alternating failures push the ratio towards 1/2; the breaker opens when
	// failures reach half of the completed calls.
	for i := 0; b.State() == StateClosed; i++ {
		if i > 40 {
			t.Fatal("breaker did not open at failure ratio 0.5")
		}
		b.Execute(ctx, fail(context.DeadlineExceeded))
		b.Execute(ctx, fail(nil))
		b.Execute(ctx, fail(context.DeadlineExceeded))
	}
	awaitState(t, states, StateOpen)
}

func TestBreakerPanicCountsAndRepanics(t *testing.T) {
	b, states := newTestBreaker(t, BreakerConfig{ConsecutiveFailures: 1, OpenTimeout: time.Hour})
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("Execute swallowed fn's panic")
			}
		}()
		b.Execute(context.Background(), func(context.Context) error { panic("boom") })
	}()
	awaitState(t, states, StateOpen)
}

func TestNewBreakerRejects(t *testing.T) {
	if _, err := NewBreaker("", BreakerConfig{}); err == nil {
		t.Errorf("NewBreaker(\"\") = nil error; want error")
	}
	if _, err := NewBreaker("c", BreakerConfig{FailureRatio: 2}); err == nil || !strings.Contains(err.Error(), "FailureRatio 2") {
		t.Errorf("NewBreaker(c, ratio 2) = %v; want FailureRatio error", err)
	}
}

// With a Probe, a caller that finds the breaker half-open pays for the
// probe, never for its own call on a dead cluster: a probe that hangs
// costs it ProbeTimeout and fails it with ErrShardUnavailable naming the
// cluster, without running its call; a probe that answers closes the
// breaker and the call runs.
func TestBreakerProbeCostsAtMostProbeTimeout(t *testing.T) {
	var healthy atomic.Bool
	probe := func(ctx context.Context) error {
		if healthy.Load() {
			return nil
		}
		<-ctx.Done() // a cluster that never answers
		return ctx.Err()
	}
	const probeTimeout = 200 * time.Millisecond
	b, states := newTestBreaker(t, BreakerConfig{ConsecutiveFailures: 1, OpenTimeout: 50 * time.Millisecond, Probe: probe, ProbeTimeout: probeTimeout})
	_ = b.Execute(context.Background(), fail(context.DeadlineExceeded))
	awaitState(t, states, StateOpen)
	for range 3 {
		awaitState(t, states, StateHalfOpen)
		start := time.Now()
		called := false
		// The caller's own context would let a call hang for a minute.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := b.Execute(ctx, func(context.Context) error { called = true; return nil })
		cancel()
		if d := time.Since(start); d > probeTimeout+time.Second {
			t.Fatalf("a failed probe cost its caller %s; want about ProbeTimeout (%s)", d, probeTimeout)
		}
		if called || !errors.Is(err, ErrShardUnavailable) || !strings.Contains(err.Error(), `"c1"`) {
			t.Fatalf("Execute on a half-open breaker whose probe hangs = %v (call run: %v); want ErrShardUnavailable naming c1 and the call not run", err, called)
		}
		awaitState(t, states, StateOpen)
	}
	healthy.Store(true)
	awaitState(t, states, StateHalfOpen)
	called := false
	if err := b.Execute(context.Background(), func(context.Context) error { called = true; return nil }); err != nil || !called {
		t.Fatalf("Execute once the probe answers = %v (call run: %v); want the call run", err, called)
	}
	awaitState(t, states, StateClosed)
}
