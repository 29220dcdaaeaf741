"""What handlers log, captured per attempt and kept until it is shipped to the admin nodes
(``POST /api/v1/executors/logs``) for the run's live log.

A handler's lines are captured through a context variable: an ``async`` handler's task and a
plain handler's thread both run in a copy of the context that names their attempt, so any
``logging`` call they make (``ctx.logger`` or the program's own loggers, INFO and above, as
far as the logger's level lets it through) lands in their attempt's log, and nothing logged
elsewhere does.
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

    def __init__(self, attempt_id: int, report_to: List[str], handle: Optional[str] = None) -> None:
        self.attempt_id = attempt_id
        self.report_to = report_to
        #: The ``handle`` of the attempt's dispatch, which its lines quote.
        self.handle = handle
        self._lock = threading.Lock()
        self._pending: List[Line] = []
        self._next_line = 1
        self._dropped = 0
        self._refused = False
        # Held while a batch of this attempt is taken and sent: the periodic shipping and the
        # last one at the attempt's end never overlap, so batches reach a node in order (a
        # node skips a line numbered at or below the last it stored).
        self.sending = asyncio.Lock()

    def refuse(self) -> None:
        """The nodes refused this attempt's lines: keep none from now on."""
        with self._lock:
            self._refused = True
            self._pending.clear()
            self._dropped = 0

    def push(self, level: str, message: str) -> None:
        with self._lock:
            if self._refused:
                return
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


def capture(record: logging.LogRecord) -> None:
    """Puts a record logged inside an attempt into that attempt's log."""
    log = current_log.get()
    if log is None or record.levelno < CAPTURED_LEVEL:
        return
    try:
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + logging.Formatter().formatException(record.exc_info)
    except Exception:  # a record that cannot be formatted is the program's to see
        return
    log.push(level_name(record.levelno), message)


_installed = threading.Lock()
_done = False


def install_capture() -> None:
    """Captures every record made inside an attempt, once per process. Through the record
    factory, not a handler of the root logger: the program's own logging set-up
    (``basicConfig``, which does nothing once the root has a handler) stays its own."""
    global _done
    with _installed:
        if _done:
            return
        _done = True
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            capture(record)
            return record

        logging.setLogRecordFactory(factory)
        # ctx.logger's lines are captured whatever level the program sets for its own.
        logging.getLogger(JOB_LOGGERS).setLevel(CAPTURED_LEVEL)


#: The parent of the loggers handlers get as ``ctx.logger``.
JOB_LOGGERS = "carillon_executor.job"
