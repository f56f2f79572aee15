package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"

	"github.com/leasegate/leasegate/locks"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/queue"
	"github.com/leasegate/leasegate/shard"
)

// noReason is an error without a leasegate reason: an ErrorInfo's reasons
// are the API's ErrorReason values (errors.proto), under v1.ErrorDomain.
const noReason = v1.ErrorReason_ERROR_REASON_UNSPECIFIED

// shardError ties an error to the shard it concerns, which toConnect
// reports in the ErrorInfo metadata.
type shardError struct {
	shard string
	err   error
}

func (e *shardError) Error() string { return fmt.Sprintf("shard %q: %v", e.shard, e.err) }
func (e *shardError) Unwrap() error { return e.err }

func onShard(shard string, err error) error { return &shardError{shard: shard, err: err} }

// sessionShard names the shard on a session acquire's loss or lack of a
// lease there: the client learns which of its leases is gone or missing.
func sessionShard(shard string, err error) error {
	var se *shardError
	if (errors.Is(err, queue.ErrSessionLost) || errors.Is(err, locks.ErrNoSessionLease)) && !errors.As(err, &se) && shard != "" {
		return onShard(shard, err)
	}
	return err
}

// errStreamEnded is what a late position or heartbeat of an Acquire
// stream meets once its handler has returned: nothing more is written.
var errStreamEnded = errors.New("the stream has ended")

// errShuttingDown is the cancel cause of waits ended by a gateway shutdown.
var errShuttingDown = errors.New("gateway is shutting down; retry with the same request_id to keep the queue place")

// fieldError is a bad request field.
type fieldError struct {
	field string
	err   error
	// verbatim: field is a key exactly as the caller sent it, not an API
	// field name the REST API would spell its own way.
	verbatim bool
}

func (e *fieldError) Error() string { return e.err.Error() }
func (e *fieldError) Unwrap() error { return e.err }

func badField(field string, format string, args ...any) error {
	return &fieldError{field: field, err: fmt.Errorf("%s: "+format, append([]any{field}, args...)...)}
}

// fieldOf tags an engine validation error with the request field it concerns.
func fieldOf(field string, err error) error {
	if err == nil {
		return nil
	}
	return &fieldError{field: field, err: fmt.Errorf("%s: %w", field, err)}
}

// apiFields names the engine's request fields (queue.FieldError.Field) as
// the API does; Epoch, which no caller sends, has none.
var apiFields = map[string]string{
	"Name": "name", "TTL": "ttl_ms", "ClientID": "client_id", "RequestID": "request_id", "Limit": "limit",
	"LockDelay": "lock_delay_ms", "Reentrant": "reentrant", "Value": "value",
}

// named tags err's engine field error, if the gateway tagged none, with its
// API name (fieldOf); toConnect and restPost read errors through it.
func named(err error) error {
	var fe *fieldError
	var qe *queue.FieldError
	if errors.As(err, &fe) || !errors.As(err, &qe) || apiFields[qe.Field] == "" {
		return err
	}
	return fieldOf(apiFields[qe.Field], err)
}

// errorTranslator, innermost, is the one place a Connect call's error is
// translated (toConnect): every other interceptor sees the Connect error.
type errorTranslator struct{}

func (errorTranslator) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		if err != nil {
			return nil, toConnect(err)
		}
		return resp, nil
	}
}

func (errorTranslator) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (errorTranslator) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := next(ctx, conn); err != nil {
			return toConnect(err)
		}
		return nil
	}
}

// toConnect translates an engine or gateway error into a Connect error, at
// the edge (errorTranslator, restPost). Messages name what was wrong, never
// ids or secrets; internal failures are summarised, not echoed.
func toConnect(err error) *connect.Error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	err = named(err)
	if le := limitedToConnect(err); le != nil {
		return le
	}
	code, reason, msg := classify(err)
	out := connect.NewError(code, errors.New(msg))
	if reason != noReason {
		info := &errdetails.ErrorInfo{Reason: reason.String(), Domain: v1.ErrorDomain}
		var se *shardError
		onShard := errors.As(err, &se)
		switch {
		case errors.Is(err, queue.ErrWatchBudget):
			info.Metadata = map[string]string{v1.MetadataLimit: limitTenantWatchKeys}
			if onShard {
				info.Metadata[v1.MetadataShard] = se.shard
			}
		case errors.Is(err, queue.ErrTooManyHolds):
			info.Metadata = map[string]string{v1.MetadataLimit: limitNameHolds}
		case errors.Is(err, queue.ErrQueueFull):
			info.Metadata = map[string]string{v1.MetadataLimit: limitNameWaiters}
		case onShard:
			info.Metadata = map[string]string{v1.MetadataShard: se.shard}
		}
		addDetail(out, info)
	}
	if field := errField(err); field != "" {
		addDetail(out, &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: msg}}})
	}
	return out
}

func addDetail(ce *connect.Error, m proto.Message) {
	if d, err := connect.NewErrorDetail(m); err == nil {
		ce.AddDetail(d)
	}
}

// errField is the request field an error concerns, as the API names it:
// a bad field's, or "limit" for a semaphore limit that is not the name's.
func errField(err error) string {
	var fe *fieldError
	if errors.As(err, &fe) {
		return fe.field
	}
	if errors.Is(err, queue.ErrLimitMismatch) {
		return "limit"
	}
	return ""
}

func classify(err error) (connect.Code, v1.ErrorReason, string) {
	var fe *fieldError
	switch {
	case errors.Is(err, queue.ErrLimitMismatch):
		// Not a bad request: the same limit is right once the name is free.
		return connect.CodeFailedPrecondition, v1.ErrorReason_LIMIT_MISMATCH, err.Error()
	case errors.As(err, &fe), errors.Is(err, queue.ErrInvalidName), errors.Is(err, queue.ErrInvalidTTL),
		errors.Is(err, queue.ErrInvalidArgument), errors.Is(err, ErrMalformedID):
		return connect.CodeInvalidArgument, noReason, err.Error()
	case errors.Is(err, ErrUnauthenticated):
		return connect.CodeUnauthenticated, noReason, err.Error()
	case errors.Is(err, queue.ErrNotOwner):
		return connect.CodePermissionDenied, v1.ErrorReason_NOT_OWNER, err.Error()
	case errors.Is(err, ErrForbidden):
		return connect.CodePermissionDenied, v1.ErrorReason_PERMISSION_DENIED, err.Error()
	case errors.Is(err, queue.ErrHolderChanged):
		return connect.CodeFailedPrecondition, noReason, err.Error()
	case errors.Is(err, queue.ErrQueueFull), errors.Is(err, queue.ErrTooManyHolds), errors.Is(err, queue.ErrWatchBudget):
		return connect.CodeResourceExhausted, v1.ErrorReason_QUOTA_EXCEEDED, err.Error()
	case errors.Is(err, ErrUnknownShard):
		return connect.CodeNotFound, noReason, "the id names a shard this gateway does not know"
	case errors.Is(err, queue.ErrWaitTimeout):
		return connect.CodeDeadlineExceeded, v1.ErrorReason_WAIT_TIMEOUT, err.Error()
	case errors.Is(err, queue.ErrLeaseLost):
		return connect.CodeAborted, v1.ErrorReason_LEASE_LOST, "the waiter's lease was lost; acquire again"
	case errors.Is(err, queue.ErrNotLeader) && errors.Is(err, queue.ErrStolen):
		return connect.CodeFailedPrecondition, v1.ErrorReason_LOCK_STOLEN, "not the leader: its term ended and another campaigner leads"
	case errors.Is(err, queue.ErrNotLeader):
		return connect.CodeFailedPrecondition, v1.ErrorReason_LOCK_EXPIRED, "not the leader: its term ended and nobody leads"
	case errors.Is(err, queue.ErrNoLeader):
		return connect.CodeNotFound, noReason, "nobody leads the election"
	case errors.Is(err, queue.ErrReleased):
		return connect.CodeFailedPrecondition, v1.ErrorReason_LOCK_RELEASED, err.Error()
	case errors.Is(err, queue.ErrEvicted):
		return connect.CodeFailedPrecondition, v1.ErrorReason_LOCK_EVICTED, err.Error()
	case errors.Is(err, queue.ErrExpired):
		return connect.CodeFailedPrecondition, v1.ErrorReason_LOCK_EXPIRED, "the lock expired: its lease lapsed and the name is free"
	case errors.Is(err, queue.ErrStolen):
		return connect.CodeFailedPrecondition, v1.ErrorReason_LOCK_STOLEN, "the lock is lost: its lease lapsed and another holder has the name"
	case errors.Is(err, locks.ErrNoSessionLease):
		msg := "the session has no lease on the name's shard; extend the session to it (ExtendSession) and retry"
		if se := (*shardError)(nil); errors.As(err, &se) {
			msg = fmt.Sprintf("the session has no lease on shard %q, which the name lives on; extend the session to it (ExtendSession) and retry", se.shard)
		}
		return connect.CodeFailedPrecondition, v1.ErrorReason_SESSION_SHARD_MISSING, msg
	case errors.Is(err, queue.ErrSessionLost):
		msg := "the session is unknown or expired; open a new one"
		if se := (*shardError)(nil); errors.As(err, &se) {
			msg = fmt.Sprintf("the session's lease on shard %q expired or was closed, and its locks there with it; ExtendSession with replace opens a new one", se.shard)
		}
		return connect.CodeFailedPrecondition, v1.ErrorReason_SESSION_LOST, msg
	case errors.Is(err, queue.ErrCallerGone):
		return connect.CodeCanceled, noReason, "the client stopped reading its stream"
	case errors.Is(err, queue.ErrSuperseded):
		return connect.CodeAborted, v1.ErrorReason_SUPERSEDED, "a retry with the same request id took this wait over"
	case errors.Is(err, queue.ErrGuardFailed):
		return connect.CodeUnavailable, v1.ErrorReason_RESHARDING, "the shard map is changing; retry shortly"
	case errors.Is(err, errShuttingDown):
		return connect.CodeUnavailable, v1.ErrorReason_SHUTTING_DOWN, errShuttingDown.Error()
	case errors.Is(err, shard.ErrShardUnavailable):
		return connect.CodeUnavailable, v1.ErrorReason_SHARD_UNAVAILABLE, err.Error()
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled, noReason, "the call was cancelled"
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded, noReason, "the call's deadline passed"
	default:
		// etcd or transport failure: retryable, details stay in the logs.
		return connect.CodeUnavailable, v1.ErrorReason_SHARD_UNAVAILABLE, "the lock store is unavailable; retry"
	}
}

// httpStatuses maps Connect codes to the REST API's status codes; any
// other code answers 503.
var httpStatuses = map[connect.Code]int{
	connect.CodeInvalidArgument:    http.StatusBadRequest,
	connect.CodeNotFound:           http.StatusNotFound,
	connect.CodePermissionDenied:   http.StatusForbidden,
	connect.CodeUnauthenticated:    http.StatusUnauthorized,
	connect.CodeFailedPrecondition: http.StatusConflict,
	connect.CodeAborted:            http.StatusConflict,
	connect.CodeAlreadyExists:      http.StatusConflict,
	connect.CodeResourceExhausted:  http.StatusTooManyRequests,
	connect.CodeDeadlineExceeded:   http.StatusGatewayTimeout,
	connect.CodeCanceled:           499,
}
