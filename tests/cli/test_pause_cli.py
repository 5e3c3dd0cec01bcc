"""`rara runs pause` / `rara runs resume` say what they did, refuse what they cannot do with
one line, and a paused run reads `paused` where people look: `rara runs list` (and its
--status filter) and `rara runs show`."""

from __future__ import annotations

from typing import Any

import psycopg
from typer.testing import CliRunner

from rara.runs import start_run
from tests.cli.test_run_phase_cli import _run, cli  # noqa: F401 (a fixture)
from tests.support.definitions import apply


def test_pause_and_resume_say_what_they_did(cli: CliRunner, conn: psycopg.Connection[Any]) -> None:  # noqa: F811
    apply(conn, "two", [{"key": "a", "capability": "test.noop@1"},
                        {"key": "b", "capability": "test.noop@1", "dependsOn": ["a"]}])  # fmt: skip
    run = start_run(conn, "two", queue_anyway=True).run_id
    other = start_run(conn, "two", queue_anyway=True).run_id
    assert _run(cli, "runs", "pause", str(run)) == f"run {run} paused: 1 step held\n"
    assert _run(cli, "runs", "pause", str(run)) == f"run {run} is already paused\n"
    listed = _run(cli, "runs", "list", "--status", "paused")
    [line] = [line for line in listed.splitlines() if f"│ {run} " in line]
    assert "paused" in line
    assert f"│ {other} " not in listed
    assert f"run {run}  two@1  paused" in _run(cli, "runs", "show", str(run))
    assert _run(cli, "runs", "resume", str(run)) == f"run {run} resumed: 1 step released\n"
    assert _run(cli, "runs", "resume", str(run)) == f"run {run} is already not paused\n"
    assert "paused" not in _run(cli, "runs", "show", str(run)).splitlines()[0]


def test_pause_refuses_an_unknown_or_ended_run(
    cli: CliRunner,  # noqa: F811
    conn: psycopg.Connection[Any],
) -> None:
    # (one line: the output and the error stream both hold it)
    assert set(_run(cli, "runs", "pause", "424242", code=2).splitlines()) == {
        "error: no run 424242"
    }
    apply(conn, "one", [{"key": "a", "capability": "test.noop@1"}])
    run = start_run(conn, "one", queue_anyway=True).run_id
    assert _run(cli, "runs", "cancel", str(run)) == f"run {run}: cancel requested\n"
    for verb in ("pause", "resume"):
        refused = _run(cli, "runs", verb, str(run), code=2)
        assert set(refused.splitlines()) == {f"error: run {run} has already ended"}
