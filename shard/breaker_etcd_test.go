package shard

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/internal/etcdtest"
)

// The breaker against a real cluster: etcd's semantic answers keep it
// closed, a stopped cluster opens it, and a probe after restart closes it.
func TestBreakerOverEtcd(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t)
	cli := c.Client()
	b, states := newTestBreaker(t, BreakerConfig{ConsecutiveFailures: 3, OpenTimeout: 100 * time.Millisecond})
	ctx := testCtx(t)
	get := func(timeout time.Duration) func(context.Context) error {
		return func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			_, err := cli.Get(ctx, "k")
			return err
		}
	}

	if err := b.Execute(ctx, get(5*time.Second)); err != nil {
		t.Fatalf("Execute(Get) = %v", err)
	}
	for range 5 {
		err := b.Execute(ctx, func(ctx context.Context) error {
			_, err := cli.Revoke(ctx, clientv3.LeaseID(12345))
			return err
		})
		if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			t.Fatalf("Execute(Revoke unknown lease) = %v; want ErrLeaseNotFound", err)
		}
	}
	if s := b.State(); s != StateClosed {
		t.Fatalf("State() after lease-not-found answers = %v; want closed", s)
	}

	c.Stop()
	for i := range 3 {
		if err := b.Execute(ctx, get(200*time.Millisecond)); !IsClusterFailure(err) {
			t.Fatalf("Execute(Get) #%d on stopped cluster = %v; want a cluster failure", i, err)
		}
	}
	awaitState(t, states, StateOpen)
	start := time.Now()
	if err := b.Execute(ctx, get(time.Second)); !errors.Is(err, ErrShardUnavailable) || time.Since(start) > 50*time.Millisecond {
		t.Fatalf("Execute on open breaker = %v after %v; want ErrShardUnavailable at once", err, time.Since(start))
	}

	c.Restart()
	for b.State() != StateClosed {
		awaitState(t, states, StateHalfOpen)
		if err := b.Execute(ctx, get(5*time.Second)); err == nil {
			awaitState(t, states, StateClosed)
		} else {
			t.Logf("probe after restart: %v", err) // the client may still be reconnecting
			awaitState(t, states, StateOpen)
		}
	}
}
