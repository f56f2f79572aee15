"""leasegate: the Python SDK of the leasegate lock gateway.

Locks are taken over the Connect protocol (HTTP/1.1, JSON) with the
standard library only. The SDK renews each lock in a background thread
before a conservative deadline, fires the lock's loss signal no later than
that deadline, retries under the same request id (a waiter keeps its queue
place) and fails over among the gateways given.

    from leasegate import Client

    client = Client(["http://127.0.0.1:8080"], token="…")
    with client.lock("jobs/nightly", ttl=15) as lock:
        write(resource, fencing_token=lock.token)
"""

from .acquire import AcquireOptions
from .client import Client
from .errors import (
    CancelledError,
    ClosedError,
    ErrorReason,
    EvictedError,
    InternalError,
    InvalidArgumentError,
    LeasegateError,
    LimitMismatchError,
    LockLostError,
    NotAcquiredError,
    NotOwnerError,
    PermissionDeniedError,
    QuotaExceededError,
    RateLimitedError,
    ReleasedError,
    SessionLostError,
    UnauthenticatedError,
    UnavailableError,
    WaitTimeoutError,
    reason_of,
)
from .lock import Lock
from .options import Options, TokenSource
from .session import Session
from .signal import Signal

__all__ = [
    "AcquireOptions",
    "CancelledError",
    "Client",
    "ClosedError",
    "ErrorReason",
    "EvictedError",
    "InternalError",
    "InvalidArgumentError",
    "LeasegateError",
    "LimitMismatchError",
    "Lock",
    "LockLostError",
    "NotAcquiredError",
    "NotOwnerError",
    "Options",
    "PermissionDeniedError",
    "QuotaExceededError",
    "RateLimitedError",
    "ReleasedError",
    "Session",
    "SessionLostError",
    "Signal",
    "TokenSource",
    "UnauthenticatedError",
    "UnavailableError",
    "WaitTimeoutError",
    "reason_of",
]
