"""One job over real gRPC: lifecycle, reports, errors, deadline, cancel and disconnect."""

from __future__ import annotations

import asyncio
import hashlib
import json
from datetime import UTC, datetime, timedelta

from rara.executor.client import make_job
from rara.executor.conformance_probe import assert_well_formed
from rara.v1 import executor_pb2 as pb
from tests.executor.support import WAIT_S, Executor, StartExecutor, collect, kinds


async def test_echo_lifecycle_and_seq(executor: Executor) -> None:
    job = make_job(capability="test.echo@1", idempotency_key="k", payload={"x": [1, "two"]})
    events = await collect(executor.client, job)
    assert_well_formed(events)
    assert kinds(events) == ["accepted", "running", "succeeded"]
    assert [e.seq for e in events] == [1, 2, 3]
    assert json.loads(events[-1].succeeded.result_json)["input"] == {"x": [1, "two"]}


async def test_artifacts_go_to_the_shared_store(executor: Executor) -> None:
    job = make_job(capability="test.echo@1", idempotency_key="k", payload={"artifact_text": "hi"})
    [entry] = (await collect(executor.client, job))[-1].succeeded.artifacts
    assert entry.digest == "sha256:" + hashlib.sha256(b"hi").hexdigest()
    assert (entry.name, entry.size, entry.media_type) == ("echo.txt", 2, "text/plain")
    assert executor.store.get_bytes(entry.digest) == b"hi"


async def test_inputs_reach_the_plugin(executor: Executor) -> None:
    ref = executor.store.put_bytes(b"corpus")
    job = make_job(capability="test.echo@1", idempotency_key="k", inputs={"collect/corpus": ref})
    result = json.loads((await collect(executor.client, job))[-1].succeeded.result_json)
    assert result["inputs"] == {"collect/corpus": ref.digest, "corpus": ref.digest}


async def test_checkpoints_from_a_thread_come_in_order(executor: Executor) -> None:
    events = await collect(
        executor.client, make_job(capability="t.ckpt-thread@1", idempotency_key="k")
    )
    assert_well_formed(events)
    assert kinds(events) == [
        "accepted",
        "running",
        "checkpoint",
        "progress",
        "checkpoint",
        "succeeded",
    ]
    assert [json.loads(e.checkpoint.state_json) for e in events if e.HasField("checkpoint")] == [
        {"step": 1},
        {"step": 2},
    ]


async def test_progress_flood_from_a_thread_is_bounded_and_ends_on_the_latest(
    executor: Executor,
) -> None:
    count = 100_000
    job = make_job(capability="test.flood@1", idempotency_key="k", payload={"count": count})
    events = await collect(executor.client, job)
    assert_well_formed(events)
    progress = [e.progress for e in events if e.HasField("progress")]
    seconds = json.loads(events[-1].succeeded.result_json)["seconds"]
    # At most one progress event per 50 ms interval (plus the first and the final flush).
    assert 1 <= len(progress) <= seconds / 0.05 + 3, (len(progress), seconds)
    assert (progress[-1].fraction, progress[-1].message) == (1.0, str(count))


async def test_progress_flood_on_the_loop_sends_only_the_latest(executor: Executor) -> None:
    events = await collect(
        executor.client, make_job(capability="t.flood-loop@1", idempotency_key="k")
    )
    assert kinds(events) == ["accepted", "running", "progress", "succeeded"]
    assert events[2].progress.message == "9999"


async def test_structured_errors(executor: Executor) -> None:
    cases = {
        "t.raise-plain@1": (pb.ERROR_CODE_HANDLER_ERROR, True, "plain failure"),
        "t.raise-permanent@1": (pb.ERROR_CODE_HANDLER_ERROR, False, "permanent failure"),
        "t.bad-result@1": (pb.ERROR_CODE_HANDLER_ERROR, False, "result is not JSON"),
        "t.not-outcome@1": (pb.ERROR_CODE_HANDLER_ERROR, False, "expected StepOutcome"),
    }
    for capability, (code, retryable, message) in cases.items():
        events = await collect(
            executor.client, make_job(capability=capability, idempotency_key=capability)
        )
        assert kinds(events) == ["accepted", "running", "failed"], capability
        error = events[-1].failed.error
        assert (error.code, error.retryable) == (code, retryable), capability
        assert message in error.message, (capability, error.message)


async def test_refusals_come_before_any_work(executor: Executor) -> None:
    for capability, code in [
        ("nope@1", pb.ERROR_CODE_UNKNOWN_CAPABILITY),
        ("t.gpu@1", pb.ERROR_CODE_INCOMPATIBLE_VERSION),
        ("no-major", pb.ERROR_CODE_INVALID_ARGUMENT),
    ]:
        events = await collect(
            executor.client, make_job(capability=capability, idempotency_key="k")
        )
        assert kinds(events) == ["failed"], capability
        assert events[0].seq == 1
        assert events[0].failed.error.code == code
        assert not events[0].failed.error.retryable


async def test_deadline_fails_retryably(executor: Executor) -> None:
    deadline = datetime.now(UTC) + timedelta(milliseconds=300)
    job = make_job(
        capability="test.sleep@1",
        idempotency_key="k",
        payload={"seconds": 60, "steps": 600},
        deadline=deadline,
    )
    events = await collect(executor.client, job)
    assert_well_formed(events)
    error = events[-1].failed.error
    assert (error.code, error.retryable) == (pb.ERROR_CODE_DEADLINE_EXCEEDED, True)
    # A deadline already past is refused at once, without starting the plugin.
    late = make_job(
        capability="test.echo@1",
        idempotency_key="late",
        deadline=datetime.now(UTC) - timedelta(seconds=1),
    )
    events = await collect(executor.client, late)
    assert kinds(events)[-1] == "failed"
    assert events[-1].failed.error.code == pb.ERROR_CODE_DEADLINE_EXCEEDED


async def test_cancel_is_cooperative_first(executor: Executor) -> None:
    job = make_job(capability="test.sleep@1", idempotency_key="k", payload={"seconds": 60})
    stream = executor.client.execute(job)
    async with asyncio.timeout(WAIT_S):
        assert (await anext(stream)).HasField("accepted")
        assert (await anext(stream)).HasField("running")
        assert await executor.client.cancel("k", 1, "user asked")
        rest = [e async for e in stream]
    assert kinds(rest)[-1] == "cancelled"
    assert rest[-1].cancelled.reason == "user asked"
    assert not await executor.client.cancel("k", 1), "the job is gone once it ended"


async def test_cancel_hard_stops_a_deaf_plugin(start_executor: StartExecutor) -> None:
    executor = await start_executor(cancel_grace=0.2)
    for capability, payload in [
        ("test.hang@1", {}),
        ("test.sleep@1", {"seconds": 5, "ignore_cancel": True}),
    ]:
        stream = executor.client.execute(
            make_job(capability=capability, idempotency_key="k", payload=payload)
        )
        async with asyncio.timeout(WAIT_S):
            async for event in stream:
                if event.HasField("running"):
                    break
            assert await executor.client.cancel("k", 1)
            rest = [e async for e in stream]
        assert kinds(rest)[-1] == "cancelled", capability
        caps = await executor.client.get_capabilities()
        assert caps.active_jobs == 0, capability


async def test_client_disconnect_cancels_the_job(executor: Executor) -> None:
    job = make_job(capability="test.sleep@1", idempotency_key="k", payload={"seconds": 60})
    stream = executor.client.execute(job)
    async with asyncio.timeout(WAIT_S):
        async for event in stream:
            if event.HasField("running"):
                break
        assert (await executor.client.get_capabilities()).active_jobs == 1
        await stream.aclose()
        await executor.server.servicer.wait_idle()
    assert (await executor.client.get_capabilities()).active_jobs == 0
