"""Whether isolation between namespaces is off (docs/namespaces.md, "Isolation"), for the banner
every page shows while it is: read at start, then every ``INTERVAL`` seconds, as the UI's
login (the catalog's word: row-level security on rara_runs). A failed read keeps the last
answer; the pages never wait for it."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from rara.pg.queries import avalue

INTERVAL = 30.0


class IsolationWatch:
    def __init__(self, pool: AsyncConnectionPool[Any], interval: float = INTERVAL) -> None:
        self.pool = pool
        self.interval = interval
        self.off = False
        self._task: asyncio.Task[None] | None = None

    async def read(self) -> None:
        with contextlib.suppress(psycopg.Error, TimeoutError):
            async with self.pool.connection(timeout=5) as conn:
                self.off = not await avalue(conn, "namespace_isolation_get", bool)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.read()

    async def start(self) -> None:
        await self.read()
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
