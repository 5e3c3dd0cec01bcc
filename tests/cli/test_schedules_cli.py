"""`rara schedules` as a user runs it: apply (again: unchanged), list, show, pause, resume,
trigger, backfill (twice: nothing new), and bad input refused in one line naming the field."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from rara.cli.main import app
from rara.schedules import firing
from tests.support.definitions import apply, noop_definition

SCHEDULE = """\
apiVersion: rara.dev/v1alpha1
kind: WorkflowSchedule
metadata: {name: nightly}
spec:
  definition: noop
  schedule: "0 2 * * *"
  timeZone: Europe/Berlin
  concurrencyPolicy: Forbid
"""


@pytest.mark.usefixtures("wide_console")
def test_the_schedule_commands(
    conn: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    noop_definition(conn)
    doc = tmp_path / "nightly.yaml"
    doc.write_text(SCHEDULE)
    cli = CliRunner(env={"DATABASE_URL": database_url})

    def ok(*args: str) -> str:
        result = cli.invoke(app, ["schedules", *args])
        assert result.exit_code == 0, result.output + result.stderr
        return result.output

    assert "nightly (created); next tick" in ok("apply", "-f", str(doc))
    assert "nightly (unchanged)" in ok("apply", "-f", str(doc))
    assert "Europe/Berlin" in ok("list")
    assert "paused" in ok("pause", "nightly")
    assert "paused" in ok("list")
    assert "resumed; next tick" in ok("resume", "nightly")
    run_id = int(ok("trigger", "nightly").strip())
    assert f"run {run_id}" in ok("show", "nightly")
    window = ("--from", "2026-03-27T00:00:00+01:00", "--to", "2026-03-31T00:00:00+02:00")
    first = ok("backfill", "nightly", *window)
    # 02:00 on 27-30 March; on the 29th 02:00 does not exist: 03:00 CEST, 01:00 UTC.
    assert "4 ticks: 4 runs started" in first
    assert "2026-03-29 01:00:00 UTC" in first  # the dashboard's format
    assert "4 ticks: 0 runs started" in ok("backfill", "nightly", *window)


def test_bad_input_is_one_line_naming_the_field(database_url: str, tmp_path: Path) -> None:
    doc = tmp_path / "bad.yaml"
    doc.write_text(SCHEDULE.replace("Europe/Berlin", "Europe/Atlantis"))
    cli = CliRunner(env={"DATABASE_URL": database_url})
    refused = cli.invoke(app, ["schedules", "apply", "-f", str(doc)])
    assert refused.exit_code == 2
    assert "invalid workflow schedule:" in refused.stderr
    assert "spec.timeZone: Value error, " not in refused.stderr
    assert "spec.timeZone: 'Europe/Atlantis' is not an IANA time zone" in refused.stderr
    missing = cli.invoke(app, ["schedules", "show", "nope"])
    assert (missing.exit_code, missing.stderr.strip()) == (2, "error: no schedule nope")
    bad_time = cli.invoke(app, ["schedules", "backfill", "nope", "--from", "x", "--to", "y"])
    assert bad_time.exit_code == 2
    assert "--from 'x' is not an ISO 8601 time" in bad_time.stderr


def test_an_input_the_definition_refuses_is_refused_at_apply(
    conn: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    limit = {"type": "object", "properties": {"limit": {"type": "integer", "minimum": 1}}}
    apply(conn, "noop", [{"key": "s0", "capability": "bench.noop@1", "inputSchema": limit}])
    cli = CliRunner(env={"DATABASE_URL": database_url})
    doc = tmp_path / "bad.yaml"
    doc.write_text(SCHEDULE + "  input: {limit: -1}\n")
    refused = cli.invoke(app, ["schedules", "apply", "-f", str(doc)])
    assert refused.exit_code == 2
    assert refused.stderr == (
        "error: invalid workflow schedule:\n"
        "  spec.input: run input refused: input.limit: -1 is less than the minimum of 1 "
        "(input of step 's0')\n"
    )
    missing = cli.invoke(app, ["schedules", "show", "nightly"])
    assert (missing.exit_code, missing.stderr.strip()) == (2, "error: no schedule nightly")
    doc.write_text(SCHEDULE + "  input: {limit: 30}\n")
    applied = cli.invoke(app, ["schedules", "apply", "-f", str(doc)])
    assert applied.exit_code == 0, applied.stderr
    assert "nightly (created)" in applied.output


@pytest.mark.usefixtures("wide_console")
def test_a_refused_schedule_says_why_and_a_backfill_before_1970_is_one_line(
    conn: psycopg.Connection[Any], database_url: str, role_url: Any, tmp_path: Path
) -> None:
    noop_definition(conn)
    doc = tmp_path / "nightly.yaml"
    doc.write_text(SCHEDULE)
    cli = CliRunner(env={"DATABASE_URL": database_url})
    assert cli.invoke(app, ["schedules", "apply", "-f", str(doc)]).exit_code == 0
    # A row the firing cannot plan (the owner wrote it): refused, and `list`/`show` say why.
    conn.execute("UPDATE rara_schedules SET cron = '61 * * * *', next_tick = now()")
    with psycopg.connect(role_url("rara_client"), autocommit=True) as firer:
        assert firing.fire_due(firer).refused_schedules == 1
    listed = cli.invoke(app, ["schedules", "list"])
    assert "refused" in listed.output
    shown = cli.invoke(app, ["schedules", "show", "nightly"]).output
    assert "refused by the firing at" in shown
    assert "'61 * * * *' is not a cron expression: Bad minute" in shown
    backfill = ["schedules", "backfill", "nightly", "--to", "2026-01-01T00:00:00+00:00"]
    early = cli.invoke(app, [*backfill, "--from", "0001-01-01T00:00:00+00:00"])
    assert (early.exit_code, early.stderr) == (
        2,
        "error: --from (0001-01-01T00:00:00+00:00) is before 1970-01-01T00:00:00+00:00, the "
        "earliest tick a backfill reaches\n",
    )


@pytest.mark.usefixtures("wide_console")
def test_list_and_show_say_when_no_firing_process_is_connected(
    conn: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    """An active schedule with nothing to fire it is not "next tick in 10 h": `list` and `show`
    say that no firing process is connected and since when none fired, and a tick left unfired
    is overdue; once `rara schedules run` (or the operator) is connected they say nothing."""
    noop_definition(conn)
    doc = tmp_path / "nightly.yaml"
    doc.write_text(SCHEDULE.replace('"0 2 * * *"', '"* * * * *"'))
    cli = CliRunner(env={"DATABASE_URL": database_url})
    assert cli.invoke(app, ["schedules", "apply", "-f", str(doc)]).exit_code == 0
    never = "no schedule firing process is connected (none has ever fired a tick here)"
    assert never in cli.invoke(app, ["schedules", "list"]).output
    assert never in cli.invoke(app, ["schedules", "show", "nightly"]).output
    # Its tick of two minutes ago not fired (as while nothing ran): overdue.
    conn.execute(
        "UPDATE rara_schedules SET next_tick = date_trunc('minute', now()) - interval '2 min'"
    )
    assert "(overdue: not fired)" in cli.invoke(app, ["schedules", "list"]).output

    def listed_once(done: Callable[[str], bool]) -> str:
        deadline = time.monotonic() + 10
        while not done(listed := cli.invoke(app, ["schedules", "list"]).output):
            assert time.monotonic() < deadline, listed
            time.sleep(0.1)
        return listed

    stop = threading.Event()
    loop = threading.Thread(target=firing.run_forever, args=(database_url, stop), daemon=True)
    loop.start()
    try:
        listed_once(lambda out: "no schedule firing process" not in out and "overdue" not in out)
        status = cli.invoke(app, ["status"])
        assert "rara schedules run (schedule firing)" in status.output, status.output
    finally:
        stop.set()
        conn.execute("NOTIFY rara_schedules")
        loop.join(10)
    since = listed_once(lambda out: "no schedule firing process is connected" in out)
    assert "(none has fired a tick since 20" in since
    assert " UTC)" in since
