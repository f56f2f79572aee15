"""Running code under a lock: with_lock and the lock() context manager, shared by Client and Session."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from .errors import CancelledError, LeasegateError, LockLostError
from .lock import Lock
from .signal import Signal, on_event

T = TypeVar("T")


def run_locked(take: Callable[[], Lock], fn: Callable[[Lock, Signal], T], cancel: threading.Event | None) -> T:
    """Acquires with take, runs fn(lock, signal) and releases the lock on every
    exit path. signal fires when the lock ends or cancel is set. Raises, in
    this order: the acquire's error; fn's, unchanged; the lock's
    LockLostError when it was lost before fn returned; release's."""
    lock = take()
    signal = Signal()
    lock.lost.add_callback(signal.fire)
    stop = on_event(cancel, lambda: signal.fire(cancel_cause()))
    try:
        try:
            result = fn(lock, signal)
        except BaseException:
            _release_quietly(lock)
            raise
        lost = lock.error if isinstance(lock.error, LockLostError) else None
        released = _release(lock)
        if lost is not None:
            raise lost
        if released is not None:
            raise released
        return result
    finally:
        stop()


def cancel_cause() -> LeasegateError:
    """The cause a with_lock signal fires with when the caller cancels."""
    return CancelledError("leasegate: the caller cancelled")


def _release(lock: Lock) -> LeasegateError | None:
    try:
        lock.release()
    except LeasegateError as e:
        return e
    return None


def _release_quietly(lock: Lock) -> None:
    # The body's exception is what the caller must see; a failed release
    # leaves the lock to lapse at its lease's end.
    _release(lock)


class LockContext:
    """`with client.lock(name) as lock:` — acquires on entry and releases on
    every exit. On a normal exit after the lock was lost it raises the
    lock's LockLostError: the body's work may have run on past the loss."""

    def __init__(self, take: Callable[[], Lock]):
        self._take = take
        self._lock: Lock | None = None

    def __enter__(self) -> Lock:
        self._lock = self._take()
        return self._lock

    def __exit__(self, exc_type, exc, tb) -> bool:
        lock = self._lock
        assert lock is not None
        if exc_type is not None:
            _release_quietly(lock)
            return False
        lost = lock.error if isinstance(lock.error, LockLostError) else None
        released = _release(lock)
        if lost is not None:
            raise lost
        if released is not None:
            raise released
        return False
