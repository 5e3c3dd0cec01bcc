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


async def test_a_session_job_carries_its_own_trace_context(
    executor: Executor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Session's metadata is the stream's: each job's span must continue the trace of the
    attempt that sent it, so the context travels in the job. Two jobs sent from two traces
    on one session each reach the executor's span with their own."""
    current = {"traceparent": ""}
    monkeypatch.setattr(
        tracing, "outgoing_metadata", lambda: (("traceparent", current["traceparent"]),)
    )
    continued: dict[str, dict[str, str]] = {}

    async def traced(awaitable: Any, name: str, metadata: Any, attributes: Any = None) -> Any:
        carrier = {k: v for k, v in metadata or () if isinstance(v, str)}
        continued[attributes["rara.step_key"]] = carrier
        return await awaitable

    monkeypatch.setattr(tracing, "traced", traced)
    executor.client.protocol = "session"
    parents = {
        "a": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "b": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    }
    for key, parent in parents.items():
        current["traceparent"] = parent
        job = make_job(capability="test.echo@1", idempotency_key=key, step_key=key)
        assert kinds(await collect(executor.client, job))[-1] == "succeeded"
    assert executor.client.session().jobs == 0  # both went over the one session
    assert {key: carrier["traceparent"] for key, carrier in continued.items()} == parents
    assert all("authorization" not in carrier for carrier in continued.values())
