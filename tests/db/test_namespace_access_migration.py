"""Migration 0018 (isolation between namespaces) on a database filled by the schema before it:
nothing changes until the owner turns isolation on — every login still reads and acts in every
namespace, no table enforces a policy — and then the same rows are kept apart by their
namespaces, with nothing lost."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import conninfo, sql

from rara.pg.migrate import migrate, retired
from rara.runs import start_run
from tests.support.databases import empty_database
from tests.support.definitions import apply

STEPS = [{"key": "collect", "capability": "corpus.collect@1"}]


@contextmanager
def client_login(pg_admin_url: str) -> Iterator[str]:
    """A login in rara_client and nothing else (made after a migration made the group roles;
    roles are the cluster's: dropped after)."""
    name = f"t_mig_client_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_admin_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN IN ROLE rara_client").format(sql.Identifier(name))
        )
    try:
        yield name
    finally:
        with psycopg.connect(pg_admin_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def _runs(conn: psycopg.Connection[Any]) -> list[tuple[int, str]]:
    return conn.execute("SELECT id, namespace FROM rara_runs ORDER BY id").fetchall()


def test_0018_changes_nothing_until_the_owner_isolates(pg_admin_url: str) -> None:
    with empty_database(pg_admin_url, "rara_mig_access") as url:
        migrate(url, [m for m in retired() if m.version <= 17])
        with psycopg.connect(url, autocommit=True) as owner:
            _fill_0017(owner)
            before = _runs(owner)
        migrate(url)
        with (
            client_login(pg_admin_url) as login,
            psycopg.connect(url, autocommit=True) as owner,
            psycopg.connect(conninfo.make_conninfo(url, user=login), autocommit=True) as client,
        ):
            assert _runs(owner) == before
            # Off: no table enforces a policy, and a plain client login sees and acts as before.
            enforced = owner.execute(
                "SELECT count(*) FROM pg_class WHERE relrowsecurity"
                " AND relnamespace = current_schema()::regnamespace"
            ).fetchone()
            assert enforced == (0,)
            grants = owner.execute(
                "SELECT role, namespace FROM rara_namespace_access ORDER BY role"
            ).fetchall()
            assert grants == [("rara_operator", "*"), ("rara_worker", "*")]
            assert _runs(client) == before
            apply(owner, "rag", STEPS, namespace="team-a")  # a version the functions made
            started = start_run(client, "rag", namespace="team-a", queue_anyway=True).run_id
            first = before[0][0]
            assert client.execute("SELECT rara_run_cancel(%s)", (first,)).fetchone() == (True,)
            # On: the login has no namespace yet, so it sees none; granted one, it sees that.
            owner.execute("SELECT rara_namespace_isolation(true)")
            assert _runs(client) == []
            owner.execute(
                "INSERT INTO rara_namespace_access (role, namespace) VALUES (%s, 'team-a')",
                (login,),
            )
            assert _runs(client) == [r for r in _runs(owner) if r[1] == "team-a"]
            assert started in {i for i, _ in _runs(client)}
            # Nothing was lost on the way.
            assert len(_runs(owner)) == len(before) + 1


def _fill_0017(conn: psycopg.Connection[Any]) -> None:
    """Definitions and runs in two namespaces, as 0017's schema holds them (its functions are
    not installed by a partial migration: rows are written as the owner)."""
    for ns in ("default", "team-a"):
        conn.execute("INSERT INTO rara_definitions (namespace, name) VALUES (%s, 'rag')", (ns,))
        conn.execute(
            "INSERT INTO rara_definition_versions (namespace, name, version, digest, spec, steps)"
            " VALUES (%s, 'rag', 1, %s, '{}', '[]')",
            (ns, "sha256:" + ns.encode().hex().ljust(64, "0")[:64]),
        )
        conn.execute(
            "INSERT INTO rara_runs (namespace, definition_version_id, input, steps_total)"
            " SELECT %s, id, '{}', 1 FROM rara_definition_versions WHERE namespace = %s",
            (ns, ns),
        )
