"""Applying a schedule checks its input as a start of its definition would (the bounds, and the
input schemas of the version it starts), so a bad input is refused at apply, naming the field,
instead of at every tick; nothing is written. Runs as a rara_client login, as `rara schedules
apply` does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from rara.errors import InputInvalid, ScheduleInvalid
from rara.pg import schedules as schedule_sql
from rara.runs import start_run
from rara.schedules.manage import apply_schedule
from rara.schedules.model import WorkflowSchedule, schedule_from_object
from tests.support.definitions import apply

LIMIT = {"type": "object", "properties": {"limit": {"type": "integer", "minimum": 1}}}
REFUSED = (
    "spec.input: run input refused: input.limit: -1 is less than the minimum of 1 "
    "(input of step 'collect')"
)


@pytest.fixture
def client(role_url: Callable[[str], str]) -> Any:
    with psycopg.connect(role_url("rara_client"), autocommit=True) as conn:
        yield conn


def _schedule(definition: str = "collect", **spec: Any) -> WorkflowSchedule:
    return schedule_from_object(
        {
            "apiVersion": "rara.dev/v1alpha1",
            "kind": "WorkflowSchedule",
            "metadata": {"name": "nightly"},
            "spec": {"definition": definition, "schedule": "0 2 * * *", **spec},
        }
    )


def _collect(conn: psycopg.Connection[Any], schema: dict[str, Any] = LIMIT) -> int:
    return apply(
        conn,
        "collect",
        [{"key": "collect", "capability": "corpus.collect@1", "inputSchema": schema}],
    ).version


def test_an_input_the_schemas_refuse_is_refused_at_apply_and_nothing_is_written(
    conn: psycopg.Connection[Any], client: Any
) -> None:
    _collect(conn)
    with pytest.raises(ScheduleInvalid) as refused:
        apply_schedule(client, _schedule(input={"limit": -1}))
    assert refused.value.problems == [REFUSED]
    # The wording is a start's own: one rule, in rara.definitions.inputs.
    with pytest.raises(InputInvalid) as started:
        start_run(client, "collect", input={"limit": -1}, queue_anyway=True)
    assert f"spec.input: {started.value}" == REFUSED
    assert schedule_sql.get(conn, "nightly", namespace="default") is None
    assert conn.execute("SELECT count(*) FROM rara_runs").fetchone() == (0,)


def test_a_good_input_is_applied(conn: psycopg.Connection[Any], client: Any) -> None:
    _collect(conn)
    assert apply_schedule(client, _schedule(input={"limit": 30})).created
    row = schedule_sql.get(conn, "nightly", namespace="default")
    assert row is not None
    assert row.input == {"limit": 30}


def test_a_change_to_a_bad_input_leaves_the_stored_schedule(
    conn: psycopg.Connection[Any], client: Any
) -> None:
    _collect(conn)
    apply_schedule(client, _schedule(input={"limit": 30}))
    with pytest.raises(ScheduleInvalid, match=r"input\.limit: 0 is less than the minimum of 1"):
        apply_schedule(client, _schedule(input={"limit": 0}))
    row = schedule_sql.get(conn, "nightly", namespace="default")
    assert row is not None
    assert row.input == {"limit": 30}


def test_the_version_the_schedule_starts_is_the_one_checked(
    conn: psycopg.Connection[Any], client: Any
) -> None:
    first = _collect(conn)
    _collect(conn, {"type": "object", "required": ["day"]})  # the latest: needs a day
    with pytest.raises(ScheduleInvalid, match="'day' is a required property"):
        apply_schedule(client, _schedule(input={"limit": 30}))
    assert apply_schedule(client, _schedule(version=first, input={"limit": 30})).created


def test_a_definition_not_applied_yet_checks_only_the_bounds(
    conn: psycopg.Connection[Any], client: Any
) -> None:
    """A WorkflowSchedule may reach the operator before its WorkflowDefinition (one `kubectl
    apply -f` of both): its ticks check the input then, and refuse it by name if need be."""
    assert apply_schedule(client, _schedule("later", input={"limit": -1})).created
