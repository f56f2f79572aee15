package sdktest_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasegate/leasegate/client"
)

// watchOpened reports each WatchHold whose response headers arrived: the
// gateway sends them once the watch is open.
type watchOpened struct {
	base http.RoundTripper
	open chan struct{}
}

func (w *watchOpened) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := w.base.RoundTrip(req)
	if err == nil && strings.HasSuffix(req.URL.Path, "/WatchHold") {
		w.open <- struct{}{}
	}
	return resp, err
}

// Releasing the holds of a re-entered lock in any order, each while every
// other hold's watch is open, frees the name once every Release returned
// nil: no hold's end is taken for another's.
func TestReleaseOfEveryReentrantHoldFreesTheName(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	for _, order := range [][]int{{0, 1, 2}, {1, 0, 2}, {2, 1, 0}, {0, 2, 1}} {
		t.Run(fmt.Sprint(order), func(t *testing.T) {
			tr := &watchOpened{base: h2cTransport(), open: make(chan struct{}, 16)}
			c := newClient(t, []string{g.URL}, client.WithHTTPClient(&http.Client{Transport: tr}), client.WithHoldWatch(time.Millisecond))
			other := newClient(t, []string{g.URL})
			ctx := ctxT(t)
			s, err := c.OpenSession(ctx, client.WithTTL(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.WithoutCancel(ctx))
			name := fmt.Sprint("reentrant-release/", order)
			var holds []*client.Lock
			for range 3 {
				l, err := s.Acquire(ctx, name, client.WithReentrant())
				if err != nil {
					t.Fatal(err)
				}
				holds = append(holds, l)
			}
			for range 3 {
				await(t, tr.open, "a hold watch opened")
			}
			for _, i := range order {
				if err := holds[i].Err(); err != nil {
					t.Fatalf("hold %d ended before its Release: %v", i, err)
				}
				if err := holds[i].Release(ctx); err != nil {
					t.Fatalf("Release of hold %d = %v", i, err)
				}
				if _, err := c.Describe(ctx, name); err != nil {
					t.Fatal(err)
				}
			}
			l2, err := other.TryAcquire(ctx, name)
			if err != nil {
				t.Fatalf("every hold's Release returned nil, but the name is still held: %v", err)
			}
			l2.Release(ctx)
		})
	}
}
