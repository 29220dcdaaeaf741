"""The record of work done under ``exactly_once_effect`` (``protocol/README.md``, *Delivery
guarantees*): by effect key, the work running here (and the other deliveries of it that joined
it) or its result, kept an hour and at most 100,000 keys, in memory."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple, Union

KEEP_MS = 3_600_000
MAX_DONE = 100_000


@dataclass(frozen=True)
class Result:
    """What an attempt ended with: ``succeeded`` (with ``output``), ``failed`` (with
    ``error``) or ``cancelled``."""

    outcome: str
    output: object = None
    error: Optional[str] = None

    def body(self) -> Dict[str, object]:
        """The result as a ``200`` answer or a report carries it."""
        body: Dict[str, object] = {"outcome": self.outcome}
        if self.outcome == "succeeded":
            body["output"] = self.output
        else:
            body["error"] = self.error or self.outcome
        return body


@dataclass
class _Running:
    primary: int
    waiting: List[int] = field(default_factory=list)


#: ``run``: run the handler; ``joined``: the work runs here under the attempt given;
#: ``done``: answer with the result given.
Begun = Union[Tuple[str, None], Tuple[str, int], Tuple[str, Result]]


class Effects:
    def __init__(self) -> None:
        self._running: Dict[str, _Running] = {}
        # Finished keys in the order they finished, with when.
        self._done: "OrderedDict[str, Tuple[Result, int]]" = OrderedDict()

    def begin(self, key: str, attempt_id: int, now: int) -> Begun:
        self._forget_old(now)
        done = self._done.get(key)
        if done is not None:
            return ("done", done[0])
        running = self._running.get(key)
        if running is not None:
            if attempt_id != running.primary and attempt_id not in running.waiting:
                running.waiting.append(attempt_id)
            return ("joined", running.primary)
        self._running[key] = _Running(attempt_id)
        return ("run", None)

    def abandon(self, key: str) -> None:
        """The handler did not start after all: a later delivery runs it."""
        self._running.pop(key, None)

    def finish(self, key: str, result: Result, now: int) -> List[int]:
        """Records the key's result (a cancelled run is forgotten, so it runs again) and
        gives the attempts that joined it, to report the same result for."""
        running = self._running.pop(key, None)
        if result.outcome != "cancelled":
            self._done.pop(key, None)
            self._done[key] = (result, now)
            while len(self._done) > MAX_DONE:
                self._done.popitem(last=False)
        return running.waiting if running else []

    def _forget_old(self, now: int) -> None:
        while self._done:
            key, (_, at) = next(iter(self._done.items()))
            if now - at <= KEEP_MS:
                return
            del self._done[key]
