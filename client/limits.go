package client

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// RateLimitError is the error of a call a gateway's rate limit refused;
// it matches ErrRateLimited. Get it with errors.As to read the delay the
// gateway asked for.
//
// The SDK has already honoured that delay where it could: a rate-limited
// call waits RetryAfter on the client's Clock and retries on the same
// gateway (rates are counted per gateway, and hopping to another one would
// only dodge the tenant's budget): a unary call within its usual attempts
// (at least 3), Acquire until its context ends or its wait timeout
// passes. It returns this error at once, without waiting, when the delay
// would end after the context's deadline or after the Acquire's wait
// timeout.
type RateLimitError struct {
	// Limit names the rate that refused the call, as the gateway reported
	// it: tenant_acquire_rate, client_acquire_rate, tenant_renew_rate or
	// client_renew_rate (errors.proto); empty if it did not say.
	Limit string
	// RetryAfter is how long the gateway asked the caller to wait before
	// the next call (its RetryInfo); zero if it did not say.
	RetryAfter time.Duration
}

// Error names the limit; the gateway's message, which the SDK's error
// wraps, gives the delay.
func (e *RateLimitError) Error() string {
	if e.Limit == "" {
		return ErrRateLimited.Error()
	}
	return ErrRateLimited.Error() + " (" + e.Limit + ")"
}

// Is makes errors.Is(err, ErrRateLimited) true.
func (e *RateLimitError) Is(target error) bool { return target == ErrRateLimited }

// QuotaError is the error of a call a gateway's cap refused; it matches
// ErrQuotaExceeded. The SDK does not retry it: the cap holds until some of
// the tenant's locks or waits end.
type QuotaError struct {
	// Limit names the cap, as the gateway reported it: name_waiters (the
	// holders and waiters of one name), tenant_waiters (a tenant's open
	// waits on one gateway), tenant_keys (a tenant's locks on one shard)
	// or tenant_watch_keys (the keys a tenant's watches on one gateway
	// follow on one shard) (errors.proto); empty if it did not say.
	Limit string
}

// Error names the cap.
func (e *QuotaError) Error() string {
	if e.Limit == "" {
		return ErrQuotaExceeded.Error()
	}
	return ErrQuotaExceeded.Error() + " (" + e.Limit + ")"
}

// Is makes errors.Is(err, ErrQuotaExceeded) true.
func (e *QuotaError) Is(target error) bool { return target == ErrQuotaExceeded }

// limitOf classifies a resource_exhausted answer by its reason: a rate
// limit or a cap. An answer without a leasegate reason (a proxy's in front
// of the gateways) is a rate limit when it carries a RetryInfo, a cap
// otherwise.
func limitOf(ce *connect.Error) error {
	var limit string
	if info := errorInfo(ce); info != nil {
		limit = info.Metadata[v1.MetadataLimit]
	}
	d, ok := retryInfo(ce)
	switch Reason(ce) {
	case v1.ErrorReason_QUOTA_EXCEEDED:
		return &QuotaError{Limit: limit}
	case v1.ErrorReason_RATE_LIMITED:
		return &RateLimitError{Limit: limit, RetryAfter: d}
	}
	if ok {
		return &RateLimitError{Limit: limit, RetryAfter: d}
	}
	return &QuotaError{Limit: limit}
}

// retryInfo is the delay of a RetryInfo detail of ce, and whether it has one.
func retryInfo(ce *connect.Error) (time.Duration, bool) {
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if ri, ok := v.(*errdetails.RetryInfo); ok {
				return max(ri.GetRetryDelay().AsDuration(), 0), true
			}
		}
	}
	return 0, false
}

// rateLimited returns the RateLimitError err is, or nil.
func rateLimited(err error) *RateLimitError {
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeResourceExhausted {
		return nil
	}
	rl, _ := limitOf(ce).(*RateLimitError)
	return rl
}

// rateLimitPause is how long to wait before retrying a call a rate limit
// refused with rl, on the same gateway: the gateway's delay, or the next
// backoff when it gave none. ok is false when the pause would end after
// ctx's deadline or after until (the wait deadline on the client's clock;
// zero for none): waiting could not help, so the caller returns rl at once.
func (c *Client) rateLimitPause(ctx context.Context, rl *RateLimitError, until time.Time, bo *backoff) (d time.Duration, ok bool) {
	d = rl.RetryAfter
	if d <= 0 {
		d = bo.next()
	}
	if dl, has := ctx.Deadline(); has && time.Until(dl) < d {
		return d, false
	}
	if !until.IsZero() && until.Sub(c.cfg.clock.Now()) < d {
		return d, false
	}
	return d, true
}
