"""Step logs of steps an executor runs over gRPC (JobLog events; docs/guide.md, "Step logs"):
a real executor process and a real worker process on loopback. What each plugin writes lands
on its own attempt, secrets the plugin resolved are masked by the executor, and the bound the
executor applied is the one the stored log shows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from rara.pg.step_logs import list_chunks
from rara.step_output import HEAD_BYTES, TAIL_BYTES
from tests.support.executors import executor_process, free_address
from tests.support.runs import define, start, wait_run

STEPS = [
    {"key": "sync", "capability": "test.log.remote@1", "executor": "grpc"},
    {"key": "async", "capability": "test.log.remote_async@1", "executor": "grpc"},
]


def _log(conn: psycopg.Connection[Any], run_id: int, key: str) -> str:
    return "".join(c.body for c in list_chunks(conn, run_id, key, limit=10_000))


def test_remote_steps_keep_their_own_masked_bounded_log(
    conn: psycopg.Connection[Any], spawn: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RARA_SECRET_TESTLOG_TOKEN", "remote-key-0451-hidden")
    address = free_address()
    define(conn, "remote-logs", STEPS)
    lines = 15_000  # 1,500,000 bytes after the first lines: over the bound
    with executor_process(address, tmp_path / "artifacts", plugins="tests.executor.log_plugins"):
        worker = spawn("w-logs", executor_endpoint=address)
        run_id = start(conn, "remote-logs", {"lines": 5, "flood": lines})
        try:
            wait_run(conn, run_id, status="succeeded", timeout=60)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the worker said:\n{worker.output()}") from None
    assert _log(conn, run_id, "async") == "".join(f"async remote {i}\n" for i in range(5))
    text = _log(conn, run_id, "sync")
    assert text.startswith("".join(f"sync remote {i}\n" for i in range(5)))
    assert "WARNING tests.remote: sync logged remotely\n" in text
    assert "the key is [REDACTED]\n" in text
    assert "remote-key-0451" not in text
    head, marker, tail = text.partition("[rara: ")
    dropped = int(tail.split()[0])
    tail = tail.split("\n", 1)[1]
    assert marker
    assert len(head.encode()) == HEAD_BYTES
    assert len(tail.encode()) == TAIL_BYTES
    assert (
        len(head.encode()) + dropped + len(tail.encode())
        == len(
            "".join(f"sync remote {i}\n" for i in range(5))
            + "WARNING tests.remote: sync logged remotely\n"
            + "the key is [REDACTED]\n"
        )
        + lines * 100
    )
    assert tail.endswith(f"{lines - 1:08d}".ljust(99, "y") + "\n")
