"""What a newcomer does: the package installed, the ten-line example served with
``python -m carillon_executor`` beside a quickstart node, and a job firing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import carillon_executor
from conftest import Node, wait_until

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_the_installed_package_is_the_wheel() -> None:
    if os.environ.get("CARILLON_SDK_FROM_WHEEL"):
        assert "site-packages" in carillon_executor.__file__, carillon_executor.__file__
    assert (Path(carillon_executor.__file__).parent / "py.typed").exists()


def test_the_example_fires_beside_a_quickstart_node() -> None:
    node = Node("", tokens=False)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARILLON_")}
    # No URL, no token: the local node's, read from its data directory.
    env.update({"CARILLON_DATA_DIR": str(node.dir), "CARILLON_URL": node.url})
    log = node.dir / "hello.log"
    with open(log, "wb") as out:
        executor = subprocess.Popen([sys.executable, "-m", "carillon_executor", "hello", "--listen", "127.0.0.1:0"],
                                    cwd=EXAMPLES, env=env, stdout=out, stderr=out)
    try:
        def fired() -> object:
            jobs = node.api("GET", "/api/v1/jobs", None)["jobs"]
            ids = [j["id"] for j in jobs if j["name"] == "hello.greet"]
            if not ids:
                return None
            runs = node.api("GET", f"/api/v1/runs?job_id={ids[0]}")["runs"]
            return [r for r in runs if r["state"] == "succeeded"]

        [run, *_] = wait_until("the example's job to fire", fired, timeout=30)
        attempt = node.run(run["id"])["attempts"][0]
        assert attempt["output"] == "hello"
        lines = node.api("GET", f"/api/v1/runs/{run['id']}/logs")["lines"]
        assert [line["message"] for line in lines] == [f"hello from run {run['id']}"]
    finally:
        executor.send_signal(signal.SIGTERM)
        assert executor.wait(30) == 0, log.read_text()
        node.stop()
