"""What the endpoint, the heartbeat and the reports share: the handlers, the attempts
running, the replay and effect records, and the calls that tell the admin nodes about them."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Deque, Dict, List, Mapping, Optional, Set, Tuple

from ._attempts import Attempt, Running, run_handler
from ._calls import AdminNodes, CallError
from ._effects import Effects, Result
from ._logs import SHIP_EVERY_S, AttemptLog
from ._wire import (
    DEREGISTER_PATH,
    HEARTBEAT_PATH,
    LOGS_PATH,
    PROTOCOL_VERSION,
    REGISTER_PATH,
    REPLAY_WINDOW_MS,
    RESULTS_PATH,
    now_ms,
)
from .jobs import JobSpec

log = logging.getLogger("carillon_executor")

#: How long the result of an attempt answered 200 at once is kept for the attempt offered
#: again: longer than a dead node's successor takes to offer it (its lease and a rebalance).
ANSWERS_KEPT_MS = 60_000


@dataclass(frozen=True)
class Identity:
    executor_id: str
    app: str
    weight: int
    capacity: int
    secret: bytes
    capture_logs: bool


#: How a dispatch was answered: its status, and the result of a ``200`` or the reason of a
#: refusal.
Answer = Tuple[int, Optional[Result], Optional[str]]


class Core:
    def __init__(
        self,
        identity: Identity,
        handlers: Mapping[str, JobSpec],
        nodes: AdminNodes,
        threads: ThreadPoolExecutor,
    ) -> None:
        self.id = identity
        self.handlers = dict(handlers)
        self.nodes = nodes
        self.threads = threads
        self.running = Running()
        self.effects = Effects()
        # Accepted attempt ids, each with the instant (epoch ms) until which it is remembered
        # (while a replay of its request could pass the timestamp check), and the order they
        # came in, to forget them.
        self.seen: Dict[int, int] = {}
        self.seen_order: Deque[Tuple[int, int]] = deque()
        # The results of attempts answered 200 at once, for a while: a node that died before
        # recording the answer has its successor offer the attempt again, and it gets the same
        # answer, where a 409 would leave the attempt running here unreported.
        self.answered: Dict[int, Result] = {}
        self.answered_order: Deque[Tuple[int, int]] = deque()
        self.draining = False
        #: Background work to wait for when draining: reports and handler runs.
        self.pending: Set["asyncio.Task[Any]"] = set()

    # --- accepting dispatches ---------------------------------------------------------

    def accept(self, dispatch: Mapping[str, Any], signed_at: int) -> Tuple[Answer, Optional[Attempt]]:
        """Takes a dispatch, whose request was signed at ``signed_at`` (epoch ms), as
        ``protocol/README.md`` says: its answer, and the attempt it started (whose handler the
        caller may wait for briefly to answer ``200`` at once)."""
        if dispatch.get("protocol") != PROTOCOL_VERSION:
            return (400, None, f"protocol {dispatch.get('protocol')} is not spoken here"), None
        attempt_id = int(dispatch["attempt_id"])
        key = dispatch.get("effect_key")
        if isinstance(key, str):
            begun, value = self.effects.begin(key, attempt_id, now_ms())
            if begun == "done" and isinstance(value, Result):
                log.debug("attempt %s answered from the record of %s", attempt_id, key)
                return (200, value, None), None
            if begun == "joined" and value == attempt_id:
                # The running attempt itself, offered again: a replay, its record untouched.
                return (409, None, "this attempt was already accepted"), None
            if begun == "joined" and isinstance(value, int):
                primary = self.running.attempts.get(value)
                joined = Attempt(attempt_id, list(dispatch.get("report_to") or []), key)
                joined.joined_to = value
                joined.handle = _handle_of(dispatch)
                if primary is not None:
                    joined.cancellation = primary.cancellation
                self.running.attempts[attempt_id] = joined
                return (202, None, None), None
        answer, attempt = self._start(dispatch, signed_at)
        if attempt is None and isinstance(key, str):
            self.effects.abandon(key)
        return answer, attempt

    def _start(self, dispatch: Mapping[str, Any], signed_at: int) -> Tuple[Answer, Optional[Attempt]]:
        attempt_id = int(dispatch["attempt_id"])
        now = now_ms()
        # In the order accepted, so one remembered longer (signed later) may keep those after
        # it a little longer too: remembering longer is safe.
        while self.seen_order and self.seen_order[0][0] < now:
            _, old = self.seen_order.popleft()
            self.seen.pop(old, None)
        while self.answered_order and now - self.answered_order[0][0] > ANSWERS_KEPT_MS:
            _, old = self.answered_order.popleft()
            self.answered.pop(old, None)
        # Before draining: an attempt taken here and offered again must not go elsewhere.
        if attempt_id in self.answered:
            return (200, self.answered[attempt_id], None), None
        if attempt_id in self.seen:
            return (409, None, "this attempt was already accepted"), None
        if self.draining:
            return (503, None, "draining"), None
        handler = str(dispatch.get("handler"))
        spec = self.handlers.get(handler)
        if spec is None:
            return (404, None, f"no handler {handler!r} here"), None
        if self.running.busy >= self.id.capacity:
            return (429, None, "at capacity"), None
        until = max(signed_at, now) + REPLAY_WINDOW_MS
        self.seen[attempt_id] = until
        self.seen_order.append((until, attempt_id))
        report_to = [str(u) for u in dispatch.get("report_to") or []]
        key = dispatch.get("effect_key")
        attempt = Attempt(attempt_id, report_to, key if isinstance(key, str) else None)
        attempt.handle = _handle_of(dispatch)
        if self.id.capture_logs:
            attempt.log = AttemptLog(attempt_id, report_to, attempt.handle)
        self.running.attempts[attempt_id] = attempt
        self.running.busy += 1
        stopped = attempt.stopped = asyncio.Event()

        def ended() -> None:
            if not stopped.is_set():
                stopped.set()
                self.running.busy -= 1

        attempt.handler = asyncio.ensure_future(
            run_handler(spec, dispatch, attempt, self.threads, ended)
        )
        # Cancelled before it began, the handler's run never gets to say it ended.
        attempt.handler.add_done_callback(lambda run: ended() if run.cancelled() else None)
        return (202, None, None), attempt

    # --- ending attempts --------------------------------------------------------------

    def answered_at_once(self, attempt: Attempt) -> Optional[Result]:
        """The result of an attempt whose handler already ended without logging, to answer
        ``200`` with instead of ``202`` and a report; None when it must be reported."""
        handler = attempt.handler
        if handler is None or not handler.done() or handler.cancelled():
            return None
        if attempt.log is not None and attempt.log.has_lines():
            return None
        result = handler.result()
        if result.outcome == "cancelled":
            return None  # a 200 carries only a success or a failure
        self.running.attempts.pop(attempt.attempt_id, None)
        self.answered[attempt.attempt_id] = result
        self.answered_order.append((now_ms(), attempt.attempt_id))
        if attempt.effect_key is not None:
            for other in self.effects.finish(attempt.effect_key, result, now_ms()):
                self._spawn(self._report_joined(other, result))
        return result

    def finish_later(self, attempt: Attempt) -> None:
        """Waits for the attempt's handler in the background, then ships the rest of its log
        and reports its result."""
        self._spawn(self._finish(attempt))

    async def _finish(self, attempt: Attempt) -> None:
        handler = attempt.handler
        assert handler is not None
        try:
            result = await asyncio.shield(handler)
        except asyncio.CancelledError:
            if not handler.cancelled():
                raise
            result = Result("cancelled", error="cancelled")
        if attempt.stopped is not None:
            # A plain handler's thread runs on past its cancel: its work is not over, and its
            # effect key stays running (a redelivery joins it) until the thread returns.
            await attempt.stopped.wait()
        # The log is complete before the result: a run that has ended shows all of it.
        if attempt.log is not None:
            await self._close_log(attempt.log)
        joined: List[int] = []
        if attempt.effect_key is not None:
            joined = self.effects.finish(attempt.effect_key, result, now_ms())
        for other in joined:
            await self._report_joined(other, result)
        await self.report(attempt.attempt_id, result, attempt.report_to, attempt.handle)

    async def _report_joined(self, attempt_id: int, result: Result) -> None:
        joined = self.running.attempts.get(attempt_id)
        report_to = joined.report_to if joined is not None else []
        await self.report(attempt_id, result, report_to, joined.handle if joined is not None else None)

    async def report(
        self, attempt_id: int, result: Result, report_to: List[str], handle: Optional[str]
    ) -> None:
        """Reports a result until an admin node takes it or refuses it for good; the attempt
        is listed in flight until then. ``handle`` is the one its dispatch carried."""
        body: Dict[str, Any] = {"executor_id": self.id.executor_id, "attempt_id": attempt_id}
        if handle is not None:
            body["handle"] = handle
        body.update(result.body())
        delay = 0.2
        try:
            while True:
                try:
                    await self.nodes.post(RESULTS_PATH, body, report_to)
                    return
                except CallError as e:
                    if e.permanent:
                        log.warning("result of attempt %s refused for good: %s", attempt_id, e)
                        return
                    log.warning("result of attempt %s not delivered yet: %s", attempt_id, e)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
        finally:
            self.running.attempts.pop(attempt_id, None)

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    # --- handler logs -----------------------------------------------------------------

    def _open_logs(self) -> List[AttemptLog]:
        return [a.log for a in self.running.attempts.values() if a.log is not None]

    async def ship_logs(self) -> None:
        """Ships the waiting lines of every running attempt, every 300 ms, until cancelled."""
        while True:
            await asyncio.sleep(SHIP_EVERY_S)
            for attempt_log in self._open_logs():
                if not attempt_log.sending.locked():
                    try:
                        await self._ship(attempt_log)
                    except Exception as e:  # shipping must go on for the other attempts
                        log.warning("log lines of attempt %s not shipped: %s", attempt_log.attempt_id, e)

    async def _close_log(self, attempt_log: AttemptLog) -> None:
        """Ships all that is left of an attempt's log, giving up after three tries in a row
        that no node took."""
        failures = 0
        while failures < 3:
            shipped = await self._ship(attempt_log)
            if shipped == "nothing":
                return
            if shipped == "not taken":
                failures += 1
                await asyncio.sleep(SHIP_EVERY_S)
            else:
                failures = 0

    async def _ship(self, attempt_log: AttemptLog) -> str:
        """Sends one batch of an attempt's waiting lines, after any batch of it on its way;
        puts them back when no node took them."""
        async with attempt_log.sending:
            lines = attempt_log.take()
            if not lines:
                return "nothing"
            batch = {
                "executor_id": self.id.executor_id,
                "attempts": [_quoted(attempt_log.attempt_id, attempt_log.handle, {"lines": lines})],
            }
            try:
                answer = await self.nodes.post(LOGS_PATH, batch, attempt_log.report_to)
                if isinstance(answer, dict) and attempt_log.attempt_id in (answer.get("refused") or []):
                    # Neither pending nor ours on the nodes: its lines are not wanted.
                    attempt_log.refuse()
            except CallError as e:
                if e.permanent:
                    log.debug("log lines of attempt %s refused: %s", attempt_log.attempt_id, e)
                    return "taken"
                attempt_log.put_back(lines)
                return "not taken"
            return "taken"

    # --- registration and heartbeats --------------------------------------------------

    def registration(self, address: str) -> Dict[str, Any]:
        handlers = []
        for spec in sorted(self.handlers.values(), key=lambda s: s.name):
            handler: Dict[str, Any] = {"name": spec.name, "description": spec.description}
            schedule = spec.schedule()
            if schedule is not None:
                handler["schedule"] = schedule
            handlers.append(handler)
        return {
            "protocol": PROTOCOL_VERSION,
            "executor_id": self.id.executor_id,
            "app": self.id.app,
            "address": address,
            "weight": self.id.weight,
            "capacity": self.id.capacity,
            "batch": True,
            "handlers": handlers,
        }

    async def register(self, address: str) -> Dict[str, Any]:
        answer = await self.nodes.post(REGISTER_PATH, self.registration(address))
        return answer if isinstance(answer, dict) else {}

    async def heartbeat(self, address: str, interval_s: float) -> None:
        """Heartbeats until cancelled: in-flight attempts and draining go up, attempts to
        cancel come back; nodes that forgot this executor get its registration again."""
        while True:
            await asyncio.sleep(interval_s)
            beat = {
                "executor_id": self.id.executor_id,
                "in_flight": self.running.in_flight(),
                "draining": self.draining,
            }
            try:
                reply = await self.nodes.post(HEARTBEAT_PATH, beat)
            except Exception as e:  # a beat that fails must not end the heartbeats
                log.warning("heartbeat not delivered: %s", e)
                continue
            if not isinstance(reply, dict):
                continue
            if reply.get("registered") is False and not self.draining:
                try:
                    await self.register(address)
                    log.info("registered again: the admin nodes had forgotten this executor")
                except CallError as e:
                    log.warning("could not register again: %s", e)
            for attempt_id in reply.get("cancel") or []:
                self.running.cancel(int(attempt_id))

    async def deregister(self) -> None:
        try:
            await self.nodes.post(DEREGISTER_PATH, {"executor_id": self.id.executor_id})
        except CallError as e:
            log.warning("could not deregister (the admin nodes will notice the silence): %s", e)

    async def drain(self, timeout_s: float) -> None:
        """Refuses new work and waits for the attempts running to end and be reported;
        past ``timeout_s`` cancels them and waits 5 s more."""
        self.draining = True
        if not await self._settled(timeout_s):
            log.warning("in-flight attempts outlived the drain timeout; cancelling them")
            self.running.cancel_all()
            await self._settled(5.0)

    async def _settled(self, timeout_s: float) -> bool:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self.running.attempts or self.pending:
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return True


def _handle_of(dispatch: Mapping[str, Any]) -> Optional[str]:
    """The attempt's handle in a dispatch; None from a node older than handles."""
    handle = dispatch.get("handle")
    return handle if isinstance(handle, str) else None


def _quoted(attempt_id: int, handle: Optional[str], rest: Dict[str, Any]) -> Dict[str, Any]:
    """An attempt's part of a call to the nodes: its id, its handle when it has one, and ``rest``."""
    part: Dict[str, Any] = {"attempt_id": attempt_id}
    if handle is not None:
        part["handle"] = handle
    part.update(rest)
    return part
