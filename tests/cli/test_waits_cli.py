"""`rara runs signal` and `rara approvals`: a signal ends its wait once, a gate shows its
evidence and takes one decision; refusals exit 2 with the database's reason, nothing written."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from rara.cli.main import app
from rara.runs import start_run
from tests.support.definitions import apply
from tests.support.runs import steps_of, wait_run


@pytest.fixture
def cli(database_url: str) -> CliRunner:
    return CliRunner(env={"DATABASE_URL": database_url, "RARA_NAMESPACE": None})


def _run(cli: CliRunner, *args: str, code: int = 0) -> str:
    result = cli.invoke(app, list(args))
    assert result.exit_code == code, (args, result.output, result.stderr)
    return result.output + (result.stderr if code else "")


def test_a_signal_from_the_command_line(cli: CliRunner, conn: psycopg.Connection[Any]) -> None:
    apply(conn, "sig", [{"key": "ready", "wait": {"signal": "export-done", "timeout": "1h"}}])
    run_id = start_run(conn, "sig", queue_anyway=True).run_id
    shown = _run(cli, "runs", "show", str(run_id))
    assert "waiting" in shown
    assert "ready waits for signal export-done (deadline 20" in shown
    said = _run(cli, "runs", "signal", str(run_id), "export-done", "--payload", '{"rows": 9}')
    assert f"run {run_id}: signal export-done ended step ready" in said
    wait_run(conn, run_id, status="succeeded", timeout=5)
    again = _run(cli, "runs", "signal", str(run_id), "export-done", "--payload", '{"rows": 1}')
    assert "was taken at" in again
    assert "nothing changed" in again
    [ready] = steps_of(conn, run_id)
    assert ready["result"]["payload"] == {"rows": 9}
    refused = _run(cli, "runs", "signal", str(run_id), "nope", code=2)
    assert "no step waits for signal nope" in refused
    refused = _run(cli, "runs", "signal", str(run_id), "export-done", "--payload", "{", code=2)
    assert "--payload is not valid JSON" in refused


def test_an_approval_from_the_command_line(cli: CliRunner, conn: psycopg.Connection[Any]) -> None:
    apply(
        conn,
        "gated",
        [
            {"key": "score", "wait": {"signal": "scored"}},
            {"key": "gate", "dependsOn": ["score"], "approval": {"show": ["score.result.payload"]}},
        ],
    )
    run_id = start_run(conn, "gated", queue_anyway=True).run_id
    _run(cli, "runs", "signal", str(run_id), "scored", "--payload", '{"ndcg": 0.74}')
    listing = _run(cli, "approvals", "list")
    assert str(run_id) in listing
    assert "waiting" in listing
    shown = _run(cli, "approvals", "show", str(run_id), "gate")
    assert "score.result.payload" in shown
    assert '"ndcg": 0.74' in shown
    assert "any client of the namespace" in shown
    decided = _run(cli, "approvals", "approve", str(run_id), "gate", "-m", "ndcg up")
    assert f"run {run_id}: gate approved by" in decided
    wait_run(conn, run_id, status="succeeded", timeout=5)
    assert "nothing changed" in _run(cli, "approvals", "approve", str(run_id), "gate")
    refused = _run(cli, "approvals", "reject", str(run_id), "gate", code=2)
    assert "approval gate was approved by" in refused
    assert "approved by" in _run(cli, "approvals", "show", str(run_id), "gate")
    assert str(run_id) not in _run(cli, "approvals", "list")  # decided: --all only
    assert str(run_id) in _run(cli, "approvals", "list", "--all")
    assert "has no approval nope" in _run(cli, "approvals", "show", str(run_id), "nope", code=2)
