"""Client options, their defaults and their validation."""

from __future__ import annotations

import os
import random
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass

from .errors import InvalidArgumentError

#: A token source: called before every request for the bearer token to send.
TokenSource = Callable[[], str]


@dataclass
class Options:
    """Configures a Client. Durations are in seconds; every field has a default.

    client_id: caller identity the gateway reports. Default "python-" + pid.
    token: bearer token, a fixed string or a source called before every request. Default none.
    ssl_context: TLS for https:// endpoints (trust, client certificate); also makes
        https the scheme of endpoints given without one. Default: the system's trust, no client certificate.
    request_timeout: bound of one attempt of a unary call as a whole (connect, send, and the
        answer however slowly it arrives). Default 10.
    renew_fraction: renewal interval as a fraction of the TTL, in (0, 0.5]. Default 1/3, jittered ±10%.
    safety_margin: subtracted from every deadline. Default TTL/100 + 0.1; at most TTL/3.
    backoff_initial, backoff_max: first and largest pause between rounds of retries. Default 0.1 and 2.
    default_ttl: TTL of locks and sessions acquired without one. Default 15.
    clock: monotonic clock in seconds, for tests. Default time.monotonic.
    on_renew: called after each renewal of a lock's or session's lease has been
        processed, as on_renew(sent, error): when it was sent (on clock) and, unless
        the gateway confirmed the lease, its error (None when confirmed; the lock's
        expires already counts from it). Called on the renewing thread: keep it
        short; what it raises is ignored. Default none.
    """

    client_id: str = ""
    token: str | TokenSource | None = None
    ssl_context: ssl.SSLContext | None = None
    request_timeout: float = 10.0
    renew_fraction: float = 1 / 3
    safety_margin: float | None = None
    backoff_initial: float = 0.1
    backoff_max: float = 2.0
    default_ttl: float = 15.0
    clock: Callable[[], float] = time.monotonic
    on_renew: Callable[[float, BaseException | None], None] | None = None

    def validate(self) -> None:
        """Raises InvalidArgumentError naming the first bad field and its allowed range."""
        if not 0 < self.renew_fraction <= 0.5:
            raise InvalidArgumentError(f"leasegate: renew_fraction is {self.renew_fraction}; want a number in (0, 0.5]")
        if self.safety_margin is not None and not self.safety_margin >= 0:
            raise InvalidArgumentError(f"leasegate: safety_margin is {self.safety_margin}; want 0 or more seconds")
        for name in ("request_timeout", "backoff_initial", "backoff_max", "default_ttl"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v > 0):
                raise InvalidArgumentError(f"leasegate: {name} is {v!r}; want a positive number of seconds")
        if not self.client_id:
            self.client_id = f"python-{os.getpid()}"

    def token_source(self) -> TokenSource | None:
        """The token as a source (None: no credentials)."""
        t = self.token
        if t is None or callable(t):
            return t
        return lambda: t

    def margin(self, ttl: float) -> float:
        """The safety margin of a lease of ttl seconds."""
        m = self.safety_margin if self.safety_margin is not None else ttl / 100 + 0.1
        return min(m, ttl / 3)

    def renew_interval(self, ttl: float) -> float:
        """The jittered pause between a confirmation and the next renewal."""
        return ttl * self.renew_fraction * (0.9 + 0.2 * random.random())

    def deadline_of(self, sent: float, ttl: float, valid_for: float = 0.0) -> float:
        """The conservative deadline a confirmation of a request sent at sent gives:
        sent + min(ttl, valid_for when said) − margin."""
        d = valid_for if 0 < valid_for < ttl else ttl
        return sent + d - self.margin(ttl)


class Backoff:
    """Jittered, exponentially growing pauses between retry rounds."""

    def __init__(self, initial: float, maximum: float):
        self._initial, self._max, self._cur = initial, maximum, 0.0

    def next(self) -> float:
        """Between half and all of a nominal pause that doubles per call up to the maximum."""
        self._cur = self._initial if self._cur == 0 else min(2 * self._cur, self._max)
        return self._cur / 2 + random.random() * self._cur / 2
