"""The named SQL (``db/queries/*.sql``) and its loader: one name space over every file, names
in one form, rows read by column name."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from rara.pg import definitions, runs, steps, workers
from rara.pg.queries import query_files, sql, statements
from rara.states import RunStatus, StepStatus

FILES = {
    "artifacts.sql",
    "definitions.sql",
    "events.sql",
    "lease.sql",
    "retention.sql",
    "runs.sql",
    "steps.sql",
    "workers.sql",
}


def test_every_file_loads_into_one_name_space() -> None:
    assert set(query_files()) >= FILES
    names = statements()
    for expected in (
        "step_lease",
        "step_heartbeat",
        "step_progress_many",
        "step_checkpoint",
        "step_end_many",
        "step_release_many",
        "step_reap_expired",
        "run_start",
        "run_cancel",
        "run_enqueue_many",
        "definition_register",
    ):
        assert expected in names
    assert "%(worker)s" in sql("step_lease")  # psycopg placeholders, parameters by name


def test_names_are_object_first_then_verb() -> None:
    """The runtime's files (FILES); a consumer's file of its own (ui.sql) prefixes its names."""
    objects = (
        "definition",
        "run",
        "step",
        "worker",
        "artifact",
        "event",
        "attempt",
        "database",
    )  # database_now: the database's clock
    files = query_files()
    for file in FILES:
        for name in re.findall(r"(?m)^-- name: (\w+)", files[file]):
            assert name.split("_")[0] in objects, name
    # The dead statements stay gone.
    for dead in (
        "run_notify",
        "step_checkpoint_latest",
        "step_inputs",
        # writes that are functions now (db/functions/), called by the names above
        "step_complete_many",
        "step_fail",
        "step_cancel",
        "run_count_many",
        "run_cancel_request",
        "step_cancel_waiting",
        "definition_version_insert",
    ):
        assert dead not in statements()


def test_a_name_in_two_files_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import rara.pg.queries as loader

    twice = "-- name: run_get^\nSELECT 1;\n"
    monkeypatch.setattr(loader, "query_files", lambda: {"a.sql": twice, "b.sql": twice})
    loader.statements.cache_clear()
    try:
        with pytest.raises(ValueError, match=r"run_get is defined in a\.sql and in b\.sql"):
            loader.statements()
    finally:
        loader.statements.cache_clear()


def test_no_statement_outside_the_folder_writes_steps() -> None:
    """The bulk inserts of tests and benchmarks are run_enqueue_many now."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for folder in ("rara", "worker", "bench", "operator"):
        for path in (root / folder).rglob("*.py"):
            assert not re.search(r"INSERT INTO rara_steps", path.read_text()), path


def test_rows_come_back_typed(conn: psycopg.Connection[Any]) -> None:
    from rara.definitions.parse import definition_from_object
    from rara.definitions.registry import apply_definition

    apply_definition(
        conn,
        definition_from_object(
            {
                "apiVersion": "rara.dev/v1alpha1",
                "kind": "WorkflowDefinition",
                "metadata": {"name": "pair"},
                "spec": {
                    "steps": [
                        {"key": "s0", "capability": "x@1"},
                        {"key": "s1", "capability": "x@1", "dependsOn": ["s0"]},
                    ]
                },
            }
        ),
    )
    [run_id] = runs.enqueue_many(
        conn,
        definition="pair",
        version=None,
        runs=1,
        steps=2,
        key="s",
        capability="x@1",
        chained=True,
    )
    run = runs.get(conn, run_id)
    assert run is not None
    assert run.status is RunStatus.PENDING
    assert run.definition == "pair"
    listed = steps.list_for_run(conn, run_id)
    assert [(s.key, s.status, s.depends_on) for s in listed] == [
        ("s0", StepStatus.READY, []),
        ("s1", StepStatus.BLOCKED, ["s0"]),
    ]
    version = definitions.version_get(conn, "pair", namespace="default")
    assert version is not None
    assert version.version == 1
    assert [b.capability for b in steps.backlog(conn)] == ["x@1"]
    assert workers.list_live(conn, 30) == []
