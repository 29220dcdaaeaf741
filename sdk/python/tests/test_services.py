"""The executor inside an existing service: mounted in a Starlette app (what FastAPI is built
on) served by uvicorn and started and stopped by the service's lifespan; and under /carillon
of a Flask app (WSGI), on an event loop of its own."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from conftest import APPS, DISPATCH_SECRET, EXECUTOR_TOKEN, Node, free_port, unique, wait_until


@pytest.mark.parametrize("service", ["starlette", "flask"])
def test_an_executor_inside_an_existing_service(sqlite_node: Node, tmp_path: Path, service: str) -> None:
    app = unique(service)
    port = free_port()
    env = dict(os.environ)
    env.update({
        "PYTHONPATH": os.pathsep.join([str(APPS), env.get("PYTHONPATH", "")]),
        "CARILLON_ADMIN_URLS": sqlite_node.url,
        "CARILLON_EXECUTOR_TOKEN": EXECUTOR_TOKEN,
        "CARILLON_DISPATCH_SECRET": DISPATCH_SECRET,
        "EMBEDDED_APP": app,
        "EMBEDDED_ADVERTISE": f"http://127.0.0.1:{port}",
        "EMBEDDED_PORT": str(port),
        "SUITE_RECORD": str(tmp_path / "record.jsonl"),
    })
    command = {
        "starlette": [sys.executable, "-m", "uvicorn", "embedded:service", "--port", str(port)],
        "flask": [sys.executable, str(APPS / "flask_service.py")],
    }[service]
    log = tmp_path / "service.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=out)
    try:
        wait_until("the executor to register", lambda: sqlite_node.executors(app))
        assert httpx.get(f"http://127.0.0.1:{port}/health").text == "the service's own route"
        job_id = sqlite_node.create_job(name=unique("inside"), app=app, handler="work_sync",
                                        args={"sleep": 1}, sharding={"count": 2})
        run_id = sqlite_node.trigger(job_id)
        wait_until("the handlers to start", lambda: (tmp_path / "record.jsonl").exists())
    finally:
        # Stopped with its work running: it finishes it, reports it, then leaves.
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    assert sqlite_node.wait_run_ended(run_id)["state"] == "succeeded", log.read_text()
    assert len((tmp_path / "record.jsonl").read_text().splitlines()) == 2
    assert [e["state"] for e in sqlite_node.executors(app)] == ["left"], log.read_text()
    assert not re.search(r"Traceback|ERROR", log.read_text()), log.read_text()
