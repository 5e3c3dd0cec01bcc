"""Trace context across worker and executor: W3C ``traceparent`` in gRPC metadata or the job.

Optional by design: rara does not depend on OpenTelemetry. When ``opentelemetry-api`` is
installed (and the process configured a tracer provider, e.g. with ``opentelemetry-sdk``),
``ExecutorClient`` sends the caller's current trace context with every job (in an Execute
call's metadata; in the job itself, ``Job.trace_context``, on a Session, whose metadata is the
stream's) and the executor runs the job inside a span that continues it. Without it, every
function here is a no-op costing one ``is None`` check.

The module is imported dynamically so type checking and imports work whether or not
OpenTelemetry is installed.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Iterable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def _load() -> tuple[Any, Any] | None:
    try:
        return importlib.import_module("opentelemetry.propagate"), importlib.import_module(
            "opentelemetry.trace"
        )
    except ImportError:
        return None


_otel = _load()


def enabled() -> bool:
    return _otel is not None


def outgoing_metadata() -> tuple[tuple[str, str], ...]:
    """gRPC metadata carrying the current trace context (``traceparent``, ``tracestate``)."""
    if _otel is None:
        return ()
    carrier: dict[str, str] = {}
    _otel[0].inject(carrier)
    # gRPC metadata keys must be lower case.
    return tuple((key.lower(), value) for key, value in carrier.items())


async def traced(
    awaitable: Awaitable[T],
    name: str,
    metadata: Iterable[tuple[str, Any]] | None,
    attributes: Mapping[str, str | int] | None = None,
) -> T:
    """Await ``awaitable`` inside a server span continuing the trace in ``metadata``."""
    if _otel is None:
        return await awaitable
    propagate, trace = _otel
    carrier = {key: value for key, value in metadata or () if isinstance(value, str)}
    parent = propagate.extract(carrier)
    tracer = trace.get_tracer("rara")
    with tracer.start_as_current_span(
        name, context=parent, kind=trace.SpanKind.SERVER, attributes=dict(attributes or {})
    ):
        return await awaitable
