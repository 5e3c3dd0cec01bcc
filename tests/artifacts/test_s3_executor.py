"""``rara executor`` given only RARA_ARTIFACTS=s3://… stores its plugins' artifacts there."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from rara.artifacts import open_store
from rara.executor.client import ExecutorClient, make_job
from tests.artifacts.s3_server import S3Server
from tests.executor.support import TOKEN, collect

pytest.importorskip("minio", reason="the s3 extra is not installed (pip install '.[s3]')")
STARTUP_S = 30.0


async def test_executor_stores_artifacts_in_the_bucket(
    s3_url: Callable[..., str], s3_env: S3Server, tmp_path: Path
) -> None:
    url = s3_url()
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
        cwd=tmp_path,
        env={**os.environ, "RARA_ARTIFACTS": url, **s3_env.env()},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        address = ""
        async with asyncio.timeout(STARTUP_S):
            while not address:
                line = (await proc.stdout.readline()).decode()
                assert line, f"executor exited early: {(await proc.communicate())[1].decode()}"
                if m := re.search(r"listening on (\S+)$", line.strip()):
                    address = m.group(1)
        async with ExecutorClient(address, token=TOKEN) as client:
            job = make_job(
                capability="test.echo@1",
                idempotency_key="k",
                payload={"artifact_text": "to the bucket"},
            )
            [entry] = (await collect(client, job))[-1].succeeded.artifacts
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()
    assert entry.digest == "sha256:" + hashlib.sha256(b"to the bucket").hexdigest()
    assert open_store(url).get_bytes(entry.digest) == b"to the bucket"
    assert not (tmp_path / ".rara").exists()  # nothing went to the default directory
