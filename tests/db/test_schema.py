"""db/schema.sql is the schema the migrations leave (db/schema.sh writes it; `make lint` runs
`db/schema.sh --check`, which asks the same of a throw-away server)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from rara.pg.migrate import migrate, schema_dump

SCHEMA = Path(__file__).resolve().parents[2] / "db" / "schema.sql"
STALE = "db/schema.sql differs from what the migrations make: run `make schema` and commit it"


@pytest.fixture
def empty_database(pg_admin_url: str) -> Iterator[str]:
    name = f"rara_schema_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield pg_admin_url.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_a_freshly_migrated_database_is_db_schema_sql(empty_database: str) -> None:
    migrate(empty_database)
    assert schema_dump(empty_database) == SCHEMA.read_text(), STALE


def test_db_schema_sql_run_on_an_empty_database_makes_the_same_schema(empty_database: str) -> None:
    """The file is a faithful description, not only a comparison target: run as it stands,
    it makes the schema it shows (per-database settings included)."""
    with psycopg.connect(empty_database, autocommit=True) as conn:
        conn.execute(SCHEMA.read_bytes())  # bytes: the whole file as one script
    assert schema_dump(empty_database) == SCHEMA.read_text()


def test_the_database_every_test_gets_is_db_schema_sql(database_url: str) -> None:
    """Tests run on clones of a migrated template (tests/conftest.py): a clone is the declared
    schema too, its database settings included (rara.pg.clone copies them), once isolation
    between namespaces — which the template turns off — is on again as in a new database."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert conn.execute("SELECT rara_namespace_isolation(true)").fetchone() == (False,)
    assert schema_dump(database_url) == SCHEMA.read_text()
