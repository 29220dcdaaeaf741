"""An existing Starlette service (as a FastAPI one would be) that mounts the executor's
endpoint and starts and stops it from its own lifespan."""

import os
from contextlib import asynccontextmanager
from typing import AsyncIterator

import suite  # noqa: F401  (its @job handlers are the executor's)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from carillon_executor import Executor

executor = Executor.from_env(app=os.environ["EMBEDDED_APP"])


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    await executor.start(advertise=os.environ["EMBEDDED_ADVERTISE"])
    yield
    await executor.stop()


async def health(request: Request) -> PlainTextResponse:
    return PlainTextResponse("the service's own route")


service = Starlette(routes=[Route("/health", health), Mount("/", app=executor.asgi)], lifespan=lifespan)
