"""Output that reads well anywhere: in a pipe (no terminal) `runs watch` prints a plain line
per change, `runs show --events` one line per event and tables are not cut at 80 columns;
cut text ends in an ellipsis."""

from __future__ import annotations

import io
from typing import Any

import psycopg
import pytest
from rich.table import Table
from typer.testing import CliRunner

from rara.cli.common import PIPED_WIDTH, WideWhenPiped
from rara.cli.main import app
from rara.cli.watch import shorten
from tests.support.runs import define, start, wait_run


def test_in_a_pipe_watch_and_events_are_plain_lines(
    conn: psycopg.Connection[Any], thread_worker: Any, database_url: str
) -> None:
    thread_worker()
    define(
        conn,
        "lines",
        [
            {"key": "first", "capability": "test.produce@1", "input": {"text": "x"}},
            {
                "key": "second",
                "capability": "test.chatty@1",
                "dependsOn": ["first"],
                "input": {"calls": 3, "seconds": 0.01},
            },
        ],
    )
    run_id = start(conn, "lines")
    wait_run(conn, run_id)
    cli = CliRunner(env={"DATABASE_URL": database_url, "COLUMNS": "80"})

    watched = cli.invoke(app, ["runs", "watch", str(run_id)])
    assert watched.exit_code == 0, watched.output
    lines = watched.output.splitlines()
    assert lines[0].startswith("first succeeded (attempt 1/3) 0:00:0"), lines
    assert lines[1].startswith("second succeeded (attempt 1/3) 0:00:0"), lines
    # The summary's title starts a line of its own (it was glued to the last progress line).
    assert any(line.strip() == f"run {run_id}" for line in lines), watched.output

    shown = cli.invoke(app, ["runs", "show", str(run_id), "--events"])
    assert shown.exit_code == 0, shown.output
    event_lines = [line for line in shown.output.splitlines() if " second#1 seq=" in line]
    assert len(event_lines) >= 1, shown.output
    assert event_lines[-1].endswith("progress 1.00  item 3 · items=3"), event_lines


def test_shorten_cuts_between_words_with_an_ellipsis() -> None:
    assert shorten("short", 10) == "short"
    assert (
        shorten("chunks=3, resumed_from_step=12, loss=0.5", 31, sep=", ")
        == "chunks=3, resumed_from_step=12…"
    )
    assert shorten("chunks=3, resumed_from_step=12, loss=0.5", 30, sep=", ") == "chunks=3…"
    assert shorten("a failure message that goes on", 12) == "a failure…"
    assert shorten("x" * 20, 8) == "xxxxxxx…"


def test_start_quiet_prints_only_the_run_id(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    """What a script needs to go on without guessing ids: run=$(rara runs start … -q)."""
    define(conn, "quiet", [{"key": "a", "capability": "test.produce@1", "input": {"text": "x"}}])
    cli = CliRunner(env={"DATABASE_URL": database_url})
    result = cli.invoke(app, ["runs", "start", "quiet", "--queue-anyway", "-q"])
    assert result.exit_code == 0, result.output
    run_id = int(result.output)
    row = conn.execute(
        "SELECT d.name FROM rara_runs r JOIN rara_definition_versions d "
        "ON d.id = r.definition_version_id WHERE r.id = %s",
        (run_id,),
    ).fetchone()
    assert row == ("quiet",)


def test_in_a_pipe_tables_are_wide_unless_columns_says_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Written to no terminal, rich would cut a table at 80 columns (`documents=3…` in `make
    demo | tee`): rara's consoles are PIPED_WIDTH wide there, and COLUMNS still decides."""
    monkeypatch.delenv("COLUMNS", raising=False)
    out = io.StringIO()
    piped = WideWhenPiped(file=out)
    assert piped.width == PIPED_WIDTH
    table = Table("step", "result")
    table.add_row("collect", "documents=3, " + "characters=1102899, " * 5 + "end")
    piped.print(table)
    assert "end" in out.getvalue(), out.getvalue()
    assert "…" not in out.getvalue(), out.getvalue()
    monkeypatch.setenv("COLUMNS", "80")
    assert WideWhenPiped(file=io.StringIO()).width == 80
    # Read at each use, not only when the console was made: one process that runs several
    # commands (a test's CliRunner) sets it per command.
    assert piped.width == 80
    assert WideWhenPiped(file=io.StringIO(), width=120).width == 120
