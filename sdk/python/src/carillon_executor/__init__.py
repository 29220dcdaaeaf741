"""The Carillon executor SDK for Python: mark functions with ``@job``, run them with
``python -m carillon_executor your_module`` (or mount ``Executor.asgi`` in an ASGI app).

.. code-block:: python

    from carillon_executor import JobContext, job

    @job(cron="0 30 2 * * ?", tz="Asia/Shanghai", description="nightly report")
    async def report(ctx: JobContext) -> dict:
        ctx.logger.info("shard %d of %d", ctx.shard.index, ctx.shard.total)
        return {"rows": 120}
"""

from ._http import ApiError, Unavailable
from .admin import Admin, AsyncAdmin
from .context import JobContext, JobError, Shard
from .cron import CronError
from .executor import Executor, ExecutorConfigError, RegistrationError
from .jobs import JobDefinitionError, JobSpec, declared_jobs, job
from .tasks import AsyncTasks, Enqueued, Task, TaskProblem, Tasks, TasksRefused, TasksUnavailable

__all__ = [
    "Admin",
    "ApiError",
    "AsyncAdmin",
    "AsyncTasks",
    "CronError",
    "Enqueued",
    "Executor",
    "ExecutorConfigError",
    "JobContext",
    "JobDefinitionError",
    "JobError",
    "JobSpec",
    "RegistrationError",
    "Shard",
    "Task",
    "TaskProblem",
    "Tasks",
    "TasksRefused",
    "TasksUnavailable",
    "Unavailable",
    "declared_jobs",
    "job",
]

__version__ = "0.1.0"
