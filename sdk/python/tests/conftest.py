"""Real admin nodes (the ``carillon`` binary of this repository) on every backend, and
executors run by ``python -m carillon_executor`` as their users run them.

``CARILLON_BIN`` names the binary (default: ``target/debug/carillon`` of the repository).
PostgreSQL and MariaDB are the machine's (127.0.0.1:5432 as ``postgres``, 127.0.0.1:3306 as
``root``): each test module gets a database of its own on each.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import httpx
import pytest

REPO = Path(__file__).resolve().parents[3]
APPS = Path(__file__).resolve().parent / "apps"
ADMIN_TOKEN = "python-sdk-admin-token-0123456789"
EXECUTOR_TOKEN = "python-sdk-executor-token-0123456789"
DISPATCH_SECRET = "python-sdk-dispatch-secret-0123456789"
BACKENDS = ["sqlite", "postgres", "mysql"]


def carillon_bin() -> Path:
    path = Path(os.environ.get("CARILLON_BIN") or REPO / "target" / "debug" / "carillon")
    if not path.exists():
        pytest.fail(f"no carillon binary at {path}: cargo build -p carillon-server, or set CARILLON_BIN")
    return path


def wait_until(what: str, check: Callable[[], Any], timeout: float = 30.0, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


def create_database(backend: str) -> str:
    """A fresh database's URL (SQLite: a file the node creates)."""
    name = f"carillon_py_{secrets.token_hex(4)}"
    if backend == "postgres":
        subprocess.run(
            ["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-qc", f"CREATE DATABASE {name}"],
            check=True, capture_output=True,
        )
        return f"postgres://postgres@127.0.0.1:5432/{name}"
    if backend == "mysql":
        subprocess.run(
            ["mysql", "-h", "127.0.0.1", "-u", "root", "-e", f"CREATE DATABASE {name}"],
            check=True, capture_output=True,
        )
        return f"mysql://root@127.0.0.1:3306/{name}"
    return ""


def drop_database(url: str) -> None:
    name = url.rsplit("/", 1)[-1]
    if url.startswith("postgres"):
        subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-qc",
                        f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"], capture_output=True)
    elif url.startswith("mysql"):
        subprocess.run(["mysql", "-h", "127.0.0.1", "-u", "root", "-e", f"DROP DATABASE IF EXISTS {name}"],
                       capture_output=True)


class Node:
    """An admin node process, with a client for its API."""

    def __init__(self, database_url: str, extra_env: Optional[Dict[str, str]] = None,
                 tokens: bool = True, https_ca: Optional[str] = None) -> None:
        """``tokens=False``: the node generates its executor token and dispatch secret into
        its data directory, as a quickstart node does."""
        self.dir = Path(tempfile.mkdtemp(prefix="carillon-py-node-"))
        self.database_url = database_url
        env = {k: v for k, v in os.environ.items() if not k.startswith("CARILLON_")}
        env.update(
            {
                "CARILLON_DATA_DIR": str(self.dir),
                "CARILLON_LISTEN": "127.0.0.1:0",
                "CARILLON_ADMIN_TOKEN": ADMIN_TOKEN,
                "CARILLON_EXECUTOR_TOKEN": EXECUTOR_TOKEN,
                "CARILLON_DISPATCH_SECRET": DISPATCH_SECRET,
                "CARILLON_EXECUTOR_LEASE_MS": "3000",
                "CARILLON_EXECUTOR_HEARTBEAT_MS": "500",
                "CARILLON_SCHEDULER_POLL_MS": "100",
                "CARILLON_LOG": "info",
                # The tests' executors listen on this machine.
                "CARILLON_EGRESS_ALLOWED_NETWORKS": "public,loopback",
            }
        )
        if not tokens:
            del env["CARILLON_EXECUTOR_TOKEN"], env["CARILLON_DISPATCH_SECRET"]
        if database_url:
            env["CARILLON_DATABASE_URL"] = database_url
        env.update(extra_env or {})
        self.log = self.dir / "node.log"
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen([str(carillon_bin()), "server"], env=env, stdout=out, stderr=out)
        address = wait_until("the node to listen", self._listening, timeout=60)
        self.url = f"{'https' if https_ca else 'http'}://{address}"
        self.client = httpx.Client(
            base_url=self.url, headers={"authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=10,
            verify=ssl.create_default_context(cafile=https_ca) if https_ca else True,
        )
        wait_until("the node to be ready", lambda: self.client.get("/readyz").status_code == 200)

    def _listening(self) -> Optional[str]:
        if self.process.poll() is not None:
            raise AssertionError(f"the node exited: {self.log.read_text()[-3000:]}")
        found = re.search(r"listening address=(\S+)", self.log.read_text())
        return found.group(1) if found else None

    def api(self, method: str, path: str, body: Any = None, expect: int = 200) -> Any:
        answer = self.client.request(method, path, json=body)
        assert answer.status_code == expect, f"{method} {path}: {answer.status_code} {answer.text}"
        return answer.json() if answer.content else None

    def create_job(self, **job: Any) -> int:
        # Fired by the test (trigger), not by the clock: a schedule that never comes.
        job.setdefault("schedule", {"cron": "0 0 0 1 1 ? 2199"})
        created = self.api("POST", "/api/v1/jobs", job, expect=201)
        return int(created["id"])

    def trigger(self, job_id: int, body: Optional[Dict[str, Any]] = None) -> int:
        answer = self.api("POST", f"/api/v1/jobs/{job_id}/trigger", body or {}, expect=202)
        return int(answer["id"])

    def run(self, run_id: int) -> Dict[str, Any]:
        return dict(self.api("GET", f"/api/v1/runs/{run_id}"))

    def wait_run_ended(self, run_id: int, timeout: float = 30.0) -> Dict[str, Any]:
        def ended() -> Optional[Dict[str, Any]]:
            run = self.run(run_id)
            return run if run["state"] not in ("pending", "queued", "running") else None

        return dict(wait_until(f"run {run_id} to end", ended, timeout=timeout))

    def executors(self, app: str) -> List[Dict[str, Any]]:
        listed = self.api("GET", "/api/v1/executors")
        items = listed["executors"] if isinstance(listed, dict) and "executors" in listed else listed
        return [e for e in items if e.get("app") == app]

    def stop(self) -> None:
        self.client.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class ExecutorProcess:
    """``python -m carillon_executor MODULE`` serving the test apps, recording what its
    handlers did in a file the test reads."""

    def __init__(self, node: Node, app: str, module: str = "suite", *flags: str,
                 env: Optional[Dict[str, str]] = None) -> None:
        self.app = app
        self.dir = Path(tempfile.mkdtemp(prefix="carillon-py-executor-"))
        self.record = self.dir / "record.jsonl"
        self.log = self.dir / "executor.log"
        environment = dict(os.environ)
        environment.update(
            {
                "PYTHONPATH": os.pathsep.join([str(APPS), environment.get("PYTHONPATH", "")]),
                "CARILLON_EXECUTOR_TOKEN": EXECUTOR_TOKEN,
                "CARILLON_DISPATCH_SECRET": DISPATCH_SECRET,
                "SUITE_RECORD": str(self.record),
            }
        )
        environment.update(env or {})
        command = [sys.executable, "-m", "carillon_executor", module, "--app", app,
                   "--admin", node.url, "--listen", "127.0.0.1:0", *flags]
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(command, env=environment, stdout=out, stderr=out)
        self.executor_id = wait_until("the executor to register", self._registered, timeout=30)

    def _registered(self) -> Optional[str]:
        if self.process.poll() is not None:
            raise AssertionError(f"the executor exited: {self.log.read_text()[-3000:]}")
        found = re.search(r"registered executor (\S+) ", self.log.read_text())
        return found.group(1) if found else None

    def records(self) -> List[Dict[str, Any]]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines() if line.strip()]

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()

    def stop(self, timeout: float = 40.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return int(self.process.returncode)

    def output(self) -> str:
        return self.log.read_text()


@pytest.fixture(scope="module", params=BACKENDS)
def node(request: pytest.FixtureRequest) -> Iterator[Node]:
    url = create_database(request.param)
    started = Node(url)
    try:
        yield started
    finally:
        started.stop()
        drop_database(url)


@pytest.fixture(scope="module")
def sqlite_node() -> Iterator[Node]:
    started = Node("")
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def executors(node: Node) -> Iterator[Callable[..., ExecutorProcess]]:
    """Starts executors on the module's node; stops them after the test."""
    started: List[ExecutorProcess] = []

    def start(app: str, *flags: str, module: str = "suite", env: Optional[Dict[str, str]] = None) -> ExecutorProcess:
        executor = ExecutorProcess(node, app, module, *flags, env=env)
        started.append(executor)
        return executor

    yield start
    for executor in started:
        executor.stop(timeout=10)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"
