"""The migration owner need not be a superuser, and is contained (docs/least-privilege.md, "The
owner"): a login with neither SUPERUSER nor CREATEROLE that owns rara's database, holding ADMIN
OPTION on rara's group roles (what a superuser runs once: `rara access bootstrap-sql`),
migrates it and runs a workflow, and cannot reach the server: on PostgreSQL 15 a CREATEROLE
owner could grant itself pg_execute_server_program and run a program as the server's OS
user. Without the bootstrap the migration is refused, naming the role it lacks."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from rara.definitions.parse import definition_from_object
from rara.definitions.registry import apply_definition
from rara.pg.access import bootstrap_sql
from rara.pg.migrate import migrate
from rara.runs import start_run
from tests.support.definitions import definition
from tests.support.runs import wait_run
from tests.support.workers import ThreadWorker

Owned = Callable[..., str]


@pytest.fixture
def owned_database(pg_admin_url: str) -> Iterator[Owned]:
    """``owned(*attributes, bootstrap=True)``: the URL of a new database owned by a new
    NOSUPERUSER login (with ``attributes``, e.g. CREATEROLE), after the superuser's one-time
    bootstrap for it unless ``bootstrap`` is False; ``owned.login(group)`` a login in a group
    role, made by the superuser and granted its group by the owner. All dropped after."""
    roles: list[str] = []
    databases: list[str] = []
    parts = urlsplit(pg_admin_url)

    def url_of(role: str, database: str) -> str:
        return urlunsplit(
            parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port}", path=f"/{database}")
        )

    def owned(*attributes: str, bootstrap: bool = True) -> str:
        owner, database = f"t_owner_{uuid.uuid4().hex[:8]}", f"rara_owned_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(pg_admin_url, autocommit=True) as admin:
            admin.execute(f"CREATE ROLE {owner} LOGIN NOSUPERUSER {' '.join(attributes)}")
            roles.append(owner)
            admin.execute(f"CREATE DATABASE {database} OWNER {owner}")
            databases.append(database)
            if bootstrap:
                admin.execute(bootstrap_sql(owner).encode())  # bytes: the script as it is
        return url_of(owner, database)

    yield owned
    with psycopg.connect(pg_admin_url, autocommit=True) as admin:
        for database in databases:
            admin.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        for role in reversed(roles):
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")


def _escalations(conn: psycopg.Connection[tuple[object, ...]]) -> dict[str, str]:
    """Each way out of rara's data tried as ``conn``'s login: what happened ('done' or the
    error's SQLSTATE)."""
    me = conn.info.user
    tries = {
        "grant pg_execute_server_program": f"GRANT pg_execute_server_program TO {me}",
        "grant pg_read_server_files": f"GRANT pg_read_server_files TO {me}",
        "copy to program": "COPY (SELECT 1) TO PROGRAM 'id'",
        "read pg_authid": "SELECT rolpassword FROM pg_authid LIMIT 1",
        "create role": f"CREATE ROLE {me}_twin SUPERUSER",
    }
    found = {}
    for what, statement in tries.items():
        try:
            with conn.transaction():
                conn.execute(statement)
            found[what] = "done"
        except psycopg.Error as exc:
            found[what] = exc.sqlstate or str(exc)
    return found


def test_the_recommended_owner_migrates_runs_a_workflow_and_cannot_reach_the_server(
    owned_database: Owned, pg_admin_url: str, tmp_path: Path
) -> None:
    url = owned_database()
    migrate(url)
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute(
            "SELECT rolsuper, rolcreaterole FROM pg_roles WHERE rolname = current_user"
        ).fetchone() == (False, False)
        escalations = _escalations(conn)
        assert all(outcome != "done" for outcome in escalations.values()), escalations
        # (Refused as insufficient_privilege; the words differ between PostgreSQL versions.)
        assert escalations == dict.fromkeys(escalations, "42501"), escalations
        # The definers run as this owner, with its rights and no more.
        assert conn.execute(
            "SELECT count(*) FROM pg_proc p JOIN pg_roles r ON r.oid = p.proowner"
            " WHERE p.prosecdef AND r.rolname <> current_user"
            " AND p.pronamespace = current_schema()::regnamespace"
        ).fetchone() == (0,)
        # A worker's login: made by whoever makes logins, put in its group by the owner.
        worker = f"t_worker_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(pg_admin_url, autocommit=True) as admin:
            admin.execute(f"CREATE ROLE {worker} LOGIN")
        try:
            conn.execute(f"GRANT rara_worker TO {worker}")
            parts = urlsplit(url)
            worker_url = urlunsplit(parts._replace(netloc=f"{worker}@{parts.netloc.split('@')[1]}"))
            apply_definition(
                conn,
                definition_from_object(
                    definition("d", [{"key": "a", "capability": "test.noop@1"}])
                ),
            )
            run_id = start_run(conn, "d", queue_anyway=True).run_id
            running = ThreadWorker(worker_url, tmp_path).start(conn)
            try:
                wait_run(conn, run_id, status="succeeded", timeout=30)
            finally:
                running.stop()
        finally:
            with psycopg.connect(pg_admin_url, autocommit=True) as admin:
                admin.execute(f"DROP ROLE {worker}")


def test_an_owner_without_the_bootstrap_is_refused_naming_the_role(owned_database: Owned) -> None:
    url = owned_database(bootstrap=False)
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as refused:
        migrate(url)
    assert "holds group role rara_reader without ADMIN OPTION" in str(refused.value)
    assert "rara access bootstrap-sql" in (refused.value.diag.message_hint or "")
    with psycopg.connect(url, autocommit=True) as conn:  # nothing half-written
        assert conn.execute("SELECT to_regclass('rara_runs')").fetchone() == (None,)


def test_a_createrole_owner_on_postgresql_15_is_not_contained(owned_database: Owned) -> None:
    """Why the owner has no CREATEROLE: before PostgreSQL 16 it may grant itself predefined
    roles, and with them run programs on the server and read its files."""
    url = owned_database("CREATEROLE", bootstrap=False)
    with psycopg.connect(url, autocommit=True) as conn:
        major = conn.execute("SELECT current_setting('server_version_num')::int / 10000")
        row = major.fetchone()
        assert row is not None
        if row[0] >= 16:
            pytest.skip("PostgreSQL 16 and later contain a CREATEROLE role")
        conn.execute(f"GRANT pg_execute_server_program TO {conn.info.user}")
        # A program run as the server's OS user; it reads its input, so the pipe never breaks.
        conn.execute("COPY (SELECT 1) TO PROGRAM 'cat > /dev/null'")
