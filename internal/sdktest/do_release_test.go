package sdktest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasegate/leasegate/client"
)

// A Session.Do whose Release no gateway answered hands its caller no Lock
// to retry with, and a session lock does not lapse while its session lives:
// unless the SDK frees it once a gateway answers again, the key holds the
// name for the session's life with nobody holding a Lock for it.
func TestSessionDoWhoseReleaseFailedLeavesNoKeyHoldingTheName(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	for _, tc := range []struct {
		name string
		fn   error // what fn returns
	}{
		{"fn fails", errors.New("boom")},
		{"fn succeeds", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, tr := refusingClient(t, g, "Release")
			other := newClient(t, []string{g.URL})
			ctx := ctxT(t)
			s, err := c.OpenSession(ctx, client.WithTTL(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.WithoutCancel(ctx))
			name := "do-release-failed/" + tc.name
			derr := s.Do(ctx, name, func(context.Context) error {
				tr.on.Store(true)
				return tc.fn
			})
			if tc.fn != nil && derr != tc.fn {
				t.Fatalf("Do = %v; want fn's error", derr)
			}
			if tc.fn == nil && !errors.Is(derr, client.ErrUnavailable) {
				t.Fatalf("Do = %v; want the Release's ErrUnavailable", derr)
			}
			tr.on.Store(false)
			// The session lives (its TTL is 30 s and it is kept alive), so
			// only a release can free the name within this bound.
			bound := time.Now().Add(10 * time.Second)
			for {
				l, err := other.TryAcquire(ctx, name)
				if err == nil {
					l.Release(ctx)
					break
				}
				if !errors.Is(err, client.ErrNotAcquired) {
					t.Fatal(err)
				}
				if time.Now().After(bound) {
					t.Fatalf("Do returned %v and its caller holds no Lock, but the name is still held: %v", derr, err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}
