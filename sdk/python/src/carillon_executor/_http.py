"""Calls to the admin nodes' REST API for the clients (``Admin``, ``Tasks``), synchronous or
``async``: any node answers any call, so a call moves to the next node when the one it tried
could not be reached (nothing was sent) or was busy; a call that may have been acted on is
sent again only when the caller says that is safe."""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import httpx


class ApiError(Exception):
    """The node refused the call: its status and problem document (``detail``, ``field``)."""

    def __init__(self, status: int, problem: Mapping[str, Any]) -> None:
        detail = str(problem.get("detail") or problem.get("title") or f"status {status}")
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.problem = dict(problem)
        self.detail = detail
        self.field: Optional[str] = problem.get("field")


class Unavailable(Exception):
    """No admin node took the call."""


@dataclass(frozen=True)
class Answer:
    status: int
    document: Any
    url: str


def _urls(admin_urls: Union[str, Sequence[str]]) -> List[str]:
    given = admin_urls.split(",") if isinstance(admin_urls, str) else list(admin_urls)
    urls = [u.strip().rstrip("/") for u in given if u.strip()]
    if not urls:
        raise ValueError("admin_urls: name at least one admin node")
    return urls


def _verify(ca: Optional[str]) -> Union[bool, ssl.SSLContext]:
    if not ca:
        return True
    context = ssl.create_default_context()
    context.load_verify_locations(cafile=ca)
    return context


def _document(response: httpx.Response) -> Any:
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return {"detail": response.text[:500]}


def _encode(body: Any) -> Optional[bytes]:
    return None if body is None else json.dumps(body, separators=(",", ":"), allow_nan=False).encode()


class _Transport:
    def __init__(self, admin_urls: Union[str, Sequence[str]], token: str) -> None:
        self.urls = _urls(admin_urls)
        if len(token.strip()) < 16:
            raise ValueError("token: is required (at least 16 characters)")
        self.headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}

    def outcome(self, url: str, response: Optional[httpx.Response],
                error: Optional[httpx.HTTPError], resend: bool) -> Union[Answer, str]:
        """What one node's answer (or failure) means: the answer to give, or why the next
        node is tried. ``resend``: the call may go to another node after one failed having
        received it (it is idempotent)."""
        if error is not None:
            # Not connected (refused, or no connection in time): nothing reached the node.
            unsent = isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout))
            if unsent or resend:
                return f"{url}: {type(error).__name__}: {error}"
            raise Unavailable(f"{url}: {type(error).__name__}: {error}; it may have been done")
        assert response is not None
        status = response.status_code
        # Busy, or timed out before reading: nothing was done, another node may take it. A
        # server error may come after the commit: only an idempotent call goes on.
        if status in (408, 429) or (resend and status >= 500):
            return f"{url} answered {status}"
        if status >= 500:
            raise Unavailable(f"{url} answered {status}; it may have been done")
        return Answer(status, _document(response), url)


def _query(query: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    return {k: v for k, v in (query or {}).items() if v is not None}


class SyncTransport(_Transport):
    def __init__(self, admin_urls: Union[str, Sequence[str]], token: str,
                 ca: Optional[str] = None, timeout: float = 10.0) -> None:
        super().__init__(admin_urls, token)
        self.client = httpx.Client(verify=_verify(ca), timeout=timeout, trust_env=False)

    def request(self, method: str, path: str, *, query: Optional[Mapping[str, Any]] = None,
                body: Any = None, headers: Optional[Mapping[str, str]] = None,
                resend: bool = False) -> Answer:
        last = "no admin node configured"
        for url in self.urls:
            response, error = None, None
            try:
                response = self.client.request(
                    method, url + path, params=_query(query), content=_encode(body),
                    headers={**self.headers, **(headers or {})})
            except httpx.HTTPError as e:
                error = e
            decided = self.outcome(url, response, error, resend)
            if isinstance(decided, Answer):
                return decided
            last = decided
        raise Unavailable(last)

    def close(self) -> None:
        self.client.close()


class AsyncTransport(_Transport):
    def __init__(self, admin_urls: Union[str, Sequence[str]], token: str,
                 ca: Optional[str] = None, timeout: float = 10.0) -> None:
        super().__init__(admin_urls, token)
        self.client = httpx.AsyncClient(verify=_verify(ca), timeout=timeout, trust_env=False)

    async def request(self, method: str, path: str, *, query: Optional[Mapping[str, Any]] = None,
                      body: Any = None, headers: Optional[Mapping[str, str]] = None,
                      resend: bool = False) -> Answer:
        last = "no admin node configured"
        for url in self.urls:
            response, error = None, None
            try:
                response = await self.client.request(
                    method, url + path, params=_query(query), content=_encode(body),
                    headers={**self.headers, **(headers or {})})
            except httpx.HTTPError as e:
                error = e
            decided = self.outcome(url, response, error, resend)
            if isinstance(decided, Answer):
                return decided
            last = decided
        raise Unavailable(last)

    async def close(self) -> None:
        await self.client.aclose()


def checked(answer: Answer) -> Any:
    """The answer's document, or ``ApiError`` for a refusal."""
    if 200 <= answer.status < 300:
        return answer.document
    problem = answer.document if isinstance(answer.document, dict) else {}
    raise ApiError(answer.status, problem)
