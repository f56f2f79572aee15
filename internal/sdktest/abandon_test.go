package sdktest_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/leasegate/leasegate/client"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// lostAnswers is a transport that, once armed for a path, lets the gateway
// answer the next call to it in full and then loses the answer: the body is
// read to its end and thrown away, the caller's context is ended, and the
// call fails as a broken connection would. The gateway has done its work
// and believes it answered; the caller never hears what.
type lostAnswers struct {
	base http.RoundTripper

	mu     sync.Mutex
	path   string // a suffix of the path to lose the answer of
	cancel context.CancelFunc

	// hold, when set, delays calls to holdPath until it is closed.
	hold     chan struct{}
	holdPath string
	// onLost, when set, is handed each lost answer's body.
	onLost func(body []byte)
}

func (l *lostAnswers) arm(path string, cancel context.CancelFunc) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.path, l.cancel = path, cancel
}

func (l *lostAnswers) RoundTrip(r *http.Request) (*http.Response, error) {
	l.mu.Lock()
	hold := l.hold
	if hold != nil && strings.HasSuffix(r.URL.Path, l.holdPath) {
		l.mu.Unlock()
		select {
		case <-hold:
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
		l.mu.Lock()
	}
	var cancel context.CancelFunc
	if l.path != "" && strings.HasSuffix(r.URL.Path, l.path) {
		cancel, l.path, l.cancel = l.cancel, "", nil
	}
	onLost := l.onLost
	l.mu.Unlock()
	resp, err := l.base.RoundTrip(r)
	if err != nil || cancel == nil {
		return resp, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if onLost != nil {
		onLost(body)
	}
	cancel()
	return nil, errors.New("the connection broke after the gateway answered")
}

// lossyClient returns a client whose answers tr can lose.
func lossyClient(t *testing.T, url string) (*client.Client, *lostAnswers) {
	base := h2cTransport()
	t.Cleanup(base.CloseIdleConnections)
	tr := &lostAnswers{base: base}
	return newClient(t, []string{url}, client.WithClientID("lossy"), client.WithHTTPClient(&http.Client{Transport: tr})), tr
}

// abandon runs call on a context that ends as the gateway's answer to path
// is lost, and checks that the call reports its context's end.
func abandon(t *testing.T, tr *lostAnswers, path string, call func(context.Context) error) {
	t.Helper()
	actx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	tr.arm(path, cancel)
	if err := call(actx); !errors.Is(err, context.Canceled) {
		t.Fatalf("a call whose answer was lost as its context ended = %v; want context.Canceled", err)
	}
}

// awaitFree checks that another client is granted name within a wait
// timeout: the name is free, or is freed, with nobody left serving it.
func awaitFree(t *testing.T, url, name string) {
	t.Helper()
	other := newClient(t, []string{url}, client.WithClientID("other"))
	l, err := other.Acquire(ctxT(t), name, client.WithWaitTimeout(15*time.Second))
	if err != nil {
		t.Fatalf("another client's acquire of %q = %v; want a grant: a grant whose answer was lost still holds the name", name, err)
	}
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

func openSession(t *testing.T, c *client.Client) *client.Session {
	t.Helper()
	s, err := c.OpenSession(ctxT(t), client.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// TestSessionGrantWhoseAnswerWasLostIsGivenUp: a session's grant rides on
// the session's lease, so a grant the caller never heard of would hold the
// name as long as the session lives. Whatever the call was — a wait, a try,
// a re-entrant hold, a campaign — the SDK gives it up.
func TestSessionGrantWhoseAnswerWasLostIsGivenUp(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	t.Run("acquire", func(t *testing.T) {
		t.Parallel()
		c, tr := lossyClient(t, g.URL)
		s := openSession(t, c)
		abandon(t, tr, "/Acquire", func(ctx context.Context) error {
			_, err := s.Acquire(ctx, "lost/acquire")
			return err
		})
		awaitFree(t, g.URL, "lost/acquire")
	})
	t.Run("try", func(t *testing.T) {
		t.Parallel()
		c, tr := lossyClient(t, g.URL)
		s := openSession(t, c)
		abandon(t, tr, "/TryAcquire", func(ctx context.Context) error {
			_, err := s.TryAcquire(ctx, "lost/try")
			return err
		})
		awaitFree(t, g.URL, "lost/try")
	})
	t.Run("reentrant hold", func(t *testing.T) {
		t.Parallel()
		c, tr := lossyClient(t, g.URL)
		s := openSession(t, c)
		outer, err := s.Acquire(ctxT(t), "lost/hold", client.WithReentrant())
		if err != nil {
			t.Fatal(err)
		}
		abandon(t, tr, "/Acquire", func(ctx context.Context) error {
			_, err := s.Acquire(ctx, "lost/hold", client.WithReentrant())
			return err
		})
		if err := outer.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		awaitFree(t, g.URL, "lost/hold")
	})
	t.Run("campaign", func(t *testing.T) {
		t.Parallel()
		c, tr := lossyClient(t, g.URL)
		s := openSession(t, c)
		abandon(t, tr, "/Campaign", func(ctx context.Context) error {
			_, err := s.Election("lost").Campaign(ctx, []byte("unheard"))
			return err
		})
		other := newClient(t, []string{g.URL}, client.WithClientID("other"))
		l, err := other.Election("lost").Campaign(ctxT(t), []byte("next"), client.WithWaitTimeout(15*time.Second))
		if err != nil {
			t.Fatalf("another campaign = %v; want elected: a leadership whose answer was lost still leads", err)
		}
		if err := l.Resign(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	})
}

// TestLostAnswerOfAHeldHoldsRetryKeepsTheHold: an acquire retried with the
// request id of a hold the caller holds is that hold again; losing the
// retry's answer must not give up the hold the caller still has.
func TestLostAnswerOfAHeldHoldsRetryKeepsTheHold(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	c, tr := lossyClient(t, g.URL)
	s := openSession(t, c)
	ctx := ctxT(t)
	outer, err := s.Acquire(ctx, "kept", client.WithReentrant())
	if err != nil {
		t.Fatal(err)
	}
	inner, err := s.Acquire(ctx, "kept", client.WithReentrant(), client.WithRequestID("inner-hold"))
	if err != nil {
		t.Fatal(err)
	}
	abandon(t, tr, "/Acquire", func(ctx context.Context) error {
		_, err := s.Acquire(ctx, "kept", client.WithReentrant(), client.WithRequestID("inner-hold"))
		return err
	})
	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Asked again (after any give-up of the id), the hold is still the
	// inner one of the same lock, not a new lock.
	again, err := s.Acquire(ctx, "kept", client.WithReentrant(), client.WithRequestID("inner-hold"))
	if err != nil {
		t.Fatal(err)
	}
	if again.Token() != inner.Token() {
		t.Fatalf("the inner hold's request id was granted token %d; want the held lock's %d: the hold was given up while held", again.Token(), inner.Token())
	}
	if err := inner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	awaitFree(t, g.URL, "kept")
}

// TestRetryOfAnAbandonedRequestIDTakesItsGrant: a call with the request id
// of an abandoned call is a retry: it takes the give-up over — cutting
// short an ask in flight — and is handed the grant the lost answer
// carried, which the give-up then never releases.
func TestRetryOfAnAbandonedRequestIDTakesItsGrant(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	c, tr := lossyClient(t, g.URL)
	s := openSession(t, c)
	ctx := ctxT(t)
	// The give-up's ask (a TryAcquire under the id) stays in flight until
	// it is cut short.
	never := make(chan struct{})
	tr.mu.Lock()
	tr.hold, tr.holdPath = never, "/TryAcquire"
	tr.mu.Unlock()
	var lost int64
	tr.mu.Lock()
	tr.onLost = func(body []byte) { lost = grantedToken(t, body) }
	tr.mu.Unlock()
	abandon(t, tr, "/Acquire", func(ctx context.Context) error {
		_, err := s.Acquire(ctx, "retried", client.WithRequestID("same-id"))
		return err
	})
	if lost == 0 {
		t.Fatal("the lost answer carried no grant")
	}
	l, err := s.Acquire(ctx, "retried", client.WithRequestID("same-id"), client.WithWaitTimeout(15*time.Second))
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if l.Token() != lost {
		t.Fatalf("the retry was granted token %d; want %d, the grant whose answer was lost", l.Token(), lost)
	}
	other := newClient(t, []string{g.URL}, client.WithClientID("other"))
	if _, err := other.TryAcquire(ctx, "retried"); !errors.Is(err, client.ErrNotAcquired) {
		t.Fatalf("another client's TryAcquire while the retry holds = %v; want ErrNotAcquired", err)
	}
	if d, err := other.Describe(ctx, "retried"); err != nil || !d.Held || d.Token != l.Token() {
		t.Fatalf("Describe = %+v, %v; want held with token %d", d, err, l.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// grantedToken is the fencing token of the grant in an Acquire stream's
// body (Connect's envelopes of binary messages), 0 if there is none.
func grantedToken(t *testing.T, body []byte) int64 {
	for len(body) >= 5 {
		flags, n := body[0], binary.BigEndian.Uint32(body[1:5])
		if uint32(len(body)-5) < n {
			break
		}
		msg := body[5 : 5+n]
		body = body[5+n:]
		if flags&0x02 != 0 {
			continue // the end of the stream
		}
		var m v1.AcquireResponse
		if err := proto.Unmarshal(msg, &m); err != nil {
			t.Errorf("an Acquire message that does not decode: %v", err)
			return 0
		}
		if g := m.GetGranted(); g != nil {
			return g.FencingToken
		}
	}
	return 0
}
