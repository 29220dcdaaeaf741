"""Traces end to end: the node exports the run's spans over OTLP, the executor's attempt span
continues the run's trace with the node's delivery as its parent, and the handler's own span
is the attempt's child; all received by a real OTLP receiver decoding OpenTelemetry's
protobuf."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any, Dict, List

import httpx

from conftest import REPO, ExecutorProcess, Node, unique, wait_until

RECEIVER = REPO / "server" / "tests" / "otlp" / "receiver.py"


def test_the_attempt_span_joins_the_runs_trace() -> None:
    receiver = subprocess.Popen([sys.executable, str(RECEIVER), "0"], stdout=subprocess.PIPE, text=True)
    try:
        assert receiver.stdout is not None
        port = int(re.search(r"listening (\d+)", receiver.stdout.readline()).group(1))  # type: ignore[union-attr]
        endpoint = f"http://127.0.0.1:{port}"
        node = Node("", {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})
        app = unique("traced")
        executor = ExecutorProcess(node, app, "traced", env={"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})
        try:
            run = node.wait_run_ended(node.trigger(node.create_job(name=unique("load"), app=app, handler="load")))
            assert run["state"] == "succeeded", run

            def spans() -> List[Dict[str, Any]]:
                return list(httpx.get(f"{endpoint}/spans").json()["spans"])

            def complete() -> Any:
                got = spans()
                names = {s["name"] for s in got}
                return got if {"carillon.deliver", "attempt", "load rows"} <= names else None

            got = wait_until("the node's and the executor's spans", complete, timeout=30)
            deliver = next(s for s in got if s["name"] == "carillon.deliver"
                           and s["attributes"].get("carillon.run_id") == run["id"])
            attempt = next(s for s in got if s["name"] == "attempt")
            own = next(s for s in got if s["name"] == "load rows")
            assert attempt["trace_id"] == deliver["trace_id"] == own["trace_id"]
            assert attempt["parent_span_id"] == deliver["span_id"]
            assert own["parent_span_id"] == attempt["span_id"]
            assert attempt["resource"]["service.name"] == "python-executor"
            assert attempt["attributes"]["carillon.run_id"] == run["id"]
            assert attempt["attributes"]["carillon.outcome"] == "succeeded"
            assert attempt["kind"] == 2, "a server span"
        finally:
            assert executor.stop() == 0, executor.output()
            node.stop()
    finally:
        receiver.kill()
        receiver.wait()
