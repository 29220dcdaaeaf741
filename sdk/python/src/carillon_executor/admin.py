"""Clients of the admin nodes' REST API for programs: ``Admin`` (blocking) and
``AsyncAdmin``, one method per operation of the API (``_admin_operations.py``, generated from
the nodes' OpenAPI document). Each returns the answer's JSON, or raises ``ApiError`` (the
node's problem: ``status``, ``detail``, ``field``) or ``Unavailable`` (no node answered).

.. code-block:: python

    admin = Admin("http://127.0.0.1:9001", token)
    job = admin.create_job({"name": "nightly", "app": "billing", "handler": "report",
                            "schedule": {"cron": "0 30 2 * * ?"}, "start": True})
    admin.trigger_job(job["id"])
"""

from __future__ import annotations

from typing import Any, Awaitable, Mapping, Optional, Sequence, Union

from ._admin_operations import Operations
from ._http import ApiError, AsyncTransport, SyncTransport, Unavailable, checked

__all__ = ["Admin", "AsyncAdmin", "ApiError", "Unavailable"]

#: Calls that may go to another node after one failed having received them (a DELETE sent
#: again would answer 404 for a delete that worked).
_IDEMPOTENT = ("GET", "PUT")


def _arguments(namespace: Optional[str], query: Optional[Mapping[str, Any]],
               headers: Optional[Mapping[str, Optional[str]]]) -> "tuple[dict[str, Any], dict[str, str]]":
    filled = dict(query or {})
    if "namespace" in filled and filled["namespace"] is None:
        filled["namespace"] = namespace
    present = {k: v for k, v in (headers or {}).items() if v is not None}
    return filled, present


class Admin(Operations):
    """The REST API, blocking. ``token`` is an admin (or read-only, or namespace service)
    token; ``namespace`` the one calls work in when they do not name another."""

    def __init__(self, admin_urls: Union[str, Sequence[str]], token: str, *,
                 namespace: Optional[str] = None, ca: Optional[str] = None,
                 timeout: float = 10.0) -> None:
        self._transport = SyncTransport(admin_urls, token, ca, timeout)
        self.namespace = namespace

    def _call(self, method: str, path: str, *, query: Optional[Mapping[str, Any]] = None,
              body: Any = None, headers: Optional[Mapping[str, Optional[str]]] = None) -> Any:
        filled, present = _arguments(self.namespace, query, headers)
        return checked(self._transport.request(
            method, path, query=filled, body=body, headers=present, resend=method in _IDEMPOTENT))

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> "Admin":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncAdmin(Operations):
    """The REST API for ``async`` programs: every method returns an awaitable."""

    def __init__(self, admin_urls: Union[str, Sequence[str]], token: str, *,
                 namespace: Optional[str] = None, ca: Optional[str] = None,
                 timeout: float = 10.0) -> None:
        self._transport = AsyncTransport(admin_urls, token, ca, timeout)
        self.namespace = namespace

    def _call(self, method: str, path: str, *, query: Optional[Mapping[str, Any]] = None,
              body: Any = None, headers: Optional[Mapping[str, Optional[str]]] = None) -> Awaitable[Any]:
        filled, present = _arguments(self.namespace, query, headers)
        return self._send(method, path, filled, body, present)

    async def _send(self, method: str, path: str, query: Mapping[str, Any], body: Any,
                    headers: Mapping[str, str]) -> Any:
        answer = await self._transport.request(
            method, path, query=query, body=body, headers=headers, resend=method in _IDEMPOTENT)
        return checked(answer)

    async def close(self) -> None:
        await self._transport.close()

    async def __aenter__(self) -> "AsyncAdmin":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
