"""Database roles (migrations 0002, 0007; docs/least-privilege.md): each process kind can do its
job and nothing else. Per role, what it must not do is tried for real on a login role of that
group and refused by PostgreSQL — a permission error, or a fence that matches nothing — and
nothing changes."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from rara.pg.queries import sql
from rara.runs import cancel_run, start_run
from rara.states import AttemptOutcome, StepStatus
from rara.worker.store import end_many
from rara.worker.vocabulary import Ending, Fence
from tests.support.definitions import apply
from tests.support.leasing import lease_now

Denied = psycopg.errors.InsufficientPrivilege
FORGED = '{"forged": true}'


@pytest.fixture
def login(role_url: Callable[[str], str]) -> Iterator[Callable[[str], psycopg.Connection[Any]]]:
    opened: list[psycopg.Connection[Any]] = []

    def connect(group: str) -> psycopg.Connection[Any]:
        opened.append(psycopg.connect(role_url(group), autocommit=True))
        return opened[-1]

    yield connect
    for c in opened:
        c.close()


@pytest.fixture
def running(conn: psycopg.Connection[Any]) -> tuple[int, Any]:
    """A run of two steps (b after a) whose step a another worker ("owner") leased."""
    apply(
        conn,
        "r",
        [{"key": "a", "capability": "x@1"}, {"key": "b", "capability": "x@1", "dependsOn": ["a"]}],
    )
    run_id = start_run(conn, "r", queue_anyway=True).run_id
    [step] = lease_now(conn, ["x@1"], worker="owner", limit=5)
    return run_id, step


def _refused(c: psycopg.Connection[Any], statement: str, params: Any = None) -> None:
    with pytest.raises(Denied):
        c.execute(statement, params)


def _state(conn: psycopg.Connection[Any]) -> Any:
    """Everything a forgery could change."""
    return conn.execute(
        "SELECT (SELECT json_agg(s ORDER BY id) FROM rara_steps s),"
        " (SELECT json_agg(r ORDER BY id) FROM rara_runs r),"
        " (SELECT json_agg(a ORDER BY step_id, attempt) FROM rara_attempts a),"
        " (SELECT count(*) FROM rara_events), (SELECT json_agg(v) FROM rara_definition_versions v)"
    ).fetchone()


# Every role: what no process may do to the tables, whoever it is.
TABLE_WRITES = (
    "UPDATE rara_steps SET status = 'succeeded', result = '{\"forged\": true}' WHERE key = 'a'",
    "UPDATE rara_runs SET status = 'succeeded', finished_at = now()",
    "UPDATE rara_attempts SET outcome = 'succeeded', ended_at = now()",
    "UPDATE rara_definition_versions SET spec = '{}'",
    "INSERT INTO rara_events (step_id, attempt, seq, kind) SELECT id, 1, 99, 'progress' "
    "FROM rara_steps",
    "INSERT INTO rara_steps (run_id, namespace, key, capability, executor, max_attempts,"
    " retry_initial_ms, retry_max_ms, retry_coefficient, status) SELECT id, namespace, 'z',"
    " 'x@1', 'inprocess', 1, 1, 1, 2, 'ready' FROM rara_runs",
    "INSERT INTO rara_namespace_shares (namespace, weight) VALUES ('default', 10000)",
    "INSERT INTO rara_namespace_quotas (namespace, capability, max_running)"
    " VALUES ('default', '*', 0)",
    "DELETE FROM rara_lanes",
    # Releases (0022): only rara_release_promote and rara_release_rollback write them.
    "INSERT INTO rara_releases (namespace, name, number, run_id, definition_version_id, results)"
    " SELECT namespace, 'forged', 1, id, definition_version_id, '{}' FROM rara_runs",
    "INSERT INTO rara_release_current (namespace, name, number) VALUES ('default', 'x', 1)",
    "UPDATE rara_release_current SET number = 1",
    "DELETE FROM rara_release_moves",
    "INSERT INTO rara_definitions (name) VALUES ('evil')",
    "DELETE FROM rara_attempts",
    "DELETE FROM rara_events",
    "DELETE FROM rara_runs",
    "TRUNCATE rara_steps CASCADE",
)


@pytest.mark.parametrize("group", ["rara_worker", "rara_operator", "rara_client", "rara_reader"])
def test_no_role_writes_a_table_or_reads_a_lease_token(
    group: str, conn: psycopg.Connection[Any], login: Any, running: Any
) -> None:
    before = _state(conn)
    c = login(group)
    for statement in TABLE_WRITES:
        _refused(c, statement)
    _refused(c, "SELECT lease_token FROM rara_steps")
    _refused(c, "SELECT lease_token FROM rara_attempts")
    _refused(c, "SELECT * FROM rara_steps")  # every column includes the token
    # ... and the internal parts of the functions, which would take the caller's word:
    run_id, _ = running
    _refused(
        c,
        "SELECT rara_run_count(%s)",
        (json.dumps([{"run_id": run_id, "succeeded": 2, "failed": 0, "cancelled": 0}]),),
    )
    _refused(c, "SELECT rara_step_cancel_dependants(%s, 'a')", (run_id,))
    assert _state(conn) == before
    # What every role reads: the state without the tokens.
    assert c.execute("SELECT status FROM rara_steps WHERE key = 'a'").fetchone() == ("running",)


def test_a_worker_cannot_forge_or_steal_what_another_worker_owns(
    conn: psycopg.Connection[Any], login: Any, running: Any, database_url: str
) -> None:
    run_id, step = running
    worker = login("rara_worker")
    before = _state(conn)
    guess = str(uuid.uuid4())
    # Its name is no credential: without the token every fenced write matches nothing.
    [[ended]] = worker.execute(
        "SELECT count(*) FROM rara_step_end_many('owner', %s, %s)",
        (json.dumps([{"id": step.id, "token": guess, "result": FORGED}]), json.dumps([])),
    ).fetchall()
    assert ended == 0
    [[ended]] = worker.execute(
        "SELECT count(*) FROM rara_step_end_many('owner', '[]', %s)",
        (
            json.dumps(
                [
                    {
                        "id": step.id,
                        "token": guess,
                        "outcome": "failed",
                        "error": {},
                        "retryable": False,
                        "jitter": 0,
                    }
                ]
            ),
        ),
    ).fetchall()
    assert ended == 0
    assert (
        worker.execute(
            sql("step_progress_many"),
            {
                "worker": "owner",
                "step_ids": [step.id],
                "tokens": [guess],
                "seqs": [1],
                "fractions": [0.5],
                "messages": ["forged"],
                "metrics": ["{}"],
            },
        ).fetchall()
        == []
    )
    assert worker.execute(
        sql("step_checkpoint"),
        {
            "worker": "owner",
            "step_id": step.id,
            "token": guess,
            "seq": 1,
            "state": '{"forged": true}',
            "digest": None,
            "size": None,
        },
    ).fetchone() == (False,)
    assert (
        worker.execute(
            sql("step_heartbeat"),
            {
                "worker": "owner",
                "capabilities": ["x@1"],
                "lease_seconds": 3600,
                "step_ids": [step.id],
                "tokens": [guess],
            },
        ).fetchall()
        == []
    )
    assert (
        worker.execute(
            sql("step_release_many"), {"worker": "owner", "step_ids": [step.id], "tokens": [guess]}
        ).fetchall()
        == []
    )
    # A success is not a failure's outcome, and released/expired are not ends of its own.
    for outcome in ("succeeded", "released", "lease_expired"):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="cannot end as"):
            worker.execute(
                "SELECT * FROM rara_step_end_many('owner', '[]', %s)",
                (
                    json.dumps(
                        [{"id": step.id, "token": str(step.lease_token), "outcome": outcome}]
                    ),
                ),
            )
    # Nor may a worker start, cancel or register anything.
    _refused(worker, "SELECT rara_run_cancel(%s)", (run_id,))
    _refused(worker, "SELECT * FROM rara_definition_register('r', '{}')")
    _refused(worker, "SELECT rara_definition_retire('r')")
    _refused(worker, "SELECT * FROM rara_run_start('r', NULL, NULL, '{}', NULL, false, 30)")
    assert _state(conn) == before

    # The owner, with its token, under the same role: its end lands, with its consequences.
    async def finish() -> list[StepStatus | None]:
        async with await psycopg.AsyncConnection.connect(worker.info.dsn, autocommit=True) as aconn:
            return await end_many(
                aconn,
                [
                    Ending(
                        Fence(step.id, "owner", step.lease_token),
                        run_id,
                        AttemptOutcome.SUCCEEDED,
                        {"ok": 1},
                    )
                ],
            )

    assert asyncio.run(finish()) == [StepStatus.SUCCEEDED]
    assert conn.execute("SELECT status FROM rara_steps WHERE key = 'b'").fetchone() == ("ready",)


def test_a_client_starts_and_cancels_runs_and_does_nothing_else(
    conn: psycopg.Connection[Any], login: Any, running: Any
) -> None:
    run_id, step = running
    client = login("rara_client")
    # The forgery of the issue: a plain UPDATE completing a step another worker runs.
    _refused(
        client,
        "UPDATE rara_steps SET status = 'succeeded', result = %s, leased_by = NULL,"
        " lease_token = NULL, lease_expires_at = NULL, finished_at = now() WHERE id = %s",
        (FORGED, step.id),
    )
    # The worker's functions are not the client's, not even with the right token.
    _refused(
        client,
        "SELECT * FROM rara_step_end_many('owner', %s)",
        (json.dumps([{"id": step.id, "token": str(step.lease_token), "result": FORGED}]),),
    )
    _refused(
        client,
        "SELECT * FROM rara_step_lease('c', '{x@1}', '{inprocess}', NULL, NULL, NULL, 5, 30)",
    )
    _refused(client, "SELECT * FROM rara_step_reap_expired('c', 10, 0)")
    _refused(client, "SELECT rara_worker_register('c', '{x@1}')")
    assert conn.execute("SELECT status FROM rara_steps WHERE id = %s", (step.id,)).fetchone() == (
        "running",
    )
    # What it may: define, start, cancel — through the functions, with their rules.
    apply(client, "mine", [{"key": "s", "capability": "x@1"}])
    other = start_run(client, "mine", queue_anyway=True).run_id
    assert cancel_run(client, other)
    assert conn.execute("SELECT status FROM rara_runs WHERE id = %s", (other,)).fetchone() == (
        "cancelled",
    )
    # Cancel is only a cancel: an ended run stays as it ended (no re-open).
    assert not cancel_run(client, other)
    _refused(
        client,
        "UPDATE rara_runs SET status = 'running', finished_at = NULL WHERE id = %s",
        (other,),
    )
    assert cancel_run(client, run_id)
    [[flag]] = conn.execute(
        "SELECT cancel_requested FROM rara_steps WHERE id = %s", (step.id,)
    ).fetchall()
    assert flag  # the running step is flagged; only its worker ends it


def test_the_operator_registers_and_starts_but_cannot_lease(
    conn: psycopg.Connection[Any], login: Any
) -> None:
    operator = login("rara_operator")
    apply(operator, "op", [{"key": "a", "capability": "x@1"}])
    start_run(operator, "op", queue_anyway=True)
    with pytest.raises(Denied):
        lease_now(operator, ["x@1"], worker="w", limit=5)
    # A version is immutable whoever asks, and a new spec is a new version.
    _refused(operator, "UPDATE rara_definition_versions SET spec = '{}' WHERE name = 'op'")
    _refused(operator, "DELETE FROM rara_definition_versions WHERE name = 'op'")
    assert apply(operator, "op", [{"key": "a", "capability": "x@2"}]).version == 2
    assert conn.execute(
        "SELECT count(*) FROM rara_definition_versions WHERE name = 'op'"
    ).fetchone() == (2,)


def test_the_reader_only_reads(conn: psycopg.Connection[Any], login: Any, running: Any) -> None:
    run_id, _ = running
    reader = login("rara_reader")
    assert reader.execute("SELECT status FROM rara_runs WHERE id = %s", (run_id,)).fetchone() == (
        "running",
    )
    with pytest.raises(Denied):
        cancel_run(reader, run_id)
    with pytest.raises(Denied):
        apply(reader, "r", [{"key": "a", "capability": "x@9"}])
    with pytest.raises(Denied):
        start_run(reader, "r", queue_anyway=True)
