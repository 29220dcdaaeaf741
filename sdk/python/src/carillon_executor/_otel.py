"""The attempt's span continues the run's trace when the program has OpenTelemetry's API
(``pip install carillon-executor[opentelemetry]``) and a tracer provider: a span ``attempt``
whose parent is the node's delivery (the dispatch's ``traceparent``), current while the
handler runs, so what the handler traces joins the run's trace. Without them it does nothing.
"""

from __future__ import annotations

import contextlib
from typing import Any, ContextManager, Mapping, Optional

try:
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the API is optional
    trace = None  # type: ignore[assignment]

_PROPAGATOR = TraceContextTextMapPropagator() if trace is not None else None


def attempt_span(dispatch: Mapping[str, Any]) -> ContextManager[Optional[Any]]:
    """The attempt's span as a context manager (a no-op one without OpenTelemetry or without
    a ``traceparent``)."""
    traceparent = dispatch.get("traceparent")
    if trace is None or _PROPAGATOR is None or not isinstance(traceparent, str):
        return contextlib.nullcontext()
    parent = _PROPAGATOR.extract({"traceparent": traceparent})
    shard = dispatch.get("shard") or {}
    return trace.get_tracer("carillon_executor").start_as_current_span(
        "attempt",
        context=parent,
        kind=trace.SpanKind.SERVER,
        attributes={
            "carillon.run_id": int(dispatch["run_id"]),
            "carillon.attempt_id": int(dispatch["attempt_id"]),
            "carillon.job": str(dispatch.get("job", "")),
            "carillon.handler": str(dispatch.get("handler", "")),
            "carillon.shard": int(shard.get("index", 0)),
        },
    )


def ended(span: Optional[Any], outcome: str, error: Optional[str]) -> None:
    """Marks the span with the attempt's outcome."""
    if span is None or trace is None:
        return
    span.set_attribute("carillon.outcome", outcome)
    if outcome == "failed":
        span.set_status(trace.Status(trace.StatusCode.ERROR, error))
