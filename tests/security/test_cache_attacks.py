"""A worker answers only for the steps it ran (migration 0026, docs/step-cache.md): a step
cache entry is written by the database from the ended step's row — only for a step with
`cache:`, in its namespace and capability — and a look-up matches the namespace and the
capability as well as the base. Before, the end wrote whatever entry the worker sent, for any
step, and a step reused the newest entry of its base from anywhere: a worker login ending one
of its steps answered every other namespace's and capability's step of that base."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import psycopg

from rara.pg.queries import sql
from rara.runs import start_run
from rara.worker import cache
from rara.worker.vocabulary import LeasedStep
from tests.support.definitions import apply
from tests.support.leasing import lease_now
from tests.support.runs import steps_of, wait_run
from tests.worker.handlers import TALLY

Conn = psycopg.Connection[Any]
Login = Callable[[str | None], Conn]
CACHED = {"cache": {"ttl": "1h"}}
TALLY_1 = "test.tally@1"
FLAKY_1 = "test.flaky@1"  # test.tally's handler under another capability
FORGED = {"text": "forged", "digest": "sha256:" + "0" * 64}


def _run(conn: Conn, name: str, capability: str, *, namespace: str, cached: bool = True) -> int:
    step = {"key": "a", "capability": capability, **(CACHED if cached else {})}
    apply(conn, name, [step], namespace=namespace)
    return start_run(conn, name, input={"text": "x"}, namespace=namespace, queue_anyway=True).run_id


def _lease_one(attacker: Conn, capability: str) -> LeasedStep:
    [step] = lease_now(attacker, [capability], worker="evil", limit=10)
    return step


def _as(step: LeasedStep, *, namespace: str, capability: str) -> LeasedStep:
    """The step the victim's worker will lease: the attacker's, in another namespace or of
    another capability (the same input and spec), as the lease gives it."""
    payload = {**step.payload, "cache": {"ttl_ms": 3_600_000, "namespace": namespace}}
    return dataclasses.replace(step, namespace=namespace, capability=capability, payload=payload)


def _end_forged(attacker: Conn, step: LeasedStep, victim: LeasedStep) -> None:
    """Ends the attacker's own leased ``step`` succeeded with ``FORGED`` and the cache entry
    ``victim``'s worker looks up (its base, read nothing), as the worker's message says."""
    key = cache.key_of(victim)
    assert key is not None
    entry = cache.with_reads(cache.entry_of(victim, key), [])
    success = {"id": step.id, "token": str(step.lease_token), "result": FORGED, "cache": entry}
    ended = attacker.execute(
        sql("step_end_many"),
        {"worker": "evil", "successes": json.dumps([success]), "others": "[]"},
    ).fetchall()
    assert [row[0] for row in ended] == [step.id]  # its own step: the end itself is accepted


def _computed(conn: Conn, run_id: int) -> bool:
    """Whether the run's step ran its handler (and so returned the genuine result)."""
    [step] = steps_of(conn, run_id)
    return f"{run_id}:a" in TALLY and step["result"]["text"] == "x"


def test_a_step_without_cache_writes_no_entry(conn: Conn, login: Login) -> None:
    """The attack: a step whose definition has no `cache:`, ended with a cache entry under the
    base of a cached step of the same namespace and capability: the entry was written."""
    attacker = login("rara_worker")
    _run(conn, "plain", TALLY_1, namespace="default", cached=False)
    step = _lease_one(attacker, TALLY_1)
    assert "cache" not in step.payload
    _end_forged(attacker, step, _as(step, namespace="default", capability=TALLY_1))
    assert conn.execute("SELECT count(*) FROM rara_step_cache").fetchone() == (0,)


def test_an_entry_of_one_namespace_is_never_served_to_another(
    conn: Conn, login: Login, thread_worker: Callable[..., Any]
) -> None:
    """The attack: team-a's cached step ended with an entry under the base team-b's step looks
    up: team-b's run reused the forged result."""
    attacker = login("rara_worker")
    _run(conn, "rag", TALLY_1, namespace="team-a")
    step = _lease_one(attacker, TALLY_1)
    _end_forged(attacker, step, _as(step, namespace="team-b", capability=TALLY_1))
    victim = _run(conn, "rag", TALLY_1, namespace="team-b")
    thread_worker()
    wait_run(conn, victim, status="succeeded")
    assert _computed(conn, victim)
    entries = conn.execute(
        "SELECT namespace, result ->> 'text' FROM rara_step_cache ORDER BY namespace"
    ).fetchall()  # the step rows' namespaces, whatever the base says
    assert entries == [("team-a", "forged"), ("team-b", "x")]


def test_an_entry_of_one_capability_is_never_served_to_another(
    conn: Conn, login: Login, thread_worker: Callable[..., Any]
) -> None:
    """The attack: a cached step of test.flaky@1 ended with an entry under the base of the
    same namespace's test.tally@1 step: that step reused the forged result."""
    attacker = login("rara_worker")
    _run(conn, "other", FLAKY_1, namespace="team-b")
    step = _lease_one(attacker, FLAKY_1)
    _end_forged(attacker, step, _as(step, namespace="team-b", capability=TALLY_1))
    victim = _run(conn, "rag", TALLY_1, namespace="team-b")
    thread_worker()
    wait_run(conn, victim, status="succeeded")
    assert _computed(conn, victim)


def test_another_namespaces_entry_is_not_replaced_under_its_key(
    conn: Conn, login: Login, thread_worker: Callable[..., Any]
) -> None:
    """The attack: team-b's step computed an entry; team-a's cached step ended with an entry
    under the same key (and base): the end replaced team-b's result, which team-b's next run
    reused."""
    worker = thread_worker()
    first = _run(conn, "rag", TALLY_1, namespace="team-b")
    wait_run(conn, first, status="succeeded")
    worker.stop()
    [(key, before)] = conn.execute("SELECT key, result FROM rara_step_cache").fetchall()
    attacker = login("rara_worker")
    _run(conn, "rag", TALLY_1, namespace="team-a")
    step = _lease_one(attacker, TALLY_1)
    victim = _as(step, namespace="team-b", capability=TALLY_1)
    _end_forged(attacker, step, victim)
    again = start_run(conn, "rag", input={"text": "x"}, namespace="team-b", queue_anyway=True)
    thread_worker()
    wait_run(conn, again.run_id, status="succeeded")
    [reused] = steps_of(conn, again.run_id)
    assert reused["result"] == before
    rows = conn.execute(
        "SELECT namespace, result FROM rara_step_cache WHERE key = %s ORDER BY namespace", (key,)
    ).fetchall()
    assert rows == [("team-a", FORGED), ("team-b", before)]


def test_a_claim_defers_only_to_its_own_namespaces_steps(conn: Conn, login: Login) -> None:
    """The attack: team-a's cached step claimed the key team-b's step computes (single flight):
    team-b's step gave its lease back, again and again, while the attacker's ran."""
    attacker = login("rara_worker")
    _run(conn, "rag", TALLY_1, namespace="team-a")
    step = _lease_one(attacker, TALLY_1)
    _run(conn, "rag", TALLY_1, namespace="team-b")
    [target] = lease_now(attacker, [TALLY_1], worker="honest", limit=10)
    key = cache.key_of(target)
    assert key is not None
    entry = cache.entry_of(target, key)
    claim = "SELECT rara_step_cache_claim(%s, %s, %s, %s::jsonb)"
    assert attacker.execute(
        claim, ("evil", step.id, step.lease_token, json.dumps(entry))
    ).fetchone() == (True,)
    assert attacker.execute(
        claim, ("honest", target.id, target.lease_token, json.dumps(entry))
    ).fetchone() == (True,)  # computes: the running step of that key is another namespace's
