"""An XXL-JOB executor built with fastapi-xxljob (from PyPI), unchanged, as its README shows it:
a FastAPI app, an `on_run` handler that calls the result back, no idle-beat callback (the
library's default), served by uvicorn. For server/tests/it/xxl_executors.rs.

Usage: fastapi_xxljob_executor.py ADMIN_URL PORT TOKEN APP
"""

import asyncio
import sys

import uvicorn
from fastapi import FastAPI
from fastapi_xxljob import FastAPIXXLJob, TriggerRequest, XXLJobResponse

admin, port, token, app_name = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

app = FastAPI()
xxl = FastAPIXXLJob(
    app,
    {
        "XXL_JOB_ADMIN_ADDRESSES": [admin],
        "XXL_JOB_ACCESS_TOKEN": token,
        "XXL_JOB_EXECUTOR_APP_NAME": app_name,
        "XXL_JOB_EXECUTOR_ADDRESS": f"http://127.0.0.1:{port}",
        "XXL_JOB_REGISTRY_INTERVAL": 2,
    },
)
pending = set()


async def finish(request: TriggerRequest) -> None:
    await asyncio.sleep(0.1)
    await xxl.callback_success(
        request.log_id, request.log_date_time, "echo:" + request.executor_params
    )


@xxl.on_run("echo")
async def echo(request: TriggerRequest) -> XXLJobResponse:
    # Taken at once; the result goes back by callback, as XXL-JOB's executors do.
    task = asyncio.ensure_future(finish(request))
    pending.add(task)
    task.add_done_callback(pending.discard)
    return XXLJobResponse.success()


uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
