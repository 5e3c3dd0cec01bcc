"""One CLI voice: every option described, one timestamp format (the dashboard's), a failed
run's error in `runs show`, a definition shown as the YAML one would apply (JSON with -o
json), a release's lines before its JSON, and a worker's text printed as it is, never as
markup."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
import typer
from typer.testing import CliRunner

from rara.cli.common import stamp
from rara.cli.main import app
from rara.cli.runs import print_events
from rara.ui.render import when
from tests.support.runs import define, start, wait_run


def _options(command: Any, path: str) -> Iterator[tuple[str, list[str], str | None]]:
    for name, sub in (getattr(command, "commands", None) or {}).items():
        yield from _options(sub, f"{path} {name}")
    for param in command.params:
        if param.param_type_name == "option":
            yield path, param.opts, param.help


def test_every_option_of_every_command_says_what_it_does() -> None:
    undescribed = [
        f"{path} {'/'.join(opts)}"
        for path, opts, help in _options(typer.main.get_command(app), "rara")
        if not (help or "").strip()
    ]
    assert undescribed == []


def test_one_timestamp_format_the_dashboards() -> None:
    at = datetime(2026, 12, 5, 9, 41, 1, 500, tzinfo=timezone(timedelta(hours=2)))
    assert stamp(at) == "2026-12-05 07:41:01 UTC"
    assert stamp(at) == f"{when(at)} UTC"
    assert stamp(at.astimezone(UTC)) == stamp(at)
    assert stamp(None) == ""


@pytest.mark.usefixtures("wide_console")
def test_runs_show_prints_a_failed_steps_error_as_it_is(
    conn: psycopg.Connection[Any], thread_worker: Any, database_url: str
) -> None:
    """A handler's error is the worker's text: `[bold]`, `[link=…]` and `[/]` in it print as
    written (rich would read them as markup, or raise on the unmatched close)."""
    thread_worker()
    message = "[bold]boom[/bold] [link=https://evil.example]click[/link] [/]"
    define(
        conn,
        "doomed",
        [
            {
                "key": "fetch",
                "capability": "test.fail@1",
                "retry": {"maxAttempts": 1},
                "input": {"message": message},
            }
        ],
    )
    run_id = start(conn, "doomed")
    wait_run(conn, run_id, status="failed")
    shown = CliRunner(env={"DATABASE_URL": database_url}).invoke(app, ["runs", "show", str(run_id)])
    assert shown.exit_code == 0, shown.output
    assert f"fetch failed (attempt 1/1): ValueError: {message}" in shown.output, shown.output
    # `runs retry -q`, as `runs start -q`: only the new run's id, for a script.
    cli = CliRunner(env={"DATABASE_URL": database_url})
    for how in ([], ["--from-failure"]):
        again = cli.invoke(app, ["runs", "retry", str(run_id), *how, "-q"])
        assert again.exit_code == 0, again.output
        # (The thread worker of this process logs to the same stdout: its lines are not ours.)
        ours = [line for line in again.output.splitlines() if not line.startswith("20")]
        assert len(ours) == 1, again.output
        assert int(ours[0]) > run_id


def test_runs_retry_takes_the_starts_flags(
    conn: psycopg.Connection[Any], database_url: str, spawn: Any
) -> None:
    """`runs retry`, with or without --from-failure, is refused as `runs start` is while no
    live worker serves a capability it would run; --queue-anyway queues it, and
    --wait-for-workers waits for a worker starting meanwhile."""
    define(conn, "unserved", [{"key": "only", "capability": "test.fail@1", "input": {}}])
    run_id = start(conn, "unserved")  # queued anyway, with no worker
    cli = CliRunner(env={"DATABASE_URL": database_url})
    assert cli.invoke(app, ["runs", "cancel", str(run_id)]).exit_code == 0
    wait_run(conn, run_id, status="cancelled")
    runs_before = conn.execute("SELECT count(*) FROM rara_runs").fetchone()
    for how in ([], ["--from-failure"]):
        refused = cli.invoke(app, ["runs", "retry", str(run_id), *how])
        assert refused.exit_code == 2, refused.output
        assert "no live worker serves test.fail@1" in refused.stderr, refused.stderr
    assert conn.execute("SELECT count(*) FROM rara_runs").fetchone() == runs_before
    queued = cli.invoke(app, ["runs", "retry", str(run_id), "--queue-anyway", "-q"])
    assert queued.exit_code == 0, queued.output
    spawn("late-worker", wait=False)  # registers while the retry below waits for it
    waited = cli.invoke(
        app, ["runs", "retry", str(run_id), "--from-failure", "--wait-for-workers", "60", "-q"]
    )
    assert waited.exit_code == 0, waited.output
    assert int(waited.output.strip()) > int(queued.output.strip())


def test_definitions_show_prints_the_yaml_to_apply_and_json_on_request(
    conn: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    cli = CliRunner(env={"DATABASE_URL": database_url})
    applied = cli.invoke(app, ["definitions", "apply", "-f", "examples/rag-refresh.yaml"])
    assert applied.exit_code == 0, applied.output
    shown = cli.invoke(app, ["definitions", "show", "rag-refresh"])
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert lines[0].startswith("# rag-refresh version 1 sha256:"), lines[0]
    assert lines[0].endswith(" UTC)"), lines[0]
    assert "  - key: index\n    dependsOn: [clean, index-shard]\n" in shown.output
    assert "null" not in shown.output  # defaults are not shown: only what was given
    shown_json = cli.invoke(app, ["definitions", "show", "rag-refresh", "-o", "json"]).output
    # (the normalised JSON, every default and one value a line, is ~370 lines; this ~170)
    assert len(lines) < len(shown_json.splitlines()) / 2
    # What it prints is a document to apply: it gives the same version.
    document = tmp_path / "shown.yaml"
    document.write_text(shown.output)
    again = cli.invoke(app, ["definitions", "apply", "-f", str(document)])
    assert again.exit_code == 0, again.output
    assert "rag-refresh version 1 " in again.output
    assert again.output.rstrip().endswith("(unchanged)")
    as_json = json.loads(shown_json)
    assert (as_json["name"], as_json["version"]) == ("rag-refresh", 1)
    assert as_json["spec"]["steps"][0]["retry"]["maxAttempts"] == 5


def test_an_event_with_many_metrics_prints_a_few_a_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`runs show --events` in a pipe: 60 metrics of one event are not one 1,000-character line."""
    monkeypatch.delenv("COLUMNS", raising=False)
    event = {
        "created_at": datetime(2026, 12, 5, 8, 0, tzinfo=UTC),
        "key": "adapt",
        "attempt": 1,
        "seq": 9,
        "kind": "progress",
        "fraction": 1.0,
        "message": "done",
        "metrics": {f"m{i}": i / 7 for i in range(60)},
    }
    print_events([event, {**event, "seq": 10, "metrics": {"loss": 0.5}}])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "2026-12-05 08:00:00 UTC adapt#1 seq=9 progress 1.00  done"
    assert lines[1] == "    m0=0, m1=0.1429, m2=0.2857, m3=0.4286, m4=0.5714, m5=0.7143"
    assert len(lines) == 1 + 10 + 1
    assert lines[-1].endswith("seq=10 progress 1.00  done · loss=0.5")
