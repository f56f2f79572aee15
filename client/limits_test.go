package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
)

// scriptedGateway answers Release with its script's errors in turn (nil:
// released), then with success; every other call is unimplemented. It
// stands in for a gateway where the subject is the SDK's handling of an
// answer, not etcd's behaviour (internal/sdktest covers real gateways).
type scriptedGateway struct {
	leasegatev1connect.UnimplementedLockServiceHandler
	mu     sync.Mutex
	script []error
	calls  int
}

func (g *scriptedGateway) Release(context.Context, *connect.Request[v1.ReleaseRequest]) (*connect.Response[v1.ReleaseResponse], error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls++
	if len(g.script) > 0 {
		err := g.script[0]
		g.script = g.script[1:]
		if err != nil {
			return nil, err
		}
	}
	return connect.NewResponse(&v1.ReleaseResponse{Released: true}), nil
}

func (g *scriptedGateway) called() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls
}

// serve runs g over HTTP/1.1 (the Connect protocol needs no more for unary
// calls) until the test ends.
func serve(t *testing.T, g *scriptedGateway) string {
	_, h := leasegatev1connect.NewLockServiceHandler(g)
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.URL
}

// scriptedClient is a client of the endpoints on a fake clock that reports
// every timer the SDK makes.
func scriptedClient(t *testing.T, endpoints ...string) (*Client, *fakeClock) {
	clk := newFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	clk.made = make(chan time.Duration, 1024)
	tr := &http.Transport{}
	c, err := New(endpoints, WithClock(clk), WithHTTPClient(&http.Client{Transport: tr}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		tr.CloseIdleConnections()
	})
	return c, clk
}

func limitErr(reason v1.ErrorReason, limit string, retry time.Duration, withRetry bool) error {
	ce := connect.NewError(connect.CodeResourceExhausted, errors.New("limit reached"))
	if reason != v1.ErrorReason_ERROR_REASON_UNSPECIFIED {
		d, _ := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: reason.String(), Domain: v1.ErrorDomain, Metadata: map[string]string{v1.MetadataLimit: limit}})
		ce.AddDetail(d)
	}
	if withRetry {
		d, _ := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)})
		ce.AddDetail(d)
	}
	return ce
}

func rateErr(retry time.Duration) error {
	return limitErr(v1.ErrorReason_RATE_LIMITED, "tenant_renew_rate", retry, true)
}

// awaitTimer waits for the SDK to make a timer of d, skipping others.
func awaitTimer(t *testing.T, clk *fakeClock, d time.Duration) {
	t.Helper()
	for {
		select {
		case got := <-clk.made:
			if got == d {
				return
			}
		case <-time.After(20 * time.Second): // turns a hang into a failure
			t.Fatalf("the SDK made no timer of %s", d)
		}
	}
}

type releaseResult struct {
	released bool
	err      error
}

func releaseAsync(ctx context.Context, c *Client) <-chan releaseResult {
	done := make(chan releaseResult, 1)
	go func() {
		ok, err := c.ReleaseByID(ctx, "id", 1)
		done <- releaseResult{ok, err}
	}()
	return done
}

func TestRateLimitWaitsRetryInfoOnTheSameGateway(t *testing.T) {
	limited := &scriptedGateway{script: []error{rateErr(3 * time.Second)}}
	other := &scriptedGateway{}
	c, clk := scriptedClient(t, serve(t, limited), serve(t, other))
	done := releaseAsync(context.Background(), c)
	// Until the retry, the only pause the SDK may take is the gateway's:
	// no shorter timer (a backoff it would retry from early) is made.
	for waiting := true; waiting; {
		select {
		case d := <-clk.made:
			if d > 0 && d < 3*time.Second {
				t.Fatalf("the SDK made a %s timer before the gateway's 3s delay", d)
			}
			waiting = d != 3*time.Second
		case <-time.After(20 * time.Second): // turns a hang into a failure
			t.Fatal("the SDK made no timer of the gateway's 3s delay")
		}
	}
	select {
	case r := <-done:
		t.Fatalf("ReleaseByID = %v, %v before the gateway's delay passed", r.released, r.err)
	default:
	}
	clk.Advance(3*time.Second - time.Nanosecond)
	select {
	case r := <-done:
		t.Fatalf("ReleaseByID = %v, %v a nanosecond before the delay passed", r.released, r.err)
	default:
	}
	clk.Advance(time.Nanosecond)
	r := <-done
	if r.err != nil || !r.released {
		t.Fatalf("ReleaseByID after the delay = %v, %v; want released", r.released, r.err)
	}
	if limited.called() != 2 || other.called() != 0 {
		t.Errorf("calls: %d to the rate-limited gateway, %d to the other; want 2 and 0", limited.called(), other.called())
	}
}

func TestRateLimitPastTheContextsDeadlineReturnsAtOnce(t *testing.T) {
	limited := &scriptedGateway{script: []error{rateErr(time.Minute)}}
	c, _ := scriptedClient(t, serve(t, limited))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := c.ReleaseByID(ctx, "id", 1)
	var rl *RateLimitError
	if !errors.Is(err, ErrRateLimited) || !errors.As(err, &rl) || rl.RetryAfter != time.Minute || rl.Limit != "tenant_renew_rate" {
		t.Fatalf("ReleaseByID = %v; want a *RateLimitError of 1m on tenant_renew_rate", err)
	}
	if limited.called() != 1 || ctx.Err() != nil {
		t.Errorf("%d calls, context %v; want 1 call and no wait", limited.called(), ctx.Err())
	}
}

func TestRateLimitSpendsTheCallsAttempts(t *testing.T) {
	limited := &scriptedGateway{script: []error{rateErr(time.Second), rateErr(time.Second), rateErr(2 * time.Second)}}
	c, clk := scriptedClient(t, serve(t, limited))
	done := releaseAsync(context.Background(), c)
	for range 2 {
		awaitTimer(t, clk, time.Second)
		clk.Advance(time.Second)
	}
	r := <-done
	var rl *RateLimitError
	if !errors.As(r.err, &rl) || rl.RetryAfter != 2*time.Second || errors.Is(r.err, ErrUnavailable) {
		t.Fatalf("ReleaseByID after 3 refusals = %v; want the last *RateLimitError (2s), not ErrUnavailable", r.err)
	}
	if limited.called() != 3 {
		t.Errorf("%d calls; want 3 (the attempts of a call)", limited.called())
	}
}

// Answers that are not outages are returned at once: no other gateway is
// asked.
func TestRefusalsAndServerFailuresAreNotRetried(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer error
		want   error
		not    error
	}{
		{"quota", limitErr(v1.ErrorReason_QUOTA_EXCEEDED, "tenant_keys", time.Second, true), ErrQuotaExceeded, ErrRateLimited},
		{"exhausted without reason or hint", limitErr(v1.ErrorReason_ERROR_REASON_UNSPECIFIED, "", 0, false), ErrQuotaExceeded, ErrUnavailable},
		{"internal", connect.NewError(connect.CodeInternal, errors.New("bug")), ErrInternal, ErrUnavailable},
		{"unknown", connect.NewError(connect.CodeUnknown, errors.New("bug")), ErrInternal, ErrUnavailable},
		{"data loss", connect.NewError(connect.CodeDataLoss, errors.New("bug")), ErrInternal, ErrUnavailable},
		{"unimplemented", connect.NewError(connect.CodeUnimplemented, errors.New("not served")), ErrInternal, ErrUnavailable},
		{"permission denied", connect.NewError(connect.CodePermissionDenied, errors.New("policy")), ErrPermissionDenied, ErrNotOwner},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := &scriptedGateway{script: []error{tc.answer}}
			other := &scriptedGateway{}
			c, _ := scriptedClient(t, serve(t, first), serve(t, other))
			_, err := c.ReleaseByID(context.Background(), "id", 1)
			if !errors.Is(err, tc.want) || errors.Is(err, tc.not) {
				t.Fatalf("ReleaseByID answered %v = %v; want %v, not %v", tc.answer, err, tc.want, tc.not)
			}
			if first.called() != 1 || other.called() != 0 {
				t.Errorf("calls: %d to the first gateway, %d to the other; want 1 and 0", first.called(), other.called())
			}
		})
	}
}

// A resource_exhausted answer without a leasegate reason (a proxy's) is a
// rate limit when it carries a RetryInfo.
func TestRateLimitWithoutReason(t *testing.T) {
	var ce *connect.Error
	errors.As(limitErr(v1.ErrorReason_ERROR_REASON_UNSPECIFIED, "", 2*time.Second, true), &ce)
	rl, ok := limitOf(ce).(*RateLimitError)
	if !ok || rl.RetryAfter != 2*time.Second || rl.Limit != "" {
		t.Fatalf("limitOf(resource_exhausted with a 2s RetryInfo) = %#v; want a *RateLimitError of 2s", limitOf(ce))
	}
}

// A connection that breaks mid-call reads as unknown or internal on this
// side too; connect made that error up, so it is an outage, retried.
func TestClientSideFailureIsRetryable(t *testing.T) {
	local := connect.NewError(connect.CodeInternal, errors.New("read: unexpected EOF"))
	if !retryable(local) || kindOf(local) != ErrUnavailable {
		t.Fatalf("retryable = %v, kindOf = %v for a failure connect made up; want true, ErrUnavailable", retryable(local), kindOf(local))
	}
}

// TestLimitMismatchKind: a semaphore acquire refused for its limit is
// ErrLimitMismatch by its reason, LIMIT_MISMATCH, and by nothing else: the
// field a BadRequest names only points at the offending value.
func TestLimitMismatchKind(t *testing.T) {
	refusal := func(reason v1.ErrorReason, field string) error {
		ce := connect.NewError(connect.CodeFailedPrecondition, errors.New(`"pool" is held with limit 2, not 3`))
		if reason != v1.ErrorReason_ERROR_REASON_UNSPECIFIED {
			d, err := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: reason.String(), Domain: v1.ErrorDomain})
			if err != nil {
				t.Fatal(err)
			}
			ce.AddDetail(d)
		}
		if field != "" {
			d, err := connect.NewErrorDetail(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field}}})
			if err != nil {
				t.Fatal(err)
			}
			ce.AddDetail(d)
		}
		return ce
	}
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"reason and field", refusal(ReasonLimitMismatch, "limit"), ErrLimitMismatch},
		{"reason alone", refusal(ReasonLimitMismatch, ""), ErrLimitMismatch},
		{"field alone", refusal(v1.ErrorReason_ERROR_REASON_UNSPECIFIED, "limit"), nil},
		{"neither", refusal(v1.ErrorReason_ERROR_REASON_UNSPECIFIED, ""), nil},
	} {
		if got := kindOf(tc.err); got != tc.want {
			t.Errorf("%s: kindOf = %v; want %v", tc.name, got, tc.want)
		}
	}
}
