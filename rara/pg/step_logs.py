"""Typed access to ``db/queries/step_logs.sql``: the chunks of what a run's steps wrote.

A reader follows a run by a ``LogCursor``: the last seq it read of each attempt. Chunks of an
attempt are written in seq order, each after the one before it committed (the worker ships one
batch at a time), so asking again for what comes after the cursor misses none and repeats none.
What a chunk holds is data: it is printed literally (the CLI) or escaped (the dashboard).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg.rows import class_row

from rara.pg.queries import AsyncConn, Conn, amany, many

# How many chunks one read returns at most (a chunk is ≤ 64 KiB): a follower asks again.
READ_LIMIT = 256


@dataclass(frozen=True, slots=True)
class LogChunk:
    step_id: int
    key: str
    attempt: int
    seq: int
    body: str
    dropped: int
    created_at: datetime


@dataclass(slots=True)
class LogCursor:
    """The last seq read of each attempt ("step_id:attempt" → seq)."""

    seen: dict[str, int] = field(default_factory=dict)

    def advance(self, chunks: Iterable[LogChunk]) -> None:
        for c in chunks:
            where = f"{c.step_id}:{c.attempt}"
            self.seen[where] = max(self.seen.get(where, 0), c.seq)


def list_chunks(
    conn: Conn,
    run_id: int,
    step_key: str | None = None,
    cursor: LogCursor | None = None,
    limit: int = READ_LIMIT,
) -> list[LogChunk]:
    """The run's chunks (of ``step_key`` only, if given) after ``cursor``, oldest first; the
    cursor, if given, moves past them."""
    chunks = many(
        conn, "step_log_list", class_row(LogChunk), **_params(run_id, step_key, cursor, limit)
    )
    if cursor is not None:
        cursor.advance(chunks)
    return chunks


async def alist_chunks(
    conn: AsyncConn, run_id: int, step_key: str | None = None, limit: int = READ_LIMIT
) -> list[LogChunk]:
    """``list_chunks`` from the start, on an async connection (the dashboard)."""
    return await amany(
        conn, "step_log_list", class_row(LogChunk), **_params(run_id, step_key, None, limit)
    )


def _params(
    run_id: int, step_key: str | None, cursor: LogCursor | None, limit: int
) -> dict[str, Any]:
    seen = json.dumps(cursor.seen if cursor else {})
    return {"run_id": run_id, "step_key": step_key, "seen": seen, "limit": limit}


@dataclass(frozen=True, slots=True)
class LogMark:
    run_id: int
    mark: int


async def alog_marks(conn: AsyncConn, run_ids: list[int]) -> dict[int, int]:
    """Per run (of those with a running step), a number that grows when a running step's log
    does (step_log_marks): the dashboard's cue to read the log again."""
    rows = await amany(conn, "step_log_marks", class_row(LogMark), run_ids=run_ids)
    return {r.run_id: r.mark or 0 for r in rows}
