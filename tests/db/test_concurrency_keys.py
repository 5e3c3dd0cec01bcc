"""Concurrency limits by key (migration 0020; docs/limits.md, "Per key"): a step that says
`concurrency: {key: input.customer, max: 2}` runs at most 2 attempts at once per customer in
its namespace, enforced in the lease across concurrent workers; bad rules and runs whose input
lacks the key are refused naming what is wrong, with nothing written."""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg
import pytest

from rara.definitions.parse import definition_from_object
from rara.errors import DefinitionInvalid, InputInvalid
from rara.pg import definitions as definition_sql
from rara.pg.runs import enqueue_many
from rara.runs import start_run
from tests.db.test_map_steps import _end, _won
from tests.support.definitions import apply, definition
from tests.support.leasing import lease_concurrently, lease_now

CALL = {
    "key": "call",
    "capability": "crm.call@1",
    "concurrency": {"key": "input.customer", "max": 2},
}


def _customers(conn: psycopg.Connection[Any], runs: dict[str, int], **start: Any) -> None:
    for customer, count in runs.items():
        for _ in range(count):
            start_run(conn, "crm", input={"customer": customer}, queue_anyway=True, **start)


def _by_customer(conn: psycopg.Connection[Any]) -> Counter[str]:
    rows = conn.execute(
        "SELECT concurrency_key FROM rara_steps WHERE status = 'running'"
    ).fetchall()
    return Counter(key.rsplit("=", 1)[1] for (key,) in rows)


def test_at_most_max_run_per_key(conn: psycopg.Connection[Any], database_url: str) -> None:
    apply(conn, "crm", [CALL])
    _customers(conn, {"acme": 5, "globex": 3, "initech": 1})
    leased = lease_now(conn, ["crm.call@1"], worker="w", limit=20)
    assert len(leased) == 5
    assert _by_customer(conn) == {"acme": 2, "globex": 2, "initech": 1}
    assert lease_now(conn, ["crm.call@1"], worker="w", limit=20) == []
    _end(database_url, _won(next(s for s in leased if s.run_input["customer"] == "acme")))
    [again] = lease_now(conn, ["crm.call@1"], worker="w", limit=20)
    assert again.run_input == {"customer": "acme"}


def test_a_key_is_a_namespace_s_and_a_group_shares_it(conn: psycopg.Connection[Any]) -> None:
    shared = {"key": "input.customer", "max": 1, "group": "crm-api"}
    apply(conn, "crm", [{**CALL, "concurrency": shared}])
    apply(conn, "crm-sync", [{"key": "sync", "capability": "crm.call@1", "concurrency": shared}])
    apply(conn, "crm", [CALL], namespace="team-b")
    _customers(conn, {"acme": 2})
    start_run(conn, "crm-sync", input={"customer": "acme"}, queue_anyway=True)
    _customers(conn, {"acme": 2}, namespace="team-b")
    leased = lease_now(conn, ["crm.call@1"], worker="w", limit=20)
    # default's acme: one of the three steps of group crm-api; team-b's acme: its own two
    assert Counter(s.namespace for s in leased) == {"default": 1, "team-b": 2}


def test_concurrent_leasers_never_exceed_a_key_s_max(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    apply(conn, "crm", [CALL])
    enqueue_many(
        conn,
        definition="crm",
        version=None,
        runs=200,
        steps=1,
        key="call",
        capability="crm.call@1",
        concurrency_keys=20,
        concurrency_max=2,
    )
    lease_concurrently(database_url, ["crm.call@1"], leasers=8, rounds=6, limit=5)
    running = _by_customer(conn)
    assert max(running.values()) <= 2
    # 48 leases of 5 for 20 keys of 2 each: every key filled, however the leases interleaved
    assert sum(running.values()) == 40


def test_a_full_key_does_not_hold_up_the_others(conn: psycopg.Connection[Any]) -> None:
    """A customer with many ready steps ahead of the others in the queue takes its max, and
    the steps behind it are leased: by the same lease as far as its walk reaches, by the next
    one, which passes the full key by, in any case."""
    apply(conn, "crm", [CALL])
    _customers(conn, {"hot": 30})
    _customers(conn, {f"c{i}": 1 for i in range(5)})
    first = lease_now(conn, ["crm.call@1"], worker="w", limit=10)
    second = lease_now(conn, ["crm.call@1"], worker="w", limit=10)
    assert len(first) + len(second) == 7
    assert _by_customer(conn) == {"hot": 2, **{f"c{i}": 1 for i in range(5)}}


def test_map_children_share_their_map_s_key(conn: psycopg.Connection[Any]) -> None:
    apply(
        conn,
        "crm",
        [
            {
                "key": "each",
                "capability": "crm.call@1",
                "map": {"over": "input.items"},
                "concurrency": {"key": "input.customer", "max": 3},
            }
        ],
    )
    start_run(conn, "crm", input={"customer": "acme", "items": list(range(10))}, queue_anyway=True)
    assert len(lease_now(conn, ["crm.call@1"], worker="w", limit=20)) == 3


def test_a_run_whose_input_lacks_the_key_is_refused_and_nothing_written(
    conn: psycopg.Connection[Any],
) -> None:
    apply(conn, "crm", [CALL])
    with pytest.raises(InputInvalid, match=r"step call: concurrency.key input.customer is missing"):
        start_run(conn, "crm", input={"client": "acme"}, queue_anyway=True)
    with pytest.raises(InputInvalid, match="is object, not a string, number or boolean"):
        start_run(conn, "crm", input={"customer": {"id": 1}}, queue_anyway=True)
    assert conn.execute("SELECT count(*) FROM rara_runs").fetchone() == (0,)
    start_run(conn, "crm", input={"customer": 42}, queue_anyway=True)  # a number is a key
    [key] = conn.execute("SELECT concurrency_key FROM rara_steps").fetchone() or [None]
    assert key == "default/crm.call=42"


@pytest.mark.parametrize(
    ("concurrency", "field"),
    [
        ({"key": "customer", "max": 2}, "concurrency.key"),
        ({"key": "input.customer", "max": 0}, "concurrency.max"),
        ({"key": "input.customer", "max": 2, "group": "Bad Group"}, "concurrency.group"),
    ],
)
def test_bad_rules_are_refused_naming_the_field(
    conn: psycopg.Connection[Any], concurrency: dict[str, Any], field: str
) -> None:
    # by the model, when the definition is parsed …
    with pytest.raises(DefinitionInvalid, match=field.replace(".", r"\.")):
        definition_from_object(definition("crm", [{**CALL, "concurrency": concurrency}]))
    # … and by the database, whoever registers the spec
    spec = {"steps": [{"key": "call", "capability": "crm.call@1", "concurrency": concurrency}]}
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=field.replace(".", r"\.")):
        definition_sql.register(conn, "crm", spec, namespace="default")
    assert conn.execute("SELECT count(*) FROM rara_definition_versions").fetchone() == (0,)
