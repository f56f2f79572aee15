"""Signal: a threading.Event that is set once, with a cause, and tells callbacks."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

_log = logging.getLogger("leasegate")


class Signal(threading.Event):
    """An Event set once, by fire, with the cause; wait on it like any Event.

    The first fire wins: its cause stays, later ones are ignored. Callbacks
    added with add_callback run once, on the firing thread, before the
    event is set (so a thread woken by wait sees what they recorded), or at
    once when it has fired; they must not block. Each runs on its own: one
    that raises is logged (logger "leasegate") and the others still run, so
    a caller's failing callback never hides a loss from another listener.
    """

    def __init__(self) -> None:
        super().__init__()
        self._mu = threading.Lock()
        self._fired = False
        self._cause: BaseException | None = None
        self._callbacks: list[Callable[[BaseException | None], None]] = []

    @property
    def cause(self) -> BaseException | None:
        """Why the signal fired, or None while it has not."""
        return self._cause

    def fire(self, cause: BaseException | None) -> bool:
        """Sets the signal with cause; returns whether this call was the one that set it."""
        with self._mu:
            if self._fired:
                return False
            self._fired = True
            self._cause = cause
            cbs, self._callbacks = self._callbacks, []
        try:
            for cb in cbs:
                _run(cb, cause)
        finally:
            super().set()
        return True

    def set(self) -> None:
        """Fires the signal with no cause."""
        self.fire(None)

    def clear(self) -> None:
        """Refused: a Signal, once fired, stays fired."""
        raise RuntimeError("leasegate: a Signal cannot be cleared")

    def add_callback(self, cb: Callable[[BaseException | None], None]) -> None:
        """Runs cb(cause) when the signal fires, or now if it has."""
        with self._mu:
            if not self._fired:
                self._callbacks.append(cb)
                return
        _run(cb, self._cause)

    def remove_callback(self, cb: Callable[[BaseException | None], None]) -> None:
        """Drops cb (compared by ==) if it has not run yet, so that the signal
        no longer keeps cb, and what it refers to, alive."""
        with self._mu:
            try:
                self._callbacks.remove(cb)
            except ValueError:
                pass


def _run(cb: Callable[[BaseException | None], None], cause: BaseException | None) -> None:
    try:
        cb(cause)
    except Exception:  # noqa: BLE001 - a listener's failure is not the signal's
        _log.exception("leasegate: a Signal callback raised")


def on_event(ev: threading.Event | None, fn: Callable[[], None]) -> Callable[[], None]:
    """Calls fn once ev is set; returns a stop function that ends the watch.

    A Signal is watched by callback; a plain Event by a small thread that
    polls it every 50 ms until stopped.
    """
    if ev is None:
        return lambda: None
    stopped = threading.Event()
    if isinstance(ev, Signal):

        def cb(_cause: BaseException | None) -> None:
            if not stopped.is_set():
                fn()

        def stop() -> None:
            stopped.set()
            ev.remove_callback(cb)

        ev.add_callback(cb)
        return stop

    def watch() -> None:
        while not stopped.is_set():
            if ev.wait(0.05):
                if not stopped.is_set():
                    fn()
                return

    threading.Thread(target=watch, name="leasegate-cancel-watch", daemon=True).start()
    return stopped.set
