package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// Errors returned by the SDK. Match them with errors.Is. An error that
// came from a gateway also wraps the *connect.Error it answered, so
// errors.As(err, &connectErr) and Reason(err) work too.
var (
	// ErrLockLost reports that a lock is no longer held, or can no longer
	// be proven held before its conservative deadline. Lock.Err wraps it
	// with the cause: the gateway's LOCK_EXPIRED or LOCK_STOLEN answer, a
	// refused proof of ownership, the session's loss, or ErrUnavailable
	// when no gateway confirmed the lease in time.
	ErrLockLost = errors.New("lock lost")
	// ErrReleased is Lock.Err after Release, or after the lock's session
	// was closed: the holder let go on purpose. A renew of a lock that was
	// released (through another handle of its lock id) fails with it too:
	// the gateway's LOCK_RELEASED.
	ErrReleased = errors.New("lock released")
	// ErrEvicted reports a lock an administrator force-released: the
	// gateway's LOCK_EVICTED, from a renewal or from the watch the SDK
	// keeps on a lock it holds (so the holder learns at once). It matches
	// ErrLockLost too: the holder must stop. The message says when and why,
	// and names the audit record of the eviction.
	ErrEvicted error = evicted{}
	// ErrWaitTimeout reports that the wait timeout of an Acquire passed
	// before a grant. The caller holds nothing.
	ErrWaitTimeout = errors.New("wait timed out")
	// ErrNotAcquired reports that TryAcquire found the lock held or
	// contended. The error is a *HeldError, which carries the holder's
	// lease expiry.
	ErrNotAcquired = errors.New("lock is held by another owner")
	// ErrSessionLost reports that a session's lease expired, was revoked,
	// or could not be confirmed before its deadline. A session holds one
	// lease per shard: the locks on a shard whose lease is lost report it
	// (with ErrLockLost), and Session.Err wraps it once every lease is.
	ErrSessionLost = errors.New("session lost")
	// ErrUnavailable reports that no gateway answered, or every gateway
	// answered with a retryable failure, within the attempts allowed.
	ErrUnavailable = errors.New("no gateway available")
	// ErrNotOwner reports a lock id, fencing token, request id or session
	// id that does not prove ownership of what it names: it is another
	// lock's, caller's or tenant's (the gateway's NOT_OWNER). Not retried.
	ErrNotOwner = errors.New("not the lock's owner")
	// ErrPermissionDenied reports a call the caller's tenant may not make:
	// its name policy refuses the name (the gateway's PERMISSION_DENIED, or
	// permission_denied without a reason). Not retried.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrRateLimited reports a call a gateway's rate limit refused after
	// the SDK waited the gateway's delay and retried as often as the call
	// allows. The error is a *RateLimitError, which carries the delay.
	ErrRateLimited = errors.New("rate limited")
	// ErrQuotaExceeded reports a call a gateway's cap refused: holders and
	// waiters of a name, a tenant's waits or its locks. Not retried: the
	// cap holds until some of them end. The error is a *QuotaError, which
	// names the cap.
	ErrQuotaExceeded = errors.New("quota exceeded")
	// ErrUnauthenticated reports that a gateway refused the caller's
	// credentials: no token, a token it does not accept, or a TLS
	// certificate refused or not trusted on either side. Not retried.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrInternal reports that a gateway answered with an unexpected
	// failure of its own (internal, unknown, data_loss, unimplemented): a
	// bug or a mismatch between the SDK and the gateway, not an outage.
	// Not retried.
	ErrInternal = errors.New("gateway internal error")
	// ErrClosed reports use of a closed Client or Session.
	ErrClosed = errors.New("closed")
	// ErrInvalidArgument reports a bad option or request field; the message
	// names the value and what is allowed.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNoLeader reports an election that nobody leads (Election.Leader).
	ErrNoLeader = errors.New("no leader")
	// ErrLimitMismatch reports an acquire whose WithLimit is not the
	// limit its name is held or waited for with (the message names it).
	// Not retried: the name keeps its limit until it has no holders or
	// waiters.
	ErrLimitMismatch = errors.New("semaphore limit mismatch")
)

// Reasons a gateway gives in the ErrorInfo detail of its errors: the
// values of the API's ErrorReason enum (errors.proto says what each means).
// Reason extracts them.
const (
	// ReasonExpired: the lock's lease lapsed and the name is free.
	ReasonExpired = v1.ErrorReason_LOCK_EXPIRED
	// ReasonStolen: the lock's lease lapsed and another holder has the name.
	ReasonStolen = v1.ErrorReason_LOCK_STOLEN
	// ReasonReleased: the lock's holder released it (ErrReleased).
	ReasonReleased = v1.ErrorReason_LOCK_RELEASED
	// ReasonEvicted: an administrator force-released the lock (ErrEvicted).
	ReasonEvicted = v1.ErrorReason_LOCK_EVICTED
	// ReasonLeaseLost: a waiter's lease died while it waited.
	ReasonLeaseLost = v1.ErrorReason_LEASE_LOST
	// ReasonSessionLost: the session expired, was closed or is not yours;
	// on an acquire or a keepalive, the session's lease on one shard is.
	ReasonSessionLost = v1.ErrorReason_SESSION_LOST
	// ReasonSessionShardMissing: the session has no lease on the shard a
	// name lives on. Session.Acquire and Session.TryAcquire extend the
	// session to that shard and retry, so callers do not see it.
	ReasonSessionShardMissing = v1.ErrorReason_SESSION_SHARD_MISSING
	// ReasonWaitTimeout: the wait timeout passed before a grant.
	ReasonWaitTimeout = v1.ErrorReason_WAIT_TIMEOUT
	// ReasonShuttingDown: the gateway is stopping; the SDK retries the
	// same request id elsewhere, keeping the queue place.
	ReasonShuttingDown = v1.ErrorReason_SHUTTING_DOWN
	// ReasonShardUnavailable: the etcd cluster holding the name is down.
	ReasonShardUnavailable = v1.ErrorReason_SHARD_UNAVAILABLE
	// ReasonResharding: the shard map is changing.
	ReasonResharding = v1.ErrorReason_RESHARDING
	// ReasonSuperseded: another call with the same request id took the
	// waiter over (a request id serves one call at a time); the SDK
	// retries, which takes it back.
	ReasonSuperseded = v1.ErrorReason_SUPERSEDED
	// ReasonRateLimited: a rate limit refused the call (ErrRateLimited).
	ReasonRateLimited = v1.ErrorReason_RATE_LIMITED
	// ReasonQuotaExceeded: a cap refused the call (ErrQuotaExceeded).
	ReasonQuotaExceeded = v1.ErrorReason_QUOTA_EXCEEDED
	// ReasonPermissionDenied: the tenant's name policy refuses the name
	// (ErrPermissionDenied).
	ReasonPermissionDenied = v1.ErrorReason_PERMISSION_DENIED
	// ReasonNotOwner: the id or token is not the caller's (ErrNotOwner).
	ReasonNotOwner = v1.ErrorReason_NOT_OWNER
	// ReasonLimitMismatch: a semaphore acquire's limit is not the one the
	// name's holders and waiters have (ErrLimitMismatch).
	ReasonLimitMismatch = v1.ErrorReason_LIMIT_MISMATCH
)

// Reason returns the leasegate reason (one of the Reason constants) carried
// by a gateway error anywhere in err's chain, or
// ERROR_REASON_UNSPECIFIED if there is none, or one this SDK does not know.
func Reason(err error) v1.ErrorReason {
	if info := errorInfo(err); info != nil {
		return v1.ErrorReason(v1.ErrorReason_value[info.Reason])
	}
	return v1.ErrorReason_ERROR_REASON_UNSPECIFIED
}

// errorInfo returns the leasegate ErrorInfo detail of a gateway error
// anywhere in err's chain, or nil.
func errorInfo(err error) *errdetails.ErrorInfo {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil
	}
	info, _ := detail(ce, func(info *errdetails.ErrorInfo) bool { return info.Domain == v1.ErrorDomain })
	return info
}

// detail returns the first detail of ce of type T that want accepts.
func detail[T any](ce *connect.Error, want func(T) bool) (T, bool) {
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if t, ok := v.(T); ok && want(t) {
				return t, true
			}
		}
	}
	var zero T
	return zero, false
}

// shardOf returns the shard a gateway error concerns (its ErrorInfo
// metadata), or "" when it names none.
func shardOf(err error) string {
	if info := errorInfo(err); info != nil {
		return info.Metadata[v1.MetadataShard]
	}
	return ""
}

// evicted is ErrEvicted: a lost lock of its own kind.
type evicted struct{}

func (evicted) Error() string { return "lock evicted" }

// Is makes errors.Is(ErrEvicted, ErrLockLost) true.
func (evicted) Is(target error) bool { return target == ErrLockLost }

// HeldError is the error TryAcquire returns when the lock is held; it
// matches ErrNotAcquired.
type HeldError struct {
	// Name is the lock's name.
	Name string
	// HolderExpires is when the holder's lease lapses unless renewed, as
	// the gateway's clock reckons it; zero when the gateway did not say
	// (the name had waiters but no live holder at that instant).
	HolderExpires time.Time
	// DelayUntil is set when the name is free but an expired holder's
	// lock-delay keeps it from everyone until then: a TryAcquire after it
	// can succeed.
	DelayUntil time.Time
}

// Error names the lock and, when known, until when its holder's lease runs
// or its lock-delay lasts.
func (e *HeldError) Error() string {
	if !e.DelayUntil.IsZero() {
		return fmt.Sprintf("leasegate: lock %q is free, but an expired holder's lock-delay keeps it from everyone until %s", e.Name, e.DelayUntil.Format(time.RFC3339Nano))
	}
	if e.HolderExpires.IsZero() {
		return fmt.Sprintf("leasegate: lock %q is held", e.Name)
	}
	return fmt.Sprintf("leasegate: lock %q is held until %s", e.Name, e.HolderExpires.Format(time.RFC3339Nano))
}

// Is makes errors.Is(err, ErrNotAcquired) true.
func (e *HeldError) Is(target error) bool { return target == ErrNotAcquired }

// opError is what the SDK's calls return: the operation, the sentinel that
// classifies the failure, and the underlying cause (often a *connect.Error).
type opError struct {
	op    string
	kind  error
	cause error
}

// Error is "leasegate: OP: KIND: CAUSE", each part said once: a gateway's
// answer is given by its message alone (its code is what KIND says), and a
// KIND the message begins with is left out.
func (e *opError) Error() string {
	msg := "leasegate: " + e.op
	cause := ""
	if e.cause != nil {
		cause = e.cause.Error()
		if ce := (*connect.Error)(nil); errors.As(e.cause, &ce) && ce == e.cause && ce.Message() != "" {
			cause = ce.Message()
		}
	}
	if e.kind != nil && e.kind.Error() != "" && !strings.HasPrefix(cause, e.kind.Error()) {
		msg += ": " + e.kind.Error()
	}
	if cause != "" {
		msg += ": " + cause
	}
	return msg
}

func (e *opError) Unwrap() []error {
	var out []error
	for _, err := range []error{e.kind, e.cause} {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// wrap classifies a failed call's error for the caller of op.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var oe *opError
	if errors.As(err, &oe) {
		return err
	}
	return &opError{op: op, kind: kindOf(err), cause: err}
}

func invalid(op, format string, args ...any) error {
	return &opError{op: op, kind: ErrInvalidArgument, cause: fmt.Errorf(format, args...)}
}

// kindOf maps a gateway error to its sentinel, or nil when none fits.
func kindOf(err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		if errors.Is(err, errStreamEnded) {
			return ErrUnavailable
		}
		return nil
	}
	switch ce.Code() {
	case connect.CodeInvalidArgument, connect.CodeOutOfRange:
		return ErrInvalidArgument
	case connect.CodeUnauthenticated:
		return ErrUnauthenticated
	case connect.CodePermissionDenied:
		if Reason(err) == ReasonNotOwner {
			return ErrNotOwner
		}
		return ErrPermissionDenied
	case connect.CodeResourceExhausted:
		return limitOf(ce)
	case connect.CodeDeadlineExceeded:
		if Reason(err) == ReasonWaitTimeout {
			return ErrWaitTimeout
		}
	case connect.CodeFailedPrecondition, connect.CodeAborted:
		switch Reason(err) {
		case ReasonSessionLost:
			return ErrSessionLost
		case ReasonExpired, ReasonStolen, ReasonLeaseLost:
			return ErrLockLost
		case ReasonReleased:
			return ErrReleased
		case ReasonEvicted:
			return ErrEvicted
		}
		if ce.Code() == connect.CodeFailedPrecondition && Reason(err) == ReasonLimitMismatch {
			return ErrLimitMismatch
		}
	case connect.CodeUnknown, connect.CodeInternal, connect.CodeDataLoss, connect.CodeUnimplemented:
		if serverFailure(ce) {
			return ErrInternal
		}
		return ErrUnavailable
	case connect.CodeUnavailable:
		return ErrUnavailable
	}
	return nil
}

// serverFailure reports an unexpected failure a gateway answered, as
// opposed to one connect made up on this side when a connection broke
// mid-call (a truncated stream reads as unknown or internal too): only
// the former is ErrInternal; the latter is an outage, retried elsewhere.
func serverFailure(ce *connect.Error) bool {
	switch ce.Code() {
	case connect.CodeUnknown, connect.CodeInternal, connect.CodeDataLoss, connect.CodeUnimplemented:
		return connect.IsWireError(ce)
	}
	return false
}

// errStreamEnded is an Acquire stream that ended cleanly without a grant.
var errStreamEnded = errors.New("the acquire stream ended without a grant")

// retryable reports whether another attempt, on the next endpoint, may
// succeed where this one failed: the gateway was unreachable, stopping,
// cut off from etcd, or the stream broke. The caller checks its own
// context first: a cancelled caller never retries. A rate limit is not
// retryable in this sense: the caller waits the gateway's delay and
// retries on the same gateway (rateLimited, rateLimitPause).
func retryable(err error) bool {
	if errors.Is(err, errStreamEnded) {
		return true
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return false
	}
	switch ce.Code() {
	case connect.CodeUnknown, connect.CodeInternal:
		return !serverFailure(ce)
	case connect.CodeUnavailable, connect.CodeCanceled:
		return true
	case connect.CodeDeadlineExceeded:
		return Reason(err) != ReasonWaitTimeout
	case connect.CodeAborted:
		// The waiter's lease died (the gateway serving it was gone for a
		// whole TTL): a retry enqueues again, at the back. Or an earlier
		// attempt of this call, late on a slow gateway, took the waiter
		// over: a retry takes it back, keeping the place.
		return Reason(err) == ReasonLeaseLost || Reason(err) == ReasonSuperseded
	}
	return false
}

// proofRefused reports an answer that proves a lease or lock is gone or not
// ours: the only answers on which a renewer declares loss before the
// deadline. Anything else is retried until the deadline.
func proofRefused(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeFailedPrecondition, connect.CodePermissionDenied, connect.CodeInvalidArgument:
		return true
	}
	return false
}

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
func (e *RateLimitError) Error() string { return limitMessage(ErrRateLimited, e.Limit) }

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
func (e *QuotaError) Error() string { return limitMessage(ErrQuotaExceeded, e.Limit) }

// limitMessage is kind's message, naming limit when it is known.
func limitMessage(kind error, limit string) string {
	if limit == "" {
		return kind.Error()
	}
	return kind.Error() + " (" + limit + ")"
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
	if r := Reason(ce); r == ReasonRateLimited || ok && r != ReasonQuotaExceeded {
		return &RateLimitError{Limit: limit, RetryAfter: d}
	}
	return &QuotaError{Limit: limit}
}

// retryInfo is the delay of a RetryInfo detail of ce, and whether it has one.
func retryInfo(ce *connect.Error) (time.Duration, bool) {
	ri, ok := detail(ce, func(*errdetails.RetryInfo) bool { return true })
	return max(ri.GetRetryDelay().AsDuration(), 0), ok
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
