"""The chaos harness's Python worker (python.go): the contended workload of
workers.go, run through the Python SDK (sdk/python, on PYTHONPATH).

It takes the contended names with a TTL, failing over across every
gateway given; before each write to the fenced register it checks the
lock's loss signal (a threading.Event) and deadline, writes its fencing
token over the register's HTTP endpoint (which records the write, as it
does every holder's), and releases. Each acquire is reported on stdout as
JSON lines, one per event, every time a CLOCK_MONOTONIC reading in
nanoseconds ("at"), which the harness places on its own timeline:

  invoke   {op, name, requestId, wait, ttl}     just before the acquire
  queued   {op}                                 a queue-position report
  granted  {op, token, shard, requestId, lockId} just after the acquire returned
  fail     {op, outcome, err, code, reason}     the acquire raised
  done     {op}                                 the loss signal fired
  end      {op, lost, proof, evicted, deadline, err}  the holder let go
  released {op}                                 a gateway confirmed the release

The first argument is the configuration (JSON): id, endpoints, names,
register, ttl (seconds), seed. On SIGTERM the worker gives up its wait or
releases what it holds, and exits.
"""

import json
import os
import random
import signal
import sys
import threading
import time
import urllib.parse
import urllib.request

from leasegate import (
    CancelledError,
    Client,
    EvictedError,
    LeasegateError,
    LockLostError,
    NotAcquiredError,
    ReleasedError,
    UnavailableError,
    WaitTimeoutError,
)

cfg = json.loads(sys.argv[1])
stop = threading.Event()
out_mu = threading.Lock()
# The register is on loopback: no proxy from the environment.
http = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def emit(ev: str, op: int, **fields) -> None:
    fields.setdefault("at", time.monotonic_ns())
    line = json.dumps({"ev": ev, "op": op, **fields})
    with out_mu:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def stop_on_sigterm() -> None:
    """Sets stop on SIGTERM. The interpreter's C-level handler writes to the
    wakeup pipe; a thread sets the Event, which a Python-level handler could
    not safely do (it runs between the main thread's bytecodes, perhaps while
    that thread holds the Event's lock)."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    signal.set_wakeup_fd(w)
    signal.signal(signal.SIGTERM, lambda *_: None)

    def wait() -> None:
        os.read(r, 1)
        stop.set()

    threading.Thread(target=wait, name="sigterm", daemon=True).start()


def register(method: str, path: str, **query):
    """One register call; None when it failed (the write may not have been applied)."""
    url = cfg["register"] + path + "?" + urllib.parse.urlencode(query)
    try:
        with http.open(urllib.request.Request(url, method=method), timeout=2) as resp:
            return json.load(resp)
    except (OSError, ValueError):
        return None


def outcome(err: LeasegateError) -> str:
    if isinstance(err, WaitTimeoutError):
        return "wait-timeout"
    if isinstance(err, NotAcquiredError):
        return "held"
    if isinstance(err, LockLostError):
        return "lost"
    if isinstance(err, CancelledError):
        return "canceled"
    return "error"


def reason(err: LeasegateError) -> str:
    return "" if err.reason == 0 else err.reason.name


def caused_by(err: BaseException | None, cls) -> bool:
    while err is not None:
        if isinstance(err, cls):
            return True
        err = err.__cause__
    return False


def lost(lock, op: int) -> None:
    """Records the loss of lock, and how: a gateway's proof, or the deadline passing unconfirmed."""
    at = time.monotonic_ns()
    err = lock.error
    proof = err is not None and not caused_by(err, UnavailableError) and not caused_by(err, ReleasedError)
    emit("end", op, at=at, lost=True, proof=proof, evicted=isinstance(err, EvictedError),
         deadline=int(lock.expires * 1e9), err=str(err) if err is not None else "")
    try:
        lock.release()
    except LeasegateError:
        pass


def release(lock, op: int) -> None:
    at = time.monotonic_ns()
    if lock.error is not None:
        lost(lock, op)
        return
    emit("end", op, at=at)
    try:
        lock.release()
    except LeasegateError:
        return
    emit("released", op)


def hold(lock, op: int, rng: random.Random) -> None:
    """Writes the token a few times, checking the lock before each write, then releases."""
    for _ in range(1 + rng.randrange(3)):
        if not lock.held():
            lost(lock, op)
            return
        if stop.is_set():
            break
        if register("POST", "/write", name=lock.name, token=lock.token, client=cfg["id"]) is None:
            break
        if lock.lost.wait(rng.uniform(0.010, 0.050)):
            lost(lock, op)
            return
    if rng.randrange(4) == 0:
        register("GET", "/read", name=lock.name, client=cfg["id"])
    release(lock, op)


def main() -> None:
    stop_on_sigterm()
    rng = random.Random(cfg["seed"])
    ttl = cfg["ttl"]
    client = Client(cfg["endpoints"], client_id=cfg["id"], request_timeout=2, backoff_initial=0.05, backoff_max=0.5)
    op = 0
    while not stop.is_set():
        op += 1
        name = rng.choice(cfg["names"])
        wait = 1 + rng.random() * 3
        rid = os.urandom(16).hex()
        emit("invoke", op, name=name, requestId=rid, wait=wait, ttl=ttl)
        try:
            lock = client.acquire(name, ttl=ttl, wait_timeout=wait, request_id=rid, cancel=stop,
                                  on_queued=lambda _pos, op=op: emit("queued", op))
        except LeasegateError as e:
            emit("fail", op, outcome=outcome(e), err=str(e), code=e.code, reason=reason(e))
            stop.wait(0.05)
            continue
        granted = time.monotonic_ns()
        lock.lost.add_callback(lambda _cause, op=op: emit("done", op))
        emit("granted", op, at=granted, token=lock.token, shard=lock.shard, requestId=lock.request_id, lockId=lock.id)
        hold(lock, op, rng)
    client.close()


if __name__ == "__main__":
    main()
