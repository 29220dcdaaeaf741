"""An XXL-JOB executor built with pyxxl (from PyPI), unchanged, for server/tests/xxl_executors.rs.

Usage: pyxxl_executor.py ADMIN_API_URL PORT TOKEN APP MARK_DIR
"""

import asyncio
import os
import sys

from pyxxl import ExecutorConfig, PyxxlRunner
from pyxxl.ctx import g

admin, port, token, app, marks = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]

config = ExecutorConfig(
    xxl_admin_baseurl=admin,
    executor_app_name=app,
    access_token=token,
    executor_url=f"http://127.0.0.1:{port}",
    executor_listen_host="127.0.0.1",
    executor_listen_port=port,
    executor_log_path=os.path.join(marks, f"executor-{port}.log"),
    log_local_dir=os.path.join(marks, f"logs-{port}"),
    dotenv_try=False,
)
runner = PyxxlRunner(config)


@runner.register(name="echo")
async def echo():
    params = g.xxl_run_data.executorParams
    g.logger.info("echo got %s", params)
    return f"echo:{params}"


@runner.register(name="shard")
async def shard():
    data = g.xxl_run_data
    return f"shard {data.broadcastIndex}/{data.broadcastTotal} on {port}"


@runner.register(name="fail")
async def fail():
    g.logger.info("about to fail")
    raise RuntimeError("boom from pyxxl")


@runner.register(name="sleepy")
async def sleepy():
    data = g.xxl_run_data
    open(os.path.join(marks, f"started-{data.logId}-{port}"), "w").close()
    try:
        for i in range(int(float(data.executorParams or "30") * 10)):
            if i % 10 == 0:
                g.logger.info("sleepy line %d", i // 10)
            await asyncio.sleep(0.1)
    except asyncio.CancelledError:
        open(os.path.join(marks, f"cancelled-{data.logId}"), "w").close()
        raise
    return f"slept on {port}"


@runner.register(name="first_slow")
async def first_slow():
    """The first run of a job sleeps 30 s, later ones 1 s; each says when it started."""
    data = g.xxl_run_data
    open(os.path.join(marks, f"started-{data.logId}-{port}"), "w").close()
    try:
        with open(os.path.join(marks, f"first-{data.jobId}"), "x"):
            seconds = 30
    except FileExistsError:
        seconds = 1
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        open(os.path.join(marks, f"cancelled-{data.logId}"), "w").close()
        raise
    return f"slept {seconds} s"


if __name__ == "__main__":
    os.makedirs(config.log_local_dir, exist_ok=True)
    runner.run_executor()
