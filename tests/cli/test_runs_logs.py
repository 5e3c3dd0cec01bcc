"""`rara runs logs RUN [STEP] [-f]`: what the steps wrote, each line stamped, printed literally,
and followed live until the step ends (docs/guide.md, "Step logs")."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from rara.cli.main import app
from rara.runs import start_run
from tests.support.definitions import apply
from tests.support.runs import wait_run
from tests.worker.log_handlers import LOG_HANDLERS

STAMPED = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC (\S+)#(\d+)  (.*)$")


@pytest.fixture
def cli(database_url: str) -> CliRunner:
    return CliRunner(env={"DATABASE_URL": database_url, "RARA_NAMESPACE": None, "COLUMNS": "200"})


def _run(cli: CliRunner, *args: str, code: int = 0) -> tuple[str, str]:
    result = cli.invoke(app, list(args))
    assert result.exit_code == code, (args, result.output, result.stderr)
    return result.stdout, result.stderr


def test_logs_of_a_run_and_of_one_step(
    cli: CliRunner, conn: psycopg.Connection[Any], thread_worker: Any
) -> None:
    apply(
        conn,
        "two",
        [
            {"key": "a", "capability": "test.log.chatty@1"},
            {"key": "b", "capability": "test.log.chatty_sync@1", "dependsOn": ["a"]},
        ],
    )
    thread_worker(handlers=[LOG_HANDLERS])
    run_id = start_run(conn, "two", input={"lines": 3}, queue_anyway=True).run_id
    wait_run(conn, run_id, status="succeeded")
    out, _ = _run(cli, "runs", "logs", str(run_id))
    lines = [STAMPED.match(line) for line in out.splitlines()]
    assert all(lines), out
    by_step = [(m.group(1), m.group(3)) for m in lines if m and " out " in m.group(3)]
    assert by_step == [("a", f"a out {i}") for i in range(3)] + [
        ("b", f"b out {i}") for i in range(3)
    ]
    only_b, _ = _run(cli, "runs", "logs", str(run_id), "b")
    assert "a out" not in only_b
    assert "b out 2" in only_b
    assert "WARNING tests.chatty: b logged 2" in only_b
    _, refused = _run(cli, "runs", "logs", str(run_id), "nope", code=2)
    assert f"error: run {run_id} has no step 'nope' (its steps: a, b)" in refused
    _, unknown = _run(cli, "runs", "logs", "999999", code=2)
    assert "error: no run 999999" in unknown


def test_logs_of_a_map_step_are_its_childrens(
    cli: CliRunner, conn: psycopg.Connection[Any], thread_worker: Any
) -> None:
    apply(
        conn,
        "mapped",
        [{"key": "m", "capability": "test.log.chatty@1", "map": {"over": "input.items"}}],
    )
    thread_worker(handlers=[LOG_HANDLERS])
    items = {"items": [1, 2], "lines": 2}
    run_id = start_run(conn, "mapped", input=items, queue_anyway=True).run_id
    wait_run(conn, run_id, status="succeeded")
    out, _ = _run(cli, "runs", "logs", str(run_id), "m")
    steps = {m.group(1) for line in out.splitlines() if (m := STAMPED.match(line))}
    assert steps == {"m[0]", "m[1]"}, out
    one, _ = _run(cli, "runs", "logs", str(run_id), "m[1]")
    assert "m[1] out 1" in one
    assert "m[0]" not in one


def test_logs_are_printed_literally(cli: CliRunner, conn: psycopg.Connection[Any]) -> None:
    """Markup stays text, an escape sequence shows as its escape, and a line cut between two
    chunks is one line."""
    apply(conn, "one", [{"key": "s", "capability": "test.log.chatty@1"}])
    run_id = start_run(conn, "one", queue_anyway=True).run_id
    for seq, body in enumerate(["[red]not red[/red] \x1b[2Jgone?\nhalf a ", "line\n"], 1):
        conn.execute(
            "INSERT INTO rara_step_logs (step_id, attempt, seq, body)"
            " SELECT id, 1, %s, %s FROM rara_steps WHERE run_id = %s",
            (seq, body, run_id),
        )
    out, _ = _run(cli, "runs", "logs", str(run_id))
    texts = [m.group(3) for line in out.splitlines() if (m := STAMPED.match(line))]
    assert texts == ["[red]not red[/red] \\x1b[2Jgone?", "half a line"]
    today = f"{datetime.now(UTC):%Y-%m-%d}"
    assert out.startswith(today)


def test_follow_prints_live_until_the_step_ends(
    conn: psycopg.Connection[Any], thread_worker: Any, database_url: str, tmp_path: Path
) -> None:
    """`-f` prints the first line while the step still runs (the step waits for the test to
    see it), then the rest, and ends by itself when the step has ended."""
    release = tmp_path / "release"
    apply(conn, "live", [{"key": "w", "capability": "test.log.until@1"}])
    thread_worker(handlers=[LOG_HANDLERS])
    run_id = start_run(conn, "live", input={"release": str(release)}, queue_anyway=True).run_id
    rara = str(Path(sys.executable).with_name("rara"))
    following = subprocess.Popen(
        [rara, "runs", "logs", str(run_id), "w", "-f"],
        env={**os.environ, "DATABASE_URL": database_url, "COLUMNS": "200"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert following.stdout is not None
        first = following.stdout.readline()
        assert first.endswith("w#1  w started\n"), first
        step = conn.execute("SELECT status::text FROM rara_steps WHERE run_id = %s", (run_id,))
        assert step.fetchone() == ("running",)
        release.touch()
        rest, _ = following.communicate(timeout=30)
    finally:
        following.kill()
    assert following.returncode == 0, rest
    assert rest.endswith("w#1  w done\n"), rest
