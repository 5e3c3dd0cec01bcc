"""The worker's database connections, and why each exists.

A worker process holds at rest (``rara.worker.store.WorkerStore``, ``rara.worker.listener``):

1. **LISTEN** (``rara.worker.listener``): ``rara_ready``, ``rara_queued``, ``rara_cancel``,
   ``rara_waits``; a connection of its own, since ``notifies()`` reads it between statements.
2. **Leases** (``OwnConnection``, hot-path session): the lease loop's ``step_lease``, one at a
   time. Its own so that no pool checkout stands between a free slot and the next lease.
3. **Ends** (``OwnConnection``, hot-path session): the completion batcher's ``step_end_many``,
   beside the leases so that the two hot paths overlap.
4. **Heartbeat** (``OwnConnection``): opened at registration, before the first lease, so that
   no other work queues in front of it during an outage and a slow server's first
   authentication does not eat the leases it must extend.
5. **The pool** (``make_pool``, one connection at rest, up to ``concurrency + 4``): the rest —
   progress, checkpoints, releases, the reaper, the firing of waits, the step cache, the
   worker's row, the next retry time. Attempts write concurrently; the pool shares a few
   connections among them, and after a server restart it replaces broken connections by
   itself, trying again about once a second (``rara.pg.reconnect``). So the loops only catch
   ``psycopg.OperationalError`` (``PoolTimeout`` is one) and retry.

And with ``held_back_slots``, the held-back loop's leases on a connection of their own (opened
at its first lease), so that it never waits for a batch being leased.

The hot paths are planned once (generic plans): planning the lease took about as long as
running it (0.85 of 1.6 ms for one step), on the path from a run's start to its handler.
Generic plans of these statements were once measured 30x slower at a million ready steps; that
was JIT compiling them (their row estimates cross jit_above_cost), off here and for rara's
database: the generic lease is 1.0 ms there against 2.0 ms custom.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from rara.pg.reconnect import CONNECT_TIMEOUT_SECONDS, async_pool_settings, dead_peer_settings

AsyncConn = psycopg.AsyncConnection[Any]
Pool = AsyncConnectionPool[AsyncConn]


def make_pool(url: str, size: int) -> Pool:
    # Back within ~1 s of the database's return, however long the outage (rara.pg.reconnect:
    # the operator's and the dashboard's pools are bound the same way).
    return AsyncConnectionPool(
        url,
        kwargs={"autocommit": True, **dead_peer_settings()},
        min_size=1,
        max_size=size,
        open=False,
        timeout=10.0,
        name="rara-worker",
        **async_pool_settings(),
    )


# The hot paths' sessions (and the lease benchmark's): statements prepared on first use and
# planned once — generic plans — without JIT, whatever the database's defaults. Without
# sequential scans too: every statement there finds its rows by an index, but a plan made while
# a table was nearly empty (a fresh database) would scan it, and keep scanning it as it grew.
HOT_PATH_SESSION: dict[str, Any] = {
    "prepare_threshold": 0,
    "options": "-c plan_cache_mode=force_generic_plan -c jit=off -c enable_seqscan=off",
}


class OwnConnection:
    """A connection of its own for one sequential caller (the lease loop, the completion
    batcher, the heartbeat), re-opened after a failure; a hot path's session
    (``HOT_PATH_SESSION``)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._conn: AsyncConn | None = None

    async def get(self) -> AsyncConn:
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

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()
