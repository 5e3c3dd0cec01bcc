"""Database roles: each process kind can do what it needs and nothing more."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from rara.runs import start_run
from rara.worker.testing import lease_now
from tests.helpers import apply


@pytest.fixture
def login_as(conn: psycopg.Connection[Any], database_url: str) -> Iterator[Any]:
    made: list[str] = []

    def connect(group: str) -> psycopg.Connection[Any]:
        name = f"t_{group}_{uuid.uuid4().hex[:8]}"
        conn.execute(f"CREATE ROLE {name} LOGIN IN ROLE {group}")
        made.append(name)
        parts = urlsplit(database_url)
        url = urlunsplit(parts._replace(netloc=f"{name}@{parts.hostname}:{parts.port}"))
        return psycopg.connect(url, autocommit=True)

    yield connect
    for name in made:
        conn.execute(f"DROP OWNED BY {name}")
        conn.execute(f"DROP ROLE {name}")


def test_worker_role_leases_but_cannot_touch_definitions(
    conn: psycopg.Connection[Any], login_as: Any
) -> None:
    apply(conn, "r", [{"key": "a", "capability": "x@1"}])
    start_run(conn, "r", queue_anyway=True)
    with login_as("rara_worker") as worker:
        rows = lease_now(worker, ["x@1"], worker="w", limit=5)
        assert len(rows) == 1
        for statement in (
            "INSERT INTO rara_definitions (name) VALUES ('evil')",
            "UPDATE rara_definitions SET retired_at = now()",
            "DELETE FROM rara_steps",
            "INSERT INTO rara_runs (definition_version_id) VALUES (1)",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                worker.execute(statement)


def test_operator_role_registers_but_cannot_lease(
    conn: psycopg.Connection[Any], login_as: Any
) -> None:
    with login_as("rara_operator") as operator:
        apply(operator, "op", [{"key": "a", "capability": "x@1"}])
        start_run(operator, "op", queue_anyway=True)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            lease_now(operator, ["x@1"], worker="w", limit=5)
