"""A fake Connect endpoint for the unit tests: it speaks the wire only.

It answers each LockService method with a function of the request, so the
unit tests reach answers a real gateway gives rarely (a rate limit, an
internal failure) and see every request's headers. Lock semantics are tested
against real gateways by the conformance runner, never here.
"""

from __future__ import annotations

import base64
import json
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from leasegate.wire import encode_envelope  # noqa: E402


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def ld(field: int, payload: bytes) -> bytes:
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def error_info(reason: str, metadata: dict[str, str] | None = None, domain: str = "leasegate.dev") -> bytes:
    b = ld(1, reason.encode()) + ld(2, domain.encode())
    for k, v in (metadata or {}).items():
        b += ld(3, ld(1, k.encode()) + ld(2, v.encode()))
    return b


def retry_info(seconds: int, nanos: int) -> bytes:
    return ld(1, varint(1 << 3) + varint(seconds) + varint(2 << 3) + varint(nanos))


def connect_error(code: str, message: str, *details: tuple[str, bytes]) -> dict:
    return {
        "code": code,
        "message": message,
        "details": [{"type": t, "value": base64.b64encode(v).decode().rstrip("=")} for t, v in details],
    }


class Reply:
    """What the fake answers: a unary JSON body or error, or stream messages."""

    def __init__(self, body: dict | None = None, error: dict | None = None, stream: list[dict] | None = None, status: int = 200):
        self.body, self.error, self.stream, self.status = body, error, stream, status


class FakeGateway:
    """A ThreadingHTTPServer on 127.0.0.1; handlers[method](request dict, headers) -> Reply."""

    def __init__(self, handlers: dict, tls: ssl.SSLContext | None = None):
        self.handlers = handlers
        self.requests: list[tuple[str, dict, dict]] = []
        fake = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                method = self.path.rsplit("/", 1)[-1]
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                streaming = self.headers.get("Content-Type") == "application/connect+json"
                req = json.loads(raw[5:] if streaming else raw)
                fake.requests.append((method, req, dict(self.headers)))
                r = fake.handlers[method](req, self.headers)
                if streaming:
                    out = b"".join(encode_envelope(m) for m in r.stream or [])
                    end = {"error": r.error} if r.error else {}
                    out += encode_envelope(end, flags=0x02)
                    self._send(200, "application/connect+json", out)
                elif r.error:
                    status = {"resource_exhausted": 429, "unauthenticated": 401, "internal": 500, "unavailable": 503}.get(r.error["code"], 400)
                    self._send(status, "application/json", json.dumps(r.error).encode())
                else:
                    self._send(r.status, "application/json", json.dumps(r.body or {}).encode())

            def _send(self, status, ctype, body):
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up the call (a cancel test)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.url = ("https" if tls else "http") + f"://127.0.0.1:{self.server.server_address[1]}"
        self._t = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._t.start()

    def count(self, method: str) -> int:
        return sum(1 for m, _, _ in self.requests if m == method)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
