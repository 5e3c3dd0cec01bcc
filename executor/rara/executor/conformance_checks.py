"""The checks ``run_conformance`` runs, in order. Each is ``async def check(probe)``."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncGenerator, Awaitable, Callable
from datetime import UTC, datetime, timedelta

import grpc

from rara.context import Checkpoint
from rara.executor.conformance_probe import Probe, Skip, expect_status, kinds
from rara.executor.wire import make_job
from rara.v1 import executor_pb2 as pb

Check = Callable[[Probe], Awaitable[None]]
Events = AsyncGenerator[pb.ExecuteResponse, None]
CHECKS: list[tuple[str, Check]] = []


def check(fn: Check) -> Check:
    CHECKS.append((fn.__name__.removeprefix("check_"), fn))
    return fn


def _result(event: pb.ExecuteResponse) -> object:
    assert event.HasField("succeeded"), f"expected succeeded, got {event.WhichOneof('event')}"
    return json.loads(event.succeeded.result_json)


async def _refused(probe: Probe, job: pb.Job, code: pb.ErrorCode.ValueType) -> None:
    events = await probe.collect(job)
    assert kinds(events) == ["failed"], f"refused job must get one failed event: {kinds(events)}"
    error = events[0].failed.error
    assert error.code == code, f"expected {pb.ErrorCode.Name(code)}, got {error}"
    assert not error.retryable, "a refused job must not be retryable"
    assert error.message, "the error must say why"


async def _until_running(stream: Events) -> None:
    async for event in stream:
        if event.HasField("running"):
            return
    raise AssertionError("stream ended before running")


@check
async def check_capabilities_listed(probe: Probe) -> None:
    caps = await probe.client.get_capabilities()
    served = {f"{c.name}@{c.major}" for c in caps.capabilities}
    for needed in ("test.echo@1", "test.sleep@1", "test.hang@1", "test.fail@1"):
        assert needed in served, f"{needed} not served (serves {sorted(served)})"
    assert caps.max_concurrency >= 1, "max_concurrency must be reported"


@check
async def check_event_order_and_seq(probe: Probe) -> None:
    job = make_job(
        capability="test.echo@1",
        idempotency_key=probe.key("order"),
        payload={"n": 2**53 + 1},
        attempt=3,
        step_key="echo",
    )
    events = await probe.collect(job)
    assert kinds(events) == ["accepted", "running", "succeeded"], kinds(events)
    result = _result(events[-1])
    assert isinstance(result, dict)
    assert result["input"] == {"n": 2**53 + 1}, f"payload must round-trip exactly: {result}"
    assert (result["attempt"], result["idempotency_key"]) == (3, probe.key("order")), result


@check
async def check_checkpoint_and_resume(probe: Probe) -> None:
    job = make_job(
        capability="test.echo@1",
        idempotency_key=probe.key("ckpt"),
        payload={"checkpoint": {"epoch": 7}},
    )
    events = await probe.collect(job)
    assert kinds(events) == ["accepted", "running", "checkpoint", "succeeded"], kinds(events)
    assert json.loads(events[2].checkpoint.state_json) == {"epoch": 7}
    resumed = make_job(
        capability="test.echo@1",
        idempotency_key=probe.key("ckpt"),
        attempt=2,
        checkpoint=Checkpoint(attempt=1, seq=events[2].seq, state={"epoch": 7}),
    )
    result = _result((await probe.collect(resumed))[-1])
    assert isinstance(result, dict), result
    assert result["resumed_from"] == {"epoch": 7}, result


@check
async def check_artifact_manifest(probe: Probe) -> None:
    text = f"conformance {probe.run_tag}"
    job = make_job(
        capability="test.echo@1", idempotency_key=probe.key("art"), payload={"artifact_text": text}
    )
    manifest = list((await probe.collect(job))[-1].succeeded.artifacts)
    digest = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    assert [(a.name, a.digest, a.size, a.media_type) for a in manifest] == [
        ("echo.txt", digest, len(text), "text/plain")
    ], manifest


@check
async def check_progress(probe: Probe) -> None:
    job = make_job(
        capability="test.sleep@1",
        idempotency_key=probe.key("progress"),
        payload={"seconds": 0.3, "steps": 3},
    )
    events = await probe.collect(job)
    progress = [e.progress for e in events if e.HasField("progress")]
    assert progress, f"expected progress events: {kinds(events)}"
    assert all(0.0 <= p.fraction <= 1.0 for p in progress), progress
    assert progress[-1].fraction == 1.0, f"the latest progress must be sent: {progress[-1]}"


@check
async def check_structured_errors(probe: Probe) -> None:
    for retryable in (True, False):
        job = make_job(
            capability="test.fail@1",
            idempotency_key=probe.key(f"fail{retryable}"),
            payload={"retryable": retryable, "message": "boom"},
        )
        events = await probe.collect(job)
        assert kinds(events) == ["accepted", "running", "failed"], kinds(events)
        error = events[-1].failed.error
        assert error.code == pb.ERROR_CODE_HANDLER_ERROR, error
        assert error.retryable is retryable, error
        assert error.message == "boom", error


@check
async def check_deadline(probe: Probe) -> None:
    deadline = datetime.now(UTC) + timedelta(seconds=0.5)
    job = make_job(
        capability="test.sleep@1",
        idempotency_key=probe.key("deadline"),
        payload={"seconds": 300, "steps": 3000},
        deadline=deadline,
    )
    events = await probe.collect(job)
    error = events[-1].failed.error
    assert error.code == pb.ERROR_CODE_DEADLINE_EXCEEDED, events[-1]
    assert error.retryable, "a deadline failure is retryable"
    assert datetime.now(UTC) - deadline < timedelta(seconds=30), "deadline honoured late"


async def _cancel_after_running(probe: Probe, name: str, capability: str) -> None:
    key = probe.key(name)
    job = make_job(capability=capability, idempotency_key=key, payload={"seconds": 300})
    stream = probe.client.execute(job)
    seen = [e async for e in _take_until_running(stream)]
    assert await probe.client.cancel(key, 1, "conformance"), "Cancel must find the job"
    rest = [e async for e in stream]
    events = seen + rest
    assert kinds(events)[-1] == "cancelled", f"expected cancelled: {kinds(events)}"
    assert events[-1].cancelled.reason, "cancelled should carry the reason"


async def _take_until_running(stream: Events) -> Events:
    async for event in stream:
        yield event
        if event.HasField("running"):
            return


@check
async def check_cancel(probe: Probe) -> None:
    await _cancel_after_running(probe, "cancel", "test.sleep@1")
    assert not await probe.client.cancel(probe.key("never-ran"), 1), "unknown job: found=false"


@check
async def check_cancel_hard_stop(probe: Probe) -> None:
    await _cancel_after_running(probe, "hard", "test.hang@1")


@check
async def check_client_disconnect(probe: Probe) -> None:
    baseline = (await probe.client.get_capabilities()).active_jobs
    job = make_job(
        capability="test.sleep@1",
        idempotency_key=probe.key("disc"),
        payload={"seconds": 300, "steps": 3000},
    )
    stream = probe.client.execute(job)
    await _until_running(stream)
    await probe.wait_active(lambda n: n > baseline)
    await stream.aclose()
    await probe.wait_active(lambda n: n <= baseline)


@check
async def check_unknown_capability(probe: Probe) -> None:
    job = make_job(capability="test.no-such-plugin@1", idempotency_key=probe.key("unknown"))
    await _refused(probe, job, pb.ERROR_CODE_UNKNOWN_CAPABILITY)


@check
async def check_incompatible_version(probe: Probe) -> None:
    job = make_job(capability="test.echo@99", idempotency_key=probe.key("version"))
    await _refused(probe, job, pb.ERROR_CODE_INCOMPATIBLE_VERSION)


@check
async def check_malformed_payload(probe: Probe) -> None:
    for i, bad in enumerate((b"{not json", b"[1, 2]")):
        job = make_job(capability="test.echo@1", idempotency_key=probe.key(f"bad{i}"))
        job.payload_json = bad
        await _refused(probe, job, pb.ERROR_CODE_INVALID_ARGUMENT)


@check
async def check_resource_exhausted(probe: Probe) -> None:
    limit = (await probe.client.get_capabilities()).max_concurrency
    if limit > 256:
        raise Skip(f"max_concurrency {limit} is too many jobs to fill for a check")
    keys = [probe.key(f"full{i}") for i in range(limit)]
    streams = [
        probe.client.execute(
            make_job(capability="test.sleep@1", idempotency_key=k, payload={"seconds": 300})
        )
        for k in keys
    ]
    try:
        await asyncio.gather(*(_until_running(s) for s in streams))
        extra = make_job(capability="test.echo@1", idempotency_key=probe.key("extra"))
        await expect_status(
            probe.collect(extra), grpc.StatusCode.RESOURCE_EXHAUSTED, "Execute on a full executor"
        )
    finally:
        for s in streams:
            await s.aclose()
    await probe.wait_active(lambda n: n == 0)


@check
async def check_unauthenticated(probe: Probe) -> None:
    if probe.token is None:
        raise Skip("endpoint runs without a token")
    for token in (None, probe.token + "-wrong"):
        async with probe.other_client(token) as client:
            await expect_status(
                client.get_capabilities(),
                grpc.StatusCode.UNAUTHENTICATED,
                f"GetCapabilities with token={token!r}",
            )
            job = make_job(capability="test.echo@1", idempotency_key=probe.key("unauth"))
            events = client.execute(job)
            await expect_status(
                events.__anext__(), grpc.StatusCode.UNAUTHENTICATED, "Execute without a valid token"
            )
