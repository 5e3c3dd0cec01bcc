"""A run only a gate or a signal can move on says `waiting`, and for what, where people look:
`rara runs list` (and its --status filter), `rara runs show`, Client.wait's timeout."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from rara.cli.main import app
from rara.client import Client
from rara.runs import start_run
from tests.support.definitions import apply


@pytest.fixture
def cli(database_url: str) -> CliRunner:
    return CliRunner(env={"DATABASE_URL": database_url, "RARA_NAMESPACE": None, "COLUMNS": "200"})


def _run(cli: CliRunner, *args: str, code: int = 0) -> str:
    result = cli.invoke(app, list(args))
    assert result.exit_code == code, (args, result.output, result.stderr)
    return result.output + (result.stderr if code else "")


def _gated(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    """A run at its gate, and one whose step is ready beside its gate."""
    apply(conn, "gated", [{"key": "release", "approval": {}}])
    apply(
        conn,
        "busy",
        [{"key": "work", "capability": "test.noop@1"}, {"key": "gate", "approval": {}}],
    )
    return (
        start_run(conn, "gated", queue_anyway=True).run_id,
        start_run(conn, "busy", queue_anyway=True).run_id,
    )


def test_runs_list_and_show_say_what_a_run_waits_for(
    cli: CliRunner, conn: psycopg.Connection[Any]
) -> None:
    gated, busy = _gated(conn)
    listed = _run(cli, "runs", "list")
    [gated_line] = [line for line in listed.splitlines() if f"│ {gated} " in line]
    assert "waiting for approval of gate release" in gated_line
    [busy_line] = [line for line in listed.splitlines() if f"│ {busy} " in line]
    assert "pending" in busy_line
    assert "waiting" not in busy_line
    waiting = _run(cli, "runs", "list", "--status", "waiting")
    assert f"│ {gated} " in waiting
    assert f"│ {busy} " not in waiting
    shown = _run(cli, "runs", "show", str(gated))
    assert f"run {gated}  gated@1  waiting for approval of gate release" in shown
    refused = _run(cli, "runs", "list", "--status", "stuck", code=2)
    assert (
        "unknown run status 'stuck': use one of pending, running, waiting, paused, succeeded,"
        " failed, cancelled"
    ) in refused


def test_client_wait_times_out_saying_what_the_run_waits_for(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    gated, _ = _gated(conn)
    client = Client(database_url)
    view = client.get_run(gated)
    assert (view.status.value, view.phase) == ("pending", "waiting")
    with pytest.raises(TimeoutError) as timed_out:
        client.wait(gated, timeout=0.2, poll=0.1)
    assert str(timed_out.value) == (
        f"run {gated} still waiting for approval of gate release after 0.2s"
    )
    # A person's turn: until_person returns at once.
    assert client.wait(gated, timeout=5, until_person=True).phase == "waiting"
    assert [r["phase"] for r in client.list_runs("waiting")] == ["waiting"]


def test_runs_watch_times_out_saying_what_the_run_waits_for(
    cli: CliRunner, conn: psycopg.Connection[Any]
) -> None:
    apply(conn, "nap", [{"key": "nap", "wait": {"for": "1h"}}])
    run_id = start_run(conn, "nap", queue_anyway=True).run_id
    # A timer is no person's turn: the watch goes on to its --timeout, and says why.
    said = _run(cli, "runs", "watch", str(run_id), "--timeout", "0.5", code=1)
    assert f"run {run_id} still waiting for timer of step nap until 20" in said
