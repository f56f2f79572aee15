"""Core: the endpoints, failover among them, credentials and the retry rule every call shares."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from . import wire
from .errors import (
    CancelledError,
    ClosedError,
    ErrorReason,
    InvalidArgumentError,
    LeasegateError,
    UnavailableError,
    classify,
    op_message,
    rate_limit_delay,
    reason_of,
    retryable,
)
from .options import Backoff, Options

T = TypeVar("T")

#: One attempt of a call against one gateway: (endpoint, bearer token or None, timeout in seconds).
Attempt = Callable[[wire.Endpoint, "str | None", float], T]


class Core:
    """Talks to one or more gateways; any gateway serves any call. A call that
    fails retryably (a gateway down, stopping or cut off from etcd) moves on
    to the next endpoint, keeping its request id."""

    def __init__(self, endpoints: list[str], options: Options | None = None, **kw):
        opts = options or Options(**kw)
        if options is not None and kw:
            raise InvalidArgumentError("leasegate: pass either options or keyword options, not both")
        opts.validate()
        if not endpoints:
            raise InvalidArgumentError("leasegate: no endpoints; want at least one gateway address")
        self.opts = opts
        try:
            self._eps = [wire.Endpoint(e, opts.ssl_context) for e in endpoints]
        except ValueError as e:
            raise InvalidArgumentError(f"leasegate: {e}") from e
        self._token = opts.token_source()
        self._mu = threading.Lock()
        self._cur = 0
        self._closed = False
        # What close must end: each keeper, session and acquire stream of
        # the client that is still going, by a key of its own.
        self._ends: dict[object, Callable[[ClosedError], None]] = {}

    @property
    def endpoints(self) -> list[str]:
        """The endpoints' URLs, in order."""
        return [e.url for e in self._eps]

    def close(self) -> None:
        """Closes the client and ends everything it keeps: every lock's loss
        signal fires with a LockLostError caused by a ClosedError, every
        session ends with a ClosedError, and waiting acquires fail with one.
        It sends nothing: what was held lapses in etcd at its lease's TTL
        (release locks and close sessions first to free them at once). No
        request leaves the client once it returns; later calls raise
        ClosedError. Idempotent; it does not wait for the network."""
        with self._mu:
            if self._closed:
                return
            self._closed = True
            ends, self._ends = list(self._ends.values()), {}
        closed = ClosedError("leasegate: the client was closed")
        for end in ends:
            end(closed)

    @property
    def closed(self) -> bool:
        """Whether close was called."""
        return self._closed

    def track(self, end: Callable[[ClosedError], None]) -> Callable[[], None]:
        """Has close call end(cause); returns the function that forgets it.
        On a closed client end runs at once."""
        key = object()
        with self._mu:
            if not self._closed:
                self._ends[key] = end
                return lambda: self._forget(key)
        end(ClosedError("leasegate: the client was closed"))
        return lambda: None

    def _forget(self, key: object) -> None:
        with self._mu:
            self._ends.pop(key, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def check_open(self, op: str) -> None:
        if self._closed:
            raise ClosedError(op_message(op, "closed"))

    def token(self) -> str | None:
        """The bearer token for the next request (the source is asked each time)."""
        return self._token() if self._token else None

    def pick(self) -> tuple[int, wire.Endpoint]:
        with self._mu:
            return self._cur, self._eps[self._cur]

    def failed(self, i: int) -> None:
        """Moves on from endpoint i, unless another call already did."""
        with self._mu:
            if self._cur == i:
                self._cur = (i + 1) % len(self._eps)

    @property
    def endpoint_count(self) -> int:
        return len(self._eps)

    def backoff(self) -> Backoff:
        return Backoff(self.opts.backoff_initial, self.opts.backoff_max)

    def call(
        self,
        op: str,
        fn: Attempt[T],
        cancel: threading.Event | None = None,
        until: float | None = None,
        timeout: float | None = None,
    ) -> T:
        """Runs fn against the current endpoint and, while failures are
        retryable, the next ones: at most max(3, endpoints) attempts, pausing
        (backoff) only after each round of every endpoint. A rate limit is
        waited out on the same gateway, for the delay its RetryInfo gives,
        within the same attempts; when the delay would end after until (a
        reading of the client's clock) it raises at once."""
        self.check_open(op)
        clock = self.opts.clock
        attempts = max(3, len(self._eps))
        bo = self.backoff()
        last: BaseException | None = None
        pause = 0.0
        for a in range(attempts):
            if pause == 0 and a > 0 and a % len(self._eps) == 0:
                pause = bo.next()
            if pause > 0:
                if until is not None and clock() + pause >= until:
                    break
                if cancel is not None and cancel.wait(pause):
                    raise CancelledError(op_message(op, "cancelled"), last)
                if cancel is None:
                    time.sleep(pause)
                pause = 0.0
            if cancel is not None and cancel.is_set():
                raise CancelledError(op_message(op, "cancelled"), last)
            self.check_open(op)
            i, ep = self.pick()
            t = timeout if timeout is not None else self.opts.request_timeout
            if until is not None:
                t = min(t, until - clock())
            if t <= 0.001:
                break
            try:
                return fn(ep, self.token(), t)
            except wire.WireError as err:
                delay = rate_limit_delay(err)
                if delay is not None:
                    pause = delay if delay > 0 else bo.next()
                    if until is not None and clock() + pause >= until:
                        raise classify(op, err) from None
                    last = err
                    continue
                if not retryable(err):
                    raise classify(op, err) from None
                self.failed(i)
                last = err
        if last is not None and rate_limit_delay(last) is not None:
            raise classify(op, last)
        if last is not None and reason_of(last) == ErrorReason.SHARD_UNAVAILABLE:
            raise UnavailableError(op_message(op, "the gateway answers, but the name's shard does not", last), last)
        if isinstance(last, LeasegateError):
            raise last
        raise UnavailableError(op_message(op, "no gateway available", last), last)
