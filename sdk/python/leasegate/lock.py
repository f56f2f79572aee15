"""Lock: one held lock, its fencing token, its deadline and its loss signal."""

from __future__ import annotations

import threading
from typing import Protocol

from . import wire
from .errors import InvalidArgumentError, LeasegateError, LockLostError, ReleasedError, UnavailableError, classify, op_message
from .signal import Signal


class LeaseHolder(Protocol):
    """What a lock's lease is kept by: its own Keeper, or its session's lease on the lock's shard."""

    lost: Signal

    @property
    def expires(self) -> float: ...

    def lose(self, err: LeasegateError) -> None: ...


class Lock:
    """A held lock.

    lost (also done) is a Signal — a threading.Event — fired with the cause
    (lost.cause: a LockLostError, EvictedError or ReleasedError) at the
    first of: a gateway proving the lock gone, the conservative deadline
    passing without a confirmation, release, or its session's close. It
    fires no later than the deadline. Send token with every write, so the
    resource can refuse a stale holder's; call check() right before one.

    Used as a context manager (with lock: …) it is released on exit.
    """

    def __init__(self, core, name: str, granted: dict, request_id: str, lease: LeaseHolder, keeper=None):
        self._c = core
        #: The lock's name.
        self.name = name
        #: The fencing token, exact (a Python int); it only grows for the name.
        self.token = wire.int64(granted, "fencingToken")
        #: The opaque lock id (carries the holder's secret).
        self.id = str(granted.get("lockId") or "")
        #: The shard (etcd cluster) the lock lives on.
        self.shard = str(granted.get("shard") or "")
        #: The request id the lock was acquired under.
        self.request_id = request_id
        #: The lock's holds (more than 1 for a re-entered session lock).
        self.hold_count = max(wire.int64(granted, "holdCount"), 1)
        self.lease = lease
        self._keeper = keeper
        self._mu = threading.Lock()
        self._released = False
        #: Fired, with the cause, when the lock ends.
        self.lost = Signal()
        self.done = self.lost
        # Removed at release: a session's lease outlives many of its locks.
        self._follow = self.lost.fire
        lease.lost.add_callback(self._follow)

    @property
    def expires(self) -> float:
        """The conservative deadline on the client's monotonic clock (seconds, as Options.clock)."""
        return self.lease.expires

    @property
    def error(self) -> LeasegateError | None:
        """The error the lock ended with, or None while it is held."""
        return self.lost.cause if self.lost.is_set() else None  # type: ignore[return-value]

    def held(self) -> bool:
        """Whether the lock is still held: not ended, its lease not lost, its deadline not passed."""
        try:
            self.check()
            return True
        except LeasegateError:
            return False

    def check(self) -> None:
        """Raises the lock's error when it has ended, when its lease is lost, or
        when its deadline has passed on the clock even if the deadline thread
        has not run yet: call it right before a write. The lease is looked
        at itself, not only through the lock's signal."""
        lease = self.lease
        if not self.lost.is_set() and not lease.lost.is_set() and self._c.opts.clock() >= lease.expires:
            op = f'lock "{self.name}"'
            why = UnavailableError(op_message(op, "no gateway confirmed the lease before its deadline"))
            lease.lose(LockLostError(op_message(op, "lock lost", why), why))
        if lease.lost.is_set():
            self.lost.fire(lease.lost.cause)
        if self.lost.is_set():
            raise self.lost.cause or LockLostError(op_message(f'lock "{self.name}"', "lock lost"))

    def renew(self) -> float:
        """Renews the lease now and returns the new deadline. Raises the lock's
        error if a gateway proves it lost. A session lock has no lease of its
        own: its session keeps it."""
        if self._keeper is None:
            raise InvalidArgumentError(f'leasegate: renew lock "{self.name}": the lock belongs to a session, which keeps its lease')
        return self._keeper.renew_now()

    def release(self) -> bool:
        """Frees the lock and fires lost with a ReleasedError. Returns False when
        the lock was already gone (released or expired), and sends nothing
        once the client is closed (close ended the lock). Idempotent; it can
        never free a lock another holder acquired since (the fencing token
        names this grant)."""
        op = f'release lock "{self.name}"'
        with self._mu:
            if self._released:
                return False
            self._released = True
        was_held = not self.lost.is_set()
        released = ReleasedError(op_message(op, "lock released"))
        if self._keeper is not None:
            self._keeper.lose(released)  # stops its renewals too
        self.lost.fire(released)
        self.lease.lost.remove_callback(self._follow)
        if self._c.closed:
            return False
        msg = {"lockId": self.id, "fencingToken": str(self.token)}
        try:
            resp = self._c.call(op, lambda ep, tok, t: wire.unary(ep, "Release", msg, tok, t))
        except LeasegateError:
            raise
        except Exception as e:  # noqa: BLE001 - classified once, here
            raise classify(op, e) from e
        return bool(resp.get("released")) and was_held

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"Lock(name={self.name!r}, token={self.token}, shard={self.shard!r}, held={not self.lost.is_set()})"
