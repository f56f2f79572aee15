package sdktest_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasegate/leasegate/client"
)

// A session Close that no gateway confirmed freed nothing: the session's
// leases live on in etcd until their TTL. A Release of one of its locks
// after it must still free the name, or report that it could not; a nil
// that leaves the name held breaks Release's promise.
func TestReleaseAfterAnUnconfirmedCloseFreesTheName(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	for _, tc := range []struct {
		name     string
		releases bool // the lock's Release reaches the gateway
	}{
		{"release reaches a gateway", true},
		{"release reaches no gateway", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			methods := []string{"CloseSession"}
			if !tc.releases {
				methods = append(methods, "Release")
			}
			c, tr := refusingClient(t, g, methods...)
			other := newClient(t, []string{g.URL})
			ctx := ctxT(t)
			s, err := c.OpenSession(ctx, client.WithTTL(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			name := "release-after-close/" + strings.ReplaceAll(tc.name, " ", "-")
			l, err := s.Acquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			tr.on.Store(true)
			if err := s.Close(ctx); !errors.Is(err, client.ErrUnavailable) {
				t.Fatalf("Close with no gateway reachable = %v; want ErrUnavailable", err)
			}
			if _, err := other.TryAcquire(ctx, name); !errors.Is(err, client.ErrNotAcquired) {
				t.Fatalf("TryAcquire after an unconfirmed Close = %v; want ErrNotAcquired (still held)", err)
			}
			rerr := l.Release(ctx)
			l2, err := other.TryAcquire(ctx, name)
			if rerr == nil && err != nil {
				t.Fatalf("Release after an unconfirmed Close returned nil, but the name is still held: %v", err)
			}
			if l2 != nil {
				l2.Release(ctx)
			}
			if tc.releases && rerr != nil {
				t.Fatalf("Release that reaches a gateway = %v; want nil", rerr)
			}
			if !tc.releases && !errors.Is(rerr, client.ErrUnavailable) {
				t.Fatalf("Release that reaches no gateway = %v; want ErrUnavailable", rerr)
			}
			tr.on.Store(false)
			if err := s.Close(ctx); err != nil {
				t.Fatalf("Close again = %v; want nil", err)
			}
		})
	}
}

// Resign is Release for an election's term: after a Close no gateway
// confirmed, it ends the term, or reports that it could not.
func TestResignAfterAnUnconfirmedCloseEndsTheTerm(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	c, tr := refusingClient(t, g, "CloseSession")
	other := newClient(t, []string{g.URL})
	ctx := ctxT(t)
	s, err := c.OpenSession(ctx, client.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	const name = "resign-after-close"
	lead, err := s.Election(name).Campaign(ctx, []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	tr.on.Store(true)
	if err := s.Close(ctx); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Close with no gateway reachable = %v; want ErrUnavailable", err)
	}
	if _, err := other.Election(name).Leader(ctx); err != nil {
		t.Fatalf("Leader after an unconfirmed Close = %v; want the term still led", err)
	}
	if err := lead.Resign(ctx); err != nil {
		t.Fatalf("Resign that reaches a gateway = %v; want nil", err)
	}
	if info, err := other.Election(name).Leader(ctx); !errors.Is(err, client.ErrNoLeader) {
		t.Fatalf("Leader after Resign returned nil = %+v, %v; want ErrNoLeader", info, err)
	}
	tr.on.Store(false)
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close again = %v; want nil", err)
	}
}
