"""The baseline (db/baseline.sql) is the retired chain 0001-0029 (db/retired/) in one file: a
database built either way has the same catalog; a database the chain built and filled is
brought onto the baseline with every row kept, and keeps working; a chain that is not the
retired one is refused, naming the version."""

from __future__ import annotations

import asyncio
import difflib
import hashlib
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from typer.testing import CliRunner

from rara.cli.main import app
from rara.pg.migrate import (
    MigrationError,
    _apply_functions,
    available,
    baseline,
    migrate,
    migrate_database,
    retired,
    schema_dump,
)
from rara.runs import cancel_run, start_run
from rara.states import AttemptOutcome
from rara.worker.store import end_many
from rara.worker.vocabulary import Ending, Fence, LeasedStep
from tests.support.databases import empty_database
from tests.support.definitions import apply
from tests.support.leasing import lease_now

Conn = psycopg.Connection[Any]
CHAIN: list[dict[str, Any]] = [
    {"key": "a", "capability": "x@1", "retry": {"maxAttempts": 1}},
    {"key": "b", "capability": "x@1", "dependsOn": ["a"]},
]


@pytest.fixture
def two(pg_admin_url: str) -> Iterator[tuple[str, str]]:
    with (
        empty_database(pg_admin_url, "rara_base_new") as new,
        empty_database(pg_admin_url, "rara_base_old") as old,
    ):
        yield new, old


def _chain(url: str) -> None:
    """What an older rara left: the retired chain, then the migrations after it, then the
    function files (as the runner before the baseline applied them)."""
    migrate(url, [*retired(), *available()[1:]])
    with psycopg.connect(url) as conn, conn.transaction():
        _apply_functions(conn, force=True)


def _versions(url: str) -> list[tuple[int, str, str]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT version, name, checksum FROM rara_schema_migrations ORDER BY 1"
        ).fetchall()
    return [(int(v), str(n), str(c)) for v, n, c in rows]


def _seeds(url: str) -> list[tuple[Any, ...]]:
    """Rows a new database starts with, and the group roles' memberships (cluster-wide)."""
    with psycopg.connect(url) as conn:
        return [
            *conn.execute("SELECT role, namespace FROM rara_namespace_access ORDER BY 1, 2"),
            *conn.execute(
                "SELECT g.rolname, m.rolname FROM pg_auth_members a"
                " JOIN pg_roles g ON g.oid = a.roleid JOIN pg_roles m ON m.oid = a.member"
                " WHERE g.rolname LIKE 'rara\\_%' AND m.rolname LIKE 'rara\\_%' ORDER BY 1, 2"
            ),
        ]


def test_the_baseline_and_the_retired_chain_make_one_catalog(two: tuple[str, str]) -> None:
    """pg_dump --schema-only of each (rara.pg.migrate.schema_dump): tables and their column
    order, types, indexes, constraints, triggers, policies, functions, grants, the database's
    settings; then the rows a new database starts with and the roles' memberships."""
    new, old = two
    migrate(new, isolation=True)
    _chain(old)
    migrate(old, isolation=True)
    made, chained = schema_dump(new), schema_dump(old)
    diff = "".join(
        difflib.unified_diff(
            chained.splitlines(True), made.splitlines(True), "retired chain", "baseline", n=1
        )
    )
    assert made == chained, diff
    assert _seeds(new) == _seeds(old)
    assert _versions(new) == _versions(old)
    assert _versions(new)[0] == (29, "baseline", baseline().checksum)


def _end(url: str, step: LeasedStep, outcome: AttemptOutcome, **ending: Any) -> None:
    async def end() -> None:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as aconn:
            await end_many(
                aconn,
                [Ending(Fence(step.id, "w", step.lease_token), step.run_id, outcome, **ending)],
            )

    asyncio.run(end())


def _lease(conn: Conn) -> dict[tuple[int, str], LeasedStep]:
    leased = lease_now(conn, ["x@1"], worker="w", limit=100, lease_seconds=300)
    return {(s.run_id, s.key): s for s in leased}


def _fill(conn: Conn, url: str) -> tuple[dict[str, int], LeasedStep]:
    """Runs in every state: succeeded (with an artifact), failed, cancelled, running (its
    second step leased, returned), pending (its step ready: a capability nobody leased)."""
    apply(conn, "flow", CHAIN)
    apply(conn, "later", [{"key": "a", "capability": "y@1"}])
    runs = {
        name: start_run(conn, "flow", input={"n": name}, queue_anyway=True).run_id
        for name in ("succeeded", "failed", "cancelled", "running")
    }
    runs["pending"] = start_run(conn, "later", queue_anyway=True).run_id
    cancel_run(conn, runs["cancelled"])
    blob = b"corpus"
    artifact = {
        "name": "corpus.txt",
        "digest": "sha256:" + hashlib.sha256(blob).hexdigest(),
        "size": len(blob),
        "media_type": "text/plain",
    }
    first = _lease(conn)
    _end(
        url,
        first[runs["succeeded"], "a"],
        AttemptOutcome.SUCCEEDED,
        result={"ok": 1},
        artifacts=[artifact],
    )
    _end(
        url,
        first[runs["failed"], "a"],
        AttemptOutcome.FAILED,
        error={"message": "no"},
        retryable=False,
    )
    _end(url, first[runs["running"], "a"], AttemptOutcome.SUCCEEDED, result={"ok": 2})
    second = _lease(conn)
    _end(url, second[runs["succeeded"], "b"], AttemptOutcome.SUCCEEDED, result={"ok": 3})
    return runs, second[runs["running"], "b"]


def _contents(conn: Conn) -> dict[str, list[Any]]:
    """Every row of every table of rara's (but the runner's own), in a fixed order."""
    tables = [
        t
        for (t,) in conn.execute(
            "SELECT relname FROM pg_class WHERE relkind = 'r' AND relname LIKE 'rara\\_%'"
            " AND relname NOT LIKE 'rara\\_schema\\_%'"
            " AND relnamespace = current_schema()::regnamespace ORDER BY 1"
        )
    ]
    return {
        t: [
            r
            for (r,) in conn.execute(
                sql.SQL("SELECT to_jsonb(t)::text FROM {} t ORDER BY 1").format(sql.Identifier(t))
            )
        ]
        for t in tables
    }


def test_a_filled_database_of_the_retired_chain_keeps_every_row_and_works_on(
    pg_admin_url: str,
) -> None:
    with empty_database(pg_admin_url, "rara_base_filled") as url:
        _chain(url)
        with psycopg.connect(url, autocommit=True) as conn:
            runs, held = _fill(conn, url)
            before = _contents(conn)
            statuses: dict[int, str] = dict(conn.execute("SELECT id, status::text FROM rara_runs"))
        assert statuses == {
            runs["succeeded"]: "succeeded",
            runs["failed"]: "failed",
            runs["cancelled"]: "cancelled",
            runs["running"]: "running",
            runs["pending"]: "pending",
        }
        assert before["rara_step_artifacts"]
        assert before["rara_attempts"]

        cli = CliRunner(env={"DATABASE_URL": url, "RARA_NAMESPACE": None})
        said = cli.invoke(app, ["migrate"])  # recognised and re-stamped: nothing to apply
        assert said.exit_code == 0, said.output
        assert "recorded as at the baseline" in said.output
        assert "schema up to date" in said.output
        assert not migrate_database(url).onto_baseline  # once
        assert _versions(url) == [(m.version, m.name, m.checksum) for m in available()]
        with psycopg.connect(url, autocommit=True) as conn:
            assert _contents(conn) == before
            # It keeps working: the lease taken before ends, the ready step is leased and ends.
            _end(url, held, AttemptOutcome.SUCCEEDED, result={"ok": 4})
            [ready] = lease_now(conn, ["y@1"], worker="w", limit=10)
            _end(url, ready, AttemptOutcome.SUCCEEDED, result={})
            ended = conn.execute(
                "SELECT status::text FROM rara_runs WHERE id = ANY(%s) ORDER BY id",
                ([runs["running"], runs["pending"]],),
            ).fetchall()
            assert ended == [("succeeded",), ("succeeded",)]


def test_a_chain_stopped_part_way_is_finished_then_stamped(pg_admin_url: str) -> None:
    """An older rara that stopped at 0020: the retired files it lacks run, then the baseline's
    row stands for them all."""
    with empty_database(pg_admin_url, "rara_base_partial") as url:
        migrate(url, retired()[:20])
        applied = migrate(url)
        assert [m.version for m in applied] == [
            *range(21, 30),
            *(m.version for m in available()[1:]),
        ]
        assert _versions(url) == [(m.version, m.name, m.checksum) for m in available()]


def _restamp(url: str, version: int, checksum: str | None) -> None:
    with psycopg.connect(url) as conn:
        if checksum is None:
            conn.execute("DELETE FROM rara_schema_migrations WHERE version = %s", (version,))
        else:
            conn.execute(
                "UPDATE rara_schema_migrations SET checksum = %s WHERE version = %s",
                (checksum, version),
            )


@pytest.mark.parametrize(
    ("version", "checksum", "says"),
    [
        (17, "stmt-sha256:" + "0" * 64, "0017_namespaces of the retired chain .* was changed"),
        (12, None, "0012_trust_boundary of the retired chain was never applied"),
        (29, "stmt-sha256:" + "1" * 64, "0029_notifications_name_nothing of the retired chain"),
    ],
)
def test_a_chain_that_is_not_the_retired_one_is_refused_naming_the_version(
    pg_admin_url: str, version: int, checksum: str | None, says: str
) -> None:
    with empty_database(pg_admin_url, f"rara_base_refused_{version}") as url:
        migrate(url, retired())
        _restamp(url, version, checksum)
        before = _versions(url)
        with pytest.raises(MigrationError, match=says):
            migrate(url)
        assert _versions(url) == before  # nothing half-done


def test_a_changed_baseline_is_refused_naming_it(database_url: str) -> None:
    _restamp(database_url, 29, "stmt-sha256:" + "2" * 64)
    with pytest.raises(MigrationError, match="0029_baseline was changed after it was applied"):
        migrate(database_url)


def test_the_retired_files_are_those_the_chain_was_built_with() -> None:
    assert [m.version for m in retired()] == list(range(1, 30))
