"""Admission, capacity, health and graceful shutdown of the gRPC server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rara.executor.client import ExecutorClient, make_job
from rara.executor.server import SERVICE_NAME
from rara.v1 import executor_pb2 as pb
from tests.executor.support import WAIT_S, Executor, StartExecutor, kinds

Events = AsyncGenerator[pb.ExecuteResponse, None]


async def _until_running(client: ExecutorClient, job: pb.Job) -> Events:
    stream = client.execute(job)
    async with asyncio.timeout(WAIT_S):
        async for event in stream:
            if event.HasField("running"):
                return stream
    raise AssertionError("stream ended before running")


async def test_capabilities(executor: Executor) -> None:
    caps = await executor.client.get_capabilities()
    by_name = {c.name: c for c in caps.capabilities}
    assert by_name["test.echo"].major == 1
    assert (by_name["t.gpu"].major, by_name["t.gpu"].resources.gpu) == (2, 1)
    assert by_name["t.gpu"].resources.memory_bytes == 8 << 30
    assert (caps.max_concurrency, caps.active_jobs) == (4, 0)
    assert caps.executor_version.startswith("rara-executor/")


async def test_full_executor_answers_resource_exhausted(start_executor: StartExecutor) -> None:
    ex = await start_executor(max_concurrency=2)
    streams = [
        await _until_running(
            ex.client,
            make_job(capability="test.sleep@1", idempotency_key=f"k{i}", payload={"seconds": 60}),
        )
        for i in range(2)
    ]
    extra = ex.client.execute(make_job(capability="test.echo@1", idempotency_key="extra"))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async with asyncio.timeout(WAIT_S):
            await anext(extra)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "2 of 2 job slots busy" in (err.value.details() or "")
    # An incompatible job is still answered with its Failed event, not the capacity error.
    events = [e async for e in ex.client.execute(make_job(capability="x@1", idempotency_key="x"))]
    assert kinds(events) == ["failed"]
    for s in streams:
        await s.aclose()
    async with asyncio.timeout(WAIT_S):
        await ex.server.servicer.wait_idle()
    events = [
        e
        async for e in ex.client.execute(
            make_job(capability="test.echo@1", idempotency_key="after")
        )
    ]
    assert kinds(events)[-1] == "succeeded", "slots are free again"


async def test_same_attempt_twice_is_refused(executor: Executor) -> None:
    job = make_job(capability="test.sleep@1", idempotency_key="k", payload={"seconds": 60})
    first = await _until_running(executor.client, job)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async with asyncio.timeout(WAIT_S):
            await anext(executor.client.execute(job))
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
    await first.aclose()


async def _health(address: str) -> int:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        # No token: health checks are exempt so kubelet probes work.
        reply = await stub.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=5)
        return int(reply.status)


async def test_graceful_stop_lets_jobs_finish_and_refuses_new_ones(
    start_executor: StartExecutor,
) -> None:
    ex = await start_executor()
    assert await _health(ex.address) == health_pb2.HealthCheckResponse.SERVING
    stream = await _until_running(
        ex.client,
        make_job(
            capability="test.sleep@1", idempotency_key="k", payload={"seconds": 0.5, "steps": 5}
        ),
    )
    stopping = asyncio.create_task(ex.server.stop(grace=WAIT_S))
    async with asyncio.timeout(WAIT_S):
        await ex.server.servicer.draining.wait()
    assert await _health(ex.address) == health_pb2.HealthCheckResponse.NOT_SERVING
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await anext(ex.client.execute(make_job(capability="test.echo@1", idempotency_key="n")))
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    async with asyncio.timeout(WAIT_S):
        rest = [e async for e in stream]
        await stopping
    assert kinds(rest)[-1] == "succeeded", "a job that fits in the grace period completes"


async def test_stop_after_grace_fails_jobs_retryably(start_executor: StartExecutor) -> None:
    ex = await start_executor(cancel_grace=0.2)
    stream = await _until_running(
        ex.client, make_job(capability="test.hang@1", idempotency_key="k")
    )
    async with asyncio.timeout(WAIT_S):
        stopping = asyncio.create_task(ex.server.stop(grace=0.2))
        rest = [e async for e in stream]
        await stopping
    error = rest[-1].failed.error
    assert (error.code, error.retryable) == (pb.ERROR_CODE_UNAVAILABLE, True)


async def test_create_server_validates(start_executor: StartExecutor) -> None:
    with pytest.raises(ValueError, match="max_concurrency"):
        await start_executor(max_concurrency=0)
