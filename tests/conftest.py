"""Test database: one real PostgreSQL per test session, a fresh database per test.

The server is rara's own embedded server (the same code `rara db up` runs) in a temporary
directory, or the server given by RARA_TEST_DATABASE_URL. A template database is migrated once;
each test gets `CREATE DATABASE … TEMPLATE` (fast: a file copy), dropped WITH (FORCE) after.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from rara.pg.clone import clone_database
from rara.pg.embedded import EmbeddedPostgres, temporary_server
from rara.pg.migrate import migrate

TEMPLATE = "rara_template"


def _with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + database))


@pytest.fixture(scope="session")
def pg_server() -> Iterator[EmbeddedPostgres | None]:
    if os.environ.get("RARA_TEST_DATABASE_URL"):
        yield None
        return
    server = temporary_server(fast=True)
    server.up()
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture(scope="session")
def pg_admin_url(pg_server: EmbeddedPostgres | None) -> str:
    if pg_server is None:
        return _with_database(os.environ["RARA_TEST_DATABASE_URL"], "postgres")
    return pg_server.url("postgres")


@pytest.fixture(scope="session")
def template_db(pg_admin_url: str) -> str:
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {TEMPLATE}")
    migrate(_with_database(pg_admin_url, TEMPLATE))
    return TEMPLATE


@pytest.fixture
def fresh_database(pg_admin_url: str, template_db: str) -> Iterator[Callable[[], str]]:
    """Makes freshly migrated databases (clones of the template), as many as a test asks for;
    all dropped after it."""
    names: list[str] = []

    def make() -> str:
        name = f"rara_test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(pg_admin_url, autocommit=True) as conn:
            clone_database(conn, template_db, name)
        names.append(name)
        return _with_database(pg_admin_url, name)

    yield make
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        for name in names:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def database_url(fresh_database: Callable[[], str]) -> str:
    """A freshly migrated database of its own for one test."""
    return fresh_database()


@pytest.fixture
def conn(database_url: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(database_url, autocommit=True) as connection:
        yield connection


@pytest.fixture
def role_url(database_url: str) -> Iterator[Callable[[str], str]]:
    """``role_url(group)``: the URL of this test's database for a new login role that is a
    member of ``group`` (rara_worker, rara_operator, rara_client, rara_reader: migrations 0002,
    0007), as a deployment gives each process its own, or of no role at all when ``group`` is
    None (any login of a shared server: tests/security); dropped after the test. (Connections
    of their own: a chaos test restarts the server under the test's ``conn``.)"""
    made: list[str] = []

    def make(group: str | None) -> str:
        name = f"t_{group or 'nobody'}_{uuid.uuid4().hex[:8]}"
        member = f" IN ROLE {group}" if group else ""
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute(f"CREATE ROLE {name} LOGIN{member}")
        made.append(name)
        parts = urlsplit(database_url)
        return urlunsplit(parts._replace(netloc=f"{name}@{parts.hostname}:{parts.port}"))

    yield make
    with psycopg.connect(database_url, autocommit=True) as admin:
        for name in made:
            admin.execute(f"DROP OWNED BY {name}")
            admin.execute(f"DROP ROLE {name}")
