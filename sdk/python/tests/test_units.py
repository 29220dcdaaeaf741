"""The SDK's own rules: the signature, @job's checks, and cron read exactly as the nodes read
it (compared with a node's answers)."""

from __future__ import annotations

import random
import asyncio
from typing import Any, List, Optional

import pytest

from carillon_executor import JobDefinitionError, job
from carillon_executor._wire import signature_problem, sign
from carillon_executor.cron import problem
from conftest import Node


def test_the_signature_matches_the_protocols_test_vector() -> None:
    assert sign(b"key", 1700000000000, b"{}") == (
        "v1=36a72f4525d3323bd0f238fe82098164fb77b1e42288ff8e07b074c686178ad3"
    )
    good = sign(b"key", 1700000000000, b"{}")
    assert signature_problem(b"key", "1700000000000", good, b"{}", 1700000000000) is None
    assert signature_problem(b"key", None, good, b"{}", 0) == "missing x-carillon-timestamp header"
    assert signature_problem(b"key", "1700000000000", None, b"{}", 0) == "missing x-carillon-signature header"
    assert signature_problem(b"key", "soon", good, b"{}", 0) == "the timestamp is not Unix milliseconds"
    assert signature_problem(b"key", "1700000000000", good, b"{}", 1700000300001) == (
        "the timestamp is 300001 ms away from this clock, outside the replay window"
    )
    assert signature_problem(b"key", "1700000000000", "v1=zz", b"{}", 1700000000000) == (
        "the signature is not of the form v1=<64 hex digits>"
    )
    assert signature_problem(b"key", "1700000000000", good, b"{ }", 1700000000000) == (
        "the signature does not match"
    )


def test_job_refuses_what_the_rust_macro_refuses_with_its_messages() -> None:
    def handler(ctx: object) -> None: ...

    cases = [
        ({"name": "two words"}, "'two words': a job name is 1 to 128 letters, digits, '-', '_' or '.'"),
        ({"name": "x" * 129}, "a job name is 1 to 128 letters"),
        ({"cron": "* * * * *", "rrule": "FREQ=DAILY"}, "give either cron or rrule, not both"),
        ({"cron": "0 61 * * * ?"}, 'invalid cron expression: minutes field "61": 61 is out of range; use 0–59'),
        ({"tz": "Europe/Paris"}, "tz needs a schedule: add cron or rrule"),
        ({"cron": "* * * * *", "tz": "Mars/Olympus"}, "tz 'Mars/Olympus' is not a time zone"),
    ]
    for arguments, message in cases:
        with pytest.raises(JobDefinitionError) as refused:
            job(**arguments)(handler)  # type: ignore[arg-type]
        assert message in str(refused.value), (arguments, str(refused.value))
        assert str(refused.value).startswith("@job on test_job_refuses_what_the_rust_macro_refuses")

    def two(a: object, b: object) -> None: ...

    with pytest.raises(JobDefinitionError, match="takes exactly one argument, `ctx: JobContext`"):
        job(two)


def corpus() -> List[str]:
    fixed = [
        "* * * * *", "0 0 * * *", "*/5 * * * *", "0 9-17 * * MON-FRI", "0 0 1,15 * *", "@daily",
        "@hourly", "@weekly", "@midnight", "@reboot", "5/2 * * * *", "/5 * * * *", "60 * * * *",
        "* 24 * * *", "* * 0 * *", "* * 32 * *", "* * * 13 *", "* * * * 8", "* * L * *",
        "* * LW * *", "* * 15W * *", "* * W * *", "* * * * 5L", "* * * * 5#3", "* * * * 5#6",
        "* * * * MON#2", "0 0 * JAN-MAR *", "0 0 ? * *", "* * * * +1", "1-2-3 * * * *",
        "5-1 * * * *", "*/0 * * * *", "x * * * *", "* * * *", "* * * * * * * *", "", " ",
        "0 0 12 * * ?", "0 0 12 * * *", "0 15 10 ? * MON-FRI", "0 0 0 L * ?", "0 0 0 L-3 * ?",
        "0 0 0 L-31 * ?", "0 0 0 LW * ?", "0 0 0 15W * ?", "0 0 0 ? * 6L", "0 0 0 ? * 6#3",
        "0 0 0 ? * 6#0", "0 0 0 1 * MON", "0 0 0 ? * ?", "0 0 0 * * ? 2199", "0 0 0 * * ? 2200",
        "0 0 0 * * ? 2030-2020", "0 */0 * * * ?", "0 0/70 * * * ?", "0 0 22-2 * * ?",
        "0 0 0 ? * FRI-MON", "0 0 0 ? JAN/2 *", "0 0 0 ? * MON-5", "? 0 0 * * ?", "0 0 0 1,L * ?",
        "0 0 0 ? * 1L,2", "0 0 0 5X * ?", "0 0 0 ? * SUN#", "0 0 0 * * ? 1969", "60 0 0 * * ?",
        "0 0 0 ? * 8", "0 0 0 ? 13 *", "0 0 0 0 * ?", "0 0 0 ? * L", "0 0 0 L-+2 * ?",
        "0 0 0 1 MAR-MAY/2 ?", "0 0 0 ? * SUN-SAT/2", "0 0 0 ? * MON/2", "0 0 0 ? * MON/0",
    ]
    tokens = ["*", "?", "0", "5", "7", "12", "31", "59", "60", "1-5", "5-1", "*/15", "1/3", "/2",
              "L", "LW", "5W", "5L", "2#3", "MON", "JAN", "MON-FRI", "1,2", "L-2", "+3", "x"]
    bases = ["0 0 12 * * ?", "*/5 * * * *", "0 15 10 ? * MON-FRI", "0 0 * * *", "0 0 0 L * ? 2030",
             "30 9 * * 1-5", "0 0/5 14 * * ?"]
    rng = random.Random(40)
    generated = []
    for _ in range(400):
        fields = rng.choice(bases).split()
        fields[rng.randrange(len(fields))] = rng.choice(tokens)
        generated.append(" ".join(fields))
    return fixed + generated


def test_cron_is_read_as_the_nodes_read_it(sqlite_node: Node) -> None:
    differ = []
    for expression in corpus():
        answer = sqlite_node.client.post(
            "/api/v1/schedules/preview", json={"schedule": {"cron": expression}, "count": 1}
        )
        node = None
        if answer.status_code == 400:
            detail = answer.json()["detail"]
            node = detail.removeprefix("schedule.cron: ") if detail.startswith("schedule.cron: ") else detail
        else:
            assert answer.status_code == 200, answer.text
        if node is not None and node.startswith("has no instant after "):
            node = None  # it parses; that it never fires again is the node's finding
        if problem(expression) != node:
            differ.append((expression, problem(expression), node))
    assert not differ, "\n".join(f"{e!r}: sdk {s!r} node {n!r}" for e, s, n in differ)
    refused = [e for e in corpus() if problem(e)]
    assert 100 < len(refused) < len(corpus()) - 100, "the corpus must hold both kinds"


def test_the_effect_record_runs_work_once_and_forgets_what_it_must() -> None:
    from carillon_executor._effects import KEEP_MS, MAX_DONE, Effects, Result

    effects = Effects()
    assert effects.begin("7:0:1", 100, 0) == ("run", None)
    assert effects.begin("7:0:1", 101, 1) == ("joined", 100)
    assert effects.begin("7:0:1", 101, 1) == ("joined", 100), "a redelivery joins once"
    assert effects.begin("7:1:1", 102, 1) == ("run", None), "another shard is other work"
    assert effects.finish("7:0:1", Result("succeeded", output=42), 2) == [101]
    assert effects.begin("7:0:1", 103, 3) == ("done", Result("succeeded", output=42))
    # A cancelled run is forgotten, so its next delivery runs it.
    effects.finish("7:1:1", Result("cancelled"), 4)
    assert effects.begin("7:1:1", 104, 5) == ("run", None)
    # A handler that did not start leaves no trace.
    effects.abandon("7:1:1")
    assert effects.begin("7:1:1", 105, 6) == ("run", None)
    # Finished keys are kept an hour, and at most MAX_DONE of them.
    assert effects.begin("7:0:1", 106, KEEP_MS + 3)[0] == "run"
    many = Effects()
    for i in range(MAX_DONE + 1):
        many.begin(f"{i}:0:1", i, 10)
        many.finish(f"{i}:0:1", Result("failed", error="no"), 10)
    assert many.begin("0:0:1", 0, 11)[0] == "run", "the oldest went first"
    assert many.begin(f"{MAX_DONE}:0:1", 0, 11)[0] == "done"


def test_an_attempts_log_numbers_its_lines_and_keeps_them_in_order() -> None:
    from carillon_executor._logs import MAX_PENDING, MAX_PER_REQUEST, AttemptLog

    log = AttemptLog(1, [])
    log.push("INFO", "first\nsecond")
    log.push("WARN", "third")
    taken = log.take()
    assert [(line["line"], line["level"], line["message"]) for line in taken] == [
        (1, "INFO", "first"), (2, "INFO", "second"), (3, "WARN", "third")]
    log.push("INFO", "fourth")
    log.put_back(taken)
    assert [line["line"] for line in log.take()] == [1, 2, 3, 4], "sent again, in order"
    for i in range(MAX_PENDING + 5):
        log.push("INFO", f"line {i}")
    first = log.take()
    assert len(first) == MAX_PER_REQUEST
    rest: List[dict] = []  # type: ignore[type-arg]
    while batch := log.take():
        rest.extend(batch)
    assert rest[-1]["message"].startswith("[carillon-executor] 5 lines dropped")
    numbers = [line["line"] for line in first + rest]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)


def test_a_task_is_written_as_the_api_reads_it() -> None:
    from datetime import datetime, timedelta, timezone

    from carillon_executor import Task

    body = Task("orders", "cancel", args={"order": 1}, delay=timedelta(minutes=30), key="k",
                delivery="exactly_once_effect").body()
    assert body == {"app": "orders", "handler": "cancel", "args": {"order": 1}, "delay": 1_800_000,
                    "key": "k", "delivery": "exactly_once_effect"}
    at = datetime(2026, 11, 26, 3, 30, tzinfo=timezone(timedelta(hours=1)))
    assert Task("a", "h", at=at).body()["at"] == "2026-11-26T02:30:00.000Z"
    with pytest.raises(ValueError, match="give delay or at, not both"):
        Task("a", "h", delay="1m", at=at).body()


def _held_executor(release: asyncio.Event) -> Any:
    """An executor (never started) whose handler ``hold`` runs until ``release`` is set."""
    from carillon_executor import Executor

    async def hold(ctx: object) -> str:
        await release.wait()
        return "held"

    executor = Executor(app="units", admin_urls="http://127.0.0.1:9", declared=False,
                        executor_token="executor-token-0123456789",
                        dispatch_secret="dispatch-secret-0123456789")
    executor.add_handler("hold", hold)
    return executor


async def _dispatch_hold(executor: Any, attempt_id: int, signed_at: int, effect_key: Optional[str] = None) -> int:
    """Dispatches ``hold`` to ``executor``'s ASGI app, signed at ``signed_at``: the status."""
    import json

    from carillon_executor._wire import sign

    document = {"protocol": 1, "run_id": 5, "attempt_id": attempt_id, "attempt": 1, "job_id": 1,
                "job": "j", "handler": "hold", "args": None, "shard": {"index": 0, "total": 1},
                "scheduled_at": "2026-01-01T00:00:00.000Z", "report_to": []}
    if effect_key is not None:
        document["effect_key"] = effect_key
    body = json.dumps(document).encode()
    sent: list = []  # type: ignore[type-arg]

    async def receive() -> dict:  # type: ignore[type-arg]
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:  # type: ignore[type-arg]
        sent.append(message)

    headers = [(b"x-carillon-timestamp", str(signed_at).encode()),
               (b"x-carillon-signature", sign(b"dispatch-secret-0123456789", signed_at, body).encode())]
    await executor.asgi({"type": "http", "method": "POST", "path": "/carillon/v1/dispatch",
                         "headers": headers}, receive, send)
    return int(sent[0]["status"])


def test_a_replayed_exactly_once_effect_attempt_leaves_its_running_work_alone() -> None:
    from carillon_executor._wire import now_ms

    async def scenario() -> None:
        release = asyncio.Event()
        executor = _held_executor(release)

        async def dispatch(attempt_id: int) -> int:
            return await _dispatch_hold(executor, attempt_id, now_ms(), effect_key="5:0:1")

        assert await dispatch(1) == 202, "running: the result comes by report"
        assert await dispatch(1) == 409, "the same attempt again: a replay"
        assert await dispatch(2) == 202, "another delivery of the work joins it"
        core = executor._core
        assert core.running.attempts[1].handler is not None, "the running work is still the first's"
        assert core.running.attempts[2].joined_to == 1
        release.set()

    asyncio.run(scenario())


def test_an_attempt_is_remembered_while_its_request_is_signed_and_is_its_own_while_draining() -> None:
    from carillon_executor._wire import REPLAY_WINDOW_MS, now_ms

    async def scenario() -> None:
        release = asyncio.Event()
        executor = _held_executor(release)
        # Signed by a node whose clock is four minutes ahead: a replay of the request passes
        # the timestamp check until then plus the window, so it is remembered that long.
        ahead = now_ms() + 240_000
        assert await _dispatch_hold(executor, 7, ahead) == 202
        core = executor._core
        assert core.seen[7] >= ahead + REPLAY_WINDOW_MS
        # Draining, it still answers for what it runs: 409, not 503 (which would send the
        # attempt on to another executor while it runs here); new work is 503.
        core.draining = True
        assert await _dispatch_hold(executor, 7, now_ms()) == 409
        assert await _dispatch_hold(executor, 8, now_ms()) == 503
        assert 8 not in core.seen, "an attempt refused is not remembered"
        release.set()

    asyncio.run(scenario())
