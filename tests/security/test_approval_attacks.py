"""Who decides an approval is the database's word (docs/waits.md, "Who may decide").

Before, rara_approval_decide took the decider's name from the caller (p_identity) from any
role granted it: a client that was no approver named an approver, or a group role of
approvers, and the gate was approved; a decision after the gate's deadline went through
while no worker had fired it yet; whoever started a run could approve its release alone.
Now a caller decides as its own role, only a member of rara_vouch (the dashboard's login, the
operator) names a person, a role approver is matched by the real caller's membership, a
deadline that passed refuses the decision, a worker's login never decides, and a gate's
four-eyes rule keeps the run's starter from deciding it. Each attack as the weakest login that
could try it."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from rara import waits
from rara.errors import WaitRefused
from rara.runs import start_run
from tests.support.definitions import apply
from tests.support.runs import steps_of, wait_run, waiting_of

Login = Callable[[str | None], psycopg.Connection[Any]]
CAROL = "carol@example.com"  # an approver by name: no database role


@pytest.fixture
def managers(conn: psycopg.Connection[Any]) -> Iterator[str]:
    """A group role of approvers (roles are cluster-wide: a name of this test's own)."""
    name = f"managers_{uuid.uuid4().hex[:8]}"
    conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(name)))
    yield name
    conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def _user(c: psycopg.Connection[Any]) -> str:
    return str(c.info.user)


def _gate(
    conn: psycopg.Connection[Any], name: str, approval: dict[str, Any], *, after: bool = False
) -> None:
    """A definition whose step `gate` waits for a decision at once; ``after``: a second gate
    after it, so that it guards no release (four-eyes off by default)."""
    steps: list[dict[str, Any]] = [{"key": "gate", "approval": approval}]
    if after:
        steps.append({"key": "last", "dependsOn": ["gate"], "approval": {}})
    apply(conn, name, steps)


def _decision(conn: psycopg.Connection[Any], run_id: int) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT decision, decided_by, decided_login FROM rara_approvals"
        " WHERE run_id = %s AND step_key = 'gate'",
        (run_id,),
    ).fetchone()
    return tuple(row or ())


def _undecided(conn: psycopg.Connection[Any], run_id: int) -> None:
    assert _decision(conn, run_id)[0] is None
    assert "gate" in waiting_of(conn, run_id)


def test_a_client_naming_an_approver_is_refused(
    conn: psycopg.Connection[Any], login: Login, managers: str
) -> None:
    _gate(conn, "strict", {"approvers": [CAROL, managers]})
    run_id = start_run(conn, "strict", queue_anyway=True).run_id
    mallory = login("rara_client")
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as refused:
        waits.decide(mallory, run_id, "gate", approve=True, identity=CAROL)
    assert f"{_user(mallory)} may not act for another person (identity {CAROL})" in str(
        refused.value
    )
    _undecided(conn, run_id)


def test_a_client_naming_a_group_role_of_approvers_is_refused(
    conn: psycopg.Connection[Any], login: Login, managers: str
) -> None:
    _gate(conn, "strict", {"approvers": [managers]})
    run_id = start_run(conn, "strict", queue_anyway=True).run_id
    mallory = login("rara_client")
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="may not act for another"):
        waits.decide(mallory, run_id, "gate", approve=True, identity=managers)
    # Without a name: as itself, no member of the role.
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="may not decide approval"):
        waits.decide(mallory, run_id, "gate", approve=True)
    _undecided(conn, run_id)


def test_a_login_that_may_not_vouch_names_nobody_even_at_an_open_gate(
    conn: psycopg.Connection[Any], login: Login
) -> None:
    """A gate without approvers takes any client's decision, recorded as that client, not as
    whoever it names (the record is the evidence of who decided). Of the group roles only the
    operator's vouches (migration 0025): kubectl's approvals, checked by the chart's policy."""
    _gate(conn, "open", {})
    run_id = start_run(conn, "open", queue_anyway=True).run_id
    mallory = login("rara_client")
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="only a member of rara_vouch"):
        waits.decide(mallory, run_id, "gate", approve=True, identity="the-ceo")
    _undecided(conn, run_id)
    assert conn.execute(
        "SELECT pg_has_role('rara_client', 'rara_vouch', 'MEMBER'),"
        " pg_has_role('rara_worker', 'rara_vouch', 'MEMBER'),"
        " pg_has_role('rara_reader', 'rara_vouch', 'MEMBER'),"
        " pg_has_role('rara_operator', 'rara_vouch', 'MEMBER')"
    ).fetchone() == (False, False, False, True)


def test_a_vouched_name_never_matches_a_role_approver(
    conn: psycopg.Connection[Any], login: Login, managers: str
) -> None:
    """The dashboard vouches for the user its proxy names; a user named like the role of
    approvers is not one of its members."""
    _gate(conn, "strict", {"approvers": [managers]})
    run_id = start_run(conn, "strict", queue_anyway=True).run_id
    ui = login("rara_client")
    conn.execute(sql.SQL("GRANT rara_vouch TO {}").format(sql.Identifier(_user(ui))))
    conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(managers),
                                                  sql.Identifier(_user(ui))))  # fmt: skip
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as refused:
        waits.decide(ui, run_id, "gate", approve=True, identity=managers)
    assert f"{managers} via {_user(ui)} may not decide approval gate" in str(refused.value)
    _undecided(conn, run_id)


def test_a_workers_login_never_decides(conn: psycopg.Connection[Any], login: Login) -> None:
    _gate(conn, "open", {})
    run_id = start_run(conn, "open", queue_anyway=True).run_id
    worker = login("rara_worker")
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="rara_approval_decide"):
        waits.decide(worker, run_id, "gate", approve=True)
    # Even a worker's login that was also given a client's role.
    conn.execute(sql.SQL("GRANT rara_client TO {}").format(sql.Identifier(_user(worker))))
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as refused:
        waits.decide(worker, run_id, "gate", approve=True)
    assert "a worker never decides an approval" in str(refused.value)
    _undecided(conn, run_id)


def test_a_decision_after_the_deadline_is_refused_with_no_worker_firing(
    conn: psycopg.Connection[Any], login: Login
) -> None:
    """The pool scaled to zero: nothing fires the gate's deadline; the database refuses the
    late decision itself, and the gate ends as its rule says when a worker comes back."""
    _gate(conn, "deadline", {"timeout": "1h"})
    run_id = start_run(conn, "deadline", queue_anyway=True).run_id
    conn.execute("UPDATE rara_waits SET due_at = now() - interval '1 second' WHERE run_id = %s",
                 (run_id,))  # fmt: skip
    client = login("rara_client")
    with pytest.raises(WaitRefused, match=r"approval gate passed its deadline \("):
        waits.decide(client, run_id, "gate", approve=True)
    _undecided(conn, run_id)
    assert conn.execute("SELECT fired FROM rara_waits_fire(10)").fetchone() == (1,)
    wait_run(conn, run_id, status="failed", timeout=5)
    assert _decision(conn, run_id)[0] == "timed_out"


def test_who_started_a_run_may_not_approve_its_release(
    conn: psycopg.Connection[Any], login: Login
) -> None:
    _gate(conn, "release", {})  # no gate after it: four-eyes on by default
    alice, bob = login("rara_client"), login("rara_client")
    run_id = start_run(alice, "release", queue_anyway=True).run_id
    for approve in (True, False):
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as refused:
            waits.decide(alice, run_id, "gate", approve=approve)
        assert f"{_user(alice)} started this run and may not also decide approval gate" in str(
            refused.value
        )
    _undecided(conn, run_id)
    assert conn.execute("SELECT started_by FROM rara_runs WHERE id = %s", (run_id,)).fetchone() == (
        _user(alice),
    )
    # Another person: approved.
    decided = waits.decide(bob, run_id, "gate", approve=True)
    assert (decided.recorded, decided.decided_by) == (True, _user(bob))
    wait_run(conn, run_id, status="succeeded", timeout=5)


def test_four_eyes_is_the_gates_setting(conn: psycopg.Connection[Any], login: Login) -> None:
    """Off when the definition says so, and by default for a gate with another after it; the
    last gate, which a release waits for, keeps it."""
    alice = login("rara_client")
    _gate(conn, "alone", {"fourEyes": False})
    run_id = start_run(alice, "alone", queue_anyway=True).run_id
    assert waits.decide(alice, run_id, "gate", approve=True).recorded
    wait_run(conn, run_id, status="succeeded", timeout=5)

    _gate(conn, "two", {}, after=True)
    run_id = start_run(alice, "two", queue_anyway=True).run_id
    assert waits.decide(alice, run_id, "gate", approve=True).recorded  # not the last gate
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="fourEyes"):
        waits.decide(alice, run_id, "last", approve=True)

    _gate(conn, "strict", {"fourEyes": True}, after=True)
    run_id = start_run(alice, "strict", queue_anyway=True).run_id
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="fourEyes"):
        waits.decide(alice, run_id, "gate", approve=True)


def test_a_vouched_starter_may_not_approve_through_the_dashboard(
    conn: psycopg.Connection[Any], login: Login
) -> None:
    """The dashboard's login starts a run for ana (rara.identity) and vouches for whoever
    decides: ana is refused under four-eyes, bo approves, recorded as `bo via <login>`."""
    _gate(conn, "release", {})
    ui = login("rara_client")
    name = _user(ui)
    conn.execute(sql.SQL("GRANT rara_vouch TO {}").format(sql.Identifier(name)))
    ui.execute("SELECT set_config('rara.identity', 'ana@example.com', false)")
    run_id = start_run(ui, "release", queue_anyway=True).run_id
    ui.execute("SELECT set_config('rara.identity', '', false)")
    assert conn.execute("SELECT started_by FROM rara_runs WHERE id = %s", (run_id,)).fetchone() == (
        f"ana@example.com via {name}",
    )
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="started this run"):
        waits.decide(ui, run_id, "gate", approve=True, identity="ana@example.com")
    decided = waits.decide(ui, run_id, "gate", approve=True, identity="bo@example.com")
    assert decided.decided_by == f"bo@example.com via {name}"
    assert _decision(conn, run_id) == ("approved", f"bo@example.com via {name}", name)
    [gate] = [s for s in steps_of(conn, run_id) if s["key"] == "gate"]
    assert gate["result"]["decided_by"] == f"bo@example.com via {name}"


def test_a_starter_name_from_a_login_that_may_not_vouch_is_ignored(
    conn: psycopg.Connection[Any], login: Login
) -> None:
    """rara.identity is any session's to set: from a login outside rara_vouch the run records
    the login, so mallory cannot pin a run on someone else to approve it herself."""
    _gate(conn, "release", {})
    mallory = login("rara_client")
    mallory.execute("SELECT set_config('rara.identity', 'bo@example.com', false)")
    run_id = start_run(mallory, "release", queue_anyway=True).run_id
    assert conn.execute("SELECT started_by FROM rara_runs WHERE id = %s", (run_id,)).fetchone() == (
        _user(mallory),
    )
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="started this run"):
        waits.decide(mallory, run_id, "gate", approve=True)


def test_a_real_approver_decides_as_itself(
    conn: psycopg.Connection[Any], login: Login, managers: str
) -> None:
    _gate(conn, "strict", {"approvers": [CAROL, managers]})
    run_id = start_run(conn, "strict", queue_anyway=True).run_id
    member = login("rara_client")
    conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(managers),
                                                  sql.Identifier(_user(member))))  # fmt: skip
    decided = waits.decide(member, run_id, "gate", approve=True, reason="checked")
    assert (decided.recorded, decided.decided_by) == (True, _user(member))
    assert _decision(conn, run_id) == ("approved", _user(member), _user(member))
    wait_run(conn, run_id, status="succeeded", timeout=5)


def test_the_dashboard_vouches_for_an_approver_by_name(
    conn: psycopg.Connection[Any], login: Login, managers: str
) -> None:
    _gate(conn, "strict", {"approvers": [CAROL, managers]})
    run_id = start_run(conn, "strict", queue_anyway=True).run_id
    ui = login("rara_client")
    name = _user(ui)
    conn.execute(sql.SQL("GRANT rara_vouch TO {}").format(sql.Identifier(name)))
    decided = waits.decide(ui, run_id, "gate", approve=True, identity=CAROL)
    assert decided.decided_by == f"{CAROL} via {name}"
    assert _decision(conn, run_id) == ("approved", f"{CAROL} via {name}", name)
    wait_run(conn, run_id, status="succeeded", timeout=5)
