"""Acquiring: the server-streaming Acquire with its queue positions,
try_acquire, and the turning of a grant into a kept Lock."""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from . import wire
from .errors import (
    CancelledError,
    ErrorReason,
    InvalidArgumentError,
    LeasegateError,
    LockLostError,
    NotAcquiredError,
    UnavailableError,
    WaitTimeoutError,
    classify,
    op_message,
    proof_refused,
    rate_limit_delay,
    retryable,
)
from .keeper import Confirmation, Keeper
from .lock import LeaseHolder, Lock
from .signal import on_event

MAX_SHARD_RECOVERIES = 3

# How long past its wait deadline an acquire may take to return: the time to
# confirm a grant that arrived at the deadline. The gateway ends the wait
# itself; closing an attempt's stream this long after the deadline only
# guards against a gateway or network that stalls (the Go SDK's waitGrace).
WAIT_GRACE = 0.5


@dataclass
class AcquireOptions:
    """Tune one acquire; durations in seconds, every field optional.

    ttl: lease TTL (the gateway rounds it up to whole seconds). Default: the client's default_ttl.
    wait_timeout: longest wait for a grant, then WaitTimeoutError. Default: wait until cancelled.
    on_queued: called with the caller's place in line (1: next) whenever the gateway reports it.
    cancel: a threading.Event; setting it gives up the wait (the gateway drops the caller from the queue).
    request_id: idempotency key; a retry with it keeps the queue place. Default: a random UUID.
    limit: semaphore limit, 1 to 1000: the first limit acquirers hold at once. Default 1.
    lock_delay: lock-delay after an expiry (not a release), 0 to 60. Default 0.
    reentrant: re-entrant (session locks only).
    manual_renew: no background renewal: renew with Lock.renew. Ignored for session locks.
    """

    ttl: float | None = None
    wait_timeout: float | None = None
    on_queued: Callable[[int], None] | None = None
    cancel: threading.Event | None = None
    request_id: str | None = None
    limit: int = 0
    lock_delay: float = 0.0
    reentrant: bool = False
    manual_renew: bool = False

    def validate(self, op: str) -> None:
        """Raises InvalidArgumentError naming a bad field and its allowed range."""
        if self.ttl is not None and not self.ttl > 0:
            raise InvalidArgumentError(op_message(op, f"ttl is {self.ttl}; want a positive number of seconds"))
        if self.wait_timeout is not None and not self.wait_timeout > 0:
            raise InvalidArgumentError(op_message(op, f"wait_timeout is {self.wait_timeout}; want a positive number of seconds"))
        if self.limit and not (isinstance(self.limit, int) and 1 <= self.limit <= 1000):
            raise InvalidArgumentError(op_message(op, f"limit is {self.limit}; want an integer from 1 to 1000"))
        if not 0 <= self.lock_delay <= 60:
            raise InvalidArgumentError(op_message(op, f"lock_delay is {self.lock_delay}; want 0 to 60 seconds"))


class SessionBinding(Protocol):
    """What a session lends an acquire: its id and its lease on each shard."""

    @property
    def session_id(self) -> str: ...

    def lease(self, shard: str) -> LeaseHolder | None: ...

    def extend(self, shard: str, cancel: threading.Event | None) -> None: ...

    def lose_shard(self, shard: str, cause: LeasegateError) -> None: ...


def _ms(seconds: float) -> str:
    """Seconds as whole milliseconds on the wire (an int64: a JSON string), rounded up."""
    return str(math.ceil(seconds * 1000))


def _request(c, name: str, o: AcquireOptions, rid: str, s: SessionBinding | None) -> dict:
    return {
        "name": name,
        "ttlMs": _ms(o.ttl if o.ttl is not None else c.opts.default_ttl),
        "clientId": c.opts.client_id,
        "requestId": rid,
        "sessionId": s.session_id if s else "",
        "limit": o.limit,
        "reentrant": o.reentrant,
        "lockDelayMs": _ms(o.lock_delay),
    }


def acquire(c, name: str, o: AcquireOptions, s: SessionBinding | None = None) -> Lock:
    """Waits in the name's queue until granted, retrying the same request id on the next gateway."""
    op = f'acquire lock "{name}"'
    c.check_open(op)
    o.validate(op)
    clock = c.opts.clock
    anchor = clock()
    rid = o.request_id or str(uuid.uuid4())
    wait_until = anchor + o.wait_timeout if o.wait_timeout is not None else None
    # The latest the call may return: whatever a gateway does, the caller is
    # not held far past the wait deadline it asked for.
    until = wait_until + WAIT_GRACE if wait_until is not None else None
    bo = c.backoff()
    failures = recoveries = 0
    last: BaseException | None = None
    while True:
        if o.cancel is not None and o.cancel.is_set():
            raise CancelledError(op_message(op, "cancelled"), last)
        c.check_open(op)
        msg = _request(c, name, o, rid, s)
        if wait_until is not None:
            left = math.ceil((wait_until - clock()) * 1000)
            if left <= 0:
                raise WaitTimeoutError(op_message(op, "wait timed out"), last)
            msg["waitTimeoutMs"] = str(left)
        i, ep = c.pick()
        sent = clock()
        progressed = False
        stream: wire.Stream | None = None
        stop = forget = lambda: None  # noqa: E731
        guard: threading.Timer | None = None
        try:
            stream = wire.Stream(ep, "Acquire", msg, c.token(), c.opts.request_timeout)
            stop = on_event(o.cancel, stream.close)
            forget = c.track(lambda _closed, stream=stream: stream.close())
            if wait_until is not None:
                guard = threading.Timer(max(until - clock(), 0), stream.close)
                guard.daemon = True
                guard.start()
            g: dict | None = None
            position = -1
            for m in stream:
                if "queued" in m:
                    progressed = True
                    p = wire.int64(wire.message(m, "queued"), "position")
                    # The gateway repeats the position as a heartbeat:
                    # report the first of each attempt, then changes.
                    if o.on_queued is not None and p != position:
                        position = p
                        o.on_queued(p)
                elif "granted" in m:
                    g = grant(wire.message(m, "granted"))
                    break
            if g is None:
                raise wire.WireError("unavailable", "the acquire stream ended without a grant")
            stop()
            stream.close()
            if o.cancel is not None and o.cancel.is_set():
                _let_go(c, g, until)
                raise CancelledError(op_message(op, "cancelled"))
            c.check_open(op)
            if s is not None and s.lease(g["shard"]) is None:
                # Granted on a lease the session gave up as lost: let the
                # grant go and take the name again on a new lease.
                _let_go(c, g, until)
                if recoveries >= MAX_SHARD_RECOVERIES:
                    raise UnavailableError(op_message(op, f"granted on shard {g['shard']}, which the session has no lease on; released it"))
                recoveries += 1
                rid = str(uuid.uuid4())
                s.extend(g["shard"], o.cancel)
                continue
            return _held(c, op, name, g, rid, anchor, sent, o, s, until)
        except LeasegateError:
            raise
        except wire.WireError as err:
            if o.cancel is not None and o.cancel.is_set():
                raise CancelledError(op_message(op, "cancelled"), err) from None
            c.check_open(op)
            if s is not None and recoveries < MAX_SHARD_RECOVERIES:
                new_rid = _recover(c, op, s, err, o.cancel)
                if new_rid is not None:
                    recoveries += 1
                    rid = new_rid or rid
                    continue
            if wait_until is not None and clock() >= wait_until:
                raise WaitTimeoutError(op_message(op, "wait timed out"), err) from None
            last = err
            pause = 0.0
            delay = rate_limit_delay(err)
            if delay is not None:
                # Waited out on the same gateway: another's budget would only hide the tenant's overload.
                pause = delay if delay > 0 else bo.next()
                if wait_until is not None and clock() + pause >= wait_until:
                    raise classify(op, err) from None
            else:
                if not retryable(err):
                    raise classify(op, err) from None
                c.failed(i)
                failures = 1 if progressed else failures + 1
                if failures >= max(3, c.endpoint_count) * 2:
                    raise UnavailableError(op_message(op, "no gateway available", err), err) from None
                if failures % c.endpoint_count == 0:
                    pause = bo.next()
            if pause > 0:
                if wait_until is not None:
                    pause = min(pause, max(wait_until - clock(), 0))
                if o.cancel is not None:
                    if o.cancel.wait(pause):
                        raise CancelledError(op_message(op, "cancelled"), err) from None
                else:
                    time.sleep(pause)
        finally:
            stop()
            forget()
            if guard is not None:
                guard.cancel()
            if stream is not None:
                stream.close()


def _recover(c, op: str, s: SessionBinding, err: BaseException, cancel: threading.Event | None) -> str | None:
    """Handles a failure that concerns the session's lease on one shard:
    SESSION_SHARD_MISSING (the session has none there) or SESSION_LOST
    naming the shard (the gateway proved it gone: it is lost, with its
    locks). The session then covers the shard with a new lease. Returns
    None when err is neither, "" to retry under the same request id, or
    the new request id to retry under: a waiter left on a lost lease is
    bound to it, and the same id on the new lease would be refused as
    another caller's."""
    e = classify(op, err)
    if not e.shard:
        return None
    if e.reason == ErrorReason.SESSION_SHARD_MISSING:
        s.extend(e.shard, cancel)
        return ""
    if e.reason == ErrorReason.SESSION_LOST:
        s.lose_shard(e.shard, e)
        s.extend(e.shard, cancel)
        return str(uuid.uuid4())
    return None


def grant(g: dict) -> dict:
    """A Granted message with its numbers checked and parsed (WireError
    internal when one is malformed): what _held and Lock read."""
    return {
        "lockId": str(g.get("lockId") or ""),
        "fencingToken": wire.int64(g, "fencingToken"),
        "ttlMs": wire.int64(g, "ttlMs"),
        "validForMs": wire.int64(g, "validForMs"),
        "shard": str(g.get("shard") or ""),
        "holdCount": wire.int64(g, "holdCount"),
    }


def _ts(v) -> datetime | None:
    if not v:
        return None
    try:
        return datetime.fromisoformat(str(v).replace("Z", "+00:00"))
    except ValueError:
        return None


def try_acquire(c, name: str, o: AcquireOptions, s: SessionBinding | None = None) -> Lock:
    """Grants the lock if it is free, and never waits (NotAcquiredError when held)."""
    op = f'try to acquire lock "{name}"'
    c.check_open(op)
    o.validate(op)
    clock = c.opts.clock
    anchor = clock()
    rid = o.request_id or str(uuid.uuid4())
    recoveries = 0
    while True:
        sent = [anchor]
        msg = _request(c, name, o, rid, s)

        def attempt(ep, tok, t):
            sent[0] = clock()
            r = wire.unary(ep, "TryAcquire", msg, tok, t)
            if r.get("acquired") and r.get("granted"):
                r["granted"] = grant(wire.message(r, "granted"))
            return r

        try:
            resp = c.call(op, attempt, cancel=o.cancel)
        except LeasegateError as err:
            if s is not None and recoveries < MAX_SHARD_RECOVERIES:
                new_rid = _recover(c, op, s, err, o.cancel)
                if new_rid is not None:
                    recoveries += 1
                    rid = new_rid or rid
                    continue
            raise
        if not resp.get("acquired") or not resp.get("granted"):
            holder, delay = _ts(resp.get("holderExpiresAt")), _ts(resp.get("delayUntil"))
            if delay:
                why = f'lock "{name}" is free, but an expired holder\'s lock-delay keeps it from everyone until {delay.isoformat()}'
            elif holder:
                why = f'lock "{name}" is held until {holder.isoformat()}'
            else:
                why = f'lock "{name}" is held'
            raise NotAcquiredError("leasegate: " + why, holder, delay)
        g = resp["granted"]
        c.check_open(op)
        if s is not None and s.lease(g["shard"]) is None and recoveries < MAX_SHARD_RECOVERIES:
            # Granted on a lease the session gave up as lost: let the grant
            # go and take the name again on a new lease.
            _let_go(c, g)
            recoveries += 1
            rid = str(uuid.uuid4())
            s.extend(g["shard"], o.cancel)
            continue
        return _held(c, op, name, g, rid, anchor, sent[0], o, s)


def _let_go(c, g: dict, until: float | None = None) -> None:
    """Releases a grant that will not be handed out, best effort: unanswered, it
    lapses with its lease. The release is bounded by the request timeout; with
    until (a reading of the client's clock) the caller waits for it only until
    then, and the release goes on in a daemon thread for the rest of its bound."""
    msg = {"lockId": g.get("lockId", ""), "fencingToken": str(g.get("fencingToken") or 0)}

    def release() -> None:
        try:
            c.call("release an unwanted grant", lambda ep, tok, t: wire.unary(ep, "Release", msg, tok, t))
        except LeasegateError:
            pass

    if until is None:
        release()
        return
    t = threading.Thread(target=release, name="leasegate-let-go", daemon=True)
    t.start()
    t.join(max(until - c.opts.clock(), 0))


def _held(
    c, op: str, name: str, g: dict, rid: str, anchor: float, sent: float, o: AcquireOptions, s: SessionBinding | None, until: float | None = None
) -> Lock:
    """Turns a grant into a Lock. The first deadline is the tighter of the
    first attempt's send time plus the TTL (every lease event of the grant
    follows it) and the granted attempt's send time plus valid_for (which
    counts from that attempt's arrival). After a long wait that leaves too
    little, a renewal right away gives a fresh send time. until (a reading of
    the client's clock) bounds that renewal and the release of a grant let go."""
    if s is not None:
        lease = s.lease(str(g.get("shard") or ""))
        if lease is None:
            _let_go(c, g, until)
            raise UnavailableError(op_message(op, f"granted on shard {g.get('shard')}, which the session has no lease on; released it"))
        # A lease lost since the grant takes the lock with it, as it should.
        return Lock(c, name, g, rid, lease, None)
    ttl = wire.millis(g, "ttlMs")
    if not ttl > 0:
        raise UnavailableError(op_message(op, f"the gateway granted a lease with ttl_ms {g.get('ttlMs')}"))
    opts = c.opts
    clock = opts.clock
    lock_id, token = g["lockId"], str(g["fencingToken"])

    def renew(ep, tok, t) -> Confirmation:
        r = wire.unary(ep, "Renew", {"lockId": lock_id, "fencingToken": token}, tok, t)
        return Confirmation(wire.millis(r, "ttlMs"), wire.millis(r, "validForMs"))

    deadline = opts.deadline_of(anchor, ttl)
    valid = wire.millis(g, "validForMs")
    if valid > 0:
        deadline = min(deadline, opts.deadline_of(sent, ttl, valid))
    if clock() - anchor >= ttl * opts.renew_fraction:
        rsent = [0.0]

        def attempt(ep, tok, t):
            rsent[0] = clock()
            return renew(ep, tok, t)

        try:
            # Not bounded by the first deadline, which a long wait may have
            # passed: the gateway kept the waiter's lease alive, and this
            # renewal's confirmation, counted from its own send time, is
            # what the lock's deadline then rests on.
            conf = c.call(op, attempt, cancel=o.cancel, until=until)
            # Without a TTL it confirms nothing; above the granted one it
            # counts only the granted one (a renewal never changes it).
            if conf.ttl > 0:
                anchor = rsent[0]
                deadline = opts.deadline_of(anchor, min(conf.ttl, ttl), conf.valid_for)
        except LeasegateError as err:
            cause = err.__cause__ if err.__cause__ is not None else err
            if proof_refused(cause):
                raise LockLostError(op_message(op, "lock lost", cause), classify(op, cause)) from None
    if clock() >= deadline:
        _let_go(c, g, until)
        raise UnavailableError(op_message(op, "granted, but no gateway confirmed the lease before its deadline; released it"))
    keeper = Keeper(c, f'lock "{name}"', ttl, anchor, deadline, renew, not o.manual_renew)
    return Lock(c, name, g, rid, keeper, keeper)
