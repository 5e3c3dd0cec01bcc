"""A Session's bounds, on both executors as real processes on loopback: a worker that sends
jobs and never reads the answers meets gRPC flow control (the executor stops reading its
requests), not an executor whose memory grows with every answer it holds; nothing is lost
once it reads again; and a message carrying more jobs than the limit ends the session with
INVALID_ARGUMENT naming it, while the client splits its batches so it never sends one."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest

from rara.executor import limits
from rara.executor.client import ExecutorClient, make_job
from rara.v1 import executor_pb2 as pb
from rara.v1 import executor_pb2_grpc as pb_grpc
from tests.executor.support import TOKEN, WAIT_S
from tests.executor.test_go_executor import _listening, build_go_executor, running
from tests.executor.test_go_executor import pytestmark as go_marks

METADATA = (("authorization", f"Bearer {TOKEN}"),)
UNSERVED = "nothing.here@1"  # a capability served nowhere: one failed event, no work

# The flood: 1 GiB of answers if the executor held them all (held, both executors grew from
# tens of MiB to about 1.1 GiB). Each job's one answer carries its 64 KiB idempotency key.
KEY_BYTES = 64 * 1024
FLOOD_JOBS = 16 * 1024
JOBS_PER_MESSAGE = 16
STALL_S = 3.0  # a write unfinished this long: the executor stopped reading
RSS_LIMIT_MIB = 200


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for process {pid}")


@contextmanager
def _python_executor(tmp: Path) -> Iterator[tuple[str, int]]:
    """``rara executor`` with the conformance plugins, as a process on loopback."""
    (tmp / "token").write_text(TOKEN)
    argv = [
        sys.executable,
        "-m",
        "rara.executor.main",
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        str(tmp / "token"),
        "--plugins",
        "rara.executor.conformance_plugins",
        "--artifact-root",
        str(tmp / "artifacts"),
        "--max-concurrency",
        "4",
        "--grace",
        "2",
    ]
    with (
        open(tmp / "executor.log", "w") as log,
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True) as proc,
    ):
        try:
            yield _listening(proc), proc.pid
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(params=["python", pytest.param("go", marks=go_marks)])
def executor(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, int]]:
    """(address, pid) of an executor process of either kind, token TOKEN."""
    if request.param == "python":
        with _python_executor(tmp_path) as started:
            yield started
    else:
        with running(build_go_executor(), tmp_path) as (address, proc):
            yield address, proc.pid


def _channel(address: str) -> grpc.aio.Channel:
    # No BDP probing: the client's receive window stays at its small default, so what the
    # executor sends and nobody reads waits in the executor, as it would in a stuck worker.
    return grpc.aio.insecure_channel(
        address, options=[*limits.CLIENT_OPTIONS, ("grpc.http2.bdp_probe", 0)]
    )


def _unserved(key: str) -> pb.Job:
    return make_job(capability=UNSERVED, idempotency_key=key)


async def test_a_session_whose_answers_are_never_read_stays_bounded(
    executor: tuple[str, int],
) -> None:
    address, pid = executor
    pad = "." * KEY_BYTES
    async with _channel(address) as channel:
        call = pb_grpc.ExecutorServiceStub(channel).Session(metadata=METADATA)
        sent, peak = 0, 0.0
        write: asyncio.Task[None] | None = None
        async with asyncio.timeout(120):
            while sent < FLOOD_JOBS:
                request = pb.SessionRequest(
                    jobs=[
                        _unserved(f"k{sent + i}.{pad}")
                        for i in range(min(JOBS_PER_MESSAGE, FLOOD_JOBS - sent))
                    ]
                )
                write = asyncio.create_task(call.write(request))
                done, _ = await asyncio.wait({write}, timeout=STALL_S)
                peak = max(peak, _rss_mib(pid))
                if not done:
                    break  # the executor stopped reading: the write waits for flow control
                write.result()
                write = None
                sent += len(request.jobs)
        peak = max(peak, _rss_mib(pid))
        assert peak < RSS_LIMIT_MIB, f"executor RSS reached {peak:.0f} MiB"
        assert write is not None, f"the executor read all {sent} jobs with no answer read"
        assert sent < FLOOD_JOBS // 4, f"the executor read {sent} jobs with no answer read"
        # Nothing was lost: read, and every job's one answer comes, the stalled message's too.
        pending = sent + JOBS_PER_MESSAGE
        answered: set[str] = set()
        async with asyncio.timeout(60):
            while len(answered) < pending:
                response = await call.read()
                assert response is not grpc.aio.EOF
                for tagged in response.events:
                    assert tagged.event.failed.error.code == pb.ERROR_CODE_UNKNOWN_CAPABILITY
                    answered.add(tagged.idempotency_key.split(".")[0])
            await write
            await call.done_writing()
            assert await call.read() is grpc.aio.EOF
        assert answered == {f"k{i}" for i in range(pending)}
        assert await call.code() == grpc.StatusCode.OK


async def test_a_session_message_over_the_job_limit_ends_the_session(
    executor: tuple[str, int],
) -> None:
    address, _ = executor
    cap = limits.MAX_SESSION_JOBS_PER_MESSAGE
    async with _channel(address) as channel:
        call = pb_grpc.ExecutorServiceStub(channel).Session(metadata=METADATA)
        async with asyncio.timeout(WAIT_S * 3):
            await call.write(pb.SessionRequest(jobs=[_unserved(f"a{i}") for i in range(cap)]))
            answered = 0
            while answered < cap:  # at the limit: served
                response = await call.read()
                assert response is not grpc.aio.EOF
                answered += len(response.events)
            await call.write(pb.SessionRequest(jobs=[_unserved(f"b{i}") for i in range(cap + 1)]))
            with contextlib.suppress(grpc.aio.AioRpcError):
                while (response := await call.read()) is not grpc.aio.EOF:
                    assert not response.events, response  # none of the refused message's
            code, details = await call.code(), await call.details()
    assert code == grpc.StatusCode.INVALID_ARGUMENT, details
    assert f"carries {cap + 1} jobs" in details, details
    assert f"limit is {cap} jobs per message" in details, details


async def test_the_client_splits_a_batch_at_the_job_limit(executor: tuple[str, int]) -> None:
    """More jobs at once than one message may carry: the session's writer sends them in
    several, and each gets its answer."""
    address, _ = executor
    count = limits.MAX_SESSION_JOBS_PER_MESSAGE * 2 + 7
    async with ExecutorClient(address, token=TOKEN) as client:
        client.protocol = "session"
        session = client.session()

        async def one(i: int) -> str:
            events = [e async for e in session.run(_unserved(f"s{i}"))]
            return str(events[-1].WhichOneof("event"))

        async with asyncio.timeout(WAIT_S * 6):
            outcomes = await asyncio.gather(*(one(i) for i in range(count)))
    assert outcomes == ["failed"] * count
