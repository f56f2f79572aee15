"""Signal: a threading.Event that is set once, with a cause, and tells callbacks."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Signal(threading.Event):
    """An Event set once, by fire, with the cause; wait on it like any Event.

    The first fire wins: its cause stays, later ones are ignored. Callbacks
    added with add_callback run once, on the firing thread, before the
    event is set (so a thread woken by wait sees what they recorded), or at
    once when it has fired; they must not block.
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
                cb(cause)
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
        cb(self._cause)


def on_event(ev: threading.Event | None, fn: Callable[[], None]) -> Callable[[], None]:
    """Calls fn once ev is set; returns a stop function that ends the watch.

    A Signal is watched by callback; a plain Event by a small thread that
    polls it every 50 ms until stopped.
    """
    if ev is None:
        return lambda: None
    stopped = threading.Event()
    if isinstance(ev, Signal):
        ev.add_callback(lambda _c: None if stopped.is_set() else fn())
        return stopped.set

    def watch() -> None:
        while not stopped.is_set():
            if ev.wait(0.05):
                if not stopped.is_set():
                    fn()
                return

    threading.Thread(target=watch, name="leasegate-cancel-watch", daemon=True).start()
    return stopped.set
