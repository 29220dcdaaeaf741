"""The executor protocol's constants and its signature (``protocol/README.md``)."""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import Optional

PROTOCOL_VERSION = 1
#: How far a signed request's timestamp may be from this clock, and how long an accepted
#: attempt id is remembered against replays.
REPLAY_WINDOW_MS = 300_000

TIMESTAMP_HEADER = "x-carillon-timestamp"
SIGNATURE_HEADER = "x-carillon-signature"

DISPATCH_PATH = "/carillon/v1/dispatch"
DISPATCH_BATCH_PATH = "/carillon/v1/dispatch-batch"
CANCEL_PATH = "/carillon/v1/cancel"

REGISTER_PATH = "/api/v1/executors/register"
HEARTBEAT_PATH = "/api/v1/executors/heartbeat"
RESULTS_PATH = "/api/v1/executors/results"
DEREGISTER_PATH = "/api/v1/executors/deregister"
LOGS_PATH = "/api/v1/executors/logs"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def sign(secret: bytes, timestamp_ms: int, body: bytes) -> str:
    """The ``X-Carillon-Signature`` value of ``body`` sent at ``timestamp_ms``."""
    mac = hmac.new(secret, str(timestamp_ms).encode() + b"." + body, hashlib.sha256)
    return "v1=" + mac.hexdigest()


def signature_problem(
    secret: bytes,
    timestamp: Optional[str],
    signature: Optional[str],
    body: bytes,
    now: int,
) -> Optional[str]:
    """Why a signed request must be refused (``401``), or ``None`` when it verifies."""
    if timestamp is None:
        return f"missing {TIMESTAMP_HEADER} header"
    if signature is None:
        return f"missing {SIGNATURE_HEADER} header"
    text = timestamp.strip()
    digits = text[1:] if text.startswith("-") else text
    if not digits.isascii() or not digits.isdigit():
        return "the timestamp is not Unix milliseconds"
    timestamp_ms = int(text)
    skew = now - timestamp_ms
    if abs(skew) > REPLAY_WINDOW_MS:
        return f"the timestamp is {skew} ms away from this clock, outside the replay window"
    tag = signature.strip()
    hex_digits = tag[3:]
    if (
        not tag.startswith("v1=")
        or len(hex_digits) != 64
        or any(c not in "0123456789abcdefABCDEF" for c in hex_digits)
    ):
        return "the signature is not of the form v1=<64 hex digits>"
    expected = sign(secret, timestamp_ms, body)
    if not hmac.compare_digest(expected[3:], hex_digits.lower()):
        return "the signature does not match"
    return None
