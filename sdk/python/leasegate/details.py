"""Decoding of the google.rpc error details a gateway attaches to errors.

ErrorInfo (the leasegate reason, its shard and limit) and RetryInfo (a rate
limit's delay) are read by hand from their protobuf encoding, so the SDK
carries no protobuf runtime: both messages are a few stable fields.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

#: The domain of the ErrorInfo detail of leasegate's errors.
ERROR_DOMAIN = "leasegate.dev"

ERROR_INFO = "google.rpc.ErrorInfo"
RETRY_INFO = "google.rpc.RetryInfo"

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


@dataclass
class ErrorInfo:
    """google.rpc.ErrorInfo: reason (1), domain (2), metadata (3)."""

    reason: str = ""
    domain: str = ""
    metadata: dict[str, str] = field(default_factory=dict)


def _varint(b: bytes, i: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        if i >= len(b):
            raise ValueError("truncated varint")
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        if c < 0x80:
            return v, i
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(b: bytes):
    """Yields (field number, wire type, value) of a message; LEN values are bytes."""
    i = 0
    while i < len(b):
        tag, i = _varint(b, i)
        num, wt = tag >> 3, tag & 7
        if wt == _VARINT:
            v, i = _varint(b, i)
        elif wt == _LEN:
            n, i = _varint(b, i)
            if i + n > len(b):
                raise ValueError("truncated field")
            v, i = b[i : i + n], i + n
        elif wt == _I64:
            v, i = b[i : i + 8], i + 8
        elif wt == _I32:
            v, i = b[i : i + 4], i + 4
        else:
            raise ValueError(f"wire type {wt} not supported")
        if i > len(b):
            raise ValueError("truncated field")
        yield num, wt, v


def decode_error_info(b: bytes) -> ErrorInfo:
    """Reads an ErrorInfo message."""
    info = ErrorInfo()
    for num, wt, v in _fields(b):
        if wt != _LEN:
            continue
        if num == 1:
            info.reason = v.decode()
        elif num == 2:
            info.domain = v.decode()
        elif num == 3:
            k = val = ""
            for en, ewt, ev in _fields(v):
                if en == 1 and ewt == _LEN:
                    k = ev.decode()
                elif en == 2 and ewt == _LEN:
                    val = ev.decode()
            info.metadata[k] = val
    return info


def decode_retry_delay(b: bytes) -> float:
    """Reads a RetryInfo message's retry_delay (a Duration) as seconds, never negative."""
    delay = 0.0
    for num, wt, v in _fields(b):
        if num == 1 and wt == _LEN:
            seconds = nanos = 0
            for dn, dwt, dv in _fields(v):
                if dn == 1 and dwt == _VARINT:
                    seconds = dv - (1 << 64) if dv >= 1 << 63 else dv
                elif dn == 2 and dwt == _VARINT:
                    nanos = dv - (1 << 64) if dv >= 1 << 63 else dv
            delay = seconds + nanos / 1e9
    return max(delay, 0.0)


def b64decode(s: str) -> bytes:
    """Decodes Connect's base64 (standard or URL alphabet, padding optional)."""
    s = s.replace("-", "+").replace("_", "/")
    return base64.b64decode(s + "=" * (-len(s) % 4))
