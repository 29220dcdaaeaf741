"""``@job``: marks a function as a handler of this executor app, optionally declaring a
schedule, exactly as the Rust SDK's ``#[job]`` does. The checks ``#[job]`` makes at compile
time are made here when the module is imported, with the same messages."""

from __future__ import annotations

import inspect
import threading
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, TypeVar, overload

from . import cron as _cron

try:
    import zoneinfo
except ImportError:  # pragma: no cover - Python 3.8, which the package does not support
    zoneinfo = None  # type: ignore[assignment]


class JobDefinitionError(ValueError):
    """A ``@job`` (or a handler given to the executor) that cannot be served, naming what is
    wrong with it."""


@dataclass(frozen=True)
class JobSpec:
    """One handler: its name, what it declares and the function that runs it."""

    name: str
    description: str
    cron: Optional[str]
    rrule: Optional[str]
    tz: Optional[str]
    func: Callable[..., Any]

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.func)

    def schedule(self) -> Optional[dict[str, str]]:
        """The schedule declared in code, as a registration carries it."""
        if self.cron is None and self.rrule is None:
            return None
        schedule = {"cron": self.cron} if self.cron is not None else {"rrule": str(self.rrule)}
        if self.tz is not None:
            schedule["timezone"] = self.tz
        return {k: v for k, v in schedule.items() if v is not None}


NAME_RULE = "a job name is 1 to 128 letters, digits, '-', '_' or '.'"


def name_problem(name: str) -> Optional[str]:
    valid = (
        0 < len(name) <= 128
        and name.isascii()
        and all(c.isalnum() or c in "-_." for c in name)
    )
    return None if valid else NAME_RULE


def spec(
    func: Callable[..., Any],
    *,
    name: Optional[str] = None,
    description: str = "",
    cron: Optional[str] = None,
    rrule: Optional[str] = None,
    tz: Optional[str] = None,
) -> JobSpec:
    """Checks a handler as ``@job`` does; raises ``JobDefinitionError`` naming the fault."""
    where = getattr(func, "__qualname__", repr(func))

    def refuse(problem: str) -> JobDefinitionError:
        return JobDefinitionError(f"@job on {where}: {problem}")

    if not callable(func):
        raise refuse("a job handler must be a function")
    parameters = [
        p
        for p in inspect.signature(func).parameters.values()
        if p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]
    if len(parameters) != 1 or parameters[0].kind == inspect.Parameter.KEYWORD_ONLY:
        raise refuse("a job handler takes exactly one argument, `ctx: JobContext`")
    chosen = name if name is not None else getattr(func, "__name__", "")
    problem = name_problem(chosen)
    if problem:
        raise refuse(f"{chosen!r}: {problem}")
    if cron is not None and rrule is not None:
        raise refuse("give either cron or rrule, not both")
    if cron is not None:
        cron_problem = _cron.problem(cron)
        if cron_problem:
            raise refuse(f"invalid cron expression: {cron_problem}")
    if tz is not None:
        if cron is None and rrule is None:
            raise refuse("tz needs a schedule: add cron or rrule")
        if not _known_zone(tz):
            raise refuse(f"tz {tz!r} is not a time zone of the IANA database")
    return JobSpec(chosen, description[:1024], cron, rrule, tz, func)


def _known_zone(tz: str) -> bool:
    # The IANA database decides, as on the nodes (which know no "Z" zone either).
    try:
        zoneinfo.ZoneInfo(tz)
    except (ValueError, zoneinfo.ZoneInfoNotFoundError):
        return False
    return True


_lock = threading.Lock()
_declared: List[JobSpec] = []

F = TypeVar("F", bound=Callable[..., Any])


@overload
def job(func: F) -> F: ...


@overload
def job(
    *,
    name: Optional[str] = None,
    description: str = "",
    cron: Optional[str] = None,
    rrule: Optional[str] = None,
    tz: Optional[str] = None,
) -> Callable[[F], F]: ...


def job(
    func: Optional[F] = None,
    *,
    name: Optional[str] = None,
    description: str = "",
    cron: Optional[str] = None,
    rrule: Optional[str] = None,
    tz: Optional[str] = None,
) -> Any:
    """Marks ``func(ctx)`` (plain or ``async``) as a handler of this executor app.

    ``name`` defaults to the function's name; ``cron`` (5 fields Unix, 6–7 Quartz) or
    ``rrule``, with ``tz``, declare a schedule: the first time the handler registers, the
    admin node creates the started job ``<app>.<name>`` with it. The function is returned
    unchanged. A bad name or schedule raises ``JobDefinitionError`` at import.
    """

    def mark(f: F) -> F:
        declared = spec(f, name=name, description=description, cron=cron, rrule=rrule, tz=tz)
        with _lock:
            # A module imported twice (as __main__ and by name) declares its handlers twice.
            _declared[:] = [
                d for d in _declared if _identity(d.func) != _identity(f) or d.name != declared.name
            ]
            _declared.append(declared)
        return f

    return mark(func) if func is not None else mark


def _identity(func: Callable[..., Any]) -> str:
    code = getattr(func, "__code__", None)
    where = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else ""
    return f"{getattr(func, '__qualname__', '')}@{where}"


def declared_jobs() -> List[JobSpec]:
    """Every ``@job`` of the program, in the order they were declared."""
    with _lock:
        return list(_declared)
