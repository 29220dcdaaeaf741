"""What handlers log, captured per attempt and kept until it is shipped to the admin nodes
(``POST /api/v1/executors/logs``) for the run's live log.

A handler's lines are captured through a context variable: an ``async`` handler's task and a
plain handler's thread both run in a copy of the context that names their attempt, so any
``logging`` call they make (``ctx.logger`` or the program's own loggers, INFO and above)
lands in their attempt's log, and nothing logged elsewhere does.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from typing import Any, Dict, List, Optional

from ._wire import now_ms

#: Lines waiting to be shipped per attempt; past it they are counted and dropped.
MAX_PENDING = 10_000
#: Lines of one attempt in one request.
MAX_PER_REQUEST = 1_000
#: How often waiting lines are shipped while attempts run.
SHIP_EVERY_S = 0.3
#: Lines below this level are not captured.
CAPTURED_LEVEL = logging.INFO

Line = Dict[str, Any]


class AttemptLog:
    """One attempt's captured lines, numbered from 1 in the order they were logged."""

    def __init__(self, attempt_id: int, report_to: List[str]) -> None:
        self.attempt_id = attempt_id
        self.report_to = report_to
        self._lock = threading.Lock()
        self._pending: List[Line] = []
        self._next_line = 1
        self._dropped = 0
        # Held while a batch of this attempt is taken and sent: the periodic shipping and the
        # last one at the attempt's end never overlap, so batches reach a node in order (a
        # node skips a line numbered at or below the last it stored).
        self.sending = asyncio.Lock()

    def push(self, level: str, message: str) -> None:
        with self._lock:
            for text in message.splitlines() or [""]:
                if len(self._pending) >= MAX_PENDING:
                    self._dropped += 1
                    continue
                self._pending.append(
                    {"line": self._next_line, "at_ms": now_ms(), "level": level, "message": text}
                )
                self._next_line += 1

    def has_lines(self) -> bool:
        with self._lock:
            return bool(self._pending) or self._dropped > 0 or self._next_line > 1

    def take(self) -> List[Line]:
        """Lines to send now (at most a request's worth), with a line saying how many were
        dropped for want of room, if any were."""
        with self._lock:
            if self._dropped:
                self._pending.append(
                    {
                        "line": self._next_line,
                        "at_ms": now_ms(),
                        "level": "WARN",
                        "message": f"[carillon-executor] {self._dropped} lines dropped: the "
                        "admin nodes did not take them as fast as the handler logged",
                    }
                )
                self._next_line += 1
                self._dropped = 0
            taken = self._pending[:MAX_PER_REQUEST]
            del self._pending[:MAX_PER_REQUEST]
            return taken

    def put_back(self, lines: List[Line]) -> None:
        """Puts lines no node took back in front of the newer ones."""
        with self._lock:
            self._pending[:0] = lines
            excess = len(self._pending) - MAX_PENDING
            if excess > 0:
                del self._pending[:excess]
                self._dropped += excess


current_log: contextvars.ContextVar[Optional[AttemptLog]] = contextvars.ContextVar(
    "carillon_attempt_log", default=None
)


def level_name(levelno: int) -> str:
    if levelno >= logging.ERROR:
        return "ERROR"
    if levelno >= logging.WARNING:
        return "WARN"
    if levelno >= logging.INFO:
        return "INFO"
    if levelno >= logging.DEBUG:
        return "DEBUG"
    return "TRACE"


class CaptureHandler(logging.Handler):
    """Puts a record logged inside an attempt into that attempt's log."""

    def __init__(self) -> None:
        super().__init__(level=CAPTURED_LEVEL)

    def emit(self, record: logging.LogRecord) -> None:
        log = current_log.get()
        if log is None:
            return
        try:
            message = record.getMessage()
            if record.exc_info:
                message += "\n" + logging.Formatter().formatException(record.exc_info)
            log.push(level_name(record.levelno), message)
        except Exception:  # a record that cannot be formatted must not fail the handler
            self.handleError(record)


_installed = threading.Lock()
_handler: Optional[CaptureHandler] = None


def install_capture() -> None:
    """Adds the capturing handler to the root logger, once per process."""
    global _handler
    with _installed:
        if _handler is None:
            _handler = CaptureHandler()
            logging.getLogger().addHandler(_handler)
            # ctx.logger's lines are captured whatever level the program sets for its own.
            logging.getLogger(JOB_LOGGERS).setLevel(CAPTURED_LEVEL)


#: The parent of the loggers handlers get as ``ctx.logger``.
JOB_LOGGERS = "carillon_executor.job"
