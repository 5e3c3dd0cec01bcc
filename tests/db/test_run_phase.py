"""A run's phase (rara_run_phase, db/functions/waits.sql): its status, except `waiting` for an
unfinished run whose open steps all wait (an approval gate, a signal, a timer) or are blocked
behind one; derived at each read, as the caller's row-level security lets it see the run."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from rara import waits
from rara.errors import InputInvalid
from rara.pg import runs as run_sql
from rara.pg import waits as wait_sql
from rara.runs import start_run
from tests.support.definitions import apply
from tests.support.leasing import lease_now


def _phase(conn: psycopg.Connection[Any], run_id: int) -> tuple[str, list[dict[str, Any]] | None]:
    row = run_sql.get(conn, run_id)
    assert row is not None
    return row.phase, row.waiting_for


def _waits(found: list[dict[str, Any]] | None) -> list[tuple[str, str, str | None]]:
    return [(w["step"], w["kind"], w["signal"]) for w in found or []]


def test_a_run_at_its_gate_is_waiting_with_the_gate_named(
    conn: psycopg.Connection[Any],
) -> None:
    apply(
        conn,
        "gated",
        [
            {"key": "release", "approval": {}},
            {"key": "publish", "capability": "test.noop@1", "dependsOn": ["release"]},
        ],
    )
    run_id = start_run(conn, "gated", queue_anyway=True).run_id
    phase, found = _phase(conn, run_id)
    # Stored: pending (a run that began with a wait has had no lease); read: waiting.
    assert run_sql.get(conn, run_id).status.value == "pending"  # type: ignore[union-attr]
    assert phase == "waiting"
    assert _waits(found) == [("release", "approval", None)]
    assert waits.run_phase_text(phase, found) == "waiting for approval of gate release"
    # The list, its filter and the operator's read say the same.
    assert [(r.id, r.phase) for r in run_sql.list_recent(conn, "waiting", 10, namespace=None)] == [
        (run_id, "waiting")
    ]
    assert run_sql.list_recent(conn, "pending", 10, namespace=None) == []
    assert [r.phase for r in run_sql.status_many(conn, [run_id])] == ["waiting"]
    # Decided: the gate ends, publish becomes ready, and the run is no longer waiting.
    waits.decide(conn, run_id, "release", approve=True)
    assert _phase(conn, run_id) == ("running", None)


def test_a_step_running_beside_a_gate_keeps_the_run_running(
    conn: psycopg.Connection[Any],
) -> None:
    apply(
        conn,
        "beside",
        [
            {"key": "work", "capability": "test.noop@1"},
            {"key": "gate", "approval": {}},
        ],
    )
    run_id = start_run(conn, "beside", queue_anyway=True).run_id
    assert _phase(conn, run_id) == ("pending", None)  # work is ready: not waiting
    assert [s.key for s in lease_now(conn, ["test.noop@1"], worker="w1", limit=1)] == ["work"]
    assert _phase(conn, run_id) == ("running", None)
    assert wait_sql.for_person(conn, run_id) == []  # `runs watch` does not stop either
    assert run_sql.list_recent(conn, "waiting", 10, namespace=None) == []
    assert [r.id for r in run_sql.list_recent(conn, "running", 10, namespace=None)] == [run_id]


def test_a_run_waiting_for_a_signal_or_a_timer_is_waiting(
    conn: psycopg.Connection[Any],
) -> None:
    apply(conn, "sig", [{"key": "ready", "wait": {"signal": "data-ready", "timeout": "1h"}}])
    apply(conn, "nap", [{"key": "nap", "wait": {"for": "1h"}}])
    signalled = start_run(conn, "sig", queue_anyway=True).run_id
    napping = start_run(conn, "nap", queue_anyway=True).run_id
    phase, found = _phase(conn, signalled)
    assert (phase, _waits(found)) == ("waiting", [("ready", "signal", "data-ready")])
    assert found
    assert found[0]["due_at"]
    assert waits.run_phase_text(phase, found).startswith(
        "waiting for signal data-ready (step ready, deadline "
    )
    assert [w.step_key for w in wait_sql.for_person(conn, signalled)] == ["ready"]
    phase, found = _phase(conn, napping)
    assert (phase, _waits(found)) == ("waiting", [("nap", "timer", None)])
    assert waits.run_phase_text(phase, found).startswith("waiting for timer of step nap until ")
    assert wait_sql.for_person(conn, napping) == []  # time moves it on, not a person
    # Signalled: the step succeeds and the run ends.
    waits.signal(conn, signalled, "data-ready", {"rows": 1})
    assert _phase(conn, signalled) == ("succeeded", None)


def test_ended_runs_keep_their_status(conn: psycopg.Connection[Any]) -> None:
    apply(conn, "gated", [{"key": "release", "approval": {}}])
    rejected = start_run(conn, "gated", queue_anyway=True).run_id
    cancelled = start_run(conn, "gated", queue_anyway=True).run_id
    waits.decide(conn, rejected, "release", approve=False)
    run_sql.cancel(conn, cancelled)
    assert _phase(conn, rejected) == ("failed", None)
    assert _phase(conn, cancelled) == ("cancelled", None)
    assert {r.phase for r in run_sql.list_recent(conn, None, 10, namespace=None)} == {
        "failed",
        "cancelled",
    }


def test_a_team_sees_the_phase_of_its_own_runs_only(
    conn: psycopg.Connection[Any], role_url: Any
) -> None:
    apply(conn, "gated", [{"key": "release", "approval": {}}], namespace="team-a")
    apply(conn, "gated", [{"key": "release", "approval": {}}], namespace="team-b")
    mine = start_run(conn, "gated", namespace="team-a", queue_anyway=True).run_id
    theirs = start_run(conn, "gated", namespace="team-b", queue_anyway=True).run_id
    url = role_url("rara_reader")
    login = url.split("//", 1)[1].split("@", 1)[0]
    conn.execute("SELECT rara_namespace_isolation(true)")
    conn.execute(
        "INSERT INTO rara_namespace_access (role, namespace) VALUES (%s, 'team-a')", (login,)
    )
    with psycopg.connect(url, autocommit=True) as team:
        assert [
            (r.id, r.phase) for r in run_sql.list_recent(team, "waiting", 10, namespace=None)
        ] == [(mine, "waiting")]
        # The function runs as its caller: another team's run, named, shows no wait.
        assert team.execute(
            "SELECT phase, waiting_for FROM rara_run_phase(%s, 'running')", (theirs,)
        ).fetchone() == ("running", None)


def test_a_filter_names_the_statuses_it_knows() -> None:
    assert waits.check_phase("waiting") == "waiting"
    with pytest.raises(InputInvalid) as refused:
        waits.check_phase("stuck")
    assert str(refused.value) == (
        "unknown run status 'stuck': use one of "
        "pending, running, waiting, paused, succeeded, failed, cancelled"
    )
