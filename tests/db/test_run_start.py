"""start_run in one statement: the digest-keyed step cache, its misses, and its refusals."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from rara import runs
from rara.errors import CapabilityUnavailable, NotFound, RaraError
from rara.pg import definitions
from rara.pg import runs as run_sql
from rara.runs import start_run
from tests.support.definitions import apply
from tests.support.roles import ROLES

# libpq's trace of what the client sends: each Execute (extended protocol) or Query (simple
# protocol: BEGIN, COMMIT) is one statement and one round trip. Not counted: the Parse + Sync
# of psycopg preparing a statement on its 5th execution, once per connection.
_STATEMENT = re.compile(r"\tF\t\d+\t(Execute|Query)\b")


@pytest.fixture(autouse=True)
def cold_cache() -> None:
    runs._INPUT_SCHEMAS.clear()
    runs._DIGEST_HINTS.clear()


def statements(conn: psycopg.Connection[Any], fn: Callable[[], Any]) -> int:
    with tempfile.TemporaryFile("w+") as trace:
        conn.pgconn.trace(trace.fileno())
        try:
            fn()
        finally:
            conn.pgconn.untrace()
        trace.seek(0)
        return len(_STATEMENT.findall(trace.read()))


def step_keys(conn: psycopg.Connection[Any], run_id: int) -> list[str]:
    rows = conn.execute("SELECT key FROM rara_steps WHERE run_id = %s ORDER BY key", (run_id,))
    return [r[0] for r in rows.fetchall()]


def run_version(conn: psycopg.Connection[Any], run_id: int) -> int:
    row = run_sql.get(conn, run_id)
    assert row is not None
    return row.version


def test_a_cached_start_is_one_statement(conn: psycopg.Connection[Any]) -> None:
    apply(conn, "one", [{"key": "a", "capability": "x@1"}, {"key": "b", "capability": "x@1"}])
    # Cold: the first statement returns the spec instead of inserting; the second inserts.
    assert statements(conn, lambda: start_run(conn, "one", queue_anyway=True)) == 2
    for _ in range(3):
        assert statements(conn, lambda: start_run(conn, "one", queue_anyway=True)) == 1
    conn.execute("INSERT INTO rara_workers (id, capabilities) VALUES ('w', '{x@1}')")
    assert statements(conn, lambda: start_run(conn, "one")) == 1  # capability check included
    assert conn.execute("SELECT count(*) FROM rara_runs").fetchone() == (5,)
    assert conn.execute("SELECT count(*) FROM rara_steps").fetchone() == (10,)


def test_inside_a_transaction_and_without_autocommit(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    apply(conn, "tx", [{"key": "a", "capability": "x@1"}])
    start_run(conn, "tx", queue_anyway=True)  # warm
    with conn.transaction():  # the caller's transaction: no BEGIN/COMMIT of our own
        assert statements(conn, lambda: start_run(conn, "tx", queue_anyway=True)) == 1
    with psycopg.connect(database_url) as plain:  # not autocommit: committed on return
        run = start_run(plain, "tx", queue_anyway=True).run_id
        assert plain.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert step_keys(conn, run) == ["a"]
    with conn.transaction(force_rollback=True):  # the caller's rollback takes the run too
        start_run(conn, "tx", queue_anyway=True)
    assert conn.execute("SELECT count(*) FROM rara_runs").fetchone() == (3,)


def test_a_new_latest_version_is_picked_up(conn: psycopg.Connection[Any]) -> None:
    apply(conn, "v", [{"key": "a", "capability": "x@1"}])
    first = start_run(conn, "v", queue_anyway=True).run_id
    apply(conn, "v", [{"key": "a", "capability": "x@1"}, {"key": "b", "capability": "x@1"}])
    second = start_run(conn, "v", queue_anyway=True).run_id  # stale hint: digest differs
    third = start_run(conn, "v", version=1, queue_anyway=True).run_id
    assert (step_keys(conn, first), run_version(conn, first)) == (["a"], 1)
    assert (step_keys(conn, second), run_version(conn, second)) == (["a", "b"], 2)
    assert (step_keys(conn, third), run_version(conn, third)) == (["a"], 1)
    assert statements(conn, lambda: start_run(conn, "v", queue_anyway=True)) == 1


@pytest.fixture
def other_database(fresh_database: Callable[[], str]) -> str:
    """A second fresh database beside `database_url`: same version ids, other specs."""
    return fresh_database()


def test_two_databases_with_one_version_id_get_their_own_steps(
    conn: psycopg.Connection[Any], other_database: str
) -> None:
    with psycopg.connect(other_database, autocommit=True) as other:
        apply(conn, "d", [{"key": "a", "capability": "x@1"}])
        apply(other, "d", [{"key": "x", "capability": "x@1"}, {"key": "y", "capability": "x@1"}])
        for _ in range(2):
            here = start_run(conn, "d", queue_anyway=True).run_id
            there = start_run(other, "d", queue_anyway=True).run_id
            assert step_keys(conn, here) == ["a"]
            assert step_keys(other, there) == ["x", "y"]
        # Both specs stay cached (by digest): only the (name, version) hint flips.
        assert set(runs._INPUT_SCHEMAS) == set(runs._DIGEST_HINTS.values()) | {
            r[0] for r in conn.execute("SELECT digest FROM rara_definition_versions")
        }
        assert statements(conn, lambda: start_run(conn, "d", queue_anyway=True)) == 2
        assert statements(conn, lambda: start_run(conn, "d", queue_anyway=True)) == 1


@pytest.mark.parametrize("warm", [False, True])
def test_a_retired_definition_is_refused_unless_pinned(
    conn: psycopg.Connection[Any], warm: bool
) -> None:
    apply(conn, "old", [{"key": "a", "capability": "x@1"}])
    if warm:
        start_run(conn, "old", queue_anyway=True)
    definitions.retire(conn, "old", namespace="default")
    before = conn.execute("SELECT count(*) FROM rara_runs").fetchone()
    with pytest.raises(NotFound, match="workflow definition old is retired"):
        start_run(conn, "old", queue_anyway=True)
    assert conn.execute("SELECT count(*) FROM rara_runs").fetchone() == before
    pinned = start_run(conn, "old", version=1, queue_anyway=True)  # an explicit version runs
    assert step_keys(conn, pinned.run_id) == ["a"]


def test_missing_definitions_name_what_was_asked(conn: psycopg.Connection[Any]) -> None:
    apply(conn, "here", [{"key": "a", "capability": "x@1"}])
    with pytest.raises(NotFound, match=r"no workflow definition nope$"):
        start_run(conn, "nope", queue_anyway=True)
    with pytest.raises(NotFound, match=r"no workflow definition here version 7$"):
        start_run(conn, "here", version=7, queue_anyway=True)


@pytest.mark.parametrize("warm", [False, True])
def test_missing_capabilities_are_refused_by_name(
    conn: psycopg.Connection[Any], warm: bool
) -> None:
    apply(
        conn,
        "caps",
        [
            {"key": "a", "capability": "x@1"},
            {"key": "b", "capability": "y@2"},
            {"key": "c", "capability": "z@3"},
            {"key": "d", "capability": "z@3"},
        ],
    )
    if warm:
        start_run(conn, "caps", queue_anyway=True)
    conn.execute("""INSERT INTO rara_workers (id, capabilities, heartbeat_at, stopped_at) VALUES
                    ('live', '{x@1}', now(), NULL),
                    ('stale', '{y@2}', now() - interval '1 hour', NULL),
                    ('stopped', '{z@3}', now(), now())""")
    before = conn.execute("SELECT count(*) FROM rara_runs").fetchone()
    with pytest.raises(CapabilityUnavailable, match="y@2, z@3") as refused:
        start_run(conn, "caps")
    assert refused.value.missing == ["y@2", "z@3"]
    assert conn.execute("SELECT count(*) FROM rara_runs").fetchone() == before
    conn.execute("UPDATE rara_workers SET capabilities = '{x@1,y@2,z@3}' WHERE id = 'live'")
    assert step_keys(conn, start_run(conn, "caps").run_id) == ["a", "b", "c", "d"]


@pytest.mark.parametrize("warm", [False, True])
def test_an_idempotency_key_returns_the_same_run(conn: psycopg.Connection[Any], warm: bool) -> None:
    apply(conn, "idem", [{"key": "a", "capability": "x@1"}])
    if warm:
        start_run(conn, "idem", queue_anyway=True)
    first = start_run(conn, "idem", idempotency_key="k-1", queue_anyway=True)
    runs._INPUT_SCHEMAS.clear()  # the repeat may come from a process that has not seen the spec
    again = start_run(conn, "idem", idempotency_key="k-1", queue_anyway=True)
    assert first.created
    assert not again.created
    assert again.run_id == first.run_id
    assert conn.execute(
        "SELECT count(*) FROM rara_steps WHERE run_id = %s", (first.run_id,)
    ).fetchone() == (1,)


def test_a_version_applied_between_the_two_calls_is_an_error(
    conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    apply(conn, "race", [{"key": "a", "capability": "x@1"}])
    remember = runs._remember

    def remember_then_apply(*args: Any) -> Any:
        steps = remember(*args)
        apply(conn, "race", [{"key": "b", "capability": "x@1"}])
        return steps

    monkeypatch.setattr(runs, "_remember", remember_then_apply)
    with pytest.raises(RaraError, match="changed while starting a run"):
        start_run(conn, "race", queue_anyway=True)
    assert conn.execute("SELECT count(*) FROM rara_runs").fetchone() == (0,)


def test_the_step_rows_decoder_is_inlined_and_no_role_calls_it(
    conn: psycopg.Connection[Any],
) -> None:
    """rara_spec_step_rows (db/functions/runs.sql) is on the start's hot path: PostgreSQL must
    inline it (a SECURITY DEFINER, a SET or STRICT would stop that, and the plan would call
    it), and it is the definer functions' helper, not something a role calls."""
    plan = "\n".join(
        row[0]
        for row in conn.execute(
            'EXPLAIN VERBOSE SELECT * FROM rara_spec_step_rows(\'[{"key": "a"}]\')'
        )
    )
    assert "jsonb_to_recordset" in plan
    assert "rara_spec_step_rows" not in plan
    callers = [
        role
        for role in ("public", *ROLES)
        if conn.execute(
            "SELECT has_function_privilege(%s, 'rara_spec_step_rows(jsonb)', 'EXECUTE')", (role,)
        ).fetchone()
        == (True,)
    ]
    assert callers == []
