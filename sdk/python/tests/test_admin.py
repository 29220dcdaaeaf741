"""The admin client: its operations are the node's (regenerated from the node's OpenAPI
document and compared), and they work against a real node."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path
from typing import Any

import pytest

import carillon_executor
from carillon_executor import Admin, ApiError, AsyncAdmin
from conftest import ADMIN_TOKEN, Node, unique

GENERATOR = Path(__file__).resolve().parents[1] / "tools" / "generate_admin.py"


def test_the_operations_are_those_of_the_nodes_openapi_document(sqlite_node: Node) -> None:
    spec = importlib.util.spec_from_file_location("generate_admin", GENERATOR)
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    document = sqlite_node.api("GET", "/api/v1/openapi.json")
    shipped = Path(carillon_executor.__file__).with_name("_admin_operations.py").read_text()
    assert generator.generate(document) == shipped, (
        "the API changed: python sdk/python/tools/generate_admin.py http://<a node>"
    )


def test_jobs_and_runs_through_the_client(node: Node, executors: Any) -> None:
    app = unique("admin")
    executors(app)
    with Admin(node.url, ADMIN_TOKEN) as admin:
        job = admin.create_job({"name": unique("nightly"), "app": app, "handler": "work",
                                "schedule": {"cron": "0 30 2 * * ?"}, "args": {"sleep": 0}})
        assert job["app"] == app and job["timezone"] == "UTC"
        run = admin.trigger_job(job["id"])
        listed = admin.list_jobs(app=app)
        assert [j["id"] for j in listed["jobs"]] == [job["id"]]
        with pytest.raises(ApiError) as refused:
            admin.create_job({"name": unique("bad"), "app": app, "handler": "work",
                              "schedule": {"cron": "0 61 * * * ?"}})
        assert refused.value.status == 400 and refused.value.field == "schedule.cron"
    ended = node.wait_run_ended(run["id"])
    assert ended["state"] == "succeeded"

    async def read() -> Any:
        async with AsyncAdmin(node.url, ADMIN_TOKEN) as admin:
            return await admin.get_run(run["id"])

    assert asyncio.run(read())["state"] == "succeeded"
