"""Unit tests: envelope framing, token and error decoding, the deadline rule
with an injected clock, and the client's retry rules against a fake wire."""

from __future__ import annotations

import io
import json
import sys
import threading
import time
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import leasegate  # noqa: E402
from leasegate import errors, wire  # noqa: E402
from leasegate.details import decode_error_info, decode_retry_delay  # noqa: E402
from leasegate.keeper import Confirmation, Keeper  # noqa: E402
from leasegate.options import Options  # noqa: E402

from fakegw import FakeGateway, Reply, connect_error, error_info, retry_info  # noqa: E402

BIG = (1 << 60) + 7  # above 2^53: a float would round it
EI, RI = "google.rpc.ErrorInfo", "google.rpc.RetryInfo"


def granted(token: int = BIG, ttl_ms: int = 5000) -> dict:
    return {"lockId": "l-1", "fencingToken": str(token), "ttlMs": str(ttl_ms), "shard": "s0", "validForMs": str(ttl_ms)}


class EnvelopeTest(unittest.TestCase):
    def test_round_trip(self):
        data = wire.encode_envelope({"queued": {"position": "2"}}) + wire.encode_envelope({}, flags=0x02)
        got = list(wire.read_envelopes(io.BytesIO(data).read))
        self.assertEqual(len(got), 2)
        self.assertEqual(got[0], (0, b'{"queued":{"position":"2"}}'))
        self.assertEqual(got[1], (2, b"{}"))
        self.assertEqual(data[:5], b"\x00\x00\x00\x00\x1b", "flag byte then a 4-byte big-endian length")

    def test_cut_inside_an_envelope_is_unavailable(self):
        data = wire.encode_envelope({"queued": {"position": "1"}})
        for cut in (3, len(data) - 1):
            with self.assertRaises(wire.WireError) as cm:
                list(wire.read_envelopes(io.BytesIO(data[:cut]).read))
            self.assertEqual(cm.exception.code, "unavailable", f"cut at {cut}")

    def test_end_stream_error(self):
        body = json.dumps({"error": connect_error("deadline_exceeded", "wait timed out", (EI, error_info("WAIT_TIMEOUT"))), "metadata": {}}).encode()
        err = wire.decode_end_stream(body)
        self.assertIsNotNone(err)
        self.assertIsInstance(errors.classify("acquire", err), leasegate.WaitTimeoutError)
        self.assertIsNone(wire.decode_end_stream(b'{"metadata":{"a":["b"]}}'))


class DecodeTest(unittest.TestCase):
    def test_error_info(self):
        info = decode_error_info(error_info("RATE_LIMITED", {"limit": "tenant_renew_rate", "shard": "s1"}))
        self.assertEqual((info.reason, info.domain), ("RATE_LIMITED", "leasegate.dev"))
        self.assertEqual(info.metadata, {"limit": "tenant_renew_rate", "shard": "s1"})

    def test_retry_delay(self):
        self.assertAlmostEqual(decode_retry_delay(retry_info(1, 500_000_000)), 1.5)
        self.assertEqual(decode_retry_delay(b""), 0.0)

    def test_token_above_2_53_is_exact(self):
        c = leasegate.Client(["http://127.0.0.1:1"])
        keeper = Keeper(c, "t", 5, c.opts.clock(), c.opts.clock() + 60, None, False)
        lock = leasegate.Lock(c, "n", granted(BIG), "r", keeper, keeper)
        self.assertEqual(lock.token, BIG)
        self.assertIsInstance(lock.token, int)
        self.assertNotEqual(lock.token, int(float(BIG)), "a float would have rounded it")
        keeper.lose(leasegate.ReleasedError("done"))

    def test_classify(self):
        cases = [
            (connect_error("failed_precondition", "", (EI, error_info("LOCK_EXPIRED"))), leasegate.LockLostError),
            (connect_error("failed_precondition", "", (EI, error_info("LOCK_EVICTED"))), leasegate.EvictedError),
            (connect_error("failed_precondition", "", (EI, error_info("LOCK_RELEASED"))), leasegate.ReleasedError),
            (connect_error("failed_precondition", "", (EI, error_info("SESSION_LOST"))), leasegate.SessionLostError),
            (connect_error("failed_precondition", "", (EI, error_info("LIMIT_MISMATCH"))), leasegate.LimitMismatchError),
            (connect_error("permission_denied", "", (EI, error_info("NOT_OWNER"))), leasegate.NotOwnerError),
            (connect_error("permission_denied", ""), leasegate.PermissionDeniedError),
            (connect_error("resource_exhausted", "", (EI, error_info("RATE_LIMITED")), (RI, retry_info(0, 250_000_000))), leasegate.RateLimitedError),
            (connect_error("resource_exhausted", "", (EI, error_info("QUOTA_EXCEEDED", {"limit": "name_waiters"}))), leasegate.QuotaExceededError),
            (connect_error("unauthenticated", ""), leasegate.UnauthenticatedError),
            (connect_error("invalid_argument", ""), leasegate.InvalidArgumentError),
            (connect_error("internal", "boom"), leasegate.InternalError),
            (connect_error("unavailable", "", (EI, error_info("SHUTTING_DOWN"))), leasegate.UnavailableError),
            (connect_error("deadline_exceeded", "", (EI, error_info("WAIT_TIMEOUT"))), leasegate.WaitTimeoutError),
        ]
        for obj, want in cases:
            got = errors.classify("op", wire.parse_error(obj))
            self.assertIs(type(got), want, f"classify({obj['code']}, {obj['details'][:1]}) = {type(got).__name__}; want {want.__name__}")
        rl = errors.classify("op", wire.parse_error(cases[7][0]))
        self.assertAlmostEqual(rl.retry_after, 0.25)
        self.assertEqual(rl.reason, leasegate.ErrorReason.RATE_LIMITED)
        q = errors.classify("op", wire.parse_error(cases[8][0]))
        self.assertEqual(q.limit, "name_waiters")

    def test_foreign_domain_is_no_reason(self):
        err = wire.parse_error(connect_error("failed_precondition", "", (EI, error_info("LOCK_EXPIRED", domain="other"))))
        self.assertEqual(errors.reason_of(err), leasegate.ErrorReason.ERROR_REASON_UNSPECIFIED)

    def test_retryable(self):
        self.assertTrue(errors.retryable(wire.WireError("unavailable")))
        self.assertTrue(errors.retryable(wire.WireError("internal", from_server=False)), "a broken connection")
        self.assertFalse(errors.retryable(wire.WireError("internal", from_server=True)), "a gateway's own failure")
        self.assertFalse(errors.retryable(wire.parse_error(connect_error("unauthenticated", ""))))
        self.assertTrue(errors.retryable(wire.parse_error(connect_error("aborted", "", (EI, error_info("SUPERSEDED"))))))


class FakeClock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


class DeadlineTest(unittest.TestCase):
    def test_rule(self):
        o = Options(safety_margin=None)
        # sent + min(ttl, valid_for) - (ttl/100 + 0.1)
        self.assertAlmostEqual(o.deadline_of(10, 5), 10 + 5 - 0.15)
        self.assertAlmostEqual(o.deadline_of(10, 5, 2), 10 + 2 - 0.15)
        self.assertAlmostEqual(o.deadline_of(10, 5, 9), 10 + 5 - 0.15, msg="valid_for above the TTL does not extend it")
        self.assertAlmostEqual(o.margin(0.3), 0.1, msg="the margin is at most TTL/3")

    def keeper(self, clock: FakeClock) -> tuple[leasegate.Client, Keeper]:
        c = leasegate.Client(["http://127.0.0.1:1"], clock=clock, safety_margin=0.5)
        # A real-time deadline far ahead, so the deadline thread stays asleep while the fake clock moves.
        k = Keeper(c, "t", 10, clock(), clock() + 9.5, None, False)
        self.addCleanup(k.lose, leasegate.ReleasedError("test over"))
        return c, k

    def test_credit_moves_later_only(self):
        clock = FakeClock()
        _, k = self.keeper(clock)
        clock.t += 4
        self.assertTrue(k.credit(clock.t - 1, Confirmation(10, 10)))
        self.assertAlmostEqual(k.expires, 1000 + 3 + 10 - 0.5)
        # An answer to an older request credits an earlier send time: ignored.
        self.assertTrue(k.credit(1001, Confirmation(10, 10)))
        self.assertAlmostEqual(k.expires, 1000 + 3 + 10 - 0.5)
        # valid_for shorter than the TTL rules.
        self.assertTrue(k.credit(clock.t, Confirmation(10, 2)))
        self.assertAlmostEqual(k.expires, 1000 + 3 + 10 - 0.5, msg="a tighter promise never moves the deadline earlier")

    def test_late_confirmation_revives_nothing(self):
        clock = FakeClock()
        _, k = self.keeper(clock)
        clock.t += 9.6  # past the deadline before the thread noticed
        self.assertFalse(k.credit(clock.t - 0.1, Confirmation(10, 10)))
        self.assertTrue(k.lost.is_set())
        self.assertIsInstance(k.lost.cause, leasegate.LockLostError)
        self.assertIsInstance(k.lost.cause.__cause__, leasegate.UnavailableError)

    def test_check_raises_past_the_deadline(self):
        clock = FakeClock()
        c, k = self.keeper(clock)
        lock = leasegate.Lock(c, "n", granted(), "r", k, k)
        lock.check()
        clock.t += 9.5
        with self.assertRaises(leasegate.LockLostError):
            lock.check()
        self.assertTrue(lock.lost.is_set())

    def test_deadline_fires_the_signal(self):
        c = leasegate.Client(["http://127.0.0.1:1"])
        now = c.opts.clock()
        k = Keeper(c, "t", 1, now, now + 0.2, None, False)
        lock = leasegate.Lock(c, "n", granted(), "r", k, k)
        self.assertTrue(lock.lost.wait(2))
        self.assertGreaterEqual(c.opts.clock(), now + 0.2)
        self.assertIsInstance(lock.error, leasegate.LockLostError)


class WireClientTest(unittest.TestCase):
    """The client's rules against the fake wire."""

    def fake(self, handlers: dict) -> FakeGateway:
        f = FakeGateway(handlers)
        self.addCleanup(f.close)
        return f

    def test_token_source_is_asked_per_request(self):
        seen = []
        f = self.fake({"TryAcquire": lambda r, h: (seen.append(h["Authorization"]), Reply({"acquired": False}))[1]})
        n = iter(range(100))
        c = leasegate.Client([f.url], token=lambda: f"t{next(n)}")
        for _ in range(3):
            with self.assertRaises(leasegate.NotAcquiredError):
                c.try_acquire("x", ttl=5)
        self.assertEqual(seen, ["Bearer t0", "Bearer t1", "Bearer t2"])
        req = f.requests[0]
        self.assertEqual(req[1]["ttlMs"], "5000", "int64 fields go out as decimal strings")
        self.assertEqual(req[2]["Connect-Protocol-Version"], "1")

    def test_static_token_and_exact_token_sent_back(self):
        f = self.fake(
            {
                "TryAcquire": lambda r, h: Reply({"acquired": True, "granted": granted()}),
                "Release": lambda r, h: Reply({"released": r["fencingToken"] == str(BIG)}),
            }
        )
        c = leasegate.Client([f.url], token="static")
        lock = c.try_acquire("x", ttl=5)
        self.assertEqual(lock.token, BIG)
        self.assertTrue(lock.release())
        self.assertTrue(all(h["Authorization"] == "Bearer static" for _, _, h in f.requests))
        self.assertIsInstance(lock.error, leasegate.ReleasedError)

    def test_rate_limit_waits_the_gateways_delay_on_the_same_gateway(self):
        calls = []

        def try_acquire(r, h):
            calls.append(time.monotonic())
            if len(calls) == 1:
                return Reply(error=connect_error("resource_exhausted", "slow down", (EI, error_info("RATE_LIMITED")), (RI, retry_info(0, 300_000_000))))
            return Reply({"acquired": False})

        f = self.fake({"TryAcquire": try_acquire})
        other = self.fake({"TryAcquire": lambda r, h: Reply({"acquired": False})})
        c = leasegate.Client([f.url, other.url])
        with self.assertRaises(leasegate.NotAcquiredError):
            c.try_acquire("x")
        self.assertEqual(len(calls), 2)
        self.assertGreaterEqual(calls[1] - calls[0], 0.29)
        self.assertEqual(other.count("TryAcquire"), 0, "the rate limit is waited out on the same gateway")

    def test_unavailable_fails_over_with_the_same_request_id(self):
        down = self.fake({"TryAcquire": lambda r, h: Reply(error=connect_error("unavailable", "stopping", (EI, error_info("SHUTTING_DOWN"))))})
        up = self.fake({"TryAcquire": lambda r, h: Reply({"acquired": False})})
        c = leasegate.Client([down.url, up.url])
        with self.assertRaises(leasegate.NotAcquiredError):
            c.try_acquire("x", request_id="rid-1")
        self.assertEqual(down.requests[0][1]["requestId"], "rid-1")
        self.assertEqual(up.requests[0][1]["requestId"], "rid-1")

    def test_unauthenticated_is_not_retried(self):
        f = self.fake({"TryAcquire": lambda r, h: Reply(error=connect_error("unauthenticated", "no"))})
        other = self.fake({"TryAcquire": lambda r, h: Reply({"acquired": False})})
        c = leasegate.Client([f.url, other.url])
        with self.assertRaises(leasegate.UnauthenticatedError):
            c.try_acquire("x")
        self.assertEqual(f.count("TryAcquire") + other.count("TryAcquire"), 1)

    def test_acquire_stream_positions_and_grant(self):
        f = self.fake(
            {
                "Acquire": lambda r, h: Reply(stream=[{"queued": {"position": "2"}}, {"queued": {"position": "1"}}, {"granted": granted()}]),
                "Release": lambda r, h: Reply({"released": True}),
            }
        )
        c = leasegate.Client([f.url])
        seen = []
        with c.lock("x", ttl=5, on_queued=seen.append) as lock:
            self.assertEqual(lock.token, BIG)
            self.assertFalse(lock.lost.is_set())
        self.assertEqual(seen, [2, 1])
        self.assertTrue(lock.lost.is_set())
        self.assertEqual(f.count("Release"), 1)
        self.assertEqual(f.requests[0][2]["Content-Type"], "application/connect+json")

    def test_lock_context_releases_when_the_body_raises(self):
        f = self.fake({"Acquire": lambda r, h: Reply(stream=[{"granted": granted()}]), "Release": lambda r, h: Reply({"released": True})})
        c = leasegate.Client([f.url])
        with self.assertRaises(KeyError):
            with c.lock("x"):
                raise KeyError("body")
        self.assertEqual(f.count("Release"), 1)

    def test_lock_context_raises_the_loss_on_a_normal_exit(self):
        f = self.fake({"Acquire": lambda r, h: Reply(stream=[{"granted": granted()}]), "Release": lambda r, h: Reply({"released": False})})
        c = leasegate.Client([f.url])
        with self.assertRaises(leasegate.LockLostError):
            with c.lock("x") as lock:
                lock.lease.lose(leasegate.LockLostError("lost under the body"))
                with self.assertRaises(leasegate.LockLostError):
                    lock.check()
        self.assertEqual(f.count("Release"), 1, "released on the way out all the same")

    def test_with_lock_passes_the_bodys_exception_unchanged(self):
        f = self.fake({"Acquire": lambda r, h: Reply(stream=[{"granted": granted()}]), "Release": lambda r, h: Reply({"released": True})})
        c = leasegate.Client([f.url])
        mine = ValueError("mine")

        def body(lock, signal):
            self.assertFalse(signal.is_set())
            raise mine

        with self.assertRaises(ValueError) as cm:
            c.with_lock("x", body)
        self.assertIs(cm.exception, mine)
        self.assertEqual(f.count("Release"), 1)

    def test_wait_timeout_from_the_stream(self):
        f = self.fake({"Acquire": lambda r, h: Reply(stream=[{"queued": {"position": "1"}}], error=connect_error("deadline_exceeded", "", (EI, error_info("WAIT_TIMEOUT"))))})
        c = leasegate.Client([f.url])
        with self.assertRaises(leasegate.WaitTimeoutError):
            c.acquire("x", wait_timeout=1)
        self.assertEqual(f.requests[0][1]["waitTimeoutMs"], "1000")

    def test_a_stalled_wait_ends_at_its_timeout_and_grace(self):
        gate = threading.Event()

        def acquire(r, h):
            gate.wait(5)
            return Reply(stream=[])

        f = self.fake({"Acquire": acquire})
        self.addCleanup(gate.set)
        c = leasegate.Client([f.url])
        t0 = time.monotonic()
        with self.assertRaises(leasegate.WaitTimeoutError):
            c.acquire("x", wait_timeout=0.3)
        took = time.monotonic() - t0
        self.assertGreaterEqual(took, 0.3)
        self.assertLess(took, 0.3 + 0.5 + 0.5, "the wait outlived its timeout and grace while the gateway stalled")

    def test_a_stalled_confirmation_of_a_late_grant_ends_at_the_wait_timeout_and_grace(self):
        gate = threading.Event()

        def acquire(r, h):
            time.sleep(0.4)  # past a third of the TTL: the grant is confirmed by a renewal at once
            return Reply(stream=[{"granted": granted(ttl_ms=1000)}])

        def renew(r, h):
            gate.wait(5)
            return Reply({"ttlMs": "1000", "validForMs": "1000"})

        f = self.fake({"Acquire": acquire, "Renew": renew, "Release": lambda r, h: Reply({"released": True})})
        self.addCleanup(gate.set)
        c = leasegate.Client([f.url])
        t0 = time.monotonic()
        with self.assertRaises(leasegate.UnavailableError):
            c.acquire("x", wait_timeout=0.6)
        self.assertLess(time.monotonic() - t0, 0.6 + 0.5 + 0.5, "confirming the grant held the caller past its wait timeout and grace")

    def test_proof_of_loss_on_renewal_fires_the_signal(self):
        f = self.fake(
            {
                "TryAcquire": lambda r, h: Reply({"acquired": True, "granted": granted()}),
                "Renew": lambda r, h: Reply(error=connect_error("failed_precondition", "gone", (EI, error_info("LOCK_STOLEN")))),
                "Release": lambda r, h: Reply({"released": False}),
            }
        )
        c = leasegate.Client([f.url])
        lock = c.try_acquire("x", manual_renew=True)
        with self.assertRaises(leasegate.LockLostError):
            lock.renew()
        self.assertTrue(lock.lost.is_set())
        self.assertEqual(lock.error.reason, leasegate.ErrorReason.LOCK_STOLEN)

    def test_cancel_ends_a_wait(self):
        gate = threading.Event()

        def acquire(r, h):
            gate.wait(5)
            return Reply(stream=[])

        f = self.fake({"Acquire": acquire})
        self.addCleanup(gate.set)
        c = leasegate.Client([f.url])
        cancel = threading.Event()
        threading.Timer(0.2, cancel.set).start()
        t0 = time.monotonic()
        with self.assertRaises(leasegate.CancelledError):
            c.acquire("x", cancel=cancel)
        self.assertLess(time.monotonic() - t0, 2)

    def test_closed_client(self):
        c = leasegate.Client(["http://127.0.0.1:1"])
        c.close()
        with self.assertRaises(leasegate.ClosedError):
            c.try_acquire("x")

    def test_an_oversized_answer_is_a_gateway_failure(self):
        pad = "x" * (5 << 20)
        f = self.fake({"TryAcquire": lambda r, h: Reply({"acquired": False, "pad": pad}), "Acquire": lambda r, h: Reply(stream=[{"queued": {"position": "1"}, "pad": pad}])})
        c = leasegate.Client([f.url])
        with self.assertRaises(leasegate.InternalError):
            c.try_acquire("x")
        with self.assertRaises(leasegate.InternalError):
            c.acquire("x")
        self.assertEqual(f.count("TryAcquire"), 1, "an oversized answer was retried")

    def test_on_queued_reports_only_changes_of_position(self):
        # The gateway repeats the position as a heartbeat.
        stream = [{"queued": {"position": p}} for p in ("3", "3", "2", "2", "2", "1")] + [{"granted": granted()}]
        f = self.fake({"Acquire": lambda r, h: Reply(stream=stream), "Release": lambda r, h: Reply({"released": True})})
        c = leasegate.Client([f.url])
        seen = []
        c.acquire("x", on_queued=seen.append).release()
        self.assertEqual(seen, [3, 2, 1])

    def test_close_ends_the_clients_sessions_and_sends_nothing_after(self):
        live = {"shards": [{"shard": "s0", "state": "SHARD_LEASE_STATE_LIVE", "ttlMs": "1500"}]}
        f = self.fake(
            {
                "OpenSession": lambda r, h: Reply({"sessionId": "s-1", "ttlMs": "1500", **live}),
                "KeepAliveSession": lambda r, h: Reply(live),
                "TryAcquire": lambda r, h: Reply({"acquired": True, "granted": {**granted(), "shard": "s0"}}),
                "Release": lambda r, h: Reply({"released": True}),
                "CloseSession": lambda r, h: Reply({}),
            }
        )
        c = leasegate.Client([f.url])
        s = c.open_session(ttl=1.5)
        lock = s.try_acquire("x")
        c.close()
        sent = len(f.requests)
        self.assertIsInstance(s.done.cause, leasegate.ClosedError)
        self.assertIsInstance(lock.error, leasegate.LockLostError)
        self.assertIsInstance(lock.error.__cause__, leasegate.ClosedError)
        self.assertFalse(lock.release(), "a lock the close ended was released again")
        s.close()
        time.sleep(1.0)  # two keepalive intervals
        self.assertEqual(f.requests[sent:], [], "requests left the closed client")

    def test_a_session_takes_a_new_lease_on_a_shard_whose_lease_was_lost(self):
        # Two shards; s0's lease is reported LOST, s1's stays live. A later
        # lock on s0 gets a new lease (replace), as the Go SDK does, whether
        # the gateway still grants on the old lease or answers SESSION_LOST.
        lost_s0 = connect_error("failed_precondition", "session lost", (EI, error_info("SESSION_LOST", {"shard": "s0"})))
        for refusal in ("grant", "session_lost"):
            with self.subTest(refusal=refusal):
                state = {"s0": "SHARD_LEASE_STATE_LOST", "replaced": False}

                def shards(*names):
                    return {"shards": [{"shard": n, "state": state.get(n, "SHARD_LEASE_STATE_LIVE"), "ttlMs": "1500"} for n in names]}

                def extend(r, h):
                    state["replaced"] = bool(r.get("replace"))
                    state["s0"] = "SHARD_LEASE_STATE_LIVE"
                    return Reply({"sessionId": "s-2", "shards": [{"shard": "s0", "state": "SHARD_LEASE_STATE_LIVE", "ttlMs": "1500"}]})

                def try_acquire(r, h):
                    if not state["replaced"] and refusal == "session_lost":
                        return Reply(error=lost_s0)
                    return Reply({"acquired": True, "granted": {**granted(), "lockId": r["requestId"], "shard": "s0"}})

                f = self.fake(
                    {
                        "OpenSession": lambda r, h: Reply({"sessionId": "s-1", "ttlMs": "1500", "shards": [{"shard": n, "state": "SHARD_LEASE_STATE_LIVE", "ttlMs": "1500"} for n in ("s0", "s1")]}),
                        "KeepAliveSession": lambda r, h: Reply(shards(*r["shards"])),
                        "ExtendSession": extend,
                        "TryAcquire": try_acquire,
                        "Release": lambda r, h: Reply({"released": True}),
                        "CloseSession": lambda r, h: Reply({}),
                    }
                )
                c = leasegate.Client([f.url])
                self.addCleanup(c.close)
                s = c.open_session(ttl=1.5)
                old = s.lease("s0")
                self.assertTrue(old.lost.wait(3), "the keepalive's LOST did not end s0's lease")
                lock = s.try_acquire("x", request_id="rid-1")
                self.assertTrue(lock.held(), f"the lock on a new lease is not held: {lock.error}")
                self.assertIsNot(lock.lease, old)
                self.assertTrue(state["replaced"], "the session extended to s0 without replacing its lost lease")
                self.assertNotEqual(lock.id, "rid-1", "the retry on the new lease kept the request id bound to the lost one")
                s.close()

    def test_bad_options_name_the_value(self):
        with self.assertRaisesRegex(leasegate.InvalidArgumentError, "renew_fraction is 0.9"):
            leasegate.Client(["http://127.0.0.1:1"], renew_fraction=0.9)
        with self.assertRaisesRegex(leasegate.InvalidArgumentError, "no endpoints"):
            leasegate.Client([])


if __name__ == "__main__":
    unittest.main()
