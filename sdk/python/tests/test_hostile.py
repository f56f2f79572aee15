"""Properties the SDK promises against a gateway that misbehaves (a broken or
hostile one) and a closed client, shown against the fake wire. Each test
names the property it holds the SDK to."""

from __future__ import annotations

import gc
import socket
import sys
import threading
import time
import unittest
import weakref
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import leasegate  # noqa: E402

from fakegw import FakeGateway, Reply  # noqa: E402

BIG = (1 << 60) + 7


def grant(ttl_ms: int = 900, token="7", lock_id: str = "l-1") -> dict:
    return {"acquired": True, "granted": {"lockId": lock_id, "fencingToken": token, "ttlMs": str(ttl_ms), "shard": "s0"}}


class Trickler:
    """A loopback HTTP server that answers every request with a 200 whose
    body it sends one byte every 0.1 s: each read finishes well inside any
    socket timeout, the whole answer takes as long as it likes."""

    def __init__(self, body_len: int = 1000):
        self._srv = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._srv.getsockname()[1]}"
        self._stop = threading.Event()
        self._body_len = body_len
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._srv.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                buf = b""
                while b"\r\n\r\n" not in buf:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    buf += chunk
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % self._body_len)
                for _ in range(self._body_len):
                    if self._stop.wait(0.1):
                        return
                    conn.sendall(b" ")
            except OSError:
                return

    def close(self) -> None:
        self._stop.set()
        self._srv.close()


class ClosedClientTest(unittest.TestCase):
    def test_close_ends_background_renewals(self):
        gw = FakeGateway({"TryAcquire": lambda r, h: Reply(grant(900)), "Renew": lambda r, h: Reply({"ttlMs": "900"}), "Release": lambda r, h: Reply({"released": True})})
        self.addCleanup(gw.close)
        c = leasegate.Client([gw.url])
        lock = c.try_acquire("closed-client")
        c.close()
        at_close = gw.count("Renew")
        time.sleep(2.0)  # more than two TTLs: a lock kept alive renews several times
        renewed = gw.count("Renew") - at_close
        self.assertEqual(renewed, 0, f'{renewed} renewals reached the gateway after close (the doc: "they lose their renewals and end at their deadlines")')
        self.assertTrue(lock.lost.is_set(), "the lock is still held two TTLs after the client was closed")
        alive = [t.name for t in threading.enumerate() if t.name.startswith("leasegate-renew")]
        self.assertEqual(alive, [], "renewal threads outlive the closed client")


class HostileAnswerTest(unittest.TestCase):
    def test_unary_call_is_bounded_by_request_timeout_against_a_trickling_gateway(self):
        gw = Trickler()
        self.addCleanup(gw.close)
        c = leasegate.Client([gw.url], request_timeout=0.5)
        self.addCleanup(c.close)
        done = threading.Event()
        out: list[object] = []

        def run():
            try:
                out.append(c.try_acquire("trickled"))
            except BaseException as e:  # noqa: BLE001 - the outcome is what the test reads
                out.append(e)
            done.set()

        threading.Thread(target=run, daemon=True).start()
        # 3 attempts of 0.5 s and the backoff between them: well under 5 s.
        self.assertTrue(done.wait(5.0), "try_acquire with request_timeout=0.5 still blocked after 5 s: the timeout bounds each socket read, not the call")

    def test_malformed_number_in_an_answer_is_a_typed_error(self):
        for bad in ("1e3", "ten", {"n": 1}, [1]):
            with self.subTest(ttlMs=bad):
                gw = FakeGateway({"TryAcquire": lambda r, h, bad=bad: Reply({"acquired": True, "granted": {"lockId": "l", "fencingToken": "7", "ttlMs": bad}}), "Release": lambda r, h: Reply({"released": True})})
                self.addCleanup(gw.close)
                c = leasegate.Client([gw.url])
                self.addCleanup(c.close)
                try:
                    c.try_acquire("malformed")
                    self.fail("a grant with ttlMs %r was accepted" % (bad,))
                except leasegate.LeasegateError:
                    pass
                except Exception as e:  # noqa: BLE001
                    self.fail(f"ttlMs {bad!r}: {type(e).__name__} escaped untyped: {e}")

    def test_a_malformed_renewal_answer_does_not_end_background_renewal(self):
        n = [0]

        def renew(r, h):
            n[0] += 1
            return Reply({"ttlMs": "oops"} if n[0] == 1 else {"ttlMs": "900"})

        gw = FakeGateway({"TryAcquire": lambda r, h: Reply(grant(900)), "Renew": renew, "Release": lambda r, h: Reply({"released": True})})
        self.addCleanup(gw.close)
        c = leasegate.Client([gw.url])
        self.addCleanup(c.close)
        lock = c.try_acquire("one-bad-answer")
        self.addCleanup(lambda: lock.release())
        time.sleep(2.0)  # two TTLs: after one bad answer, the next renewals confirm the lease
        self.assertFalse(lock.lost.is_set(), f"one malformed renewal answer lost the lock ({lock.error}); renewals after it: {gw.count('Renew') - 1}")

    def test_renewal_ttl_above_the_asked_ttl_does_not_extend_the_deadline(self):
        gw = FakeGateway({"TryAcquire": lambda r, h: Reply(grant(2000)), "Renew": lambda r, h: Reply({"ttlMs": "600000"}), "Release": lambda r, h: Reply({"released": True})})
        self.addCleanup(gw.close)
        c = leasegate.Client([gw.url])
        self.addCleanup(c.close)
        lock = c.try_acquire("long-ttl", ttl=2.0, manual_renew=True)
        self.addCleanup(lambda: lock.release())
        sent = time.monotonic()
        d = lock.renew()
        self.assertLessEqual(d - sent, 2.0, f"the deadline is {d - sent:.1f} s after the renewal was sent on a lock that asked for 2 s")

    def test_oversized_unary_answer_is_refused(self):
        pad = "x" * (16 << 20)
        gw = FakeGateway({"TryAcquire": lambda r, h: Reply({**grant(5000), "pad": pad}), "Release": lambda r, h: Reply({"released": True})})
        self.addCleanup(gw.close)
        c = leasegate.Client([gw.url])
        self.addCleanup(c.close)
        try:
            lock = c.try_acquire("huge")
        except leasegate.LeasegateError:
            return
        lock.release()
        self.fail("a 16 MiB unary answer was read whole and accepted (the stream path refuses one above 4 MiB)")

    def test_a_fencing_token_sent_as_a_float_is_refused_not_rounded(self):
        # 2^60 + 7 as a JSON float reads as 2^60: a lock with another grant's token.
        gw = FakeGateway({"TryAcquire": lambda r, h: Reply(grant(5000, token=float(BIG))), "Release": lambda r, h: Reply({"released": True})})
        self.addCleanup(gw.close)
        c = leasegate.Client([gw.url])
        self.addCleanup(c.close)
        try:
            lock = c.try_acquire("float-token")
        except leasegate.LeasegateError:
            return
        lock.release()
        self.fail(f"a float fencing token was accepted as {lock.token} (exact would be {BIG} or a refusal)")

    def test_a_renewal_answer_with_ttl_0_does_not_extend_the_deadline(self):
        # As the Go SDK: a zero TTL confirms nothing.
        gw = FakeGateway({"TryAcquire": lambda r, h: Reply(grant(2000)), "Renew": lambda r, h: Reply({"ttlMs": "0"}), "Release": lambda r, h: Reply({"released": True})})
        self.addCleanup(gw.close)
        c = leasegate.Client([gw.url])
        self.addCleanup(c.close)
        lock = c.try_acquire("zero-ttl", ttl=2.0, manual_renew=True)
        self.addCleanup(lambda: lock.release())
        before = lock.expires
        time.sleep(0.3)  # so that a renewal crediting the old TTL lands visibly later
        try:
            after = lock.renew()
        except leasegate.LeasegateError:
            after = lock.expires
        self.assertLessEqual(after, before, f"an answer with ttlMs 0 moved the deadline {(after - before) * 1000:.0f} ms later")

    def test_a_keepalive_reporting_a_live_lease_with_ttl_0_does_not_extend_it(self):
        # The Go SDK takes a LIVE shard with no TTL as unconfirmed.
        shards = lambda ttl: {"shards": [{"shard": "s0", "state": "SHARD_LEASE_STATE_LIVE", "ttlMs": str(ttl)}]}  # noqa: E731
        gw = FakeGateway(
            {
                "OpenSession": lambda r, h: Reply({"sessionId": "s-1", "ttlMs": "1500", **shards(1500)}),
                "KeepAliveSession": lambda r, h: Reply(shards(0)),
                "CloseSession": lambda r, h: Reply({}),
            }
        )
        self.addCleanup(gw.close)
        c = leasegate.Client([gw.url])
        self.addCleanup(c.close)
        s = c.open_session(ttl=1.5)
        self.addCleanup(s.close)
        lease = s.lease("s0")
        first = lease.expires
        time.sleep(1.0)  # two keepalives at TTL/3
        later = first if lease.lost.is_set() else lease.expires
        self.assertLessEqual(later, first, f"keepalives answering ttlMs 0 moved the lease's deadline {(later - first) * 1000:.0f} ms later")


class SessionLeakTest(unittest.TestCase):
    def test_a_released_session_lock_is_not_kept_alive_by_its_session(self):
        live = {"shards": [{"shard": "s0", "state": "SHARD_LEASE_STATE_LIVE", "ttlMs": "30000"}]}
        gw = FakeGateway(
            {
                "OpenSession": lambda r, h: Reply({"sessionId": "s-1", "ttlMs": "30000", **live}),
                "KeepAliveSession": lambda r, h: Reply(live),
                "TryAcquire": lambda r, h: Reply(grant(30000)),
                "Release": lambda r, h: Reply({"released": True}),
                "CloseSession": lambda r, h: Reply({}),
            }
        )
        self.addCleanup(gw.close)
        c = leasegate.Client([gw.url])
        self.addCleanup(c.close)
        s = c.open_session(ttl=30)
        self.addCleanup(s.close)
        refs = []
        for _ in range(100):
            lock = s.try_acquire("many")
            lock.release()
            refs.append(weakref.ref(lock.lost))
            del lock
        gc.collect()
        pinned = sum(1 for r in refs if r() is not None)
        self.assertEqual(pinned, 0, f"{pinned} of 100 released session locks' signals are still referenced (by the session lease's callbacks)")

    def test_a_raising_loss_callback_on_one_lock_does_not_hide_the_loss_from_another(self):
        # Two locks on one session lease; the first lock's loss signal has a
        # callback that raises. The lease's loss must still reach the second.
        live = {"shards": [{"shard": "s0", "state": "SHARD_LEASE_STATE_LIVE", "ttlMs": "1500"}]}
        lost = {"shards": [{"shard": "s0", "state": "SHARD_LEASE_STATE_LOST"}]}
        gw = FakeGateway(
            {
                "OpenSession": lambda r, h: Reply({"sessionId": "s-1", "ttlMs": "1500", **live}),
                "KeepAliveSession": lambda r, h: Reply(lost),
                "TryAcquire": lambda r, h: Reply(grant(1500, lock_id=r["name"])),
                "Release": lambda r, h: Reply({"released": True}),
                "CloseSession": lambda r, h: Reply({}),
            }
        )
        self.addCleanup(gw.close)
        c = leasegate.Client([gw.url])
        self.addCleanup(c.close)
        s = c.open_session(ttl=1.5)
        self.addCleanup(s.close)
        first = s.try_acquire("first")
        second = s.try_acquire("second")

        def boom(_cause):
            raise RuntimeError("a caller's callback failed")

        first.lost.add_callback(boom)
        deadline = second.expires
        told = second.lost.wait(max(deadline - time.monotonic(), 0) + 1.0)
        past = time.monotonic() - deadline
        self.assertTrue(told and not second.held(), f"{past * 1000:.0f} ms past its deadline, the second lock is untold (held() = {second.held()}): a loss callback of another lock raised")


if __name__ == "__main__":
    unittest.main()
