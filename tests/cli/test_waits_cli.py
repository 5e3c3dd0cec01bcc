"""`rara runs signal` and `rara approvals`: a signal ends its wait once, a gate shows its
evidence and takes one decision; refusals exit 2 with the database's reason, nothing written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
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


def _gated_run(conn: psycopg.Connection[Any]) -> int:
    """A run whose gate shows what the signal `scored` brings."""
    apply(
        conn,
        "gated",
        [
            {"key": "score", "wait": {"signal": "scored"}},
            {"key": "gate", "dependsOn": ["score"], "approval": {"show": ["score.result.payload"]}},
        ],
    )
    return start_run(conn, "gated", queue_anyway=True).run_id


def test_an_approval_from_the_command_line(cli: CliRunner, conn: psycopg.Connection[Any]) -> None:
    run_id = _gated_run(conn)
    _run(cli, "runs", "signal", str(run_id), "scored", "--payload", '{"ndcg": 0.74}')
    listing = _run(cli, "approvals", "list")
    assert str(run_id) in listing
    assert "waiting" in listing
    shown = _run(cli, "approvals", "show", str(run_id), "gate")
    assert "score.result.payload" in shown
    assert re.search(r"│ payload\s+│ 0\.740\s+│", shown), shown  # metrics: a table (rara.evidence)
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


QUALITY = {
    "before/recall@10": 0.61, "before/recall@10_lo": 0.52, "before/recall@10_hi": 0.70,
    "after/recall@10": 0.68, "after/recall@10_lo": 0.60, "after/recall@10_hi": 0.76,
    "diff/recall@10": 0.07, "diff/recall@10_lo": 0.02, "diff/recall@10_hi": 0.12,
    "before/recall@5": 0.5, "after/recall@5": 0.55,
}  # fmt: skip


def test_watch_stops_where_only_a_person_moves_the_run_on(
    cli: CliRunner, conn: psycopg.Connection[Any], database_url: str
) -> None:
    """`runs watch` exits 3 at a gate, with the command that moves each wait on; the gate
    shows a table of metrics as a table (rara.evidence); --through-waits goes on to the end."""
    run_id = _gated_run(conn)
    watched = _run(cli, "runs", "watch", str(run_id), "--timeout", "30", code=3)
    assert "score waiting" in watched
    assert f"run {run_id} waits for a person:" in watched
    assert f"score waits for signal scored: rara runs signal {run_id} scored --payload" in watched

    _run(cli, "runs", "signal", str(run_id), "scored", "--payload", json.dumps(QUALITY))
    watched = _run(cli, "runs", "watch", str(run_id), "--timeout", "30", code=3)
    assert f"gate waits for an approval: rara approvals show {run_id} gate" in watched
    shown = _run(cli, "approvals", "show", str(run_id), "gate")
    rows = {line.split()[1]: line for line in shown.splitlines() if line.startswith("│ ")}
    assert "0.610 [0.520, 0.700]" in rows["before"]
    assert "0.500" in rows["before"]  # recall@5: no interval
    assert "+0.070 [+0.020, +0.120]" in rows["diff"]  # a difference is signed
    assert list(rows)[-1] == "diff"  # and last
    header = next(line for line in shown.splitlines() if "recall@5" in line)
    assert header.index("recall@5") < header.index("recall@10")
    assert "recall@10_lo" not in shown  # drawn in its cell, not a column of its own

    # A decision made elsewhere while it is watched (--through-waits): it goes on to the end.
    rara = str(Path(sys.executable).with_name("rara"))
    watching = subprocess.Popen(
        [rara, "runs", "watch", str(run_id), "--through-waits", "--timeout", "30"],
        env={**os.environ, "DATABASE_URL": database_url},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert watching.stdout is not None
        seen = []
        for line in watching.stdout:  # ends by itself: the watch's own --timeout
            seen.append(line)
            if line.startswith("gate waiting"):
                break
        _run(cli, "approvals", "approve", str(run_id), "gate", "-m", "recall up")
        rest, _ = watching.communicate(timeout=60)
    finally:
        watching.kill()
    output = "".join(seen) + rest
    assert watching.returncode == 0, output
    assert "gate waiting" in output
    assert "gate succeeded" in output


def test_a_cancel_from_the_command_line_keeps_its_reason(
    cli: CliRunner, conn: psycopg.Connection[Any]
) -> None:
    """`rara runs cancel N --reason`: the reason and who cancelled are the run's error, shown
    by `rara runs show`; a cancel without one records none, as before."""
    apply(conn, "held", [{"key": "gate", "approval": {}}])
    said = start_run(conn, "held", queue_anyway=True).run_id
    silent = start_run(conn, "held", queue_anyway=True, idempotency_key="second").run_id
    login = conn.execute("SELECT current_user").fetchone()
    assert login is not None
    assert "cancel requested" in _run(cli, "runs", "cancel", str(said), "--reason", "wrong input")
    _run(cli, "runs", "cancel", str(silent))
    wait_run(conn, said, status="cancelled")
    wait_run(conn, silent, status="cancelled")
    assert f"cancelled by {login[0]}: wrong input" in _run(cli, "runs", "show", str(said))
    errors = conn.execute(
        "SELECT id, error FROM rara_runs WHERE id = ANY(%s) ORDER BY id", ([said, silent],)
    ).fetchall()
    assert errors == [
        (said, {"code": "CANCELLED", "message": f"cancelled by {login[0]}: wrong input",
                "cancelled_by": login[0], "reason": "wrong input"}),
        (silent, None),
    ]  # fmt: skip
