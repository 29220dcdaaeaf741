"""The Tasks client against real nodes on every backend: keys, batches, delays and instants,
cancelling by key, refusals naming the bad task, and the executor running what is due."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from carillon_executor import AsyncTasks, Task, Tasks, TasksRefused
from conftest import ADMIN_TOKEN, Node, unique, wait_until


def test_a_key_enqueues_once_and_the_task_runs_on_the_executor(node: Node, executors: Any) -> None:
    app = unique("tasks")
    executor = executors(app)
    tasks = Tasks(node.url, ADMIN_TOKEN)
    key = unique("order-8812")
    first = tasks.enqueue(Task(app, "work", args={"order": 8812}, delay="1s", key=key))
    again = tasks.enqueue(Task(app, "work", args={"order": 0}, key=key))
    assert first[0].created and not again[0].created and again[0].id == first[0].id
    assert tasks.get_by_key(key)["id"] == first[0].id  # type: ignore[index]
    ran = wait_until("the task to run", lambda: [r for r in executor.records() if r["args"] == {"order": 8812}])
    assert len(ran) == 1
    done = wait_until("the task to end", lambda: (t := tasks.get(first[0].id)) and t["state"] == "succeeded" and t)
    assert done["run_id"] == ran[0]["run_id"]
    # Finished, it gives its key up.
    later = tasks.enqueue(Task(app, "work", args={"order": 2}, key=key))
    assert later[0].created and later[0].id != first[0].id
    tasks.close()


def test_a_batch_is_stored_whole_or_refused_naming_the_bad_task(node: Node, executors: Any) -> None:
    app = unique("batch")
    executor = executors(app)
    tasks = Tasks(node.url, ADMIN_TOKEN, batch=3)
    soon = datetime.now(timezone.utc) + timedelta(seconds=1)
    batch = [Task(app, "work", args={"n": n}, at=soon) for n in range(7)]
    stored = tasks.enqueue(batch)
    assert len(stored) == 7 and all(e.created for e in stored)
    wait_until("all seven to run", lambda: len({r["args"]["n"] for r in executor.records()}) == 7)

    bad = [Task(app, "work", delay="1h") for _ in range(4)]
    bad += [Task(app, "work", priority=11), Task(app, "work", delay="yesterday")]
    with pytest.raises(TasksRefused) as refused:
        tasks.enqueue(bad)
    # The first batch of three went in; the second holds both bad tasks and none of it did.
    assert len(refused.value.stored) == 3
    assert {(p.index, p.field) for p in refused.value.problems} == {(4, "priority"), (5, "delay")}
    with pytest.raises(ValueError, match="naive datetime"):
        Task(app, "work", at=datetime.now()).body()
    tasks.close()


def test_a_task_cancelled_by_key_never_runs(node: Node, executors: Any) -> None:
    app = unique("cancel")
    executor = executors(app)

    async def scenario() -> None:
        tasks = AsyncTasks(node.url, ADMIN_TOKEN)
        key = unique("remind")
        [enqueued] = await tasks.enqueue(Task(app, "work", args={"key": key}, delay=timedelta(seconds=3), key=key))
        cancelled = await tasks.cancel_key(key)
        assert cancelled is not None and cancelled["id"] == enqueued.id and cancelled["state"] == "cancelled"
        assert await tasks.get(enqueued.id) is None
        assert await tasks.cancel_key(key) is None
        [control] = await tasks.enqueue(Task(app, "work", args={"key": "control"}, delay="1s", delivery="exactly_once_effect"))
        await tasks.close()
        wait_until("the control task to run", lambda: [r for r in executor.records() if r["args"] == {"key": "control"}])

    asyncio.run(scenario())
    assert not [r for r in executor.records() if r["args"] != {"key": "control"}]
    [control] = executor.records()
    assert control["effect_key"] is not None
