"""The handlers the tests run. Each records what it saw in the JSON lines file named by
``SUITE_RECORD``, one line per event, so a test can count runs per run and shard."""

import asyncio
import json
import os
import threading
import time
from typing import Any, Dict

from carillon_executor import JobContext, JobError, job

_lock = threading.Lock()


def record(ctx: JobContext, event: str, **extra: Any) -> None:
    line: Dict[str, Any] = {
        "event": event,
        "handler": ctx.handler,
        "run_id": ctx.run_id,
        "attempt_id": ctx.attempt_id,
        "attempt": ctx.attempt,
        "shard": ctx.shard.index,
        "total": ctx.shard.total,
        "effect_key": ctx.effect_key,
        "pid": os.getpid(),
        "at": time.time(),
    }
    line.update(extra)
    with _lock, open(os.environ["SUITE_RECORD"], "a") as out:
        out.write(json.dumps(line) + "\n")


@job(description="records its run and shard, sleeps args.sleep seconds")
async def work(ctx: JobContext) -> Dict[str, Any]:
    record(ctx, "start", args=ctx.args, input=ctx.input)
    seconds = (ctx.args or {}).get("sleep", 0) if isinstance(ctx.args, dict) else 0
    if seconds:
        await asyncio.sleep(seconds)
    return {"run": ctx.run_id, "shard": ctx.shard.index}


@job(description="work, in a thread")
def work_sync(ctx: JobContext) -> Dict[str, Any]:
    record(ctx, "start", thread=threading.current_thread().name)
    seconds = (ctx.args or {}).get("sleep", 0) if isinstance(ctx.args, dict) else 0
    if seconds:
        time.sleep(seconds)
    return {"run": ctx.run_id, "shard": ctx.shard.index}


@job(description="fails until its attempt reaches args.succeed_on")
async def flaky(ctx: JobContext) -> str:
    record(ctx, "start")
    if ctx.attempt < int(ctx.args["succeed_on"]):
        raise JobError(f"attempt {ctx.attempt} fails on purpose")
    return f"succeeded on attempt {ctx.attempt}"


@job(description="sleeps args.seconds unless cancelled")
async def sleepy(ctx: JobContext) -> str:
    record(ctx, "start")
    try:
        await asyncio.sleep(float(ctx.args["seconds"]))
    except asyncio.CancelledError:
        record(ctx, "cancelled", flag=ctx.cancelled)
        raise
    record(ctx, "end")
    return "slept"


@job(description="sleeps args.seconds in a thread, watching ctx.cancelled")
def sleepy_sync(ctx: JobContext) -> str:
    record(ctx, "start")
    if ctx.wait_cancelled(float(ctx.args["seconds"])):
        record(ctx, "cancelled", flag=ctx.cancelled)
        return "stopped"
    record(ctx, "end")
    return "slept"


@job(description="logs args.lines lines, args.every_ms apart")
async def chatty(ctx: JobContext) -> int:
    lines = int(ctx.args["lines"])
    for i in range(1, lines + 1):
        ctx.logger.info("line %d of %d", i, lines)
        if ctx.args.get("every_ms"):
            await asyncio.sleep(ctx.args["every_ms"] / 1000)
    record(ctx, "end")
    return lines


@job(description="logs through the standard logging module, in a thread")
def chatty_sync(ctx: JobContext) -> str:
    import logging

    logging.getLogger("suite.own").warning("a warning from the program's own logger")
    ctx.logger.info("from ctx.logger")
    return "logged"


@job(description="raises an exception that is not a JobError")
def broken(ctx: JobContext) -> None:
    record(ctx, "start")
    raise ValueError("no such customer")


@job(description="returns what is not JSON")
async def not_json(ctx: JobContext) -> Any:
    return {1, 2}


@job(description="records what the run was given beside its arguments, and its secrets")
def given(ctx: JobContext) -> Dict[str, Any]:
    record(
        ctx,
        "given",
        parent=ctx.parent,
        workflow=ctx.workflow,
        params=ctx.params,
        upstream=ctx.upstream,
        secrets=sorted(ctx.secrets()),
        secret_length=len(ctx.secret("db_password") or ""),
        trace_id=ctx.trace_id,
        scheduled_at=ctx.scheduled_at,
        job_name=ctx.job_name,
    )
    return {"step": (ctx.workflow or {}).get("step"), "rows": 120}
