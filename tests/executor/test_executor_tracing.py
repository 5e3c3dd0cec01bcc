"""Trace context from the caller to the executor's job span (only with OpenTelemetry)."""

from __future__ import annotations

from typing import Any

import pytest

from rara import tracing
from rara.executor.client import make_job
from tests.executor.support import Executor, collect, kinds


@pytest.mark.skipif(tracing.enabled(), reason="OpenTelemetry is installed here")
async def test_without_opentelemetry_tracing_is_a_no_op(executor: Executor) -> None:
    assert tracing.outgoing_metadata() == ()

    async def answer() -> int:
        return 42

    assert await tracing.traced(answer(), "x", [("traceparent", "00-bad")]) == 42
    events = await collect(executor.client, make_job(capability="test.echo@1", idempotency_key="k"))
    assert kinds(events)[-1] == "succeeded"


async def test_the_job_span_continues_the_callers_trace(executor: Executor) -> None:
    sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
    export = pytest.importorskip("opentelemetry.sdk.trace.export")
    in_memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")
    from opentelemetry import trace

    exporter: Any = in_memory.InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(export.SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    # The global provider can be set once per process: use it if this test set it.
    trace.set_tracer_provider(provider)
    if trace.get_tracer_provider() is not provider:
        pytest.skip("another tracer provider is installed globally")
    with tracer.start_as_current_span("worker.attempt") as parent:
        assert dict(tracing.outgoing_metadata())["traceparent"]
        events = await collect(
            executor.client, make_job(capability="test.echo@1", idempotency_key="k", run_id=7)
        )
    assert kinds(events)[-1] == "succeeded"
    spans = {s.name: s for s in exporter.get_finished_spans()}
    job = spans["rara.executor.job"]
    assert job.context.trace_id == parent.get_span_context().trace_id
    assert job.parent is not None
    assert job.parent.span_id == parent.get_span_context().span_id
    assert job.attributes["rara.run_id"] == 7
