package sdktest_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leasegate/leasegate/client"
)

// A Release that no gateway answered returns an error, and calling it again
// retries: the second call frees the name. A session lock never lapses on
// its own while its session lives, so a retried Release that only reported
// success would leave the name held for the session's life.
func TestReleaseAgainAfterAnUnansweredReleaseFreesTheName(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	c, tr := refusingClient(t, g, "Release")
	other := newClient(t, []string{g.URL})
	ctx := ctxT(t)
	s, err := c.OpenSession(ctx, client.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	for _, tc := range []struct {
		name    string
		acquire func() (*client.Lock, error)
	}{
		{"session", func() (*client.Lock, error) { return s.Acquire(ctx, "release-again/session") }},
		{"own lease", func() (*client.Lock, error) {
			return c.Acquire(ctx, "release-again/own", client.WithTTL(30*time.Second))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := tc.acquire()
			if err != nil {
				t.Fatal(err)
			}
			tr.on.Store(true)
			if err := l.Release(ctx); !errors.Is(err, client.ErrUnavailable) {
				t.Fatalf("Release with no gateway reachable = %v; want ErrUnavailable", err)
			}
			if _, err := other.TryAcquire(ctx, l.Name()); !errors.Is(err, client.ErrNotAcquired) {
				t.Fatalf("TryAcquire after an unanswered Release = %v; want ErrNotAcquired (still held)", err)
			}
			tr.on.Store(false)
			if err := l.Release(ctx); err != nil {
				t.Fatalf("Release again = %v; want nil", err)
			}
			l2, err := other.TryAcquire(ctx, l.Name())
			if err != nil {
				t.Fatalf("the name is still held after Release again returned nil: %v", err)
			}
			l2.Release(ctx)
		})
	}
}
