"""Every (from, to) pair of both state machines: allowed ones succeed, every other is refused —
by the code's table and, separately, by the database's trigger."""

from __future__ import annotations

import itertools
import re
from typing import Any

import psycopg
import pytest

from rara.errors import ErrorCode
from rara.pg.migrate import function_files
from rara.pg.queries import query_files
from rara.states import (
    RUN_TRANSITIONS,
    STEP_TRANSITIONS,
    AttemptOutcome,
    IllegalTransition,
    RunStatus,
    StepStatus,
    check_run_transition,
    check_step_transition,
)
from tests.support.definitions import apply

STEP_PAIRS = list(itertools.product(StepStatus, StepStatus))
RUN_PAIRS = list(itertools.product(RunStatus, RunStatus))


def _step_columns(status: StepStatus) -> str:
    """Columns a step row needs to be legal in `status` (lease and finish constraints)."""
    cols = ["status = %(status)s"]
    if status is StepStatus.RUNNING:
        cols += [
            "leased_by = 'w'",
            "lease_token = gen_random_uuid()",
            "lease_expires_at = now() + interval '1 min'",
        ]
    else:
        cols += ["leased_by = NULL", "lease_token = NULL", "lease_expires_at = NULL"]
    cols.append("finished_at = now()" if status.terminal else "finished_at = NULL")
    return ", ".join(cols)


def _force_step(conn: psycopg.Connection[Any], step_id: int, status: StepStatus) -> None:
    """Put a step in `status` bypassing the transition trigger (test set-up only)."""
    conn.execute("ALTER TABLE rara_steps DISABLE TRIGGER rara_steps_transition")
    try:
        conn.execute(
            f"UPDATE rara_steps SET {_step_columns(status)} WHERE id = %(id)s",
            {"status": status.value, "id": step_id},
        )
    finally:
        conn.execute("ALTER TABLE rara_steps ENABLE TRIGGER rara_steps_transition")


@pytest.fixture
def step_id(conn: psycopg.Connection[Any]) -> int:
    from rara.runs import start_run

    apply(conn, "sm", [{"key": "a", "capability": "x@1"}])
    run = start_run(conn, "sm", queue_anyway=True)
    row = conn.execute("SELECT id FROM rara_steps WHERE run_id = %s", (run.run_id,)).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize(("old", "new"), STEP_PAIRS, ids=lambda s: str(s))
def test_step_transition_code(old: StepStatus, new: StepStatus) -> None:
    if (old, new) in STEP_TRANSITIONS:
        check_step_transition(old, new)
    else:
        with pytest.raises(IllegalTransition):
            check_step_transition(old, new)


@pytest.mark.parametrize(("old", "new"), RUN_PAIRS, ids=lambda s: str(s))
def test_run_transition_code(old: RunStatus, new: RunStatus) -> None:
    if (old, new) in RUN_TRANSITIONS:
        check_run_transition(old, new)
    else:
        with pytest.raises(IllegalTransition):
            check_run_transition(old, new)


def test_step_transitions_database(conn: psycopg.Connection[Any], step_id: int) -> None:
    """The trigger allows exactly the code's table (a no-op 'transition' is not a transition)."""
    for old, new in STEP_PAIRS:
        if old == new:
            continue
        _force_step(conn, step_id, old)
        update = f"UPDATE rara_steps SET {_step_columns(new)} WHERE id = %(id)s"
        if (old, new) in STEP_TRANSITIONS:
            conn.execute(update, {"status": new.value, "id": step_id})
        else:
            with pytest.raises(psycopg.errors.CheckViolation, match="illegal step transition"):
                conn.execute(update, {"status": new.value, "id": step_id})


def test_run_transitions_database(conn: psycopg.Connection[Any], step_id: int) -> None:
    run_id = conn.execute("SELECT run_id FROM rara_steps WHERE id = %s", (step_id,)).fetchone()
    assert run_id is not None

    def columns(status: RunStatus) -> str:
        started = "now()" if status is not RunStatus.PENDING else "NULL"
        finished = "now()" if status.terminal else "NULL"
        return f"status = %(s)s, started_at = {started}, finished_at = {finished}"

    for old, new in RUN_PAIRS:
        if old == new:
            continue
        conn.execute("ALTER TABLE rara_runs DISABLE TRIGGER rara_runs_transition")
        conn.execute(
            f"UPDATE rara_runs SET {columns(old)} WHERE id = %(id)s",
            {"s": old.value, "id": run_id[0]},
        )
        conn.execute("ALTER TABLE rara_runs ENABLE TRIGGER rara_runs_transition")
        update = f"UPDATE rara_runs SET {columns(new)} WHERE id = %(id)s"
        if (old, new) in RUN_TRANSITIONS:
            conn.execute(update, {"s": new.value, "id": run_id[0]})
        else:
            with pytest.raises(psycopg.errors.CheckViolation, match="illegal run transition"):
                conn.execute(update, {"s": new.value, "id": run_id[0]})


def test_database_table_matches_code(conn: psycopg.Connection[Any]) -> None:
    """The SQL functions the triggers use hold the same pairs as rara.states."""
    allowed = {
        (StepStatus(a), StepStatus(b))
        for a, b in conn.execute(
            "SELECT a, b FROM unnest(enum_range(NULL::rara_step_status)) a, "
            "unnest(enum_range(NULL::rara_step_status)) b WHERE rara_step_transition_allowed(a, b)"
        ).fetchall()
    }
    assert allowed == STEP_TRANSITIONS
    allowed_runs = {
        (RunStatus(a), RunStatus(b))
        for a, b in conn.execute(
            "SELECT a, b FROM unnest(enum_range(NULL::rara_run_status)) a, "
            "unnest(enum_range(NULL::rara_run_status)) b WHERE rara_run_transition_allowed(a, b)"
        ).fetchall()
    }
    assert allowed_runs == RUN_TRANSITIONS
    assert {s.value for s in StepStatus} == {
        r[0] for r in conn.execute("SELECT unnest(enum_range(NULL::rara_step_status))::text")
    }
    assert {s.value for s in RunStatus} == {
        r[0] for r in conn.execute("SELECT unnest(enum_range(NULL::rara_run_status))::text")
    }
    assert {o.value for o in AttemptOutcome} == {
        r[0] for r in conn.execute("SELECT unnest(enum_range(NULL::rara_attempt_outcome))::text")
    }


def test_error_codes_the_sql_writes_are_the_enum() -> None:
    """The stored codes db/functions writes itself are members of rara.errors.ErrorCode."""
    written = {
        code
        for text in [*query_files().values(), *function_files().values()]
        for code in re.findall(r"'code',\s*'([A-Z_]+)'", text)
    }
    assert written == {
        "LEASE_EXPIRED",
        "UPSTREAM_FAILED",
        "CANCELLED",
        "MAP_NOT_A_LIST",
        "MAP_TOO_LARGE",
        "MAP_CHILD_FAILED",
        "WAIT_TIMED_OUT",
        "APPROVAL_TIMED_OUT",
        "REJECTED",
    }
    assert written <= {c.value for c in ErrorCode}


def test_every_wire_error_code_maps_onto_the_enum() -> None:
    from rara.v1 import executor_pb2 as pb

    for name in (v.name for v in pb.ErrorCode.DESCRIPTOR.values):
        assert ErrorCode.from_wire_name(name).value == name.removeprefix("ERROR_CODE_")
    assert ErrorCode.of_rpc_status("UNAVAILABLE") is ErrorCode.EXECUTOR_UNAVAILABLE
    assert ErrorCode.of_rpc_status("DATA_LOSS") is ErrorCode.EXECUTOR_RPC_FAILED
