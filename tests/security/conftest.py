"""Logins for the attack suite: one per rara role, and one with no rara role at all (any login
of a shared PostgreSQL), each with a connection of its own; all dropped after the test."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

# The worker's fixtures (a worker in a thread; the handlers' record cleared per test), for the
# attacks on a running worker.
from tests.worker.conftest import _forget_seen, thread_worker  # noqa: F401

ROLES = ("rara_reader", "rara_worker", "rara_client", "rara_operator")


@pytest.fixture
def login_url(database_url: str) -> Iterator[Callable[[str | None], str]]:
    """``login_url(group)``: the URL of this test's database for a new login that is a member
    of ``group``, or of nothing when ``group`` is None."""
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


@pytest.fixture
def login(login_url: Callable[[str | None], str]
          ) -> Iterator[Callable[[str | None], psycopg.Connection[Any]]]:
    opened: list[psycopg.Connection[Any]] = []

    def connect(group: str | None) -> psycopg.Connection[Any]:
        opened.append(psycopg.connect(login_url(group), autocommit=True))
        return opened[-1]

    yield connect
    for c in opened:
        c.close()
