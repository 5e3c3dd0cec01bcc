"""A worker given only RARA_ARTIFACTS=s3://… keeps its steps' artifacts in the bucket."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rara.artifacts import open_store
from rara.worker.settings import WorkerSettings
from tests.support.runs import define, start, steps_of, wait_run
from tests.support.workers import FAST, HANDLERS, ThreadWorker

pytest.importorskip("minio", reason="the s3 extra is not installed (pip install '.[s3]')")


def test_worker_stores_and_passes_artifacts_through_s3(
    conn: psycopg.Connection[Any],
    database_url: str,
    tmp_path: Path,
    s3_url: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = s3_url()
    monkeypatch.setenv("RARA_ARTIFACTS", url)
    define(
        conn,
        "art",
        [
            {"key": "make", "capability": "test.produce@1"},
            {"key": "use", "capability": "test.consume@1", "dependsOn": ["make"]},
        ],
    )
    worker = ThreadWorker(database_url, tmp_path)
    # No artifact_root: the store comes from RARA_ARTIFACTS alone, as in a pod.
    worker.settings = WorkerSettings(database_url=database_url, handlers=[HANDLERS], **FAST)
    worker.start(conn)
    try:
        run_id = start(conn, "art", {"text": "hello bucket"})
        wait_run(conn, run_id, status="succeeded")
    finally:
        worker.stop()
    make, use = steps_of(conn, run_id)
    assert use["result"]["text"] == "hello bucket"  # read back from S3, verified
    assert open_store(url).get_bytes(make["result"]["digest"]) == b"hello bucket"
    assert not (tmp_path / "artifacts").exists()
