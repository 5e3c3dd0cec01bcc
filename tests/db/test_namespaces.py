"""Every name lives in a namespace (migration 0017, docs/namespaces.md): the same definition or
schedule name in two namespaces is two of them, each with its own history; idempotency keys
are one run per namespace; a run is in its definition's namespace, and a resume stays there.
Through the same calls the CLI, the client and the operator make, as a rara_client login."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from rara.client import Client
from rara.definitions.parse import definition_from_object
from rara.definitions.registry import apply_definition
from rara.errors import InputInvalid, NotFound
from rara.namespaces import check_namespace, namespace_from
from rara.pg import definitions as definition_sql
from rara.pg import runs as run_sql
from rara.pg import schedules as schedule_sql
from rara.runs import resume_run, start_run
from rara.schedules import firing, manage
from rara.schedules.model import schedule_from_object
from tests.support.definitions import definition

STEP = {"key": "collect", "capability": "corpus.collect@1"}


@pytest.fixture
def client(role_url: Callable[[str], str]) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(role_url("rara_client"), autocommit=True) as conn:
        yield conn


def _apply(conn: psycopg.Connection[Any], namespace: str, name: str, **step: Any) -> int:
    doc = definition(name, [{**STEP, **step}])
    return apply_definition(conn, definition_from_object(doc), namespace=namespace).version


def _runs(conn: psycopg.Connection[Any]) -> list[tuple[int, str, str, int]]:
    return conn.execute(
        "SELECT r.id, r.namespace, v.namespace || '/' || v.name, v.version FROM rara_runs r"
        " JOIN rara_definition_versions v ON v.id = r.definition_version_id ORDER BY r.id"
    ).fetchall()


def test_the_same_name_in_two_namespaces_is_two_histories(
    conn: psycopg.Connection[Any], client: psycopg.Connection[Any]
) -> None:
    assert _apply(client, "team-a", "rag-refresh") == 1
    assert _apply(client, "team-b", "rag-refresh") == 1
    # A change in one namespace is a version there only.
    assert _apply(client, "team-b", "rag-refresh", input={"limit": 2}) == 2
    assert _apply(client, "team-a", "rag-refresh") == 1
    a = definition_sql.version_get(client, "rag-refresh", namespace="team-a")
    b = definition_sql.version_get(client, "rag-refresh", namespace="team-b")
    assert a is not None
    assert b is not None
    assert (a.namespace, a.version, b.namespace, b.version) == ("team-a", 1, "team-b", 2)
    assert definition_sql.version_get(client, "rag-refresh", namespace="default") is None
    listed = definition_sql.list_all(client, namespace=None)
    assert [(d.namespace, d.name, d.latest_version) for d in listed] == [
        ("team-a", "rag-refresh", 1),
        ("team-b", "rag-refresh", 2),
    ]
    assert [d.namespace for d in definition_sql.list_all(client, namespace="team-b")] == ["team-b"]

    # Runs start from their own namespace's version, and are in that namespace.
    ra = start_run(client, "rag-refresh", namespace="team-a", queue_anyway=True).run_id
    rb = start_run(client, "rag-refresh", namespace="team-b", queue_anyway=True).run_id
    assert _runs(conn) == [
        (ra, "team-a", "team-a/rag-refresh", 1),
        (rb, "team-b", "team-b/rag-refresh", 2),
    ]
    assert [r.id for r in run_sql.list_recent(client, None, 10, namespace="team-a")] == [ra]
    assert [r.id for r in run_sql.list_recent(client, None, 10, namespace=None)] == [rb, ra]


def test_retiring_in_one_namespace_leaves_the_other(
    conn: psycopg.Connection[Any], client: psycopg.Connection[Any]
) -> None:
    _apply(client, "team-a", "rag-refresh")
    _apply(client, "team-b", "rag-refresh")
    assert definition_sql.retire(client, "rag-refresh", namespace="team-a")
    assert not definition_sql.retire(client, "rag-refresh", namespace="team-c")
    with pytest.raises(NotFound, match="team-a/rag-refresh is retired"):
        start_run(client, "rag-refresh", namespace="team-a", queue_anyway=True)
    assert start_run(client, "rag-refresh", namespace="team-b", queue_anyway=True).created
    # A name that exists only elsewhere is not found, and the message says where it looked.
    with pytest.raises(NotFound, match="no workflow definition team-c/rag-refresh"):
        start_run(client, "rag-refresh", namespace="team-c", queue_anyway=True)
    assert [ns for _, ns, _, _ in _runs(conn)] == ["team-b"]


def test_an_idempotency_key_is_one_run_per_namespace(
    client: psycopg.Connection[Any],
) -> None:
    _apply(client, "team-a", "rag-refresh")
    _apply(client, "team-b", "rag-refresh")
    a1 = start_run(
        client, "rag-refresh", namespace="team-a", idempotency_key="nightly", queue_anyway=True
    )
    b1 = start_run(
        client, "rag-refresh", namespace="team-b", idempotency_key="nightly", queue_anyway=True
    )
    a2 = start_run(
        client, "rag-refresh", namespace="team-a", idempotency_key="nightly", queue_anyway=True
    )
    assert a1.created
    assert b1.created
    assert not a2.created
    assert a2.run_id == a1.run_id != b1.run_id
    assert run_sql.id_by_key(client, "nightly", namespace="team-b") == b1.run_id
    assert run_sql.id_by_key(client, "nightly", namespace="default") is None


def test_a_resume_stays_in_its_namespace(
    conn: psycopg.Connection[Any], client: psycopg.Connection[Any]
) -> None:
    _apply(client, "team-a", "rag-refresh")
    _apply(client, "team-b", "rag-refresh")
    failed = start_run(client, "rag-refresh", namespace="team-b", queue_anyway=True).run_id
    client.execute("SELECT rara_run_cancel(%s)", (failed,))
    resumed = resume_run(client, failed, idempotency_key="again")
    again = resume_run(client, failed, idempotency_key="again")
    assert resumed.created
    assert not again.created
    assert again.run_id == resumed.run_id
    row = run_sql.get(client, resumed.run_id)
    assert row is not None
    assert row.namespace == "team-b"
    # The key is team-b's: team-a's start under it is another run.
    other = start_run(
        client, "rag-refresh", namespace="team-a", idempotency_key="again", queue_anyway=True
    )
    assert other.created
    assert other.run_id != resumed.run_id


def _schedule(name: str, **spec: Any) -> Any:
    return schedule_from_object(
        {
            "apiVersion": "rara.dev/v1alpha1",
            "kind": "WorkflowSchedule",
            "metadata": {"name": name},
            "spec": {"definition": "rag-refresh", "schedule": "* * * * * *", **spec},
        }
    )


def test_schedules_of_one_name_in_two_namespaces_fire_their_own_definitions(
    conn: psycopg.Connection[Any], client: psycopg.Connection[Any]
) -> None:
    _apply(client, "team-a", "rag-refresh")
    _apply(client, "team-b", "rag-refresh")
    _apply(client, "team-b", "rag-refresh", input={"limit": 2})
    for namespace in ("team-a", "team-b"):
        assert manage.apply_schedule(client, _schedule("nightly"), namespace=namespace).created
    listed = schedule_sql.list_all(client, namespace=None)
    assert [(s.namespace, s.name) for s in listed] == [("team-a", "nightly"), ("team-b", "nightly")]
    # Both overdue by two seconds, as after an outage: each fires its namespace's definition.
    conn.execute(
        "UPDATE rara_schedules SET next_tick = date_trunc('second', now()) - %s",
        (timedelta(seconds=2),),
    )
    assert firing.fire_due(client).started >= 6
    started = conn.execute(
        "SELECT DISTINCT r.namespace, v.namespace, v.version,"
        " r.idempotency_key LIKE 'schedule:nightly:%%'"
        " FROM rara_runs r JOIN rara_definition_versions v ON v.id = r.definition_version_id"
        " ORDER BY 1"
    ).fetchall()
    assert started == [("team-a", "team-a", 1, True), ("team-b", "team-b", 2, True)]
    for namespace in ("team-a", "team-b"):
        ticks = schedule_sql.ticks(client, "nightly", 100, namespace=namespace)
        assert ticks
        assert all(t.outcome == "started" for t in ticks)
        rows = [run_sql.get(client, t.run_id) for t in ticks if t.run_id is not None]
        assert {r.namespace for r in rows if r is not None} == {namespace}

    # Pause and delete act on one namespace's schedule only.
    assert manage.set_suspended(client, "nightly", True, namespace="team-a")
    a = schedule_sql.get(client, "nightly", namespace="team-a")
    b = schedule_sql.get(client, "nightly", namespace="team-b")
    assert a is not None
    assert b is not None
    assert a.suspended
    assert not b.suspended
    manage.delete_schedule(client, "nightly", namespace="team-b")
    assert schedule_sql.get(client, "nightly", namespace="team-b") is None
    assert schedule_sql.get(client, "nightly", namespace="team-a") is not None
    with pytest.raises(NotFound, match="no schedule team-b/nightly"):
        manage.trigger(client, "nightly", namespace="team-b")
    run_id = manage.trigger(client, "nightly", namespace="team-a")
    row = run_sql.get(client, run_id)
    assert row is not None
    assert row.namespace == "team-a"


def test_a_namespace_that_is_no_name_is_refused_by_the_client_and_the_database(
    conn: psycopg.Connection[Any], client: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    for bad in ("Team_A", "-a", "a-", "", "a" * 64, "a/b"):
        with pytest.raises(InputInvalid, match="is not a namespace name"):
            check_namespace(bad)
    monkeypatch.setenv("RARA_NAMESPACE", "Team_A")
    with pytest.raises(InputInvalid, match="RARA_NAMESPACE 'Team_A' is not a namespace name"):
        namespace_from(None)
    monkeypatch.setenv("RARA_NAMESPACE", "team-a")
    assert namespace_from(None) == "team-a"
    assert namespace_from("team-b") == "team-b"
    # The database holds the same rule, whoever calls it.
    with pytest.raises(psycopg.errors.CheckViolation, match="rara_definitions_namespace_check"):
        client.execute(
            "SELECT * FROM rara_definition_register('x', %s::jsonb, 'Team_A')",
            ('{"steps": [{"key": "a", "capability": "x@1"}]}',),
        )
    assert conn.execute("SELECT count(*) FROM rara_definitions").fetchone() == (0,)


def test_a_document_naming_its_namespace_lands_there_unless_the_client_said_another(
    conn: psycopg.Connection[Any], database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RARA_NAMESPACE", raising=False)
    doc = definition("rag-refresh", [STEP])
    doc["metadata"]["namespace"] = "team-b"
    with pytest.raises(
        InputInvalid, match=r"metadata\.namespace is 'team-b' but the namespace given is 'team-a'"
    ):
        Client(database_url, namespace="team-a").apply_definition(doc)
    assert conn.execute("SELECT count(*) FROM rara_definitions").fetchone() == (0,)
    applied = Client(database_url).apply_definition(doc)
    assert (applied.namespace, applied.version) == ("team-b", 1)
    # The environment says where a client works, not what a document says.
    monkeypatch.setenv("RARA_NAMESPACE", "team-a")
    env_client = Client(database_url)
    assert env_client.namespace == "team-a"
    assert env_client.apply_definition(doc).namespace == "team-b"
    del doc["metadata"]["namespace"]
    assert env_client.apply_definition(doc).namespace == "team-a"
    run = env_client.start_run("rag-refresh", queue_anyway=True)
    assert env_client.get_run(run.run_id).namespace == "team-a"
    assert [r["namespace"] for r in env_client.list_runs(all_namespaces=True)] == ["team-a"]
    assert Client(database_url, namespace="team-b").list_runs() == []
    with pytest.raises(NotFound, match="no workflow definition team-c/rag-refresh"):
        Client(database_url, namespace="team-c").get_definition("rag-refresh")
