"""`rara triggers` as a user runs it: apply (again: unchanged), list, show with its events,
pause, resume, delete, and a bad document refused in one line naming the field."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from rara.cli.main import app
from rara.triggers.watching import watch_due
from rara.triggers.webhook_events import accept
from tests.support.definitions import noop_definition
from tests.triggers.conftest import delivery, resolve_test_secret

TRIGGER = """\
apiVersion: rara.dev/v1alpha1
kind: WorkflowTrigger
metadata: {name: docs-landed}
spec:
  definition: noop
  input: {limit: 3}
  webhook:
    secretRef: {name: docs-hook}
    inputFrom: {documents: /docs}
"""


@pytest.mark.usefixtures("wide_console")
def test_the_trigger_commands(
    conn: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    noop_definition(conn)
    doc = tmp_path / "trigger.yaml"
    doc.write_text(TRIGGER)
    cli = CliRunner(env={"DATABASE_URL": database_url})

    def ok(*args: str) -> str:
        result = cli.invoke(app, ["triggers", *args])
        assert result.exit_code == 0, result.output + result.stderr
        return result.output

    assert "docs-landed (created); deliveries go to POST /hooks/default/docs-landed" in ok(
        "apply", "-f", str(doc)
    )
    assert "(unchanged)" in ok("apply", "-f", str(doc))
    listed = ok("list")
    assert "docs-landed" in listed
    assert "active" in listed

    now = time.time()
    started = accept(conn, delivery({"docs": ["a"]}, "d-1"), now=now, secret_of=resolve_test_secret)
    accept(conn, delivery({"files": []}, "d-2"), now=now, secret_of=resolve_test_secret)
    shown = ok("show", "docs-landed")
    assert "webhook, active" in shown
    assert "secretRef:" in shown
    assert "toleranceSeconds: 300" in shown  # the spec as stored, defaults filled
    rows = {
        cells[0]: cells
        for line in shown.splitlines()
        if line.startswith("│")
        for cells in [[c.strip() for c in line.split("│")[1:-1]]]
    }
    assert rows["d-1"][:5] == ["d-1", "started", str(started.run_id), "pending", "1"]
    assert rows["d-2"][:2] == ["d-2", "refused"]
    assert "nothing at '/docs'" in shown

    assert "paused" in ok("pause", "docs-landed")
    assert "paused (already)" in ok("pause", "docs-landed")
    assert "paused" in ok("list")
    assert "resumed" in ok("resume", "docs-landed")
    assert "deleted" in ok("delete", "docs-landed")
    gone = cli.invoke(app, ["triggers", "show", "docs-landed"])
    assert gone.exit_code != 0
    assert "no trigger docs-landed" in gone.output + gone.stderr
    # the runs it started stay
    assert conn.execute("SELECT count(*) FROM rara_runs").fetchone() == (1,)


def test_a_bad_trigger_document_is_refused_naming_the_field(
    database_url: str, tmp_path: Path
) -> None:
    doc = tmp_path / "bad.yaml"
    doc.write_text(TRIGGER.replace("inputFrom: {documents: /docs}", "inputFrom: {documents: docs}"))
    result = CliRunner(env={"DATABASE_URL": database_url}).invoke(
        app, ["triggers", "apply", "-f", str(doc)]
    )
    assert result.exit_code != 0
    out = result.output + result.stderr
    assert "invalid workflow trigger:" in out
    assert "spec.webhook.inputFrom" in out
    assert "'docs' is not a JSON pointer" in out


@pytest.mark.usefixtures("wide_console")
def test_an_objects_trigger_shows_what_it_watches_and_why_it_cannot(
    conn: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    noop_definition(conn)
    doc = tmp_path / "watch.yaml"
    doc.write_text(
        "apiVersion: rara.dev/v1alpha1\nkind: WorkflowTrigger\nmetadata: {name: docs-changed}\n"
        "spec: {definition: noop, objects: {location: incoming, pollSeconds: 60}}\n"
    )
    cli = CliRunner(env={"DATABASE_URL": database_url})
    applied = cli.invoke(app, ["triggers", "apply", "-f", str(doc)])
    assert applied.exit_code == 0, applied.output
    assert "docs-changed (created); watching incoming" in applied.output
    watch_due(conn, None)  # no --objects-root: it cannot watch a folder
    shown = cli.invoke(app, ["triggers", "show", "docs-changed"])
    assert shown.exit_code == 0, shown.output
    assert "docs-changed: objects, active; watching incoming (0 objects seen); next pass" in (
        shown.output
    )
    assert "cannot watch since" in shown.output
    assert "this process watches no folders" in shown.output
