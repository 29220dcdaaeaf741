"""The executor in a WSGI service (Flask, Django): its event loop runs in a thread of its own,
and a WSGI application hands each call of the nodes to it.

.. code-block:: python

    executor = Executor.from_env(app="billing")
    executor.start_background(advertise="http://10.0.0.7:8000")
    app.wsgi_app = DispatcherMiddleware(app.wsgi_app, {"/carillon": executor.wsgi})
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from ._endpoint import Endpoint, Message

StartResponse = Callable[[str, List[Tuple[str, str]]], Any]
#: How long a WSGI worker waits for the loop to answer a call of the nodes.
ANSWER_TIMEOUT_S = 60.0


class LoopThread:
    """An event loop running in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="carillon-executor", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, work: Any, timeout: Optional[float] = None) -> Any:
        """Runs a coroutine on the loop and waits for its result."""
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


class WsgiEndpoint:
    """The dispatch endpoint as a WSGI application, answering on the executor's loop."""

    def __init__(self, endpoint: Endpoint, loop: Callable[[], Optional[LoopThread]]) -> None:
        self._endpoint = endpoint
        self._loop = loop

    def __call__(self, environ: Dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        loop = self._loop()
        if loop is None:
            start_response("503 Service Unavailable", [("content-type", "application/json")])
            return [b'{"error":"the executor is not started: call start_background()"}']
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        headers = [
            (key[5:].replace("_", "-").lower().encode("latin-1"), str(value).encode("latin-1"))
            for key, value in environ.items()
            if key.startswith("HTTP_")
        ]
        scope = {
            "type": "http",
            "method": environ.get("REQUEST_METHOD", "GET"),
            # Mounted under a prefix, the path the nodes called is the prefix and the rest.
            "path": environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", ""),
            "headers": headers,
        }
        sent: List[Message] = []

        async def receive() -> Message:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: Message) -> None:
            sent.append(message)

        loop.call(self._endpoint(scope, receive, send), ANSWER_TIMEOUT_S)
        start, content = sent[0], b"".join(m.get("body", b"") for m in sent[1:])
        status = int(start["status"])
        reason = {200: "OK", 202: "Accepted", 400: "Bad Request", 401: "Unauthorized",
                  404: "Not Found", 405: "Method Not Allowed", 409: "Conflict",
                  413: "Payload Too Large", 429: "Too Many Requests",
                  503: "Service Unavailable"}.get(status, "")
        start_response(f"{status} {reason}", [(k.decode(), v.decode()) for k, v in start["headers"]])
        return [content]
