"""What a Python executor's users rely on, against real admin nodes on every backend: the
behaviours the Rust SDK's tests prove."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Dict, List

import httpx

from carillon_executor._wire import now_ms, sign
from conftest import DISPATCH_SECRET, Node, free_port, unique, wait_until
from lossy_proxy import LossyProxy


def attempts_of(node: Node, run_id: int) -> List[Dict[str, Any]]:
    return list(node.run(run_id)["attempts"])


def test_every_run_and_shard_runs_once_async_and_in_threads(node: Node, executors: Any) -> None:
    app = unique("once")
    executor = executors(app)
    sharded = node.create_job(name=unique("sharded"), app=app, handler="work", sharding={"count": 3})
    threaded = node.create_job(name=unique("threaded"), app=app, handler="work_sync", args={"sleep": 0.2})
    runs = [node.trigger(sharded) for _ in range(4)] + [node.trigger(threaded) for _ in range(4)]
    for run_id in runs:
        run = node.wait_run_ended(run_id)
        assert run["state"] == "succeeded", run
    seen = Counter((r["run_id"], r["shard"]) for r in executor.records() if r["event"] == "start")
    expected = {(run, shard) for run in runs[:4] for shard in range(3)} | {(run, 0) for run in runs[4:]}
    assert set(seen) == expected
    assert all(count == 1 for count in seen.values()), seen
    outputs = {(a["shard"], json.dumps(a["output"])) for a in attempts_of(node, runs[0])}
    assert outputs == {(s, json.dumps({"run": runs[0], "shard": s})) for s in range(3)}
    threads = {r.get("thread", "") for r in executor.records() if r["handler"] == "work_sync"}
    assert all(t.startswith("carillon-job") for t in threads), threads


def test_failures_are_retried_and_the_handler_sees_each_attempt(node: Node, executors: Any) -> None:
    app = unique("retry")
    executor = executors(app)
    job_id = node.create_job(
        name=unique("flaky"), app=app, handler="flaky", args={"succeed_on": 3},
        retry={"max_attempts": 3, "initial_delay_ms": 100},
    )
    run = node.wait_run_ended(node.trigger(job_id))
    assert run["state"] == "succeeded", run
    attempts = sorted(run["attempts"], key=lambda a: a["attempt"])
    assert [a["state"] for a in attempts] == ["failed", "failed", "succeeded"]
    assert attempts[0]["error"] == "attempt 1 fails on purpose"
    assert attempts[2]["output"] == "succeeded on attempt 3"
    assert [r["attempt"] for r in executor.records()] == [1, 2, 3]


def test_an_exception_or_an_output_that_is_not_json_fails_the_attempt(node: Node, executors: Any) -> None:
    app = unique("fail")
    executors(app)
    broken = node.wait_run_ended(node.trigger(node.create_job(name=unique("broken"), app=app, handler="broken")))
    assert broken["state"] == "failed"
    assert broken["attempts"][0]["error"] == "ValueError: no such customer"
    lines = node.api("GET", f"/api/v1/runs/{broken['id']}/logs")["lines"]
    text = "\n".join(line["message"] for line in lines)
    assert "Traceback (most recent call last)" in text and "ValueError: no such customer" in text
    assert {line["level"] for line in lines} == {"ERROR"}
    odd = node.wait_run_ended(node.trigger(node.create_job(name=unique("odd"), app=app, handler="not_json")))
    assert odd["state"] == "failed"
    assert odd["attempts"][0]["error"].startswith("the output is not JSON: "), odd


def test_timeouts_and_cancels_reach_async_and_thread_handlers(node: Node, executors: Any) -> None:
    app = unique("stop")
    executor = executors(app)
    for handler in ("sleepy", "sleepy_sync"):
        timed = node.create_job(name=unique(handler), app=app, handler=handler, args={"seconds": 30}, timeout_ms=1000)
        run = node.wait_run_ended(node.trigger(timed))
        assert run["state"] == "failed" and run["attempts"][0]["state"] == "timed_out", run
        wait_until(f"{handler} to see its timeout", lambda: [
            r for r in executor.records() if r["run_id"] == run["id"] and r["event"] == "cancelled"])

        cancelled = node.create_job(name=unique(handler), app=app, handler=handler, args={"seconds": 30})
        run_id = node.trigger(cancelled)
        wait_until("the handler to start", lambda: [
            r for r in executor.records() if r["run_id"] == run_id and r["event"] == "start"])
        node.api("POST", f"/api/v1/runs/{run_id}/cancel", {})
        run = node.wait_run_ended(run_id)
        assert run["state"] == "cancelled", run
        seen = wait_until(f"{handler} to see the cancel", lambda: [
            r for r in executor.records() if r["run_id"] == run_id and r["event"] == "cancelled"])
        assert seen[0]["flag"] is True
    assert not [r for r in executor.records() if r["event"] == "end"], "a cancelled handler ran on"


def test_a_killed_executors_attempt_fails_over_to_another(node: Node, executors: Any) -> None:
    app = unique("failover")
    first = executors(app)
    job_id = node.create_job(name=unique("long"), app=app, handler="sleepy", args={"seconds": 2})
    run_id = node.trigger(job_id)
    wait_until("the first executor to start it", lambda: first.records())
    second = executors(app)
    first.kill()
    run = node.wait_run_ended(run_id, timeout=40)
    assert run["state"] == "succeeded", run
    states = [a["state"] for a in sorted(run["attempts"], key=lambda a: a["id"])]
    assert states == ["lost", "succeeded"], states
    assert [r["event"] for r in second.records() if r["run_id"] == run_id] == ["start", "end"]


def test_logs_reach_the_run_once_each_and_in_order(node: Node, executors: Any) -> None:
    app = unique("logs")
    executors(app)
    job_id = node.create_job(name=unique("chatty"), app=app, handler="chatty", args={"lines": 300, "every_ms": 2})
    run = node.wait_run_ended(node.trigger(job_id))
    assert run["state"] == "succeeded", run
    lines = node.api("GET", f"/api/v1/runs/{run['id']}/logs")["lines"]
    assert [line["message"] for line in lines] == [f"line {i} of 300" for i in range(1, 301)]
    assert [line["line"] for line in lines] == list(range(1, 301))
    assert {line["level"] for line in lines} == {"INFO"}

    plain = node.wait_run_ended(node.trigger(node.create_job(name=unique("plain"), app=app, handler="chatty_sync")))
    messages = [(line["level"], line["message"]) for line in node.api("GET", f"/api/v1/runs/{plain['id']}/logs")["lines"]]
    assert messages == [("WARN", "a warning from the program's own logger"), ("INFO", "from ctx.logger")]


def test_a_lost_answer_runs_nothing_twice(node: Node, executors: Any) -> None:
    app = unique("effect")
    port = free_port()
    proxy = LossyProxy(("127.0.0.1", port))
    # Nodes reach the executor through the proxy, which can lose its answers.
    executor = executors(app, "--listen", f"127.0.0.1:{port}", "--advertise", f"http://127.0.0.1:{proxy.port}")
    try:
        counts, runs = {}, []
        for delivery in ("exactly_once_effect", "at_least_once"):
            job_id = node.create_job(name=unique(delivery), app=app, handler="work", delivery=delivery)
            proxy.lose_next_answers(1)
            run = node.wait_run_ended(node.trigger(job_id), timeout=40)
            assert run["state"] == "succeeded", run
            runs.append(run["id"])
            counts[delivery] = len([r for r in executor.records() if r["run_id"] == run["id"]])
        assert proxy.lost == 2, "an answer of each was lost"
        # The attempt offered again is answered as before, from the effect record or from the
        # answer kept for it: the handler ran once. (An executor that forgot its answer would
        # answer 409, and the attempt, never reported, would be failed over and run again.)
        assert counts == {"exactly_once_effect": 1, "at_least_once": 1}, counts
        attempts = [node.run(r)["attempts"] for r in runs]
        assert all(len(a) == 1 and a[0]["state"] == "succeeded" for a in attempts), attempts
    finally:
        proxy.close()


def test_sigterm_drains_running_work_then_leaves(node: Node, executors: Any) -> None:
    app = unique("drain")
    executor = executors(app)
    run_id = node.trigger(node.create_job(name=unique("long"), app=app, handler="sleepy", args={"seconds": 2}))
    wait_until("the handler to start", lambda: executor.records())
    assert executor.stop() == 0, executor.output()
    run = node.run(run_id)
    assert run["state"] == "succeeded", run
    assert [e["state"] for e in node.executors(app)] == ["left"]


def test_calls_that_are_not_the_nodes_are_refused(node: Node, executors: Any) -> None:
    app = unique("signed")
    executors(app)
    address = node.executors(app)[0]["address"]
    dispatch = {
        "protocol": 1, "run_id": 1, "attempt_id": 987654321, "attempt": 1, "job_id": 1,
        "job": "forged", "handler": "work", "args": None, "shard": {"index": 0, "total": 1},
        "scheduled_at": "2026-01-01T00:00:00.000Z", "report_to": [node.url],
    }
    body = json.dumps(dispatch).encode()

    def post(timestamp: int, signature: str) -> httpx.Response:
        return httpx.post(f"{address}/carillon/v1/dispatch", content=body, headers={
            "x-carillon-timestamp": str(timestamp), "x-carillon-signature": signature})

    now = now_ms()
    wrong = post(now, sign(b"not-the-secret-0123456789", now, body))
    assert wrong.status_code == 401 and wrong.json()["error"] == "the signature does not match"
    stale = now - 301_000
    old = post(stale, sign(DISPATCH_SECRET.encode(), stale, body))
    assert old.status_code == 401 and "outside the replay window" in old.json()["error"]
    good = post(now, sign(DISPATCH_SECRET.encode(), now, body))
    assert good.status_code == 200, good.text
    # Sent again, it runs nothing: the answer it had (a node offering it again gets it too).
    replay = post(now, sign(DISPATCH_SECRET.encode(), now, body))
    assert (replay.status_code, replay.json()) == (200, good.json()), replay.text
    slow = dict(dispatch, attempt_id=987654322, handler="sleepy", args={"seconds": 1})
    body = json.dumps(slow).encode()
    assert post(now, sign(DISPATCH_SECRET.encode(), now, body)).status_code == 202
    replay = post(now, sign(DISPATCH_SECRET.encode(), now, body))
    assert replay.status_code == 409, replay.text


def test_a_schedule_declared_in_code_makes_a_job_that_fires(node: Node, executors: Any) -> None:
    app = unique("declared")
    executor = executors(app, module="scheduled")
    jobs = node.api("GET", "/api/v1/jobs")["jobs"]
    declared = [j for j in jobs if j["name"] == f"{app}.every_second"]
    assert declared and declared[0]["schedule"] == {"cron": "* * * * * ?"}
    assert declared[0]["timezone"] == "Europe/Paris"
    wait_until("two fires", lambda: len(executor.records()) >= 2, timeout=20)
    assert not [j for j in jobs if j["name"] == f"{app}.unscheduled"]

