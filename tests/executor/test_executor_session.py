"""Many jobs on one Session stream, over real gRPC: each job's events reach it alone, a
cancel or a refusal touches one job, a slow reader of one job holds back no other, and an
executor killed mid-session fails every job on it the way a broken Execute call does."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from rara.executor.client import ExecutorClient, make_job
from rara.executor.conformance_probe import assert_well_formed
from rara.v1 import executor_pb2 as pb
from tests.executor.support import BIG_WAIT_S, TOKEN, WAIT_S, StartExecutor, collect, kinds
from tests.support.executors import executor_process, free_address


async def _until_running(events: object) -> None:
    async with asyncio.timeout(WAIT_S):
        async for event in events:  # type: ignore[attr-defined]
            if event.HasField("running"):
                return
    raise AssertionError("the job ended before running")


async def _active(client: ExecutorClient, n: int) -> None:
    async with asyncio.timeout(WAIT_S):
        while True:
            if (await client.get_capabilities()).active_jobs == n:
                return
            await asyncio.sleep(0.01)


async def _to_the_end(events: AsyncIterator[pb.ExecuteResponse]) -> None:
    async with asyncio.timeout(WAIT_S):
        async for _ in events:
            pass


async def test_the_executor_advertises_sessions(start_executor: StartExecutor) -> None:
    ex = await start_executor()
    assert list((await ex.client.get_capabilities()).protocols) == ["session"]


async def test_many_jobs_share_one_session_and_each_gets_its_own_events(
    start_executor: StartExecutor,
) -> None:
    ex = await start_executor(max_concurrency=64)
    ex.client.protocol = "session"
    jobs = [
        make_job(capability="test.echo@1", idempotency_key=f"k{i}", payload={"i": i}, step_id=i)
        for i in range(200)
    ]
    session = ex.client.session()
    sem = asyncio.Semaphore(64)

    async def one(job: pb.Job) -> list[pb.ExecuteResponse]:
        async with sem:
            return await collect(ex.client, job)

    results = await asyncio.gather(*(one(j) for j in jobs))
    for i, events in enumerate(results):
        assert_well_formed(events)
        assert kinds(events) == ["accepted", "running", "succeeded"]
        result = json.loads(events[-1].succeeded.result_json)
        assert (result["input"], result["idempotency_key"]) == ({"i": i}, f"k{i}")
    assert ex.client.session() is session, "every job went on the one session"
    assert session.jobs == 0


async def test_cancelling_one_job_stops_only_it(start_executor: StartExecutor) -> None:
    ex = await start_executor()
    ex.client.protocol = "session"
    kept = ex.client.execute(make_job(capability="test.hang@1", idempotency_key="kept"))
    gone = ex.client.execute(make_job(capability="test.hang@1", idempotency_key="gone"))
    await asyncio.gather(_until_running(kept), _until_running(gone))
    await gone.aclose()  # leaving a job's events sends a cancel for it on the session
    await _active(ex.client, 1)
    echo = await collect(ex.client, make_job(capability="test.echo@1", idempotency_key="e"))
    assert kinds(echo)[-1] == "succeeded", "the session goes on"
    assert await ex.client.cancel("kept", 1, "test over")
    async with asyncio.timeout(WAIT_S):
        rest = [e async for e in kept]
    assert kinds(rest)[-1] == "cancelled"
    assert rest[-1].cancelled.reason == "test over"


@pytest.mark.parametrize("protocol", ["execute", "session"])
async def test_rpc_timeout_cancels_the_job_on_either_protocol(
    start_executor: StartExecutor, protocol: str
) -> None:
    """A caller's deadline holds per job on a Session too, whose stream has none: the job
    fails with DEADLINE_EXCEEDED, the executor stops it, and the session goes on."""
    ex = await start_executor()
    ex.client.protocol = protocol  # type: ignore[assignment]
    job = make_job(capability="test.hang@1", idempotency_key="late")
    with pytest.raises(grpc.aio.AioRpcError) as late:
        await _to_the_end(ex.client.execute(job, rpc_timeout=0.3))
    assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    await _active(ex.client, 0)
    echo = await collect(ex.client, make_job(capability="test.echo@1", idempotency_key="next"))
    assert kinds(echo) == ["accepted", "running", "succeeded"]


async def test_a_full_executor_refuses_one_job_not_the_session(
    start_executor: StartExecutor,
) -> None:
    ex = await start_executor(max_concurrency=2)
    ex.client.protocol = "session"
    hangs = [
        ex.client.execute(make_job(capability="test.hang@1", idempotency_key=f"h{i}"))
        for i in range(2)
    ]
    await asyncio.gather(*(_until_running(h) for h in hangs))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await collect(ex.client, make_job(capability="test.echo@1", idempotency_key="extra"))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "2 of 2 job slots busy" in (refused.value.details() or "")
    # The same attempt twice is refused as Execute refuses it, and only that job.
    with pytest.raises(grpc.aio.AioRpcError) as twice:
        await collect(ex.client, make_job(capability="test.hang@1", idempotency_key="h0"))
    assert twice.value.code() == grpc.StatusCode.ALREADY_EXISTS
    await hangs[0].aclose()
    await _active(ex.client, 1)
    echo = await collect(ex.client, make_job(capability="test.echo@1", idempotency_key="later"))
    assert kinds(echo) == ["accepted", "running", "succeeded"]
    await hangs[1].aclose()
    await _active(ex.client, 0)


async def test_a_job_nobody_reads_holds_back_no_other(start_executor: StartExecutor) -> None:
    """One job's events pile up unread (its consumer is busy) while others run through."""
    ex = await start_executor(max_concurrency=8)
    ex.client.protocol = "session"
    slow = ex.client.execute(
        make_job(
            capability="test.sleep@1",
            idempotency_key="slow",
            payload={"seconds": 0.5, "steps": 50},
        )
    )
    await _until_running(slow)  # then not read again until the others are done
    for i in range(20):
        events = await collect(
            ex.client, make_job(capability="test.echo@1", idempotency_key=f"f{i}")
        )
        assert kinds(events)[-1] == "succeeded"
    async with asyncio.timeout(WAIT_S):
        rest = [e async for e in slow]
    assert kinds(rest)[-1] == "succeeded"
    assert set(kinds(rest)[:-1]) <= {"progress"}


async def test_a_malformed_job_fails_alone(start_executor: StartExecutor) -> None:
    ex = await start_executor()
    ex.client.protocol = "session"
    bad = make_job(capability="test.echo@1", idempotency_key="bad")
    bad.payload_json = b"[1, 2]"
    good = make_job(capability="test.echo@1", idempotency_key="good")
    bad_events, good_events = await asyncio.gather(
        collect(ex.client, bad), collect(ex.client, good)
    )
    assert kinds(bad_events) == ["failed"]
    assert not bad_events[0].failed.error.retryable
    assert bad_events[0].failed.error.code == pb.ERROR_CODE_INVALID_ARGUMENT
    assert kinds(good_events) == ["accepted", "running", "succeeded"]


async def test_sigkill_mid_session_fails_every_job_and_the_next_session_works(
    tmp_path: Path,
) -> None:
    """The executor process dies with jobs on its session: each job's events end in the
    status a broken Execute call ends in (UNAVAILABLE), and once an executor answers there
    again the client opens a new session for the next job."""
    address = free_address()
    async with ExecutorClient(address) as client:
        client.protocol = "session"
        with executor_process(address, tmp_path) as proc:
            await _wait_serving(client)
            jobs = [
                client.execute(make_job(capability="test.hang@1", idempotency_key=f"h{i}"))
                for i in range(3)
            ]
            await asyncio.gather(*(_until_running(j) for j in jobs))
            first = client.session()
            proc.send_signal(signal.SIGKILL)
            for job in jobs:
                with pytest.raises(grpc.aio.AioRpcError) as broken:
                    await _to_the_end(job)
                assert broken.value.code() == grpc.StatusCode.UNAVAILABLE
            assert first.broken is not None
        with executor_process(address, tmp_path):
            await _wait_serving(client)
            events = await collect(client, make_job(capability="test.echo@1", idempotency_key="n"))
            assert kinds(events) == ["accepted", "running", "succeeded"]
            assert client.session() is not first


async def _wait_serving(client: ExecutorClient) -> None:
    async with asyncio.timeout(30):
        while True:
            try:
                await client.get_capabilities(rpc_timeout=1.0)
                return
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.05)


async def test_an_idle_session_does_not_hold_up_shutdown(tmp_path: Path) -> None:
    """SIGTERM drains: a session with no job on it ends at once (the process exits well
    within its 30 s grace), as an executor with no Execute call open would."""
    address = free_address()
    async with ExecutorClient(address) as client:
        client.protocol = "session"
        with executor_process(address, tmp_path, grace=30) as proc:
            await _wait_serving(client)
            await collect(client, make_job(capability="test.echo@1", idempotency_key="x"))
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            await asyncio.to_thread(proc.wait, 10)
        assert time.monotonic() - started < 5


async def test_a_session_without_the_token_is_refused(start_executor: StartExecutor) -> None:
    ex = await start_executor()
    for token in (None, TOKEN + "-wrong"):
        async with ExecutorClient(ex.address, token=token) as client:
            client.protocol = "session"
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await collect(client, make_job(capability="test.echo@1", idempotency_key="u"))
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert (await ex.client.get_capabilities()).active_jobs == 0


async def test_big_events_go_in_messages_of_their_own(start_executor: StartExecutor) -> None:
    """Two 9 MB results at once: together they would pass the 16 MB wire limit, so each goes
    in its own message (and so does each job on the way in)."""
    ex = await start_executor()
    ex.client.protocol = "session"
    blobs = ["a" * (9 << 20), "b" * (9 << 20)]
    results = await asyncio.gather(
        *(
            collect(
                ex.client,
                make_job(capability="test.echo@1", idempotency_key=f"big{i}", payload={"b": b}),
                BIG_WAIT_S,
            )
            for i, b in enumerate(blobs)
        )
    )
    for blob, events in zip(blobs, results, strict=True):
        assert kinds(events) == ["accepted", "running", "succeeded"]
        assert json.loads(events[-1].succeeded.result_json)["input"] == {"b": blob}


async def test_a_verdict_frees_the_slot_before_the_worker_hears_it(tmp_path: Path) -> None:
    """As many chains as the executor (a process, 16 slots) has slots, each sending its next
    job the moment it read the last one's verdict: a slot still held then (freed only once the
    job's task was collected) refused the job as full."""
    address = free_address()
    async with ExecutorClient(address) as client:
        client.protocol = "session"
        with executor_process(address, tmp_path):
            await _wait_serving(client)
            assert (await client.get_capabilities()).max_concurrency == 16

            async def chain(c: int) -> None:
                for i in range(60):
                    job = make_job(capability="test.echo@1", idempotency_key=f"c{c}-{i}")
                    assert kinds(await collect(client, job))[-1] == "succeeded"

            await asyncio.gather(*(chain(c) for c in range(16)))
