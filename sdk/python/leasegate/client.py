"""Client: the SDK's entry point."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from .acquire import AcquireOptions, acquire, try_acquire
from .core import Core
from .lock import Lock
from .run import LockContext, run_locked
from .session import Session
from .signal import Signal

T = TypeVar("T")


class Client(Core):
    """Talks to one or more leasegate gateways; any gateway serves any call,
    and a call that fails retryably moves on to the next endpoint under the
    same request id (an acquire keeps its queue place).

    Client(["http://gw1:8080", "http://gw2:8080"], token="…") takes Options'
    fields as keywords, or one Options as options=. Safe to share among
    threads. Every call blocks until it has its answer.
    """

    def acquire(self, name: str, **opts) -> Lock:
        """Waits in the name's queue (FIFO) until granted, reporting its place
        through on_queued, and returns the held Lock, renewed in the
        background until released. Takes AcquireOptions' fields as keywords.
        Raises WaitTimeoutError after wait_timeout, CancelledError when
        cancel is set."""
        return acquire(self, name, AcquireOptions(**opts))

    def try_acquire(self, name: str, **opts) -> Lock:
        """Takes the lock if it is free and never waits; NotAcquiredError when held."""
        return try_acquire(self, name, AcquireOptions(**opts))

    def lock(self, name: str, **opts) -> LockContext:
        """A context manager: `with client.lock(name) as lock:` acquires (as
        acquire), and releases on every exit path. A normal exit after the
        lock was lost raises its LockLostError."""
        return LockContext(lambda: self.acquire(name, **opts))

    def with_lock(self, name: str, fn: Callable[[Lock, Signal], T], **opts) -> T:
        """Acquires name, runs fn(lock, signal) and releases the lock on every
        exit path. signal (a threading.Event) fires when the lock ends or
        opts' cancel is set: have fn's work watch it, and send lock.token
        with its writes. Raises, in this order: the acquire's error; fn's,
        unchanged; the lock's LockLostError when the lock was lost before fn
        returned, even though fn succeeded (its work may have run on past the
        loss); release's."""
        return run_locked(lambda: self.acquire(name, **opts), fn, opts.get("cancel"))

    def open_session(self, ttl: float | None = None, cancel: threading.Event | None = None) -> Session:
        """Opens a session of ttl seconds (default: the client's default_ttl)."""
        return Session.open(self, ttl if ttl is not None else self.opts.default_ttl, cancel)
