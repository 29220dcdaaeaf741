"""The executor inside an existing ASGI service: mounted in a Starlette app (what FastAPI is
built on) served by uvicorn, started and stopped by the service's lifespan."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from conftest import APPS, DISPATCH_SECRET, EXECUTOR_TOKEN, Node, free_port, unique, wait_until


def test_an_executor_mounted_in_a_starlette_service(sqlite_node: Node, tmp_path: Path) -> None:
    app = unique("embedded")
    port = free_port()
    env = dict(os.environ)
    env.update({
        "PYTHONPATH": os.pathsep.join([str(APPS), env.get("PYTHONPATH", "")]),
        "CARILLON_ADMIN_URLS": sqlite_node.url,
        "CARILLON_EXECUTOR_TOKEN": EXECUTOR_TOKEN,
        "CARILLON_DISPATCH_SECRET": DISPATCH_SECRET,
        "EMBEDDED_APP": app,
        "EMBEDDED_ADVERTISE": f"http://127.0.0.1:{port}",
        "SUITE_RECORD": str(tmp_path / "record.jsonl"),
    })
    log = tmp_path / "service.log"
    with open(log, "wb") as out:
        service = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "embedded:service", "--port", str(port), "--log-level", "info"],
            env=env, stdout=out, stderr=out)
    try:
        wait_until("the executor to register", lambda: sqlite_node.executors(app))
        assert httpx.get(f"http://127.0.0.1:{port}/health").text == "the service's own route"
        job_id = sqlite_node.create_job(name=unique("inside"), app=app, handler="work", sharding={"count": 2})
        run = sqlite_node.wait_run_ended(sqlite_node.trigger(job_id))
        assert run["state"] == "succeeded", run
        assert len((tmp_path / "record.jsonl").read_text().splitlines()) == 2
    finally:
        service.send_signal(signal.SIGTERM)
        service.wait(30)
    assert [e["state"] for e in sqlite_node.executors(app)] == ["left"], log.read_text()
    assert not re.search(r"Traceback|ERROR", log.read_text()), log.read_text()
