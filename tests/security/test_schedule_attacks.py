"""Schedules act in their own namespace, and one schedule cannot stop the others
(docs/schedules.md, "Who may name which run" and "A schedule that cannot fire").

Two teams, isolated (`rara access isolate`), each with its definition; the firing login may
act in every namespace ('*'), as the operator's does. Each attack is tried as the weakest
login that could try it: a team's client, calling the schedule functions directly rather than
through the CLI. The firing must never be a way into another team's runs: a schedule records,
reads and cancels only the runs of its own ticks. And a schedule the firing cannot plan (a
bad cron or zone) is refused at apply, whoever calls it; one that exists anyway (a row the
owner wrote) is refused by the firing and skipped, and the others fire.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

from rara.pg import schedules as schedule_sql
from rara.runs import start_run
from rara.schedules import firing, manage
from rara.schedules.model import schedule_from_object
from tests.support.definitions import noop_definition

Conn = psycopg.Connection[Any]
Refused = psycopg.errors.InvalidParameterValue
TEAMS = ("team-a", "team-b")


def _schedule(name: str, **spec: Any) -> Any:
    return schedule_from_object(
        {
            "apiVersion": "rara.dev/v1alpha1",
            "kind": "WorkflowSchedule",
            "metadata": {"name": name},
            "spec": {"definition": "noop", "schedule": "* * * * * *", **spec},
        }
    )


def _make_due(conn: Conn, namespace: str, name: str) -> None:
    conn.execute(
        "UPDATE rara_schedules SET next_tick = date_trunc('second', now()) - interval '1 second'"
        " WHERE namespace = %s AND name = %s",
        (namespace, name),
    )


@pytest.fixture
def team_login(
    conn: Conn, database_url: str, role_url: Callable[[str], str]
) -> Iterator[Callable[[str, str], Conn]]:
    """``team_login(group, namespace)``: a new login in ``group`` and in a role the owner
    granted ``namespace`` ('*': every one), once isolation is on."""
    roles: list[str] = []
    opened: list[Conn] = []

    def make(group: str, namespace: str) -> Conn:
        role = f"t_team_{uuid.uuid4().hex[:8]}"
        conn.execute(sql.SQL("CREATE ROLE {} IN ROLE rara_reader").format(sql.Identifier(role)))
        roles.append(role)
        conn.execute(
            "INSERT INTO rara_namespace_access (role, namespace) VALUES (%s, %s)",
            (role, namespace),
        )
        url = role_url(group)
        user = str(psycopg.conninfo.conninfo_to_dict(url)["user"])
        conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(role), sql.Identifier(user)))
        opened.append(psycopg.connect(url, autocommit=True))
        return opened[-1]

    yield make
    for c in opened:
        c.close()
    for role in roles:
        conn.execute("DELETE FROM rara_namespace_access WHERE role = %s", (role,))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.fixture
def teams(conn: Conn) -> dict[str, int]:
    """Each team's `noop` definition and a pending run of it (no worker: it stays pending),
    and team-a's schedule `nightly` under Replace; isolation on. Team → its run id."""
    runs = {}
    for ns in TEAMS:
        noop_definition(conn, namespace=ns)
        runs[ns] = start_run(conn, "noop", namespace=ns, queue_anyway=True).run_id
    manage.apply_schedule(
        conn, _schedule("nightly", concurrencyPolicy="Replace"), namespace="team-a"
    )
    assert conn.execute("SELECT rara_namespace_isolation(true)").fetchone() == (False,)
    return runs


def _decide(login: Conn, tick: datetime, run_id: int, missed: int = 0) -> None:
    login.execute(
        "SELECT rara_schedule_decide(%s, %s, %s, NULL, 'team-a')",
        (
            "nightly",
            Jsonb([{"tick": tick.isoformat(), "outcome": "started", "run_id": run_id}]),
            missed,
        ),
    )


def _run(conn: Conn, run_id: int) -> tuple[str, bool]:
    row = conn.execute(
        "SELECT status::text, cancel_requested FROM rara_runs WHERE id = %s", (run_id,)
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def _db_now(conn: Conn) -> datetime:
    return manage.database_now(conn)


def test_a_team_cannot_make_another_teams_run_its_schedules_last_run(
    conn: Conn, teams: dict[str, int], team_login: Callable[[str, str], Conn]
) -> None:
    """The attack: team-a's client records team-b's run as the last run of team-a's Replace
    schedule; the firing, which acts in every namespace, would cancel it at the next tick."""
    a = team_login("rara_client", "team-a")
    fire = team_login("rara_operator", "*")
    with pytest.raises(Refused, match="is not the run of schedule nightly of namespace team-a"):
        _decide(a, _db_now(conn), teams["team-b"])
    # Nor a run of its own namespace that is no tick's run of the schedule.
    with pytest.raises(Refused, match="is not the run of schedule nightly"):
        _decide(a, _db_now(conn), teams["team-a"])
    row = schedule_sql.get(conn, "nightly", namespace="team-a")
    assert row is not None
    assert row.last_run_id is None
    _make_due(conn, "team-a", "nightly")
    assert firing.fire_due(fire).started >= 1
    assert _run(conn, teams["team-b"]) == ("pending", False)
    # Replace's cancel itself names the schedule, and cancels only that schedule's last run.
    with pytest.raises(Refused, match="is not the last run of schedule nightly"):
        a.execute("SELECT rara_schedule_cancel_run('nightly', %s, 'team-a')", (teams["team-b"],))
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        a.execute("SELECT rara_schedule_cancel_run('nightly', %s, 'team-b')", (teams["team-b"],))
    assert _run(conn, teams["team-b"]) == ("pending", False)


def test_the_claim_tells_nothing_of_a_run_that_is_not_the_schedules(
    conn: Conn, teams: dict[str, int], team_login: Callable[[str, str], Conn]
) -> None:
    """The oracle: the claim said whether the recorded last run had ended, whosever it was.
    Even where a row names a foreign run (the owner wrote it; a decide no longer can), the
    claim says nothing of it and the firing's Replace leaves it alone."""
    a = team_login("rara_client", "team-a")
    fire = team_login("rara_operator", "*")
    conn.execute(
        "UPDATE rara_schedules SET last_run_id = %s, last_tick = now() - interval '1 minute'"
        " WHERE namespace = 'team-a' AND name = 'nightly'",
        (teams["team-b"],),
    )
    _make_due(conn, "team-a", "nightly")
    with a.transaction():
        (due,) = schedule_sql.claim(a, 10)
        assert (due.name, due.last_run_id, due.last_run_ended) == (
            "nightly",
            teams["team-b"],
            None,
        )
    firing.fire_due(fire)
    assert _run(conn, teams["team-b"]) == ("pending", False)


def test_missed_ticks_cannot_be_counted_down(
    conn: Conn, teams: dict[str, int], team_login: Callable[[str, str], Conn]
) -> None:
    a = team_login("rara_client", "team-a")
    with pytest.raises(Refused, match="missed ticks -1000000 of schedule nightly is not a count"):
        a.execute("SELECT rara_schedule_decide('nightly', '[]', -1000000, NULL, 'team-a')")
    row = schedule_sql.get(conn, "nightly", namespace="team-a")
    assert row is not None
    assert row.missed_ticks == 0


@pytest.mark.parametrize(
    ("cron", "zone", "problem"),
    [
        ("61 * * * *", "UTC", "spec.schedule: '61 * * * *' is not a cron expression: Bad minute"),
        ("0 0 31 2 *", "UTC", "is not a cron expression: Bad day-of-month"),
        ("* * * *", "UTC", "is not a cron expression: Wrong number of fields"),
        ("0 2 * * *", "Mars/Olympus", "spec.timeZone: 'Mars/Olympus' is not an IANA time zone"),
    ],
)
def test_a_schedule_applied_through_sql_with_a_bad_cron_or_zone_is_refused(
    conn: Conn,
    teams: dict[str, int],
    team_login: Callable[[str, str], Conn],
    cron: str,
    zone: str,
    problem: str,
) -> None:
    """The poison's way in: rara_schedule_apply called directly, past the document check."""
    a = team_login("rara_client", "team-a")
    with pytest.raises(Refused, match="invalid workflow schedule") as refused:
        schedule_sql.apply(
            a,
            namespace="team-a",
            name="poison",
            spec={"schedule": cron, "timeZone": zone},
            next_tick=_db_now(conn),
            definition="noop",
            version=None,
            cron=cron,
            time_zone=zone,
            input={},
            concurrency_policy="Allow",
            starting_deadline_seconds=300,
            suspended=False,
            successful_runs_kept=3,
            failed_runs_kept=1,
        )
    assert problem in str(refused.value)
    assert schedule_sql.get(conn, "poison", namespace="team-a") is None


def test_a_schedules_input_over_the_run_input_limit_is_refused_at_apply(
    conn: Conn, teams: dict[str, int], team_login: Callable[[str, str], Conn]
) -> None:
    """Every tick would start a run with this input: it is refused where it enters, by the
    run input's limit, not once per firing."""
    limit = conn.execute("SELECT (rara_limits() ->> 'run_input_bytes')::int").fetchone()
    assert limit is not None
    fat = {"blob": "x" * (2 * limit[0])}
    with pytest.raises(psycopg.Error) as refused:
        schedule_sql.apply(
            team_login("rara_client", "team-a"),
            namespace="team-a",
            name="fat",
            spec={"schedule": "0 * * * *", "input": fat},
            next_tick=_db_now(conn),
            definition="noop",
            version=None,
            cron="0 * * * *",
            time_zone="UTC",
            input=fat,
            concurrency_policy="Allow",
            starting_deadline_seconds=300,
            suspended=False,
            successful_runs_kept=3,
            failed_runs_kept=1,
        )
    assert refused.value.sqlstate == "54000", refused.value
    assert "spec.input is" in str(refused.value)
    assert "run_input_bytes" in str(refused.value)
    assert schedule_sql.get(conn, "fat", namespace="team-a") is None


@pytest.mark.parametrize(
    ("column", "value", "reason"),
    [
        ("cron", "61 * * * *", "'61 * * * *' is not a cron expression: Bad minute"),
        ("time_zone", "Mars/Olympus", "'Mars/Olympus' is not an IANA time zone"),
    ],
)
def test_a_poison_schedule_is_refused_by_the_firing_and_the_others_fire(
    conn: Conn,
    teams: dict[str, int],
    team_login: Callable[[str, str], Conn],
    column: str,
    value: str,
    reason: str,
) -> None:
    """One that exists anyway (the owner wrote the row): the firing refuses it, alone."""
    a = team_login("rara_client", "team-a")
    fire = team_login("rara_operator", "*")
    manage.apply_schedule(conn, _schedule("every-second"), namespace="team-b")
    conn.execute(
        sql.SQL("UPDATE rara_schedules SET {} = %s WHERE namespace = 'team-a'").format(
            sql.Identifier(column)
        ),
        (value,),
    )
    _make_due(conn, "team-a", "nightly")
    _make_due(conn, "team-b", "every-second")
    counts = firing.fire_due(fire)
    assert counts.refused_schedules == 1
    assert counts.started >= 1  # team-b's
    row = schedule_sql.get(conn, "nightly", namespace="team-a")
    assert row is not None
    assert row.refused_reason is not None
    assert reason in row.refused_reason
    assert row.refused_at is not None
    # Not taken again (nor slept on) until it is applied again, which lifts the refusal.
    assert firing.fire_due(fire).refused_schedules == 0
    assert schedule_sql.next_due(fire).next_tick != row.next_tick
    applied = manage.apply_schedule(a, _schedule("nightly"), namespace="team-a")
    assert applied.changed
    row = schedule_sql.get(conn, "nightly", namespace="team-a")
    assert row is not None
    assert (row.refused_reason, row.refused_at, row.cron, row.time_zone) == (
        None,
        None,
        "* * * * * *",
        "UTC",
    )
