"""Runner of the language-neutral conformance scenarios
(sdk/conformance/scenarios.json, rules in sdk/conformance/README.md) against
the conformance harness: LEASEGATE_CONFORMANCE is the harness's JSON
description, LEASEGATE_CONFORMANCE_SCENARIOS the scenarios' path. Skipped
when either is unset.
"""

from __future__ import annotations

import json
import os
import secrets
import ssl
import sys
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import leasegate  # noqa: E402

DESC = os.environ.get("LEASEGATE_CONFORMANCE")
SCENARIOS = os.environ.get("LEASEGATE_CONFORMANCE_SCENARIOS")

# Fields each op takes (rule: a runner refuses an unknown op or field).
OWNER = {"client", "session"}
FIELDS: dict[str, set[str]] = {
    "client": {"as", "gateways", "token", "tokenSource", "tls", "recordRenewals"},
    "rotateToken": {"client", "token"},
    "alignRevision": {"next"},
    "expectRenewals": {"lock", "forMs", "atLeast"},
    "openSession": {"client", "as", "ttlMs"},
    "closeSession": {"session", "expectError"},
    "acquire": OWNER | {"name", "as", "ttlMs", "waitTimeoutMs", "requestId", "manualRenew"},
    "tryAcquire": OWNER | {"name", "as", "ttlMs", "expectError", "maxElapsedMs"},
    "awaitGranted": {"lock", "timeoutMs", "afterLossOf"},
    "awaitPosition": {"lock", "position", "timeoutMs"},
    "awaitError": {"lock", "error", "timeoutMs", "minElapsedMs", "maxElapsedMs"},
    "expectWaiting": {"lock", "forMs"},
    "release": {"lock", "expectError"},
    "renew": {"lock", "minElapsedMs", "maxElapsedMs", "expectError"},
    "expectHeld": {"lock"},
    "expectReleased": {"lock", "timeoutMs"},
    "awaitLost": {"lock", "withinMs", "error", "timeoutMs"},
    "awaitLostInLease": {"lock", "gateways", "earlyMs", "timeoutMs"},
    "withLock": OWNER | {"name", "ttlMs", "exit", "expectError"},
    "expectTokenAbove": {"lock", "thanLock", "than"},
    "expectTokenExact": {"lock", "odd"},
    "fenceWrite": {"lock", "expect", "resource"},
    "raiseEpoch": {"atLeast"},
    "stopGateway": {"gateway"},
    "startGateway": {"gateway"},
    "resetRequests": {"gateways"},
    "expectRequests": {"gateways", "method", "count", "atLeast", "token"},
}

# The calls whose answer confirms a lock's own lease.
CONFIRMING = ("Acquire", "TryAcquire", "Renew")


def load_scenarios(path: str) -> list[dict]:
    """The scenarios of the file at path, refusing another version, an
    unknown op or field, or a repeated id, before any of them runs."""
    doc = json.loads(Path(path).read_text())
    extra = set(doc) - {"version", "scenarios"}
    if extra:
        raise StepFailed(f"{path}: unknown fields {sorted(extra)}")
    if doc.get("version") != 1:
        raise StepFailed(f"{path}: version {doc.get('version')}; this runner reads version 1")
    seen = set()
    for sc in doc["scenarios"]:
        extra = set(sc) - {"id", "title", "guarantee", "steps"}
        if extra:
            raise StepFailed(f"{path}: scenario {sc.get('id')}: unknown fields {sorted(extra)}")
        if not sc.get("id") or sc["id"] in seen:
            raise StepFailed(f"{path}: scenario id {sc.get('id')!r} is empty or repeated")
        seen.add(sc["id"])
        for i, s in enumerate(sc["steps"]):
            op = s.get("op")
            if op not in FIELDS:
                raise StepFailed(f"{path}: scenario {sc['id']} step {i}: unknown op {op!r}")
            extra = set(s) - {"op"} - FIELDS[op]
            if extra:
                raise StepFailed(f"{path}: scenario {sc['id']} step {i} ({op}): unknown fields {sorted(extra)}")
    return doc["scenarios"]


# Error kinds in the README's order: when an error matches several, the first wins.
KINDS = [
    ("notAcquired", leasegate.NotAcquiredError),
    ("waitTimeout", leasegate.WaitTimeoutError),
    ("lockLost", leasegate.LockLostError),
    ("released", leasegate.ReleasedError),
    ("sessionLost", leasegate.SessionLostError),
    ("rateLimited", leasegate.RateLimitedError),
    ("quotaExceeded", leasegate.QuotaExceededError),
    ("permissionDenied", leasegate.PermissionDeniedError),
    ("notOwner", leasegate.NotOwnerError),
    ("unauthenticated", leasegate.UnauthenticatedError),
    ("internal", leasegate.InternalError),
    ("invalidArgument", leasegate.InvalidArgumentError),
    ("limitMismatch", leasegate.LimitMismatchError),
    ("closed", leasegate.ClosedError),
    ("unavailable", leasegate.UnavailableError),
]


class StepFailed(AssertionError):
    pass


class BodyError(Exception):
    """The withLock body's own errors, told apart by identity."""


def kind_of(err: BaseException | None, body: dict | None = None) -> str:
    body = body or {}
    if err is None:
        return "no error"
    for kind, cls in KINDS:
        if isinstance(err, cls):
            return kind
    if err is body.get("callback"):
        return "callback"
    if err is body.get("thrown"):
        return "thrown"
    if isinstance(err, leasegate.CancelledError):
        return "cancelled"
    return f"unexpected {type(err).__name__}: {err}"


def check(ok: bool, why: str) -> None:
    if not ok:
        raise StepFailed(why)


@dataclass
class Entry:
    """A lock a scenario named: its acquire under way, or its outcome."""

    name: str
    started_at: float
    client: str | None = None
    ttl_ms: int | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    settled: threading.Event = field(default_factory=threading.Event)
    cv: threading.Condition = field(default_factory=threading.Condition)
    positions: list[int] = field(default_factory=list)
    cursor: int = 0
    lock: leasegate.Lock | None = None
    error: BaseException | None = None
    ended_at: float | None = None
    lost_at: float | None = None
    lost_wall: float | None = None  # time.time() then, to compare with the harness's arrivals

    def queued(self, p: int) -> None:
        with self.cv:
            self.positions.append(p)
            self.cv.notify_all()

    def settle(self, lock: leasegate.Lock | None, error: BaseException | None) -> None:
        self.ended_at = time.monotonic()
        if lock is not None:
            self.lock = lock
            lock.lost.add_callback(self._lost)
        self.error = error
        self.settled.set()

    def _lost(self, _cause) -> None:
        with self.cv:
            if self.lost_at is None:
                self.lost_wall = time.time()
                self.lost_at = time.monotonic()
            self.cv.notify_all()


@dataclass
class RenewLog:
    """A client's renewals as its on_renew saw them, with the deadline of its
    latest lock right after each: (sent, expires, error)."""

    lock: leasegate.Lock | None = None
    seen: list[tuple[float, float, BaseException | None]] = field(default_factory=list)
    mu: threading.Lock = field(default_factory=threading.Lock)

    def observe(self, sent: float, err: BaseException | None) -> None:
        with self.mu:
            self.seen.append((sent, self.lock.expires if self.lock is not None else float("nan"), err))

    def since(self, n: int) -> list[tuple[float, float, BaseException | None]]:
        with self.mu:
            return list(self.seen[n:])


class Runner:
    def __init__(self, desc: dict, run: str):
        self.desc = desc
        self.run = run

    def control(self, method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.desc["control"] + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                text = resp.read()
        except urllib.error.HTTPError as e:
            raise StepFailed(f"control {method} {path}: {e.code} {e.read()!r}") from None
        return json.loads(text) if text else {}

    def last_confirmed(self, gateways: list[int]) -> int:
        """The arrival (Unix ms) at the gateways' fronts of the latest
        confirming request they answered without error since their reset."""
        last = 0
        for g in gateways:
            r = self.control("GET", f"/gateways/{g}/requests")
            for path, arrivals in (r.get("arrivals") or {}).items():
                if path.rsplit("/", 1)[-1] in CONFIRMING:
                    last = max([last] + [a["atMs"] for a in arrivals if a["ok"]])
        check(last > 0, f"gateways {gateways} answered no {CONFIRMING} without error since their reset")
        return last

    def scenario(self, sc: dict) -> None:
        prefix = f"{self.run}/{sc['id']}/"
        clients: dict[str, leasegate.Client] = {}
        sessions: dict[str, leasegate.Session] = {}
        locks: dict[str, Entry] = {}
        entries: list[Entry] = []
        self.tokens: dict[str, list[str]] = {}  # clients with a token source: [current token]
        self.renewals: dict[str, RenewLog] = {}  # clients with recordRenewals

        def entry(k) -> Entry:
            if k not in locks:
                raise StepFailed(f"no lock {k!r}")
            return locks[k]

        def held(k) -> leasegate.Lock:
            e = entry(k)
            if e.lock is None:
                raise StepFailed(f"lock {k} is not granted ({e.error or 'still waiting'})")
            return e.lock

        def owner(s: dict):
            if "session" in s:
                return sessions[s["session"]]
            return clients[s["client"]]

        def expect_call(s: dict, fn, body: dict | None = None):
            try:
                out = fn()
            except BaseException as err:  # noqa: BLE001 - the step names the kind
                if "expectError" not in s:
                    raise StepFailed(f"failed: {kind_of(err, body)}") from err
                got = kind_of(err, body)
                check(got == s["expectError"], f"failed with {got}; want {s['expectError']}")
                return None
            check("expectError" not in s, f"succeeded; want {s.get('expectError')}")
            return out

        def opts(s: dict) -> dict:
            o = {}
            if "ttlMs" in s:
                o["ttl"] = s["ttlMs"] / 1000
            return o

        try:
            for i, s in enumerate(sc["steps"]):
                op = s.get("op")
                try:
                    self.step(s, prefix, clients, sessions, locks, entries, entry, held, owner, expect_call, opts)
                except Exception as err:  # noqa: BLE001
                    raise StepFailed(f"scenario {sc['id']} step {i} ({op}): {err}") from err
        finally:
            for e in entries:
                e.settled.wait(2)  # a wait left behind by a failed step
                e.cancel.set()
                e.settled.wait(2)
                if e.lock is not None:
                    try:
                        e.lock.release()
                    except leasegate.LeasegateError:
                        pass
            for ses in sessions.values():
                try:
                    ses.close()
                except leasegate.LeasegateError:
                    pass
            for c in clients.values():
                c.close()
            self.control("POST", "/reset")

    def step(self, s, prefix, clients, sessions, locks, entries, entry, held, owner, expect_call, opts) -> None:
        op = s["op"]
        desc = self.desc
        if op == "client":
            tok = s["token"]
            token = None if tok == "none" else desc["tokens"].get(tok)
            if tok != "none" and token is None:
                raise StepFailed(f"no token {tok} in the description")
            endpoints = [desc["gateways"][g] for g in s.get("gateways", [])]
            kw = {}
            if s.get("tokenSource") and token is not None:
                box = [token]
                self.tokens[s["as"]] = box
                token = lambda box=box: box[0]  # noqa: E731
            if "tls" in s:
                check(not endpoints, "a tls client's endpoint is the TLS gateway; want no gateways")
                endpoints = [desc["tls"]["gateway"]]
                ctx = ssl.create_default_context(cafile=desc["tls"]["ca"])
                if s["tls"] == "cert":
                    ctx.load_cert_chain(desc["tls"]["cert"], desc["tls"]["key"])
                else:
                    check(s["tls"] == "noCert", f"tls {s['tls']!r}: want cert or noCert")
                kw["ssl_context"] = ctx
            if s.get("recordRenewals"):
                log = RenewLog()
                self.renewals[s["as"]] = log
                kw["on_renew"] = log.observe
            clients[s["as"]] = leasegate.Client(endpoints, token=token, **kw)
        elif op == "rotateToken":
            box = self.tokens.get(s["client"])
            check(box is not None, f"client {s['client']} has no token source")
            check(s["token"] in desc["tokens"], f"no token {s['token']} in the description")
            box[0] = desc["tokens"][s["token"]]
        elif op == "alignRevision":
            self.control("POST", "/revision", {"next": s["next"]})
        elif op == "expectRenewals":
            e = entry(s["lock"])
            lock = held(s["lock"])
            log = self.renewals.get(e.client) if e.client else None
            check(log is not None and e.ttl_ms is not None, "expectRenewals needs a client with recordRenewals and a lock with ttlMs")
            start = len(log.since(0))
            check(not lock.lost.wait(s["forMs"] / 1000), f"lost while held: {lock.error}")
            confirmed = [(sent, exp) for sent, exp, err in log.since(start) if err is None]
            for sent, exp in confirmed:
                check(exp <= sent + e.ttl_ms / 1000, f"a renewal sent at {sent:.3f} left the deadline at {exp:.3f}, past send time + {e.ttl_ms} ms")
            check(len(confirmed) >= s["atLeast"], f"{len(confirmed)} renewals confirmed; want at least {s['atLeast']}")
        elif op == "openSession":
            ttl = s["ttlMs"] / 1000 if "ttlMs" in s else None
            sessions[s["as"]] = clients[s["client"]].open_session(ttl)
        elif op == "closeSession":
            expect_call(s, sessions[s["session"]].close)
        elif op == "acquire":
            o = owner(s)
            e = Entry(prefix + s["name"], time.monotonic(), s.get("client"), s.get("ttlMs"))
            log = self.renewals.get(s.get("client"))
            kw = opts(s)
            if "waitTimeoutMs" in s:
                kw["wait_timeout"] = s["waitTimeoutMs"] / 1000
            if "requestId" in s:
                kw["request_id"] = prefix + s["requestId"]
            if s.get("manualRenew"):
                kw["manual_renew"] = True

            def run(e=e, o=o, kw=kw, log=log):
                try:
                    lock = o.acquire(e.name, on_queued=e.queued, cancel=e.cancel, **kw)
                except BaseException as err:  # noqa: BLE001
                    e.settle(None, err)
                else:
                    if log is not None:
                        with log.mu:
                            log.lock = lock
                    e.settle(lock, None)

            locks[s["as"]] = e
            entries.append(e)
            threading.Thread(target=run, name=f"acquire {s['as']}", daemon=True).start()
        elif op == "tryAcquire":
            o = owner(s)
            e = Entry(prefix + s["name"], time.monotonic(), s.get("client"), s.get("ttlMs"))
            lock = expect_call(s, lambda: o.try_acquire(e.name, **opts(s)))
            elapsed = time.monotonic() - e.started_at
            log = self.renewals.get(s.get("client"))
            if log is not None and lock is not None:
                with log.mu:
                    log.lock = lock
            e.settle(lock, None)
            entries.append(e)
            if "as" in s:
                locks[s["as"]] = e
            if "maxElapsedMs" in s:
                check(elapsed * 1000 <= s["maxElapsedMs"], f"took {elapsed * 1000:.0f} ms")
        elif op == "awaitGranted":
            e = entry(s["lock"])
            e.settled.wait(s.get("timeoutMs", 10000) / 1000)
            check(e.lock is not None, f"not granted: {e.error or 'still waiting'}")
            if "afterLossOf" in s:
                lost = entry(s["afterLossOf"])
                check(
                    lost.lost_at is not None and lost.lost_at < e.ended_at,
                    f"granted before {s['afterLossOf']} was told it lost the lock",
                )
        elif op == "awaitPosition":
            e = entry(s["lock"])
            want = s["position"]
            end = time.monotonic() + s.get("timeoutMs", 10000) / 1000
            with e.cv:
                while True:
                    try:
                        at = e.positions.index(want, e.cursor)
                        e.cursor = at + 1
                        break
                    except ValueError:
                        left = end - time.monotonic()
                        if left <= 0:
                            raise StepFailed(f"not told position {want}; told {e.positions[e.cursor:]} (settled: {e.error or e.lock})") from None
                        e.cv.wait(left)
        elif op == "awaitError":
            e = entry(s["lock"])
            e.settled.wait(s.get("timeoutMs", 10000) / 1000)
            check(e.settled.is_set() and e.lock is None, f"no error: {'granted' if e.lock else 'still waiting'}")
            got = kind_of(e.error)
            check(got == s["error"], f"failed with {got}; want {s['error']}")
            elapsed = (e.ended_at - e.started_at) * 1000
            if "minElapsedMs" in s:
                check(elapsed >= s["minElapsedMs"], f"ended after {elapsed:.0f} ms; want at least {s['minElapsedMs']}")
            if "maxElapsedMs" in s:
                check(elapsed <= s["maxElapsedMs"], f"ended after {elapsed:.0f} ms; want at most {s['maxElapsedMs']}")
        elif op == "expectWaiting":
            e = entry(s["lock"])
            settled = e.settled.wait(s["forMs"] / 1000)
            check(not settled, f"settled: {'granted' if e.lock else e.error}")
        elif op == "release":
            lock = held(s["lock"])
            expect_call(s, lock.release)
        elif op == "renew":
            lock = held(s["lock"])
            t0 = time.monotonic()
            expect_call(s, lock.renew)
            took = (time.monotonic() - t0) * 1000
            if "minElapsedMs" in s:
                check(took >= s["minElapsedMs"], f"renew took {took:.0f} ms; want at least {s['minElapsedMs']}")
            if "maxElapsedMs" in s:
                check(took <= s["maxElapsedMs"], f"renew took {took:.0f} ms; want at most {s['maxElapsedMs']}")
        elif op == "expectHeld":
            lock = held(s["lock"])
            check(not lock.lost.is_set(), f"ended: {lock.error}")
        elif op == "expectReleased":
            lock = held(s["lock"])
            check(lock.lost.wait(s.get("timeoutMs", 10000) / 1000), "the done signal did not fire")
            check(kind_of(lock.error) == "released", f"ended with {kind_of(lock.error)}: {lock.error}")
        elif op == "awaitLost":
            lock = held(s["lock"])
            deadline = lock.expires
            left = deadline - time.monotonic() + s.get("timeoutMs", 10000) / 1000
            check(lock.lost.wait(max(left, 0)), "the loss signal did not fire")
            e = entry(s["lock"])
            late = (e.lost_at - deadline) * 1000
            check(late <= s["withinMs"], f"lost {late:.0f} ms after the deadline; want at most {s['withinMs']}")
            want = s.get("error", "lockLost")
            check(kind_of(lock.error) == want, f"lost with {kind_of(lock.error)}: {lock.error}; want {want}")
        elif op == "awaitLostInLease":
            lock = held(s["lock"])
            e = entry(s["lock"])
            check(e.ttl_ms is not None and s.get("earlyMs", 0) > 0 and s.get("gateways"), "awaitLostInLease needs gateways, earlyMs and a lock with ttlMs")
            check(lock.lost.wait(s.get("timeoutMs", 10000) / 1000), "the loss signal did not fire")
            with e.cv:  # the runner's callback records the time as the signal fires
                check(e.cv.wait_for(lambda: e.lost_wall is not None, 1), "the loss signal fired but its callback did not run")
            lease = self.last_confirmed(s["gateways"]) + e.ttl_ms
            lost = e.lost_wall * 1000
            check(lost <= lease, f"loss signalled {lost - lease:.0f} ms after the lease could have lapsed in etcd (last confirmed arrival + {e.ttl_ms} ms)")
            check(lost >= lease - s["earlyMs"], f"loss signalled {lease - lost:.0f} ms before the lease could have lapsed in etcd; want at most {s['earlyMs']}")
        elif op == "withLock":
            o = owner(s)
            body = {"callback": BodyError("callback"), "thrown": RuntimeError("thrown"), "ran": False}
            cancel = threading.Event()

            def fn(lock, signal):
                body["ran"] = True
                ex = s["exit"]
                if ex == "return":
                    return "ok"
                if ex == "error":
                    raise body["callback"]
                if ex == "throw":
                    raise body["thrown"]
                if ex == "cancel":
                    cancel.set()
                    if not signal.wait(10):
                        raise StepFailed("the body's signal did not fire after the cancel")
                    raise signal.cause
                raise StepFailed(f"unknown exit {ex!r}")

            kw = opts(s)
            expect_call(s, lambda: o.with_lock(prefix + s["name"], fn, cancel=cancel, **kw), body)
            check(body["ran"], "the body did not run")
        elif op == "expectTokenAbove":
            lock = held(s["lock"])
            than = held(s["thanLock"]).token if "thanLock" in s else int(s["than"])
            check(isinstance(lock.token, int) and lock.token > than, f"{lock.token} is not above {than}")
        elif op == "expectTokenExact":
            lock = held(s["lock"])
            h = self.control("GET", "/holder?name=" + urllib.parse.quote(lock.name, safe=""))
            check(str(lock.token) == h.get("token"), f"token {lock.token}; the gateway reads {h}")
            if s.get("odd"):
                check(lock.token % 2 == 1, f"token {lock.token} is even; the scenario arranged an odd one")
        elif op == "fenceWrite":
            lock = held(s["lock"])
            resource = prefix + s["resource"] if "resource" in s else lock.name
            r = self.control("POST", "/fence", {"resource": resource, "token": str(lock.token)})
            check(r.get("accepted") == (s["expect"] == "accepted"), f"fence answered {r}; want {s['expect']}")
        elif op == "raiseEpoch":
            self.control("POST", "/epoch", {"atLeast": s["atLeast"]})
        elif op in ("stopGateway", "startGateway"):
            self.control("POST", f"/gateways/{s['gateway']}/{op[:-7]}")
        elif op == "resetRequests":
            for g in s["gateways"]:
                self.control("POST", f"/gateways/{g}/requests/reset")
        elif op == "expectRequests":
            n = 0
            for g in s["gateways"]:
                r = self.control("GET", f"/gateways/{g}/requests")
                paths = (r.get("byToken") or {}).get(s["token"]) if "token" in s else r.get("byPath")
                n += sum(c for p, c in (paths or {}).items() if p.endswith("/" + s["method"]))
            if "count" in s:
                check(n == s["count"], f"{n} {s['method']} requests (token {s.get('token', 'any')}); want {s['count']}")
            else:
                check(n >= s["atLeast"], f"{n} {s['method']} requests; want at least {s['atLeast']}")
        else:
            raise StepFailed(f"unknown op {op!r}")


@unittest.skipUnless(DESC and SCENARIOS, "LEASEGATE_CONFORMANCE and LEASEGATE_CONFORMANCE_SCENARIOS are not set")
class ConformanceTest(unittest.TestCase):
    def test_scenarios(self):
        desc = json.loads(DESC)
        scenarios = load_scenarios(SCENARIOS)
        runner = Runner(desc, f"conf-py-{secrets.token_hex(4)}")
        passed = []
        for sc in scenarios:
            with self.subTest(scenario=sc["id"]):
                t0 = time.monotonic()
                runner.scenario(sc)
                passed.append(sc["id"])
                print(f"conformance: {sc['id']} passed in {time.monotonic() - t0:.1f}s", file=sys.stderr)
        self.assertEqual(len(passed), len(scenarios))


if __name__ == "__main__":
    unittest.main()
