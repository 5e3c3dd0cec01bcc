"""The named SQL of ``db/queries/workflows.sql``, loaded once, for sync and async callers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import cache
from importlib.resources import files
from typing import Any

import aiosql

_FILE = files("rara.sql") / "queries" / "workflows.sql"


@cache
def sync_queries() -> Any:
    """Queries for psycopg's sync connections (CLI, client, operator)."""
    return aiosql.from_str(_FILE.read_text(), "psycopg", mandatory_parameters=False)


@cache
def async_queries() -> Any:
    """Queries for psycopg's async connections (worker)."""
    return aiosql.from_str(_FILE.read_text(), "apsycopg", mandatory_parameters=False)


async def fetch_all(rows: AsyncIterator[Any]) -> list[Any]:
    """Rows of an async query without a suffix: aiosql returns those as an async generator
    (the statement runs only once it is iterated)."""
    return [row async for row in rows]
