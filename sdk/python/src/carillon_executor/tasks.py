"""Tasks: one-shot work an application asks for ("cancel this order in 30 minutes"), run by an
app's executors when due (``protocol/README.md``, *Tasks*). ``Tasks`` blocks, ``AsyncTasks``
is for ``async`` programs; both need an admin (or namespace service) token, not an
executor's.

.. code-block:: python

    tasks = Tasks("http://127.0.0.1:9001", token)
    tasks.enqueue(Task("orders", "cancel_unpaid", args={"order": 1234},
                       delay=timedelta(minutes=30), key="cancel-order-1234"))
    tasks.cancel_key("cancel-order-1234")   # paid after all
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from ._http import Answer, ApiError, AsyncTransport, SyncTransport, Unavailable, checked

__all__ = ["Task", "Enqueued", "TaskProblem", "TasksRefused", "TasksUnavailable", "Tasks", "AsyncTasks",
           "ApiError"]

#: Most tasks the API takes in one request.
MAX_BATCH = 10_000


@dataclass
class Task:
    """A task to enqueue. Give ``delay`` (a ``timedelta`` or a duration string: ``"30m"``,
    ``"1h30m"``) or ``at`` (an aware ``datetime`` or RFC 3339), not both; with neither it is due
    now. ``key`` makes enqueueing idempotent while the task is unfinished. ``retry``,
    ``timeout_ms``, ``balance``, ``delivery`` (``at_least_once``, ``at_most_once``,
    ``exactly_once_effect``) and ``flow`` mean what they mean for a job."""

    app: str
    handler: str
    args: Any = None
    delay: Union[timedelta, str, None] = None
    at: Union[datetime, str, None] = None
    key: Optional[str] = None
    priority: Optional[int] = None
    retry: Optional[Dict[str, Any]] = None
    timeout_ms: Optional[int] = None
    balance: Optional[str] = None
    delivery: Optional[str] = None
    flow: Optional[Dict[str, Any]] = field(default=None)

    def body(self) -> Dict[str, Any]:
        body: Dict[str, Any] = {"app": self.app, "handler": self.handler}
        if self.args is not None:
            body["args"] = self.args
        if self.delay is not None and self.at is not None:
            raise ValueError(f"task {self.app}.{self.handler}: give delay or at, not both")
        if isinstance(self.delay, timedelta):
            body["delay"] = max(int(self.delay.total_seconds() * 1000), 0)
        elif self.delay is not None:
            body["delay"] = str(self.delay)
        if isinstance(self.at, datetime):
            if self.at.tzinfo is None:
                raise ValueError(
                    f"task {self.app}.{self.handler}: at is a naive datetime; give it a time zone"
                )
            instant = self.at.astimezone(timezone.utc)
            body["at"] = instant.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        elif self.at is not None:
            body["at"] = str(self.at)
        for name in ("key", "priority", "retry", "timeout_ms", "balance", "delivery", "flow"):
            value = getattr(self, name)
            if value is not None:
                body[name] = value
        return body


@dataclass(frozen=True)
class Enqueued:
    """What an enqueue did with one task: its id, and ``created`` (False: an unfinished task
    held the key, and ``id`` is that task's)."""

    id: int
    created: bool


@dataclass(frozen=True)
class TaskProblem:
    """A bad task: its index in the whole call, the field, and what is wrong."""

    index: int
    field: str
    message: str


class TasksRefused(Exception):
    """The node refused a batch: nothing of it was stored; ``stored`` lists the tasks of the
    call's earlier batches, which were."""

    def __init__(self, status: int, detail: str, problems: List[TaskProblem], stored: List[Enqueued]) -> None:
        super().__init__(f"the node refused the batch: {detail}")
        self.status, self.detail, self.problems, self.stored = status, detail, problems, stored


class TasksUnavailable(Exception):
    """No node took a batch; ``stored`` lists the tasks of the call's earlier batches."""

    def __init__(self, reason: str, stored: List[Enqueued]) -> None:
        super().__init__(f"no admin node took the batch: {reason}")
        self.reason, self.stored = reason, stored


def _batches(tasks: Union[Task, Iterable[Task]], size: int) -> List[Tuple[int, List[Task], bool]]:
    """The call's batches: their offset, their tasks, and whether each task has a key (then a
    batch whose answer was lost is safely sent again: the keys return the first's tasks)."""
    listed = [tasks] if isinstance(tasks, Task) else list(tasks)
    return [
        (i, listed[i : i + size], all(t.key for t in listed[i : i + size]))
        for i in range(0, len(listed), size)
    ]


def _taken(answer: Answer, offset: int, stored: List[Enqueued]) -> List[Enqueued]:
    if answer.status in (200, 201):
        return [Enqueued(int(t["id"]), t["status"] == "created") for t in answer.document["tasks"]]
    problem = answer.document if isinstance(answer.document, dict) else {}
    problems = [
        TaskProblem(int(e["index"]) + offset, str(e["field"]), str(e["message"]))
        for e in problem.get("errors") or []
    ]
    detail = str(problem.get("detail") or f"status {answer.status}")
    raise TasksRefused(answer.status, detail, problems, stored)


def _unsure(reason: str, keyed: bool) -> str:
    if keyed or "may have been done" not in reason:
        return reason
    return reason + " (the batch may have been stored: without keys on all its tasks it is not sent again)"


def _found(answer: Answer) -> Optional[Dict[str, Any]]:
    return None if answer.status == 404 else dict(checked(answer))


def _holder(answer: Answer) -> Optional[Dict[str, Any]]:
    items = checked(answer)["items"]
    return dict(items[0]) if items else None


class Tasks:
    """Enqueues, reads and cancels tasks, blocking."""

    def __init__(self, admin_urls: Union[str, Sequence[str]], token: str, *,
                 namespace: Optional[str] = None, ca: Optional[str] = None,
                 timeout: float = 30.0, batch: int = MAX_BATCH) -> None:
        self._transport = SyncTransport(admin_urls, token, ca, timeout)
        self._query = {"namespace": namespace}
        self._batch = max(1, min(batch, MAX_BATCH))

    def enqueue(self, tasks: Union[Task, Iterable[Task]]) -> List[Enqueued]:
        """Enqueues in requests of up to 10,000 tasks, each stored whole or refused whole;
        per task, in order, its id and whether it was created."""
        stored: List[Enqueued] = []
        for offset, batch, keyed in _batches(tasks, self._batch):
            body = {"tasks": [t.body() for t in batch]}
            try:
                answer = self._transport.request("POST", "/api/v1/tasks", query=self._query, body=body, resend=keyed)
            except Unavailable as e:
                raise TasksUnavailable(_unsure(str(e), keyed), stored) from None
            stored.extend(_taken(answer, offset, stored))
        return stored

    def get(self, task_id: int) -> Optional[Dict[str, Any]]:
        """The task, with its run once it fired; None when there is none."""
        return _found(self._transport.request("GET", f"/api/v1/tasks/{task_id}", query=self._query, resend=True))

    def get_by_key(self, key: str) -> Optional[Dict[str, Any]]:
        """The unfinished task holding ``key``; None when none does."""
        query = {**self._query, "key": key}
        return _holder(self._transport.request("GET", "/api/v1/tasks", query=query, resend=True))

    def list(self, **filters: Any) -> Dict[str, Any]:
        """A page of tasks (``app``, ``handler``, ``state``, ``due_from``, ``due_to``,
        ``limit``, ``cursor``): ``{"items": [...], "next_cursor": ...}``."""
        query = {**self._query, **filters}
        return dict(checked(self._transport.request("GET", "/api/v1/tasks", query=query, resend=True)))

    def cancel(self, task_id: int) -> Optional[Dict[str, Any]]:
        """Cancels and deletes the task (a fired one's run is cancelled); the task as it was,
        or None when there is none. A task whose run has ended raises ``ApiError`` (409)."""
        return _found(self._transport.request("DELETE", f"/api/v1/tasks/{task_id}", query=self._query))

    def cancel_key(self, key: str) -> Optional[Dict[str, Any]]:
        """Cancels the task holding ``key``, as :meth:`cancel` does."""
        query = {**self._query, "key": key}
        return _found(self._transport.request("DELETE", "/api/v1/tasks", query=query))

    def close(self) -> None:
        self._transport.close()


class AsyncTasks:
    """:class:`Tasks` for ``async`` programs."""

    def __init__(self, admin_urls: Union[str, Sequence[str]], token: str, *,
                 namespace: Optional[str] = None, ca: Optional[str] = None,
                 timeout: float = 30.0, batch: int = MAX_BATCH) -> None:
        self._transport = AsyncTransport(admin_urls, token, ca, timeout)
        self._query = {"namespace": namespace}
        self._batch = max(1, min(batch, MAX_BATCH))

    async def enqueue(self, tasks: Union[Task, Iterable[Task]]) -> List[Enqueued]:
        stored: List[Enqueued] = []
        for offset, batch, keyed in _batches(tasks, self._batch):
            body = {"tasks": [t.body() for t in batch]}
            try:
                answer = await self._transport.request("POST", "/api/v1/tasks", query=self._query, body=body, resend=keyed)
            except Unavailable as e:
                raise TasksUnavailable(_unsure(str(e), keyed), stored) from None
            stored.extend(_taken(answer, offset, stored))
        return stored

    async def get(self, task_id: int) -> Optional[Dict[str, Any]]:
        return _found(await self._transport.request("GET", f"/api/v1/tasks/{task_id}", query=self._query, resend=True))

    async def get_by_key(self, key: str) -> Optional[Dict[str, Any]]:
        query = {**self._query, "key": key}
        return _holder(await self._transport.request("GET", "/api/v1/tasks", query=query, resend=True))

    async def list(self, **filters: Any) -> Dict[str, Any]:
        query = {**self._query, **filters}
        return dict(checked(await self._transport.request("GET", "/api/v1/tasks", query=query, resend=True)))

    async def cancel(self, task_id: int) -> Optional[Dict[str, Any]]:
        return _found(await self._transport.request("DELETE", f"/api/v1/tasks/{task_id}", query=self._query))

    async def cancel_key(self, key: str) -> Optional[Dict[str, Any]]:
        query = {**self._query, "key": key}
        return _found(await self._transport.request("DELETE", "/api/v1/tasks", query=query))

    async def close(self) -> None:
        await self._transport.close()

