"""The worker's database connections, and why there are two at rest.

A worker process holds:

1. **LISTEN** (``rara.worker.listener``): ``rara_ready``, ``rara_queued``, ``rara_cancel``,
   ``rara_waits``; a connection of its own, since ``notifies()`` reads it between statements.
2. **The pool** (``make_pool``): every other statement of ``rara.worker.store`` — leases,
   ends, the reaper's turn, progress, checkpoints, the step cache, the firing of waits, the
   worker's row. One connection at rest; under load it grows to what the loops and attempts
   use at once (the lease loop, the held-back leases, the completion batcher, each attempt's
   writes: ``concurrency + 4`` at most), and shrinks back to one after ``IDLE_SECONDS``
   unused. Checking one out costs microseconds when one is free; when none is, the pool opens
   another in the background and the first returned serves the waiter. After a server
   restart the pool replaces broken connections by itself (``rara.pg.reconnect``), so the
   loops only catch ``psycopg.OperationalError`` (``PoolTimeout`` is one) and retry.
3. **The heartbeat's own** (``OwnConnection``), only while the worker holds leases: renewing
   them after an outage must not wait behind the pool's reconnect back-off or its waiters
   (measured: a 20 s outage under a 30 s lease expired held leases when the heartbeat checked
   out of the pool). Re-opened at once after a failure; closed when the worker holds none, and
   the worker's row is then beaten on the pool.

So a fleet of idle workers costs the database two backends a worker, not five.

Every connection of the pool is a hot path's session (``HOT_PATH_SESSION``): statements are
planned once (generic plans). Planning the lease took about as long as running it (0.85 of
1.6 ms for one step), on the path from a run's start to its handler. Generic plans of these
statements were once measured 30x slower at a million ready steps; that was JIT compiling them
(their row estimates cross jit_above_cost), off here and for rara's database: the generic lease
is 1.0 ms there against 2.0 ms custom. The worker's other statements are keyed by id the same
way, so one kind of session serves them all.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from rara.pg.reconnect import CONNECT_TIMEOUT_SECONDS, async_pool_settings, dead_peer_settings

AsyncConn = psycopg.AsyncConnection[Any]
Pool = AsyncConnectionPool[AsyncConn]

# The hot paths' sessions (and the lease benchmark's): statements prepared on first use and
# planned once — generic plans — without JIT, whatever the database's defaults. Without
# sequential scans too: every statement there finds its rows by an index, but a plan made while
# a table was nearly empty (a fresh database) would scan it, and keep scanning it as it grew.
HOT_PATH_SESSION: dict[str, Any] = {
    "prepare_threshold": 0,
    "options": "-c plan_cache_mode=force_generic_plan -c jit=off -c enable_seqscan=off",
}

# A connection above the pool's one unused this long is closed (psycopg_pool looks once per
# interval and closes one at a time): long enough that a worker between bursts keeps its
# connections, short enough that an idle fleet is back to two backends a worker in minutes.
IDLE_SECONDS = 60.0


def make_pool(url: str, size: int) -> Pool:
    # Back within ~1 s of the database's return, however long the outage (rara.pg.reconnect:
    # the operator's and the dashboard's pools are bound the same way).
    return AsyncConnectionPool(
        url,
        kwargs={
            "autocommit": True,
            "connect_timeout": CONNECT_TIMEOUT_SECONDS,
            **HOT_PATH_SESSION,
            **dead_peer_settings(),
        },
        min_size=1,
        max_size=size,
        max_idle=IDLE_SECONDS,
        open=False,
        timeout=10.0,
        name="rara-worker",
        **async_pool_settings(),
    )


class OwnConnection:
    """A connection of its own for one sequential caller (the heartbeat, while it renews
    leases), opened on first use and again after a failure; a hot path's session
    (``HOT_PATH_SESSION``). A try abandoned mid-connect may overlap the next one: the lock
    makes them share one connection rather than each open one and one of them be lost."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._conn: AsyncConn | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    async def get(self) -> AsyncConn:
        async with self._lock:
            if self._closed:
                raise psycopg.OperationalError("the connection's owner has stopped")
            if self._conn is None or self._conn.closed:
                self._conn = await psycopg.AsyncConnection.connect(
                    self.url,
                    autocommit=True,
                    connect_timeout=CONNECT_TIMEOUT_SECONDS,
                    **HOT_PATH_SESSION,
                    **dead_peer_settings(),
                )
            return self._conn

    def forget(self, conn: AsyncConn) -> None:
        """``conn`` is not to be used again (its caller closes it): a new one next time."""
        if self._conn is conn:
            self._conn = None

    async def release(self) -> None:
        """Closed until the next ``get``."""
        async with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    async def close(self) -> None:
        """Closed for good: a ``get`` after this fails."""
        self._closed = True
        await self.release()
