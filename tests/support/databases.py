"""An empty database of its own, for tests that migrate one part-way, fill it as an older
schema had it, and then migrate the rest (the template database of tests/conftest.py is
already at the latest schema)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg


@contextmanager
def empty_database(pg_admin_url: str, name: str) -> Iterator[str]:
    """The URL of a new empty database ``name`` on the test server (one left by an earlier
    run is replaced), dropped again afterwards whatever happened."""
    with psycopg.connect(pg_admin_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield pg_admin_url.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(pg_admin_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
