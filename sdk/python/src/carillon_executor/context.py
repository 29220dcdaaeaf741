"""What a handler gets: the dispatch it is running, a logger and a way to notice cancellation."""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from ._logs import JOB_LOGGERS


class JobError(Exception):
    """A handler's failure: raise it and its message, alone, is reported as the attempt's
    error. Any other exception fails the attempt too, reported as ``Type: message`` with its
    traceback in the run's log."""


@dataclass(frozen=True)
class Shard:
    """Which shard of the run this attempt is: ``index`` from 0 of ``total``."""

    index: int
    total: int


class Cancellation:
    """Set once the attempt is cancelled (the run cancelled or timed out, the attempt failed
    over, or the executor stopping hard). Readable from any thread."""

    def __init__(self) -> None:
        self._flag = threading.Event()
        self._waiters: "list[Tuple[asyncio.AbstractEventLoop, asyncio.Event]]" = []
        self._lock = threading.Lock()

    def set(self) -> None:
        with self._lock:
            self._flag.set()
            waiters, self._waiters = self._waiters, []
        for loop, event in waiters:
            loop.call_soon_threadsafe(event.set)

    def is_set(self) -> bool:
        return self._flag.is_set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        return self._flag.wait(timeout)

    async def wait_async(self) -> None:
        event = asyncio.Event()
        with self._lock:
            if self._flag.is_set():
                return
            self._waiters.append((asyncio.get_running_loop(), event))
        await event.wait()


class JobContext:
    """One attempt of one run (or of one shard of it), as the admin node dispatched it."""

    def __init__(self, dispatch: Mapping[str, Any], cancellation: Cancellation) -> None:
        self._dispatch = dispatch
        self._cancellation = cancellation
        self._logger = logging.getLogger(f"{JOB_LOGGERS}.{dispatch['handler']}")
        shard = dispatch.get("shard") or {}
        self._shard = Shard(int(shard.get("index", 0)), int(shard.get("total", 1)))

    @property
    def run_id(self) -> int:
        """The run; the same for every attempt and shard of it. Key idempotent effects on it
        (with ``shard.index``)."""
        return int(self._dispatch["run_id"])

    @property
    def attempt_id(self) -> int:
        return int(self._dispatch["attempt_id"])

    @property
    def attempt(self) -> int:
        """1 for the first attempt of this shard, 2 for its first retry…"""
        return int(self._dispatch["attempt"])

    @property
    def job_id(self) -> int:
        """The job's id; a task's run has the task's id negated."""
        return int(self._dispatch["job_id"])

    @property
    def job_name(self) -> str:
        return str(self._dispatch["job"])

    @property
    def handler(self) -> str:
        return str(self._dispatch["handler"])

    @property
    def shard(self) -> Shard:
        return self._shard

    @property
    def scheduled_at(self) -> str:
        """The run's scheduled instant, RFC 3339 in UTC."""
        return str(self._dispatch["scheduled_at"])

    @property
    def args(self) -> Any:
        """The job's (or this shard's, or the task's) arguments: any JSON, ``None`` when
        there are none."""
        return self._dispatch.get("args")

    @property
    def timeout_ms(self) -> Optional[int]:
        """The attempt's timeout, when the job has one: past it the attempt is cancelled."""
        value = self._dispatch.get("timeout_ms")
        return None if value is None else int(value)

    @property
    def effect_key(self) -> Optional[str]:
        """Under ``exactly_once_effect``: the same for every delivery of the same work."""
        value = self._dispatch.get("effect_key")
        return None if value is None else str(value)

    @property
    def input(self) -> Optional[Dict[str, Any]]:
        """What the run was given beside the arguments: ``{"parent": …}`` for a child job's
        run, ``{"workflow", "params", "upstream"}`` for a workflow step's; else ``None``."""
        value = self._dispatch.get("input")
        return value if isinstance(value, dict) else None

    @property
    def parent(self) -> Optional[Dict[str, Any]]:
        """A child job's run: its parent run's ``run_id``, ``job_id``, ``job``, ``state`` and
        ``output``."""
        return self._member("parent")

    @property
    def workflow(self) -> Optional[Dict[str, Any]]:
        """A workflow step's run: the workflow's ``id``, its run's ``run_id``, the ``step``."""
        return self._member("workflow")

    @property
    def params(self) -> Any:
        """A workflow step's run: the workflow run's params (``None`` when there are none)."""
        return (self.input or {}).get("params")

    @property
    def upstream(self) -> Dict[str, Dict[str, Any]]:
        """A workflow step's run: each step it needs, by name (``run_id``, ``state``,
        ``output``); empty otherwise."""
        return self._member("upstream") or {}

    def _member(self, name: str) -> Optional[Dict[str, Any]]:
        value = (self.input or {}).get(name)
        return value if isinstance(value, dict) else None

    @property
    def traceparent(self) -> Optional[str]:
        """The W3C ``traceparent`` of this delivery: send it on, or give it to your tracer,
        and the work the handler causes joins the run's trace."""
        value = self._dispatch.get("traceparent")
        return None if value is None else str(value)

    @property
    def trace_id(self) -> Optional[str]:
        """The run's trace id (32 hex digits), when the node sent a ``traceparent``."""
        parts = (self.traceparent or "").split("-")
        if len(parts) == 4 and len(parts[1]) == 32:
            if all(c in "0123456789abcdef" for c in parts[1].lower()):
                return parts[1]
        return None

    def secret(self, name: str) -> Optional[str]:
        """The value of a secret the job names (its ``secrets``); ``None`` for another.
        Never log it."""
        value = self.secrets().get(name)
        return None if value is None else str(value)

    def secrets(self) -> Dict[str, str]:
        """Every secret the dispatch carries, by name."""
        value = self._dispatch.get("secrets") or {}
        return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}

    @property
    def logger(self) -> logging.Logger:
        """A logger whose lines (INFO and above) ship to the run's live log. Any logging the
        handler does is captured the same way; this one is always enabled at INFO."""
        return self._logger

    @property
    def cancelled(self) -> bool:
        """True once the attempt is cancelled: a plain handler checks it in its loops (an
        ``async`` handler is also cancelled through ``asyncio``)."""
        return self._cancellation.is_set()

    def wait_cancelled(self, timeout: Optional[float] = None) -> bool:
        """Blocks a plain handler's thread until the attempt is cancelled or ``timeout``
        seconds pass; True when cancelled. A sleep that ends early on cancel."""
        return self._cancellation.wait(timeout)

    async def until_cancelled(self) -> None:
        """Resolves when the attempt is cancelled."""
        await self._cancellation.wait_async()

    def __repr__(self) -> str:
        return (
            f"JobContext(run_id={self.run_id}, attempt_id={self.attempt_id}, "
            f"job={self.job_name!r}, handler={self.handler!r}, shard={self._shard})"
        )
