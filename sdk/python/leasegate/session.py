"""Session: leases that many locks of one client share, one per shard,
renewed together by one keepalive call. Each shard's lease is lost on its
own: a shard that fails costs the session only the locks on it."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from . import wire
from .acquire import AcquireOptions, acquire, try_acquire
from .errors import (
    ErrorReason,
    LeasegateError,
    LockLostError,
    ReleasedError,
    SessionLostError,
    classify,
    op_message,
    proof_refused,
    rate_limit_delay,
)
from .keeper import Confirmation, Keeper
from .lock import LeaseHolder, Lock
from .run import LockContext, run_locked
from .signal import Signal

T = TypeVar("T")

_log = logging.getLogger("leasegate")

LIVE, LOST, UNCONFIRMED = "live", "lost", "unconfirmed"


@dataclass
class ShardAnswer:
    """A session call's outcome on one shard: LIVE (with its TTL and
    valid_for, in seconds), LOST or UNCONFIRMED. A LIVE answer without a TTL
    confirms nothing: it is UNCONFIRMED."""

    shard: str
    state: str
    ttl: float = 0.0
    valid_for: float = 0.0


def shard_answers(resp: dict) -> list[ShardAnswer]:
    """The shards of a session call's answer, parsed (WireError internal when malformed)."""
    raw = resp.get("shards") or []
    if not isinstance(raw, list):
        raise wire.WireError("internal", f"malformed answer: shards is {raw!r}; want a list", from_server=True)
    out = []
    for sh in raw:
        if not isinstance(sh, dict):
            raise wire.WireError("internal", f"malformed answer: a shard is {sh!r}; want a message", from_server=True)
        name, state = str(sh.get("shard") or ""), sh.get("state")
        ttl, valid = wire.millis(sh, "ttlMs"), wire.millis(sh, "validForMs")
        if state in ("SHARD_LEASE_STATE_LIVE", 1) and ttl > 0:
            out.append(ShardAnswer(name, LIVE, ttl, valid))
        elif state in ("SHARD_LEASE_STATE_LOST", 2):
            out.append(ShardAnswer(name, LOST))
        else:
            out.append(ShardAnswer(name, UNCONFIRMED))
    return out


class Session:
    """Shares one lease per shard among its locks. Its keepalive runs every
    TTL × renew_fraction in a background thread; a shard's lease whose
    deadline passes unconfirmed, or that a gateway reports LOST, ends the
    locks on that shard (their cause is a LockLostError caused by a
    SessionLostError) and is never renewed again, so it lapses in etcd too.
    A later acquire on that shard opens a new lease there (the old one's
    locks stay lost). The session ends when no lease is left live, or when
    it or its client is closed.

    Used as a context manager it is closed on exit.
    """

    def __init__(self, core, session_id: str, ttl: float, anchor: float):
        self._c = core
        self._id = session_id
        #: The session's TTL in seconds.
        self.ttl = ttl
        self._anchor = anchor
        self._leases: dict[str, Keeper] = {}
        self._cv = threading.Condition()
        self._next: float | None = None
        self._extending = threading.Lock()  # one extension at a time, so none is wasted
        #: Fired, with the cause, when the session ends.
        self.done = Signal()
        forget = core.track(self._end)
        self.done.add_callback(lambda _cause: forget())

    @classmethod
    def open(cls, c, ttl: float, cancel: threading.Event | None = None) -> "Session":
        op = "open session"
        c.check_open(op)
        sent = [0.0]
        msg = {"clientId": c.opts.client_id, "ttlMs": str(math.ceil(ttl * 1000))}

        def attempt(ep, tok, t):
            sent[0] = c.opts.clock()
            r = wire.unary(ep, "OpenSession", msg, tok, t)
            return {"sessionId": r.get("sessionId"), "ttl": wire.millis(r, "ttlMs"), "shards": shard_answers(r)}

        resp = c.call(op, attempt, cancel=cancel)
        s = cls(c, str(resp["sessionId"] or ""), resp["ttl"] or ttl, sent[0])
        s._apply(sent[0], resp["shards"])
        threading.Thread(target=s._keep_alive_loop, name="leasegate-session", daemon=True).start()
        return s

    @property
    def session_id(self) -> str:
        """The session id (it changes when the session extends to more shards)."""
        return self._id

    def lease(self, shard: str) -> LeaseHolder | None:
        """The live lease on shard, or None."""
        with self._cv:
            k = self._leases.get(shard)
        return k if k is not None and not k.lost.is_set() else None

    def _apply(self, sent: float, answers: list[ShardAnswer], fresh: str = "") -> None:
        """Credits a session call's per-shard outcomes, sent at sent. A LIVE
        answer opens a lease on a shard the session has none on, and, for the
        shard fresh (which the call replaced), one in place of a lost lease;
        a lost lease is otherwise never revived."""
        for a in answers:
            op = f"session lease on shard {a.shard}"
            if a.state == LIVE:
                conf = Confirmation(a.ttl, a.valid_for)
                with self._cv:
                    k = self._leases.get(a.shard)
                    if k is None or (a.shard == fresh and k.lost.is_set()):
                        deadline = self._c.opts.deadline_of(sent, conf.ttl, conf.valid_for)
                        k = Keeper(self._c, op, conf.ttl, sent, deadline, None, False)
                        self._leases[a.shard] = k
                        k.lost.add_callback(lambda _cause: self._lease_lost())
                        continue
                k.credit(sent, conf)
            elif a.state == LOST:
                sl = SessionLostError(op_message(op, "session lost"))
                self.lose_shard(a.shard, sl)

    def lose_shard(self, shard: str, cause: LeasegateError) -> None:
        """Loses the session's lease on shard, with its locks (their cause a
        LockLostError caused by cause)."""
        with self._cv:
            k = self._leases.get(shard)
        if k is not None:
            k.lose(LockLostError(op_message(f"session lease on shard {shard}", "lock lost", cause), cause))

    def _lease_lost(self) -> None:
        """Ends the session once no lease is left live."""
        if not self._live():
            self.done.fire(SessionLostError(op_message("session", "session lost: no lease left")))
            with self._cv:
                self._cv.notify_all()

    def _end(self, closed: LeasegateError) -> None:
        """Ends the session and loses its leases with closed (the client's close)."""
        if not self.done.fire(closed):
            return
        with self._cv:
            self._cv.notify_all()
            ks = list(self._leases.values())
        for k in ks:
            k.lose(LockLostError(op_message("session", "lock lost", closed), closed))

    def _live(self) -> list[str]:
        with self._cv:
            return [s for s, k in self._leases.items() if not k.lost.is_set()]

    def _keep_alive_loop(self) -> None:
        clock = self._c.opts.clock
        while True:
            with self._cv:
                while not self.done.is_set():
                    at = self._next if self._next is not None else self._anchor + self._c.opts.renew_interval(self.ttl)
                    self._next = at
                    left = at - clock()
                    if left <= 0:
                        break
                    self._cv.wait(left)
                if self.done.is_set():
                    return
                self._next = None
            try:
                self._keep_alive_once()
            except Exception:  # noqa: BLE001 - the session outlives a fault of one keepalive
                _log.exception("leasegate: a session keepalive failed unexpectedly")
                self._schedule(self._c.backoff().next())

    def _schedule(self, delay: float | None) -> None:
        with self._cv:
            self._next = None if delay is None else self._c.opts.clock() + delay

    def _keep_alive_once(self) -> None:
        op = "keep session alive"
        shards = self._live()
        if not shards:
            self.done.fire(SessionLostError(op_message(op, "session lost: no lease left")))
            return
        i, ep = self._c.pick()
        clock = self._c.opts.clock
        sent = clock()
        # An answer after the earliest lease's deadline could not save it.
        with self._cv:
            earliest = min(self._leases[s].expires for s in shards)
        timeout = max(0.001, min(self._c.opts.request_timeout, earliest - sent))
        if self.done.is_set():
            return
        try:
            resp = wire.unary(ep, "KeepAliveSession", {"sessionId": self._id, "shards": shards}, self._c.token(), timeout)
            answers = shard_answers(resp)
        except wire.WireError as err:
            if self.done.is_set():
                return
            e = classify(op, err)
            if e.reason == ErrorReason.SESSION_LOST or (proof_refused(err) and e.reason != ErrorReason.SESSION_SHARD_MISSING):
                lost = e if isinstance(e, SessionLostError) else SessionLostError(op_message(op, "session lost", err), err)
                with self._cv:
                    ks = [self._leases.get(s) for s in ([e.shard] if e.shard else shards)]
                for k in ks:
                    if k is not None:
                        k.lose(LockLostError(op_message(op, "lock lost", lost), lost))
                self._schedule(0)
                return
            self._c.failed(i)
            delay = rate_limit_delay(err)
            self._schedule(delay if delay else self._c.backoff().next())
            return
        self._apply(sent, answers)
        with self._cv:
            if sent > self._anchor:
                self._anchor = sent
        unconfirmed = any(a.state == UNCONFIRMED for a in answers)
        self._schedule(self._c.opts.backoff_initial if unconfirmed else None)

    def extend(self, shard: str, cancel: threading.Event | None = None) -> None:
        """Makes sure the session holds a live lease on shard: opens one there
        (ExtendSession), replacing a lease the session lost, unless another
        call did so meanwhile. A lost lease is replaced, never revived: the
        gateway revokes it first, so its locks are freed and stay lost."""
        op = f"extend session to shard {shard}"
        with self._extending:
            self._check_open(op)
            if self.lease(shard) is not None:
                return
            with self._cv:
                replace = shard in self._leases
            sent = [0.0]

            def attempt(ep, tok, t):
                sent[0] = self._c.opts.clock()
                msg = {
                    "sessionId": self._id,
                    "shards": [shard],
                    "ttlMs": str(math.ceil(self.ttl * 1000)),
                    "clientId": self._c.opts.client_id,
                    "replace": replace,
                }
                r = wire.unary(ep, "ExtendSession", msg, tok, t)
                return str(r.get("sessionId") or ""), shard_answers(r)

            sid, answers = self._c.call(op, attempt, cancel=cancel)
            self._id = sid or self._id
            self._apply(sent[0], answers, fresh=shard)

    def _check_open(self, op: str) -> None:
        if self.done.is_set():
            c = self.done.cause
            raise c if isinstance(c, LeasegateError) else classify(op, c)

    def acquire(self, name: str, **opts) -> Lock:
        """Waits for the lock in the session: the lock lives on the session's lease on its shard.
        Takes AcquireOptions' fields as keywords."""
        self._check_open("acquire lock in session")
        return acquire(self._c, name, AcquireOptions(**opts), self)

    def try_acquire(self, name: str, **opts) -> Lock:
        """Takes the lock in the session if it is free, and never waits."""
        self._check_open("try to acquire lock in session")
        return try_acquire(self._c, name, AcquireOptions(**opts), self)

    def with_lock(self, name: str, fn: Callable[[Lock, Signal], T], **opts) -> T:
        """Runs fn under the lock taken in the session, as Client.with_lock."""
        return run_locked(lambda: self.acquire(name, **opts), fn, opts.get("cancel"))

    def lock(self, name: str, **opts):
        """A context manager holding the lock in the session, as Client.lock."""
        return LockContext(lambda: self.acquire(name, **opts))

    def close(self) -> None:
        """Revokes the session's leases, releasing every lock attached (their cause is a ReleasedError)."""
        closed = ReleasedError(op_message("close session", "session closed"))
        if not self.done.fire(closed):
            return
        with self._cv:
            self._cv.notify_all()
            ks = list(self._leases.values())
        for k in ks:
            k.lose(closed)
        self._c.call("close session", lambda ep, tok, t: wire.unary(ep, "CloseSession", {"sessionId": self._id}, tok, t))

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
