"""A step held back by a limit, a quota or a concurrency key becomes leasable when a step that
counted against the same bound stops running, though its own status never changes: the path by
which that step stopped sends ``rara_ready`` (``rara_admission_freed``, db/functions/limits.sql)
with the capabilities a waiting step may have, so that idle workers, polling rarely while they
listen, look again. An end that held no bound sends nothing new. docs/lease-protocol.md,
"Wake-ups"."""

from __future__ import annotations

from typing import Any

import psycopg

from rara.pg import limits
from rara.runs import start_run
from tests.db.test_map_steps import _end, _won
from tests.support.definitions import apply
from tests.support.leasing import lease_now
from tests.support.waiting import wait_until

A, B = "team-a", "team-b"


def _heard(listener: psycopg.Connection[Any], conn: psycopg.Connection[Any]) -> set[str]:
    """The rara_ready payloads delivered to ``listener`` so far (a marker sent last: every
    notification committed before it has arrived once it has)."""
    conn.execute("NOTIFY rara_ready, 'marker'")
    seen = set()
    for note in listener.notifies(timeout=10):
        if note.payload == "marker":
            return seen
        seen.add(note.payload)
    raise AssertionError(f"no marker within 10 s; seen {seen}")


def _listening(database_url: str) -> psycopg.Connection[Any]:
    listener = psycopg.connect(database_url, autocommit=True)
    listener.execute("LISTEN rara_ready")
    return listener


def _one(conn: psycopg.Connection[Any], name: str, capability: str, **step: Any) -> None:
    for namespace in (A, B):
        apply(conn, name, [{"key": "s", "capability": capability, **step}], namespace=namespace)


def test_an_end_that_held_no_bound_sends_nothing(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    _one(conn, "work", "work@1")
    start_run(conn, "work", namespace=A, queue_anyway=True)
    start_run(conn, "work", namespace=A, queue_anyway=True)
    limits.set_limit(conn, "other@1", 1)  # a limit elsewhere: not this capability's
    limits.set_quota(conn, B, "work@1", 1)  # a quota of another namespace
    with _listening(database_url) as listener:
        [step] = lease_now(conn, ["work@1"], worker="w", limit=1)
        _end(database_url, _won(step))
        assert _heard(listener, conn) == set()


def test_a_limit_s_end_wakes_its_capability(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    _one(conn, "gpu", "gpu@1")
    limits.set_limit(conn, "gpu@1", 1)
    start_run(conn, "gpu", namespace=A, queue_anyway=True)
    start_run(conn, "gpu", namespace=B, queue_anyway=True)
    [running] = lease_now(conn, ["gpu@1"], worker="w", limit=5)
    assert lease_now(conn, ["gpu@1"], worker="w", limit=5) == []  # held back by the limit
    with _listening(database_url) as listener:
        _end(database_url, _won(running))
        assert _heard(listener, conn) == {"gpu@1"}
    [waited] = lease_now(conn, ["gpu@1"], worker="w", limit=5)
    assert waited.namespace != running.namespace


def test_a_quota_of_all_capabilities_wakes_every_capability_queued_in_its_namespace(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    _one(conn, "cpu", "cpu@1")
    _one(conn, "io", "io@1")
    limits.set_quota(conn, A, limits.EVERY_CAPABILITY, 1)
    start_run(conn, "cpu", namespace=A, queue_anyway=True)
    start_run(conn, "io", namespace=A, queue_anyway=True)
    start_run(conn, "io", namespace=B, queue_anyway=True)  # B's lane: not A's quota's
    [running] = lease_now(conn, ["cpu@1"], worker="w", limit=5)
    assert lease_now(conn, ["io@1"], worker="w", limit=5, passing=[B]) == []
    with _listening(database_url) as listener:
        _end(database_url, _won(running))
        assert _heard(listener, conn) == {"cpu@1", "io@1"}
    [waited] = lease_now(conn, ["io@1"], worker="w", limit=5, passing=[B])
    assert waited.namespace == A


def test_a_quota_of_one_capability_wakes_that_capability(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    _one(conn, "cpu", "cpu@1")
    _one(conn, "io", "io@1")
    limits.set_quota(conn, A, "cpu@1", 1)
    start_run(conn, "cpu", namespace=A, queue_anyway=True)
    start_run(conn, "io", namespace=A, queue_anyway=True)
    [running] = lease_now(conn, ["cpu@1"], worker="w", limit=5)
    with _listening(database_url) as listener:
        _end(database_url, _won(running))
        assert _heard(listener, conn) == {"cpu@1"}


def test_a_key_wakes_only_when_it_was_full(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    # A group shared by steps of two capabilities: a full key's end wakes both.
    shared = {"key": "input.customer", "max": 2, "group": "crm-api"}
    apply(conn, "call", [{"key": "s", "capability": "crm.call@1", "concurrency": shared}])
    apply(conn, "sync", [{"key": "s", "capability": "crm.sync@1", "concurrency": shared}])
    for name in ("call", "call", "sync"):
        start_run(conn, name, input={"customer": "acme"}, queue_anyway=True)
    start_run(conn, "call", input={"customer": "globex"}, queue_anyway=True)
    leased = lease_now(conn, ["crm.call@1"], worker="w", limit=5)
    acme = [s for s in leased if s.run_input == {"customer": "acme"}]
    [globex] = [s for s in leased if s.run_input == {"customer": "globex"}]
    assert len(acme) == 2
    assert lease_now(conn, ["crm.sync@1"], worker="w", limit=5) == []
    with _listening(database_url) as listener:
        _end(database_url, _won(globex))  # globex's key was not full: nothing waited on it
        assert _heard(listener, conn) == set()
        _end(database_url, _won(acme[0]))
        assert _heard(listener, conn) == {"crm.call@1", "crm.sync@1"}
    [waited] = lease_now(conn, ["crm.sync@1"], worker="w", limit=5)
    assert waited.run_input == {"customer": "acme"}


def test_a_release_and_a_reap_free_what_they_held(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    _one(conn, "cpu", "cpu@1")
    _one(conn, "io", "io@1")
    limits.set_quota(conn, A, limits.EVERY_CAPABILITY, 1)
    start_run(conn, "cpu", namespace=A, queue_anyway=True)
    start_run(conn, "io", namespace=A, queue_anyway=True)
    [held] = lease_now(conn, ["cpu@1"], worker="w", limit=5)
    with _listening(database_url) as listener:
        conn.execute("SELECT rara_step_release_many('w', %s, %s)", ([held.id], [held.lease_token]))
        # the released step's own rara_ready (cpu@1), and io@1 for the quota it held
        assert _heard(listener, conn) == {"cpu@1", "io@1"}
        [held] = lease_now(conn, ["cpu@1"], worker="w", limit=5, lease_seconds=0.05)
        wait_until(
            lambda: conn.execute("SELECT * FROM rara_step_reap_expired('r', 10, 0)").fetchall(),
            message="the expired lease reaped",
        )
        assert _heard(listener, conn) == {"cpu@1", "io@1"}


def test_a_bound_raised_wakes_what_it_held_back(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    _one(conn, "cpu", "cpu@1")
    _one(conn, "io", "io@1")
    start_run(conn, "io", namespace=A, queue_anyway=True)
    with _listening(database_url) as listener:
        limits.set_limit(conn, "gpu@1", 0)
        assert _heard(listener, conn) == {"gpu@1"}
        limits.set_quota(conn, A, limits.EVERY_CAPABILITY, 3)
        assert _heard(listener, conn) == {"io@1"}
