"""The HTTP endpoint admin nodes dispatch to, as an ASGI application: ``POST
/carillon/v1/dispatch``, ``/carillon/v1/dispatch-batch`` and ``/carillon/v1/cancel``, all
signed (``protocol/README.md``)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Awaitable, Callable, Dict, List, MutableMapping, Optional, Tuple

from ._attempts import Attempt
from ._core import Answer, Core
from ._wire import (
    CANCEL_PATH,
    DISPATCH_BATCH_PATH,
    DISPATCH_PATH,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    now_ms,
    signature_problem,
)

log = logging.getLogger("carillon_executor")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

#: A request body larger than this is refused: a batch of 512 dispatches is far smaller.
MAX_BODY = 32 * 1024 * 1024


class Endpoint:
    """The ASGI application; lifespan events go to ``lifespan`` when one is given."""

    def __init__(
        self,
        core: Core,
        answer_within_s: float,
        lifespan: Optional[Callable[[Scope, Receive, Send], Awaitable[None]]] = None,
    ) -> None:
        self.core = core
        self.answer_within_s = answer_within_s
        self.lifespan = lifespan

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            if self.lifespan is not None:
                await self.lifespan(scope, receive, send)
            return
        if scope["type"] != "http":
            return
        path = str(scope.get("path", ""))
        route = next((p for p in (DISPATCH_PATH, DISPATCH_BATCH_PATH, CANCEL_PATH) if path.endswith(p)), None)
        if route is None:
            await _answer(send, 404, {"error": f"no such path: {path}"})
            return
        if scope.get("method") != "POST":
            await _answer(send, 405, {"error": "use POST"})
            return
        body = await _body(receive)
        if body is None:
            await _answer(send, 413, {"error": f"the body is larger than {MAX_BODY} bytes"})
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        problem = signature_problem(
            self.core.id.secret,
            headers.get(TIMESTAMP_HEADER),
            headers.get(SIGNATURE_HEADER),
            body,
            now_ms(),
        )
        if problem is not None:
            log.warning("refused a call whose signature does not verify: %s", problem)
            await _answer(send, 401, {"error": problem})
            return
        try:
            document = json.loads(body)
        except ValueError as e:
            await _answer(send, 400, {"error": f"not JSON: {e}"})
            return
        # A verified timestamp is an integer.
        signed_at = int(headers.get(TIMESTAMP_HEADER, "0").strip())
        if route == CANCEL_PATH:
            await self._cancel(document, send)
        elif route == DISPATCH_PATH:
            await self._dispatch(document, signed_at, send)
        else:
            await self._dispatch_batch(document, signed_at, send)

    async def _dispatch(self, document: Any, signed_at: int, send: Send) -> None:
        if not _is_dispatch(document):
            await _answer(send, 400, {"error": "not a dispatch"})
            return
        (status, result, error), attempt = self.core.accept(document, signed_at)
        answers = await self._settle([((status, result, error), attempt)])
        status, result, error = answers[0]
        if status == 200 and result is not None:
            await _answer(send, 200, result.body())
        elif status == 202:
            await _answer(send, 202, {"accepted": True})
        else:
            await _answer(send, status, {"error": error})

    async def _dispatch_batch(self, document: Any, signed_at: int, send: Send) -> None:
        dispatches = document.get("dispatches") if isinstance(document, dict) else None
        if not isinstance(dispatches, list) or not all(_is_dispatch(d) for d in dispatches):
            await _answer(send, 400, {"error": "not a dispatch batch"})
            return
        taken = [self.core.accept(d, signed_at) for d in dispatches]
        answers = await self._settle(taken)
        replies: List[Dict[str, Any]] = []
        for dispatch, (status, result, error) in zip(dispatches, answers):
            reply: Dict[str, Any] = {"attempt_id": dispatch["attempt_id"], "status": status}
            if status == 200 and result is not None:
                reply["result"] = result.body()
            elif error is not None:
                reply["error"] = error
            replies.append(reply)
        await _answer(send, 200, {"replies": replies})

    async def _settle(self, taken: List[Tuple[Answer, Optional[Attempt]]]) -> List[Answer]:
        """Gives handlers started by these dispatches a moment to end, so that those done by
        then are answered ``200`` with their result, in this reply, instead of by a report;
        the others are reported when they end."""
        started = [a for _, a in taken if a is not None and a.handler is not None]
        answers: List[Answer] = []
        settled = 0
        try:
            if started and self.answer_within_s > 0:
                handlers = [a.handler for a in started if a.handler is not None]
                await asyncio.wait(handlers, timeout=self.answer_within_s)
            for answer, attempt in taken:
                if attempt is not None:
                    result = self.core.answered_at_once(attempt)
                    if result is not None:
                        answer = (200, result, None)
                    else:
                        self.core.finish_later(attempt)
                answers.append(answer)
                settled += 1
        finally:
            # This request cancelled or failed midway: what it started is still reported.
            for _, attempt in taken[settled:]:
                if attempt is not None and attempt.attempt_id in self.core.running.attempts:
                    self.core.finish_later(attempt)
        return answers

    async def _cancel(self, document: Any, send: Send) -> None:
        attempt_id = document.get("attempt_id") if isinstance(document, dict) else None
        if not isinstance(attempt_id, int):
            await _answer(send, 400, {"error": "not a cancellation"})
            return
        self.core.running.cancel(attempt_id)
        await _answer(send, 200, {})


def _is_dispatch(document: Any) -> bool:
    return (
        isinstance(document, dict)
        and isinstance(document.get("attempt_id"), int)
        and isinstance(document.get("run_id"), int)
        and isinstance(document.get("handler"), str)
        and "protocol" in document
    )


async def _body(receive: Receive) -> Optional[bytes]:
    chunks: List[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _answer(send: Send, status: int, document: Any) -> None:
    body = json.dumps(document, separators=(",", ":")).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
