"""Executor metrics, scraped over HTTP from a real executor process (``--metrics-port``)."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rara.executor.client import ExecutorClient, make_job
from tests.executor.support import TOKEN, WAIT_S, kinds

STARTUP_S = 30.0  # a cold interpreter importing grpc and protobuf on a busy CI machine


@pytest.fixture
async def process(tmp_path: Path) -> AsyncIterator[tuple[asyncio.subprocess.Process, str, str]]:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rara.executor.main",
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        str(token_file),
        "--plugins",
        "rara.executor.conformance_plugins",
        "--artifact-root",
        str(tmp_path / "artifacts"),
        "--metrics-port",
        "0",
        "--grace",
        "5",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    address = metrics = ""
    async with asyncio.timeout(STARTUP_S):
        while not (address and metrics):
            line = (await proc.stdout.readline()).decode().strip()
            assert line, f"executor exited early: {(await proc.communicate())[1].decode()}"
            if m := re.search(r"listening on (\S+)$", line):
                address = m.group(1)
            if m := re.search(r"metrics on port (\d+)$", line):
                metrics = f"http://127.0.0.1:{m.group(1)}"
    yield proc, address, metrics
    if proc.returncode is None:
        proc.kill()
        await proc.wait()


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=WAIT_S) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_metrics_over_http(process: tuple[asyncio.subprocess.Process, str, str]) -> None:
    proc, address, base = process
    assert await asyncio.to_thread(_get, base + "/healthz") == (200, "ok\n")
    assert await asyncio.to_thread(_get, base + "/readyz") == (200, "ready\n")
    async with ExecutorClient(address, token=TOKEN) as client, asyncio.timeout(WAIT_S):
        for i in range(2):
            events = [
                e
                async for e in client.execute(
                    make_job(capability="test.echo@1", idempotency_key=f"k{i}")
                )
            ]
            assert kinds(events)[-1] == "succeeded"
        for capability in ("made.up@1", "test.echo@9"):
            events = [
                e
                async for e in client.execute(
                    make_job(capability=capability, idempotency_key="bad")
                )
            ]
            assert kinds(events) == ["failed"]
        # A stream held open shows in the gauge.
        stream = client.execute(
            make_job(capability="test.sleep@1", idempotency_key="slow", payload={"seconds": 30})
        )
        async for event in stream:
            if event.HasField("running"):
                break
        status, text = await asyncio.to_thread(_get, base + "/metrics")
        assert status == 200
        samples = _samples(text)
        assert samples[("rara_executor_streams", ())] == 1.0
        assert samples[("rara_executor_jobs_running", ())] == 1.0
        await stream.aclose()
    jobs = "rara_executor_jobs_total"
    assert samples[(jobs, (("capability", "test.echo@1"), ("outcome", "succeeded")))] == 2.0
    # Refusals of capabilities not served here (unknown name, other major) share one label
    # value: a caller must not be able to grow the label set with made-up names.
    assert samples[(jobs, (("capability", "unknown"), ("outcome", "refused")))] == 2.0
    duration = ("rara_executor_job_duration_seconds_count", (("capability", "test.echo@1"),))
    assert samples[duration] == 2.0

    proc.send_signal(signal.SIGTERM)
    async with asyncio.timeout(WAIT_S):
        await proc.wait()
    assert proc.returncode == 0
