"""The attempts an executor runs: starting a handler (an ``async`` one as a task, a plain one
in a thread), its result, its cancellation, and what must be remembered about it until its
result is reported."""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional

from ._effects import Result
from ._logs import AttemptLog, current_log
from ._otel import attempt_span
from ._otel import ended as traced_end
from .context import Cancellation, JobContext, JobError
from .jobs import JobSpec

log = logging.getLogger("carillon_executor")


@dataclass
class Attempt:
    """An attempt this executor answered ``202`` for (or is about to answer), until its result
    is reported."""

    attempt_id: int
    report_to: List[str]
    effect_key: Optional[str]
    cancellation: Cancellation = field(default_factory=Cancellation)
    #: The handler's run; None for an attempt joined to another delivery of its work.
    handler: Optional["asyncio.Task[Result]"] = None
    log: Optional[AttemptLog] = None
    #: A delivery of work already running here: the attempt running it.
    joined_to: Optional[int] = None
    #: Set once the handler's work has stopped (a plain handler's thread may outlive its
    #: cancelled attempt).
    stopped: Optional[asyncio.Event] = None
    #: The ``handle`` its dispatch carried, which its result and log lines quote.
    handle: Optional[str] = None


def _output_problem(output: Any) -> Optional[str]:
    try:
        json.dumps(output, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        return f"the output is not JSON: {e}"
    return None


async def run_handler(
    spec: JobSpec,
    dispatch: Mapping[str, Any],
    attempt: Attempt,
    threads: Optional[ThreadPoolExecutor],
    ended: Callable[[], None],
) -> Result:
    """Runs the handler to its end and gives its result; what it logs lands in the attempt's
    log. Never raises: an exception is the attempt's failure, a cancel its cancellation.

    ``ended`` is called once the handler's work has stopped: for a plain handler cancelled in
    its thread that is when the thread returns, which may be after the result (a thread
    cannot be stopped from outside; it sees ``ctx.cancelled``)."""
    if attempt.log is not None:
        # This task runs in a context of its own: the variable names this attempt only here
        # and in the thread a plain handler runs in (which gets a copy of this context).
        current_log.set(attempt.log)
    ctx = JobContext(dispatch, attempt.cancellation)
    with attempt_span(dispatch) as span:
        result = await _run(spec, ctx, threads, ended)
        traced_end(span, result.outcome, result.error)
    return result


async def _run(spec: JobSpec, ctx: JobContext, threads: Optional[ThreadPoolExecutor],
               ended: Callable[[], None]) -> Result:
    thread: "Optional[asyncio.Future[Any]]" = None
    try:
        if spec.is_async:
            output = await spec.func(ctx)
        else:
            loop = asyncio.get_running_loop()
            context = contextvars.copy_context()
            thread = loop.run_in_executor(threads, context.run, spec.func, ctx)
            thread.add_done_callback(lambda done: _thread_ended(done, ended))
            output = await asyncio.shield(thread)
        if ctx.cancelled:
            return Result("cancelled", error="cancelled")
        problem = _output_problem(output)
    except asyncio.CancelledError:
        return Result("cancelled", error="cancelled")
    except JobError as e:
        return Result("failed", error=str(e) or type(e).__name__)
    except (Exception, SystemExit) as e:  # the handler's own failure, whatever it is
        ctx.logger.error("the handler raised:\n%s", traceback.format_exc().rstrip())
        return Result("failed", error=f"{type(e).__name__}: {e}")
    finally:
        if thread is None:
            ended()
    if problem:
        return Result("failed", error=problem)
    return Result("succeeded", output=output)


def _thread_ended(done: "asyncio.Future[Any]", ended: Callable[[], None]) -> None:
    # Read the outcome, so a thread that failed after its attempt was cancelled is not
    # reported by asyncio as an exception nobody retrieved.
    if not done.cancelled():
        done.exception()
    ended()


class Running:
    """Attempts accepted and not yet reported, by id (joined deliveries included)."""

    def __init__(self) -> None:
        self.attempts: Dict[int, Attempt] = {}
        #: Attempts started and not ended, counted against the capacity.
        self.busy = 0

    def in_flight(self) -> List[int]:
        return list(self.attempts)

    def cancel(self, attempt_id: int) -> None:
        attempt = self.attempts.get(attempt_id)
        if attempt is not None and attempt.joined_to is not None:
            # A joined delivery is cancelled with the work it joined, as the Rust SDK does.
            attempt = self.attempts.get(attempt.joined_to, attempt)
        if attempt is None or attempt.cancellation.is_set():
            return
        log.info("cancelling attempt %s", attempt.attempt_id)
        attempt.cancellation.set()
        if attempt.handler is not None:
            attempt.handler.cancel()

    def cancel_all(self) -> None:
        for attempt_id in list(self.attempts):
            self.cancel(attempt_id)
