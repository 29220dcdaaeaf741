"""What a handler is given beside its arguments, through the typed context: a child job's
parent run, a workflow step's params and upstream outputs, the job's secrets."""

from __future__ import annotations

from typing import Any, Dict

from conftest import ExecutorProcess, Node, unique, wait_until


def given(executor: Any, run_id: int) -> Dict[str, Any]:
    return dict(wait_until(f"run {run_id}'s handler", lambda: next(
        (r for r in executor.records() if r["run_id"] == run_id and r["event"] == "given"), None)))


def test_a_child_run_sees_its_parent_and_a_step_its_params_and_upstream(node: Node, executors: Any) -> None:
    app = unique("inputs")
    executor = executors(app)
    child = node.create_job(name=unique("child"), app=app, handler="given")
    parent = node.create_job(name=unique("parent"), app=app, handler="work", args={"sleep": 0},
                             children={"on_success": [child]})
    parent_run = node.wait_run_ended(node.trigger(parent))
    child_run = wait_until("the child run", lambda: node.run(parent_run["id"])["children"])[0]
    seen = given(executor, child_run["run_id"])
    assert seen["parent"]["run_id"] == parent_run["id"]
    assert seen["parent"]["state"] == "succeeded"
    assert seen["parent"]["output"] == {"run": parent_run["id"], "shard": 0}
    assert seen["workflow"] is None and seen["upstream"] == {} and seen["params"] is None

    workflow = node.api("POST", "/api/v1/workflows", {
        "name": unique("etl"), "schedule": {"cron": "0 0 0 1 1 ? 2199"},
        "params": {"date": "yesterday"},
        "steps": [
            {"name": "extract", "app": app, "handler": "given"},
            {"name": "load", "app": app, "handler": "given", "needs": ["extract"]},
        ]}, expect=201)
    started = node.api("POST", f"/api/v1/workflows/{workflow['id']}/trigger", {"params": {"date": "2026-11-28"}},
                       expect=202)

    def load_step() -> Any:
        steps = node.api("GET", f"/api/v1/workflow-runs/{started['id']}")["steps"]
        return next((s for s in steps if s["name"] == "load" and s["state"] == "succeeded"), None)

    load = wait_until("the load step", load_step)
    seen = given(executor, load["run_id"])
    assert seen["workflow"] == {"id": workflow["id"], "run_id": started["id"], "step": "load"}
    assert seen["params"] == {"date": "2026-11-28"}
    assert seen["upstream"]["extract"]["state"] == "succeeded"
    assert seen["upstream"]["extract"]["output"] == {"step": "extract", "rows": 120}
    assert seen["parent"] is None


def test_a_jobs_secrets_reach_its_handler(sqlite_node: Node) -> None:
    app = unique("secrets")
    executor = ExecutorProcess(sqlite_node, app)
    try:
        sqlite_node.api("PUT", "/api/v1/secrets/db_password", {"value": "correct horse battery"}, expect=201)
        job_id = sqlite_node.create_job(name=unique("uses"), app=app, handler="given", secrets=["db_password"])
        run = sqlite_node.wait_run_ended(sqlite_node.trigger(job_id))
        assert run["state"] == "succeeded", run
        seen = given(executor, run["id"])
        assert seen["secrets"] == ["db_password"] and seen["secret_length"] == len("correct horse battery")
        assert seen["job_name"].startswith("uses-") and seen["scheduled_at"].endswith("Z")
        assert "correct horse" not in executor.output()
    finally:
        executor.stop()
