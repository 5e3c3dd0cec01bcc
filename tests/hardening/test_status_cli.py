"""`rara status` against a real database: live workers, backlog per capability, failures."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from typer.testing import CliRunner

from rara.cli.main import app
from rara.pg.queries import run
from rara.runs import start_run
from rara.states import AttemptOutcome, StepStatus
from rara.worker.store import end_many
from rara.worker.vocabulary import Ending, Fence
from tests.support.definitions import apply
from tests.support.leasing import lease_now


async def _fail(url: str, fence: Fence, run_id: int) -> StepStatus | None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        error = {"code": "HANDLER_ERROR", "message": "tokenizer exploded", "retryable": False}
        [status] = await end_many(
            conn, [Ending(fence, run_id, AttemptOutcome.FAILED, error=error, retryable=False)]
        )
        return status


def test_status_shows_workers_backlog_and_failures(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    run(
        conn,
        "worker_register",
        worker="gpu-worker-7",
        capabilities=["embed@1", "adapt.lora@1"],
        executors="[]",
    )
    apply(
        conn,
        "rag",
        [
            {"key": "embed", "capability": "embed@1", "retry": {"maxAttempts": 1}},
            {"key": "adapt", "capability": "adapt.lora@1", "dependsOn": ["embed"]},
        ],
    )
    failing = start_run(conn, "rag").run_id
    start_run(conn, "rag")
    rows = lease_now(conn, ["embed@1"], worker="gpu-worker-7", limit=1, lease_seconds=60)
    assert [(r.run_id, r.key) for r in rows] == [(failing, "embed")]
    fence = Fence(rows[0].id, "gpu-worker-7", rows[0].lease_token)
    assert asyncio.run(_fail(database_url, fence, failing)) == "failed"

    result = CliRunner(env={"DATABASE_URL": database_url, "COLUMNS": "200"}).invoke(app, ["status"])
    assert result.exit_code == 0, result.output
    rows_out = _rows(result.stdout)
    worker = next(r for r in rows_out if r[0] == "gpu-worker-7")
    assert worker[:2] == ["gpu-worker-7", "adapt.lora@1, embed@1"]
    # Backlog: the second run's embed is ready (its adapt waits on it, blocked: not backlog);
    # the first run's embed failed for good and its adapt was cancelled.
    assert ["embed@1", "1", "0"] in rows_out
    assert not any(r[0] == "adapt.lora@1" for r in rows_out)
    failure = next(r for r in rows_out if r and r[-1] == "tokenizer exploded")
    assert failure[:4] == [str(failing), "embed", "embed@1", "1"], failure


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("│").split("│")]


def _rows(out: str) -> list[list[str]]:
    """The tables' rows, a cell wrapped over lines joined again (a line whose first cell is
    empty goes on the row above): what a row says, however wide the console was."""
    rows: list[list[str]] = []
    for line in out.splitlines():
        if "│" not in line:
            continue
        cells = _cells(line)
        if rows and not cells[0] and len(cells) == len(rows[-1]):
            rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=True)]
        else:
            rows.append(cells)
    return rows


def test_status_on_an_empty_database(database_url: str) -> None:
    result = CliRunner(env={"DATABASE_URL": database_url}).invoke(app, ["status"])
    assert result.exit_code == 0, result.output
    for title in ("live workers", "backlog", "recent failures"):
        assert title in result.stdout


def test_status_refuses_a_negative_limit(database_url: str) -> None:
    result = CliRunner(env={"DATABASE_URL": database_url}).invoke(
        app, ["status", "--failures", "-1"]
    )
    assert result.exit_code == 2
    assert "Traceback" not in result.output
