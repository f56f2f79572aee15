"""Typed errors: one class per thing a program does next, as the Go SDK's
sentinels (client/errors.go). A gateway's answer is classified once, by
classify, from its Connect code and the ErrorReason in its ErrorInfo.
"""

from __future__ import annotations

import enum
from datetime import datetime

from .wire import WireError


class ErrorReason(enum.IntEnum):
    """The wire's leasegate.v1.ErrorReason (proto/leasegate/v1/errors.proto)."""

    ERROR_REASON_UNSPECIFIED = 0
    LOCK_EXPIRED = 1
    LOCK_STOLEN = 2
    LEASE_LOST = 3
    SESSION_LOST = 4
    SESSION_SHARD_MISSING = 5
    WAIT_TIMEOUT = 6
    SHUTTING_DOWN = 7
    SHARD_UNAVAILABLE = 8
    RESHARDING = 9
    SUPERSEDED = 10
    RATE_LIMITED = 11
    QUOTA_EXCEEDED = 12
    PERMISSION_DENIED = 13
    NOT_OWNER = 14
    LIMIT_MISMATCH = 15
    LOCK_RELEASED = 16
    LOCK_EVICTED = 17


def reason_of(err: BaseException | None) -> ErrorReason:
    """The ErrorReason err carries, or ERROR_REASON_UNSPECIFIED."""
    if isinstance(err, LeasegateError):
        return err.reason
    if isinstance(err, WireError):
        info = err.error_info()
        if info is not None:
            try:
                return ErrorReason[info.reason]
            except KeyError:
                pass
    return ErrorReason.ERROR_REASON_UNSPECIFIED


class LeasegateError(Exception):
    """Base of every error the SDK raises.

    reason is the gateway's ErrorReason (ERROR_REASON_UNSPECIFIED when it
    gave none), code its Connect code ("" when no gateway answered), shard
    the shard its ErrorInfo names, and __cause__ the answer it came from.
    """

    def __init__(self, message: str, cause: BaseException | None = None):
        super().__init__(message)
        self.__cause__ = cause
        self.reason = ErrorReason.ERROR_REASON_UNSPECIFIED
        self.code = ""
        self.shard = ""
        if isinstance(cause, WireError):
            self.code = cause.code
            self.reason = reason_of(cause)
            info = cause.error_info()
            self.shard = info.metadata.get("shard", "") if info else ""
        elif isinstance(cause, LeasegateError):
            self.code, self.reason, self.shard = cause.code, cause.reason, cause.shard


class LockLostError(LeasegateError):
    """The lock is no longer held, or can no longer be proven held before its
    conservative deadline: stop writing under it. The cause is the gateway's
    proof (LOCK_EXPIRED, LOCK_STOLEN, …) or an UnavailableError when no
    gateway confirmed the lease in time."""


class EvictedError(LockLostError):
    """An administrator force-released the lock. It is a LockLostError."""


class ReleasedError(LeasegateError):
    """The lock was released on purpose, by its holder or by closing its session."""


class WaitTimeoutError(LeasegateError):
    """The acquire's wait timeout passed before a grant; nothing is held."""


class NotAcquiredError(LeasegateError):
    """try_acquire found the name held or contended.

    holder_expires is when the holder's lease lapses on the gateway's clock,
    delay_until when a pending lock-delay ends; either is None when unsaid.
    """

    def __init__(self, message: str, holder_expires: datetime | None = None, delay_until: datetime | None = None):
        super().__init__(message)
        self.holder_expires = holder_expires
        self.delay_until = delay_until


class SessionLostError(LeasegateError):
    """A session's lease (on a shard, or all of them) is gone."""


class UnavailableError(LeasegateError):
    """No gateway answered, or each answered with a retryable failure, within the attempts allowed."""


class NotOwnerError(LeasegateError):
    """A lock id, token, request id or session id is not the caller's (NOT_OWNER). Not retried."""


class PermissionDeniedError(LeasegateError):
    """The tenant's name policy refuses the name. Not retried."""


class RateLimitedError(LeasegateError):
    """A rate limit refused the call after the SDK waited the gateway's delay
    and retried as often as the call allows. retry_after is the gateway's
    RetryInfo delay in seconds (0 when unsaid), limit the limit's name."""

    def __init__(self, message: str, cause: BaseException | None, retry_after: float, limit: str):
        super().__init__(message, cause)
        self.retry_after = retry_after
        self.limit = limit


class QuotaExceededError(LeasegateError):
    """A cap on keys or waiters refused the call; limit names it. Not retried."""

    def __init__(self, message: str, cause: BaseException | None, limit: str):
        super().__init__(message, cause)
        self.limit = limit


class UnauthenticatedError(LeasegateError):
    """The gateway refused the credentials (token or certificate). Not retried."""


class InternalError(LeasegateError):
    """A gateway answered with an unexpected failure of its own. Not retried."""


class LimitMismatchError(LeasegateError):
    """A semaphore acquire's limit is not the name's. Not retried."""


class InvalidArgumentError(LeasegateError):
    """A bad option or request field; the message names it."""


class ClosedError(LeasegateError):
    """Use of a closed Client or Session."""


class CancelledError(LeasegateError):
    """The caller's cancel event ended the call."""


def op_message(op: str, what: str, cause: BaseException | None = None) -> str:
    """'leasegate: OP: WHAT[: CAUSE]'."""
    c = (cause.message if isinstance(cause, WireError) else str(cause)) if cause is not None else ""
    return f"leasegate: {op}: {what}" + (f": {c}" if c and not c.startswith(what) else "")


_SERVER_FAILURES = ("unknown", "internal", "data_loss", "unimplemented")


def classify(op: str, err: BaseException) -> LeasegateError:
    """Turns a failed call's error into the SDK error for op."""
    if isinstance(err, LeasegateError):
        return err
    if not isinstance(err, WireError):
        return UnavailableError(op_message(op, "no gateway available", err), err)
    reason = reason_of(err)
    code = err.code
    if code in ("invalid_argument", "out_of_range"):
        return InvalidArgumentError(op_message(op, "invalid argument", err), err)
    if code == "unauthenticated":
        return UnauthenticatedError(op_message(op, "unauthenticated", err), err)
    if code == "permission_denied":
        if reason == ErrorReason.NOT_OWNER:
            return NotOwnerError(op_message(op, "not the lock's owner", err), err)
        return PermissionDeniedError(op_message(op, "permission denied", err), err)
    if code == "resource_exhausted":
        info = err.error_info()
        limit = info.metadata.get("limit", "") if info else ""
        delay = err.retry_delay()
        if reason == ErrorReason.RATE_LIMITED or (reason != ErrorReason.QUOTA_EXCEEDED and delay is not None):
            return RateLimitedError(op_message(op, "rate limited", err), err, delay or 0.0, limit)
        return QuotaExceededError(op_message(op, "quota exceeded" + (f" ({limit})" if limit else ""), err), err, limit)
    if code == "deadline_exceeded" and reason == ErrorReason.WAIT_TIMEOUT:
        return WaitTimeoutError(op_message(op, "wait timed out", err), err)
    if code in ("failed_precondition", "aborted"):
        if reason == ErrorReason.SESSION_LOST:
            return SessionLostError(op_message(op, "session lost", err), err)
        if reason in (ErrorReason.LOCK_EXPIRED, ErrorReason.LOCK_STOLEN, ErrorReason.LEASE_LOST):
            return LockLostError(op_message(op, "lock lost", err), err)
        if reason == ErrorReason.LOCK_RELEASED:
            return ReleasedError(op_message(op, "lock released", err), err)
        if reason == ErrorReason.LOCK_EVICTED:
            return EvictedError(op_message(op, "lock evicted", err), err)
        if reason == ErrorReason.LIMIT_MISMATCH and code == "failed_precondition":
            return LimitMismatchError(op_message(op, "semaphore limit mismatch", err), err)
    if code in _SERVER_FAILURES:
        if err.from_server:
            return InternalError(op_message(op, "gateway internal error", err), err)
        return UnavailableError(op_message(op, "no gateway available", err), err)
    if code in ("unavailable", "canceled"):
        # canceled here is a stream the gateway or the connection ended: the
        # caller's own cancel is told apart before classifying.
        return UnavailableError(op_message(op, "no gateway available", err), err)
    return LeasegateError(op_message(op, code, err), err)


def retryable(err: BaseException) -> bool:
    """Whether another attempt, on the next endpoint, may succeed where err
    failed: the gateway was unreachable, stopping, cut off from etcd, or the
    stream broke. A rate limit is not retryable in this sense: the caller
    waits the gateway's delay and asks the same gateway."""
    if not isinstance(err, WireError):
        return False
    code = err.code
    if code in ("unknown", "internal"):
        return not err.from_server
    if code in ("unavailable", "canceled"):
        return True
    if code == "deadline_exceeded":
        return reason_of(err) != ErrorReason.WAIT_TIMEOUT
    if code == "aborted":
        # The waiter's lease died (a retry enqueues again), or an earlier
        # attempt of this call took the waiter over (a retry takes it back,
        # keeping the place).
        return reason_of(err) in (ErrorReason.LEASE_LOST, ErrorReason.SUPERSEDED)
    return False


def proof_refused(err: BaseException) -> bool:
    """An answer that proves a lease or lock gone or not the caller's: the
    only answers on which a renewer declares loss before the deadline."""
    return isinstance(err, WireError) and err.from_server and err.code in (
        "failed_precondition",
        "permission_denied",
        "invalid_argument",
    )


def rate_limit_delay(err: BaseException) -> float | None:
    """The delay (seconds, 0 unsaid) a rate-limited answer asks for, or None when err is no rate limit."""
    if not isinstance(err, WireError) or err.code != "resource_exhausted":
        return None
    c = classify("", err)
    return c.retry_after if isinstance(c, RateLimitedError) else None
