"""The migration owner need not be a superuser (docs/least-privilege.md, "Threat model"): a
login with CREATEROLE that owns rara's database migrates it, creates the group roles' grants,
and the runtime works; a compromise of that owner is a compromise of rara's data, not of the
server."""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit, urlunsplit

import psycopg

from rara.definitions.parse import definition_from_object
from rara.definitions.registry import apply_definition
from rara.pg.migrate import migrate
from rara.runs import start_run
from tests.support.definitions import definition


def test_a_non_superuser_owner_migrates_and_runs(pg_admin_url: str) -> None:
    owner, database = f"t_owner_{uuid.uuid4().hex[:8]}", f"rara_owned_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_admin_url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {owner} LOGIN CREATEROLE NOSUPERUSER")
        admin.execute(f"CREATE DATABASE {database} OWNER {owner}")
    parts = urlsplit(pg_admin_url)
    url = urlunsplit(
        parts._replace(netloc=f"{owner}@{parts.hostname}:{parts.port}", path=f"/{database}")
    )
    try:
        migrate(url)
        with psycopg.connect(url, autocommit=True) as conn:
            assert conn.execute(
                "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
            ).fetchone() == (False,)
            apply_definition(
                conn, definition_from_object(definition("d", [{"key": "a", "capability": "x@1"}]))
            )
            assert start_run(conn, "d", queue_anyway=True).created
            # The definers run as this owner, with its rights and no more.
            assert conn.execute(
                "SELECT count(*) FROM pg_proc p JOIN pg_roles r ON r.oid = p.proowner"
                " WHERE p.prosecdef AND r.rolname <> current_user"
                " AND p.pronamespace = current_schema()::regnamespace"
            ).fetchone() == (0,)
    finally:
        with psycopg.connect(pg_admin_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
            admin.execute(f"DROP OWNED BY {owner}")
            admin.execute(f"DROP ROLE {owner}")
