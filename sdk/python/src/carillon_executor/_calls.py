"""Calls from an executor to its admin nodes: any node answers any call (they share one
database), so a call moves on to the next node when one fails, starting with the last one
that answered (``protocol/README.md``, *Answers from admin nodes*)."""

from __future__ import annotations

import json
from typing import Any, List, Optional, Sequence

import httpx


class CallError(Exception):
    """A call no admin node took; ``permanent`` when retrying cannot help (the node
    understood and refused)."""

    def __init__(self, message: str, permanent: bool) -> None:
        super().__init__(message)
        self.permanent = permanent


class AdminNodes:
    def __init__(self, urls: Sequence[str], token: str, client: httpx.AsyncClient) -> None:
        self.urls: List[str] = [u.rstrip("/") for u in urls]
        self._headers = {
            "authorization": f"Bearer {token}",
            "content-type": "application/json",
        }
        self._client = client
        self._preferred = 0

    async def post(self, path: str, body: Any, first: Sequence[str] = ()) -> Any:
        """POSTs ``body`` to ``first``, then to every admin node, until one takes it; gives
        its JSON answer."""
        n = len(self.urls)
        order = [u.rstrip("/") for u in first]
        order += [self.urls[(self._preferred + i) % n] for i in range(n)]
        content = json.dumps(body, separators=(",", ":"), allow_nan=False).encode()
        last: Optional[str] = None
        for url in order:
            try:
                answer = await self._client.post(url + path, content=content, headers=self._headers)
            except httpx.HTTPError as e:
                last = f"{url}: {type(e).__name__}: {e}"
                continue
            status = answer.status_code
            if 200 <= status < 300:
                if url in self.urls:
                    self._preferred = self.urls.index(url)
                return answer.json() if answer.content else None
            if 400 <= status < 500 and status not in (408, 429):
                # The node understood and refused: another would refuse too.
                raise CallError(f"{url} answered {status}: {answer.text[:200]}", permanent=True)
            last = f"{url} answered {status}"
        raise CallError(last or "no admin node configured", permanent=False)
