"""Freshness (rara.freshness): a definition that declares `freshness.maxAge` is stale when its
newest succeeded run is older than that (or, never run, when it was applied longer ago), and so
is a release name whose current release is a run of it; `rara status` and `rara releases list`
say so, and the operator's gauges carry it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from prometheus_client import REGISTRY
from typer.testing import CliRunner

from rara.cli.main import app
from rara.definitions.parse import canonical_spec, definition_from_object
from rara.errors import DefinitionInvalid
from rara.freshness import age_text, freshness
from rara.operator.pools import export_metrics
from rara.releases import promote
from rara.runs import start_run
from rara.triggers.manage import apply_trigger
from rara.triggers.model import trigger_from_object
from rara.triggers.watching import watch_due
from tests.support.definitions import apply, definition
from tests.support.freshness import STEPS, age, declared
from tests.support.runs import wait_run

Conn = psycopg.Connection[Any]


def test_a_definition_and_its_release_go_stale_past_their_max_age(
    conn: Conn, thread_worker: Callable[..., Any]
) -> None:
    apply(conn, "plain", STEPS)  # declares nothing: never judged
    declared(conn, "1h")
    [never] = freshness(conn, namespace="default")
    assert (never.kind, never.name, never.stale, never.made_at) == (
        "definition",
        "refresh",
        False,
        None,
    )
    age(conn, "rara_definitions", "created_at", 2)
    [never] = freshness(conn, namespace="default")
    assert never.stale
    assert never.describe().startswith("stale: 2h")
    assert never.describe().endswith("old (never made), at most 1h")

    thread_worker()
    run_id = start_run(conn, "refresh", queue_anyway=True).run_id
    wait_run(conn, run_id, status="succeeded")
    promote(conn, "index", run_id, namespace="default")
    judged = {(f.kind, f.name): f for f in freshness(conn, namespace="default")}
    assert not judged["definition", "refresh"].stale
    assert judged["definition", "refresh"].run_id == run_id
    assert not judged["release", "index"].stale

    age(conn, "rara_releases", "promoted_at", 3)
    judged = {(f.kind, f.name): f for f in freshness(conn, namespace="default")}
    assert judged["release", "index"].stale  # the release is old, the definition's run is not
    assert not judged["definition", "refresh"].stale

    export_metrics([], {}, list(judged.values()))
    labels = {"namespace": "default", "kind": "release", "name": "index"}
    assert REGISTRY.get_sample_value("rara_stale", labels) == 1
    assert REGISTRY.get_sample_value("rara_freshness_age_seconds", labels) >= 3 * 3600  # type: ignore[operator]

    cli = CliRunner(env={"DATABASE_URL": conn.info.dsn, "COLUMNS": "250"})
    listed = cli.invoke(app, ["releases", "list"])
    assert listed.exit_code == 0, listed.output
    assert "stale: 3h" in listed.output
    status = cli.invoke(app, ["status"])
    assert status.exit_code == 0, status.output
    assert "release index" in status.output
    assert "definition refresh" not in status.output


@pytest.mark.parametrize(("value", "problem"), [("30s", "at least 1m"), ("soon", "not a duration")])
def test_a_bad_max_age_is_refused_naming_the_field(value: str, problem: str) -> None:
    doc = definition("refresh", STEPS)
    doc["spec"]["freshness"] = {"maxAge": value}
    with pytest.raises(DefinitionInvalid) as refused:
        definition_from_object(doc)
    assert "spec.freshness.maxAge" in str(refused.value)
    assert problem in str(refused.value)


def test_a_spec_without_freshness_keeps_its_digest() -> None:
    plain = definition_from_object(definition("refresh", STEPS))
    assert "freshness" not in canonical_spec(plain.spec)


def test_ages_read_in_their_two_largest_units() -> None:
    assert age_text(timedelta(days=9, hours=2, minutes=5)) == "9d 2h"
    assert age_text(timedelta(minutes=3, seconds=4)) == "3m 4s"
    assert age_text(timedelta(seconds=0)) == "0s"


def test_a_stale_trigger_starts_one_run_per_stale_episode(
    conn: Conn, thread_worker: Callable[..., Any]
) -> None:
    declared(conn, "1h")
    doc = {
        "apiVersion": "rara.dev/v1alpha1",
        "kind": "WorkflowTrigger",
        "metadata": {"name": "refresh-when-stale"},
        "spec": {"definition": "refresh", "stale": {"definition": "refresh"}},
    }
    apply_trigger(conn, trigger_from_object(doc))

    def watch() -> int:
        conn.execute("UPDATE rara_triggers SET next_poll = now()")
        return watch_due(conn, None).started

    assert watch() == 0  # applied just now: fresh
    age(conn, "rara_definitions", "created_at", 2)
    assert watch() == 1  # never run, and applied 2 h ago: stale
    assert watch() == 0  # the same episode: nothing more
    [(key, given)] = conn.execute(
        "SELECT idempotency_key, input -> 'stale' FROM rara_runs"
    ).fetchall()
    assert key == "trigger:refresh-when-stale:stale-never"
    assert given == {
        "definition": "refresh",
        "maxAge": "1h",
        "ageSeconds": given["ageSeconds"],
        "run": None,
    }
    assert given["ageSeconds"] >= 7200

    thread_worker()  # the refresh runs: fresh again
    wait_run(
        conn, int(conn.execute("SELECT max(id) FROM rara_runs").fetchone()[0]), status="succeeded"
    )  # type: ignore[index]
    assert watch() == 0
    age(conn, "rara_runs", "finished_at", 2)  # and ages: a new episode
    assert watch() == 1
    keys = [k for (k,) in conn.execute("SELECT event_key FROM rara_trigger_events ORDER BY 1")]
    assert keys[0].startswith("stale-")
    assert keys[0] != "stale-never"
