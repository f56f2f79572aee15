"""The Connect protocol over HTTP/1.1 with the standard library.

Unary calls are JSON POSTs; the server-streaming Acquire uses Connect's
envelopes (one flag byte, a 4-byte big-endian length, a JSON message),
ending with an end-stream envelope (flag 0x02) that carries the error, if
any. Errors come back as WireError, which the errors module classifies.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import ssl
import struct
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from .details import ERROR_DOMAIN, ERROR_INFO, RETRY_INFO, ErrorInfo, b64decode, decode_error_info, decode_retry_delay

SERVICE = "/leasegate.v1.LockService/"
END_STREAM = 0x02
COMPRESSED = 0x01
MAX_MESSAGE = 4 << 20

_HTTP_CODES = {
    400: "internal",
    401: "unauthenticated",
    403: "permission_denied",
    404: "unimplemented",
    408: "deadline_exceeded",
    429: "unavailable",
    502: "unavailable",
    503: "unavailable",
    504: "unavailable",
}


@dataclass
class WireError(Exception):
    """A failed call: a gateway's Connect error, or one made on this side.

    from_server is true when a gateway answered with it; a connection that
    failed or broke gives a WireError with from_server false.
    """

    code: str
    message: str = ""
    details: list[tuple[str, bytes]] = field(default_factory=list)
    from_server: bool = False

    def __str__(self) -> str:
        return f"{self.code}: {self.message}" if self.message else self.code

    def error_info(self) -> ErrorInfo | None:
        """The leasegate ErrorInfo among the details, if any."""
        for t, v in self.details:
            if t == ERROR_INFO:
                try:
                    info = decode_error_info(v)
                except (ValueError, UnicodeDecodeError):
                    continue
                if info.domain == ERROR_DOMAIN:
                    return info
        return None

    def retry_delay(self) -> float | None:
        """The RetryInfo delay in seconds, if the error carries one."""
        for t, v in self.details:
            if t == RETRY_INFO:
                try:
                    return decode_retry_delay(v)
                except ValueError:
                    continue
        return None


_INT = re.compile(r"-?[0-9]+")


def int64(obj: dict, key: str) -> int:
    """obj[key] as an integer: protojson writes an int64 as a string of
    digits, an int32 as a number; absent or null is 0. Anything else (a
    float, which would round a fencing token above 2**53, an exponent, a
    word, an object) is a gateway's malformed answer: WireError internal."""
    v = obj.get(key)
    if v is None:
        return 0
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, str) and _INT.fullmatch(v):
        return int(v)
    raise WireError("internal", f"malformed answer: {key} is {v!r}; want an integer", from_server=True)


def millis(obj: dict, key: str) -> float:
    """obj[key], a duration in whole milliseconds, in seconds (as int64)."""
    return int64(obj, key) / 1000


def message(obj: object, key: str) -> dict:
    """obj[key] as a message; absent or null is an empty one. A field of
    another type is a malformed answer: WireError internal."""
    v = obj.get(key) if isinstance(obj, dict) else None
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise WireError("internal", f"malformed answer: {key} is {v!r}; want a message", from_server=True)
    return v


def encode_envelope(msg: dict, flags: int = 0) -> bytes:
    """One Connect envelope holding msg as JSON."""
    body = json.dumps(msg, separators=(",", ":")).encode()
    return struct.pack(">BI", flags, len(body)) + body


def read_envelopes(read: Callable[[int], bytes]) -> Iterator[tuple[int, bytes]]:
    """Yields (flags, payload) of each envelope read with read(n) until EOF.

    A stream cut inside an envelope raises WireError unavailable.
    """
    while True:
        head = _read_full(read, 5)
        if not head:
            return
        if len(head) < 5:
            raise WireError("unavailable", "the stream broke inside an envelope header")
        flags, n = struct.unpack(">BI", head)
        if n > MAX_MESSAGE:
            raise _too_large(f"stream message of {n} bytes")
        body = _read_full(read, n)
        if len(body) < n:
            raise WireError("unavailable", "the stream broke inside a message")
        yield flags, body


def _read_full(read: Callable[[int], bytes], n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = read(n - len(out))
        if not chunk:
            break
        out += chunk
    return out


def parse_error(obj: object, from_server: bool = True) -> WireError:
    """A WireError from a Connect JSON error object."""
    if not isinstance(obj, dict):
        return WireError("unknown", "malformed error", from_server=from_server)
    details = []
    for d in obj.get("details") or []:
        try:
            details.append((d.get("type", ""), b64decode(d.get("value", ""))))
        except (ValueError, AttributeError):
            continue
    return WireError(str(obj.get("code") or "unknown"), str(obj.get("message") or ""), details, from_server)


def decode_end_stream(body: bytes) -> WireError | None:
    """The error an end-stream message carries, or None for a clean end."""
    try:
        obj = json.loads(body or b"{}")
    except ValueError:
        return WireError("internal", "malformed end-stream message", from_server=True)
    err = obj.get("error") if isinstance(obj, dict) else None
    return parse_error(err) if err else None


class Endpoint:
    """One gateway's base URL, and the way to open connections to it."""

    def __init__(self, url: str, ssl_context: ssl.SSLContext | None):
        if "://" not in url:
            url = ("https://" if ssl_context else "http://") + url
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"endpoint {url!r}: want http://host:port or https://host:port")
        self.url = url
        self.https = u.scheme == "https"
        self.host = u.hostname
        self.port = u.port or (443 if self.https else 80)
        self.prefix = u.path.rstrip("/")
        self.ssl_context = ssl_context if self.https else None
        if self.https and self.ssl_context is None:
            self.ssl_context = ssl.create_default_context()

    def connect(self, timeout: float | None) -> http.client.HTTPConnection:
        if self.https:
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self.ssl_context)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)


def _headers(content_type: str, token: str | None, timeout: float | None) -> dict[str, str]:
    h = {"Content-Type": content_type, "Connect-Protocol-Version": "1", "User-Agent": "leasegate-python"}
    if token:
        h["Authorization"] = "Bearer " + token
    if timeout is not None:
        # Whole milliseconds, rounded down: never later than the caller's bound.
        h["Connect-Timeout-Ms"] = str(max(1, int(timeout * 1000)))
    return h


def _transport_error(e: BaseException) -> WireError:
    if isinstance(e, ssl.SSLCertVerificationError):
        return WireError("unauthenticated", f"TLS: the gateway's certificate is not trusted: {e}")
    if isinstance(e, ssl.SSLError) and any(
        s in str(e).lower() for s in ("certificate required", "bad certificate", "unknown ca", "certificate unknown")
    ):
        return WireError("unauthenticated", f"TLS: a certificate was refused: {e}")
    if isinstance(e, (TimeoutError, socket.timeout)):
        return WireError("deadline_exceeded", f"no answer in time: {e}")
    return WireError("unavailable", f"{type(e).__name__}: {e}")


def _pending_alert(conn: http.client.HTTPConnection) -> WireError | None:
    """The TLS alert a gateway sent before closing, if one waits unread.

    Under TLS 1.3 the gateway judges the client's certificate after this
    side's handshake has finished: its refusal (an alert, then EOF) surfaces
    at the first write or read as a bare EOF or reset, indistinguishable
    from an outage until the alert itself is read.
    """
    sock = conn.sock
    if not isinstance(sock, ssl.SSLSocket):
        return None
    try:
        sock.settimeout(0.2)
        sock.recv(1)
    except ssl.SSLError as e:
        err = _transport_error(e)
        return err if err.code == "unauthenticated" else None
    except OSError:
        return None
    return None


def _http_error(status: int, body: bytes) -> WireError:
    try:
        obj = json.loads(body)
        if isinstance(obj, dict) and obj.get("code"):
            return parse_error(obj)
    except ValueError:
        pass
    return WireError(_HTTP_CODES.get(status, "unknown"), f"HTTP {status}: {body[:200]!r}", from_server=True)


def _read_body(resp: http.client.HTTPResponse) -> bytes:
    """The answer's body, refused once it exceeds MAX_MESSAGE (as a stream's
    message is) without reading the rest."""
    if (resp.length or 0) > MAX_MESSAGE:
        raise _too_large(f"answer of {resp.length} bytes")
    body = resp.read(MAX_MESSAGE + 1)
    if len(body) > MAX_MESSAGE:
        raise _too_large("answer")
    return body


def _too_large(what: str) -> WireError:
    # A gateway's failure, not a quota of the caller's: never retried.
    return WireError("internal", f"{what} exceeds {MAX_MESSAGE} bytes", from_server=True)


def unary(ep: Endpoint, method: str, msg: dict, token: str | None, timeout: float) -> dict:
    """Calls method with msg and returns the answer, or raises WireError.

    timeout bounds the whole call: connecting, sending and reading however
    slowly the gateway trickles its answer (a socket timeout alone bounds
    only each read). At the bound a timer shuts the socket and the call
    fails with deadline_exceeded.
    """
    conn = ep.connect(timeout)
    conn.auto_open = 0  # a socket shut by the timer must not reconnect
    mu = threading.Lock()
    expired = [False]

    def expire() -> None:
        with mu:
            expired[0] = True
            sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()
    try:
        conn.connect()
        with mu:
            if expired[0]:
                raise WireError("deadline_exceeded", f"no answer within {timeout:.3f} s")
        conn.request(
            "POST",
            ep.prefix + SERVICE + method,
            body=json.dumps(msg, separators=(",", ":")).encode(),
            headers=_headers("application/json", token, timeout),
        )
        resp = conn.getresponse()
        body = _read_body(resp)
    except WireError:
        raise
    except (OSError, http.client.HTTPException, ValueError, AttributeError) as e:
        if expired[0]:
            raise WireError("deadline_exceeded", f"no answer within {timeout:.3f} s") from e
        raise (_pending_alert(conn) or _transport_error(e)) from e
    finally:
        timer.cancel()
        conn.close()
    if resp.status != 200:
        raise _http_error(resp.status, body)
    try:
        out = json.loads(body or b"{}")
    except ValueError as e:
        raise WireError("internal", "malformed answer", from_server=True) from e
    return out if isinstance(out, dict) else {}


class Stream:
    """A server-streaming call: iterate for its messages; close to end it.

    Nothing is sent until iteration starts. close may be called from another
    thread at any time: it shuts the socket, which ends a connect, send or
    read blocked on it, and a closed stream never opens a connection again.
    The socket has no read timeout once connected: a wait lasts as long as
    the gateway keeps it (its wait timeout, or the caller's cancel).
    """

    def __init__(self, ep: Endpoint, method: str, msg: dict, token: str | None, connect_timeout: float):
        self._conn = ep.connect(connect_timeout)
        self._conn.auto_open = 0  # a closed stream must not reconnect on its own
        self._path = ep.prefix + SERVICE + method
        self._body = encode_envelope(msg)
        self._headers = _headers("application/connect+json", token, None)
        self._lock = threading.Lock()
        self._closed = False

    def __iter__(self) -> Iterator[dict]:
        try:
            self._conn.connect()
            with self._lock:
                if self._closed:
                    raise WireError("canceled", "the stream was closed")
                self._conn.sock.settimeout(None)
            self._conn.request("POST", self._path, body=self._body, headers=self._headers)
            resp = self._conn.getresponse()
            if resp.status != 200:
                raise _http_error(resp.status, _read_body(resp))
            for flags, body in read_envelopes(resp.read):
                if flags & COMPRESSED:
                    raise WireError("internal", "compressed stream message not negotiated", from_server=True)
                if flags & END_STREAM:
                    err = decode_end_stream(body)
                    if err:
                        raise err
                    return
                try:
                    msg = json.loads(body)
                except ValueError as e:
                    raise WireError("internal", "malformed stream message", from_server=True) from e
                yield msg
            raise WireError("unavailable", "the stream ended without an end-stream message")
        except WireError:
            raise
        except (OSError, http.client.HTTPException, ValueError, AttributeError) as e:
            if self._closed:
                raise WireError("canceled", "the stream was closed") from e
            raise (_pending_alert(self._conn) or _transport_error(e)) from e
        finally:
            self.close()

    def close(self) -> None:
        """Ends the call; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            sock = self._conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._conn.close()
