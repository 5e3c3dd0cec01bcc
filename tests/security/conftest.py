"""Logins for the attack suite: one per rara role, and one with no rara role at all (any login
of a shared PostgreSQL), each with a connection of its own (tests/conftest.py's ``role_url``);
all dropped after the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest


@pytest.fixture
def login(
    role_url: Callable[[str | None], str],
) -> Iterator[Callable[[str | None], psycopg.Connection[Any]]]:
    """``login(group)``: a connection of a new login in ``group`` (None: in no rara role)."""
    opened: list[psycopg.Connection[Any]] = []

    def connect(group: str | None) -> psycopg.Connection[Any]:
        opened.append(psycopg.connect(role_url(group), autocommit=True))
        return opened[-1]

    yield connect
    for c in opened:
        c.close()
