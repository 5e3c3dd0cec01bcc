"""``python -m rara.executor.main`` as a real process: startup checks and SIGTERM."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rara.executor.client import ExecutorClient, make_job
from rara.executor.server import SERVICE_NAME
from tests.executor.support import TOKEN, WAIT_S, kinds

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
STARTUP_S = 30.0  # a cold interpreter importing grpc and protobuf on a busy CI machine


async def _spawn(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rara.executor.main",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


@pytest.fixture
async def process(tmp_path: Path) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    proc = await _spawn(
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        str(token_file),
        "--plugins",
        "rara.executor.conformance_plugins",
        "--artifact-root",
        str(tmp_path / "artifacts"),
        "--grace",
        "20",
        "--cancel-grace",
        "0.5",
    )
    assert proc.stdout is not None
    address = ""
    async with asyncio.timeout(STARTUP_S):
        while not address:
            line = (await proc.stdout.readline()).decode()
            assert line, f"executor exited early: {(await proc.communicate())[1].decode()}"
            if m := re.search(r"listening on (\S+)$", line.strip()):
                address = m.group(1)
    yield proc, address
    if proc.returncode is None:
        proc.kill()
        await proc.wait()


async def test_sigterm_drains_then_exits_cleanly(
    process: tuple[asyncio.subprocess.Process, str],
) -> None:
    proc, address = process
    async with ExecutorClient(address, token=TOKEN) as client:
        job = make_job(
            capability="test.sleep@1", idempotency_key="k", payload={"seconds": 1.0, "steps": 10}
        )
        stream = client.execute(job)
        async with asyncio.timeout(WAIT_S):
            async for event in stream:
                if event.HasField("running"):
                    break
            async with grpc.aio.insecure_channel(address) as channel:
                health = health_pb2_grpc.HealthStub(channel)
                watch = health.Watch(health_pb2.HealthCheckRequest(service=SERVICE_NAME))
                assert (await anext(aiter(watch))).status == SERVING
                proc.send_signal(signal.SIGTERM)
                # Load balancers learn first, while the job is still running.
                assert (await anext(aiter(watch))).status == NOT_SERVING
                watch.cancel()
            rest = [e async for e in stream]
    assert kinds(rest)[-1] == "succeeded", "the running job finishes within the grace period"
    async with asyncio.timeout(WAIT_S):
        _, stderr = await proc.communicate()
    assert proc.returncode == 0, stderr.decode()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "refusing to start without authentication"),
        (["--insecure-loopback", "--listen", "0.0.0.0:0"], "needs a loopback --listen"),
    ],
)
async def test_refuses_to_start_insecurely(tmp_path: Path, args: list[str], message: str) -> None:
    proc = await _spawn("--artifact-root", str(tmp_path), *args)
    async with asyncio.timeout(STARTUP_S):
        _, stderr = await proc.communicate()
    assert proc.returncode == 2
    assert message in stderr.decode()
