"""Keeper: the conservative deadline of one lease and, unless it is kept by
hand, its background renewal.

The deadline is S + min(TTL, valid_for) − margin, S being the clock reading
taken just before sending the latest request a gateway answered with a
confirmation. etcd counts a lease's TTL from when its leader handled the
confirming grant or keepalive, which follows S; valid_for counts from the
request's arrival, which follows S too. So while this process's clock runs
no slower than the etcd leader's, the lease outlives the deadline by the
margin. A confirmation only ever moves the deadline later (an answer to an
older request, crediting an earlier S, is ignored), and one that arrives
once the deadline has passed revives nothing: the signal stays fired.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from . import wire
from .errors import (
    InvalidArgumentError,
    LeasegateError,
    LockLostError,
    UnavailableError,
    classify,
    op_message,
    proof_refused,
    rate_limit_delay,
    retryable,
)
from .signal import Signal

_log = logging.getLogger("leasegate")


@dataclass
class Confirmation:
    """A lease confirmation: its TTL and what the gateway owes from the request's arrival (0: unsaid), in seconds."""

    ttl: float
    valid_for: float = 0.0


#: A renewal RPC on one endpoint with a token and timeout: it confirms the lease or raises the gateway's answer.
RenewFn = Callable[[wire.Endpoint, "str | None", float], Confirmation]


class Keeper:
    """Holds a lease's deadline and fires lost at it unless a confirmation
    moves it first; with background renewal it also renews every
    TTL × renew_fraction from the latest confirmation's send time, retrying
    every endpoint with backoff until the deadline.

    Two daemon threads serve it: one fires the deadline (it never waits on
    the network, so a renewal stuck in a call cannot delay the signal), one
    renews. Both end when lost fires, which the client's close does too.

    A confirmation is credited with at most the lease's granted TTL (a renewal
    never changes a lease's TTL, so a larger one is a gateway's error) and a
    confirmation without a TTL credits nothing.
    """

    def __init__(self, core, op: str, ttl: float, anchor: float, deadline: float, renew: RenewFn | None, background: bool):
        self._c = core
        self._op = op
        self._ttl = ttl
        self._anchor = anchor
        self._deadline = deadline
        self._renew = renew
        self._cv = threading.Condition()
        self._renewing = False
        self._next_renewal = anchor + core.opts.renew_interval(ttl)
        #: Fired, with the cause, when the lease is lost or the keeper stops.
        self.lost = Signal()
        forget = core.track(lambda closed: self.lose(LockLostError(op_message(self._op, "lock lost", closed), closed)))
        self.lost.add_callback(lambda _cause: forget())
        threading.Thread(target=self._watch_deadline, name=f"leasegate-deadline {op}", daemon=True).start()
        if renew is not None and background:
            threading.Thread(target=self._renew_loop_bg, name=f"leasegate-renew {op}", daemon=True).start()

    @property
    def expires(self) -> float:
        """The conservative deadline, on the client's clock (seconds)."""
        with self._cv:
            return self._deadline

    @property
    def ttl(self) -> float:
        """The lease's TTL in seconds."""
        return self._ttl

    def credit(self, sent: float, conf: Confirmation) -> bool:
        """Applies a confirmation of a request sent at sent: the deadline moves
        only later, and not at all once passed or lost. Returns whether the
        lease is still held."""
        now = self._c.opts.clock()
        with self._cv:
            if self.lost.is_set():
                return False
            late = now >= self._deadline
            if not late and conf.ttl > 0:
                d = self._c.opts.deadline_of(sent, min(conf.ttl, self._ttl), conf.valid_for)
                if d > self._deadline:
                    self._deadline = d
                if sent > self._anchor:
                    self._anchor = sent
                    self._next_renewal = sent + self._c.opts.renew_interval(self._ttl)
                self._cv.notify_all()
        if late:
            # The deadline thread is late (a busy process): the deadline still rules.
            self.lose(self.unconfirmed())
            return False
        return True

    def lose(self, err: LeasegateError) -> None:
        """Fires lost with err (the first cause wins) and stops the threads."""
        self.lost.fire(err)
        with self._cv:
            self._cv.notify_all()

    def unconfirmed(self, last: BaseException | None = None) -> LockLostError:
        """The error the deadline passing gives."""
        why = UnavailableError(op_message(self._op, "no gateway confirmed the lease before its deadline", last), last)
        return LockLostError(op_message(self._op, "lock lost", why), why)

    def _watch_deadline(self) -> None:
        clock = self._c.opts.clock
        with self._cv:
            while not self.lost.is_set():
                left = self._deadline - clock()
                if left <= 0:
                    break
                self._cv.wait(left)
            else:
                return
        self.lose(self.unconfirmed())

    def _renew_loop_bg(self) -> None:
        clock = self._c.opts.clock
        while True:
            with self._cv:
                while not self.lost.is_set():
                    left = self._next_renewal - clock()
                    if left <= 0:
                        break
                    self._cv.wait(left)
                if self.lost.is_set():
                    return
            try:
                self.renew_now()
            except LeasegateError:
                if self.lost.is_set():
                    return
            except Exception:  # noqa: BLE001 - the lease outlives a fault of one renewal
                _log.exception("leasegate: %s: a renewal failed unexpectedly", self._op)
                self.lost.wait(self._c.opts.backoff_initial)

    def renew_now(self) -> float:
        """Renews until a gateway confirms the lease, one proves it lost, or the
        deadline passes; returns the new deadline or raises. A renewal already
        under way is not doubled: the call waits for it and returns its
        deadline if it moved."""
        if self._renew is None:
            raise InvalidArgumentError(op_message(self._op, "the lease is not renewed on its own"))
        with self._cv:
            if self.lost.is_set():
                raise self.lost.cause
            if self._renewing:
                before = self._deadline
                while self._renewing and not self.lost.is_set():
                    self._cv.wait()
                if self.lost.is_set():
                    raise self.lost.cause
                if self._deadline > before:
                    return self._deadline
            self._renewing = True
        try:
            return self._renew_until_deadline(self._renew)
        finally:
            with self._cv:
                self._renewing = False
                self._cv.notify_all()

    def _observe(self, sent: float, err: BaseException | None) -> None:
        """Reports a processed renewal to the client's on_renew."""
        hook = self._c.opts.on_renew
        if hook is None:
            return
        try:
            hook(sent, err)
        except Exception:  # noqa: BLE001 - a hook's failure is not the lease's
            pass

    def _renew_until_deadline(self, renew: RenewFn) -> float:
        opts = self._c.opts
        bo = self._c.backoff()
        last: BaseException | None = None
        tried = 0
        while True:
            if self.lost.is_set():
                raise self.lost.cause
            left = self.expires - opts.clock()
            if left <= 0:
                self.lose(self.unconfirmed(last))
                raise self.lost.cause
            i, ep = self._c.pick()
            sent = opts.clock()
            pause = 0.0
            try:
                try:
                    conf = renew(ep, self._c.token(), max(0.001, min(opts.request_timeout, left)))
                except wire.WireError:
                    raise
                except Exception as e:  # noqa: BLE001 - one attempt's fault, retried like a failed call
                    _log.exception("leasegate: %s: a renewal attempt failed unexpectedly", self._op)
                    raise wire.WireError("unknown", f"{type(e).__name__}: {e}") from e
                if not conf.ttl > 0:
                    raise wire.WireError("internal", "the gateway confirmed the lease without a TTL, which confirms nothing", from_server=True)
                if not self.credit(sent, conf):
                    raise self.lost.cause
                self._observe(sent, None)
                return self.expires
            except wire.WireError as err:
                self._observe(sent, err)
                if self.lost.is_set():
                    raise self.lost.cause from None
                if proof_refused(err):
                    cause = classify(self._op, err)
                    self.lose(cause if isinstance(cause, LockLostError) else LockLostError(op_message(self._op, "lock lost", err), cause))
                    raise self.lost.cause from None
                last = err
                delay = rate_limit_delay(err)
                if delay is not None:
                    pause = delay if delay > 0 else bo.next()
                else:
                    if retryable(err):
                        self._c.failed(i)
                    tried += 1
                    if tried % self._c.endpoint_count == 0:
                        pause = bo.next()
            if pause > 0:
                self.lost.wait(min(pause, max(self.expires - opts.clock(), 0)))
