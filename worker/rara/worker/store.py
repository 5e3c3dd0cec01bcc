"""The worker's database access: the named queries it runs, over a connection pool.

Why a pool (psycopg_pool) and not one connection per loop: attempts end concurrently (one
short transaction each) while heartbeats, leases and the reaper run beside them; the pool
shares a few connections among all of them, and after a server restart it replaces broken
connections by itself (a connection given back in a bad state is discarded, new ones are made
on demand). So the loops only need to catch ``psycopg.OperationalError`` (``PoolTimeout`` is
one) and retry the statement. The LISTEN connection is separate (``rara.worker.listener``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import class_row, scalar_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from rara import lifecycle
from rara.artifacts.ref import ArtifactRef
from rara.pg import steps as step_sql
from rara.pg.queries import amany, avalue, sql
from rara.states import AttemptOutcome, StepStatus
from rara.worker.dispatch import LEASED, LeasedStep

Pool = AsyncConnectionPool[psycopg.AsyncConnection[Any]]
Pairs = Sequence[tuple[str, str]]  # (capability, executor kind)


def make_pool(url: str, size: int) -> Pool:
    return AsyncConnectionPool(url, kwargs={"autocommit": True}, min_size=1, max_size=size,
                               open=False, timeout=10.0, name="rara-worker")


# The hot paths' sessions (and the lease benchmark's): statements prepared on first use and
# planned once — generic plans — without JIT, whatever the database's defaults (see WorkerStore).
# Without sequential scans too: every statement there finds its rows by an index, but a plan
# made while a table was nearly empty (a fresh database) would scan it, and keep scanning it
# as it grew.
HOT_PATH_SESSION: dict[str, Any] = {
    "prepare_threshold": 0,
    "options": "-c plan_cache_mode=force_generic_plan -c jit=off -c enable_seqscan=off"}


@dataclass(frozen=True, slots=True)
class HeldLease:
    """A row of ``step_heartbeat``: a lease still held, and whether cancel was asked."""

    id: int
    cancel_requested: bool


async def _lease(conn: psycopg.AsyncConnection[Any], params: dict[str, Any]) -> list[LeasedStep]:
    async with conn.cursor(row_factory=LEASED) as cur:
        await cur.execute(sql("step_lease"), params)
        return await cur.fetchall()


class _OwnConnection:
    """A connection of its own for one sequential caller (the lease loop, the completion
    batcher), re-opened after a failure; a hot path's session (``HOT_PATH_SESSION``)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._conn: psycopg.AsyncConnection[Any] | None = None

    async def get(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, connect_timeout=10, **HOT_PATH_SESSION)
        return self._conn

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()


class WorkerStore:
    """The worker's statements, over the pool.

    ``own_url``: the two hot paths — leases and the completion batcher's flushes, each
    sequential — get a connection of their own instead, so they overlap each other and no pool
    checkout stands in their way. Both are planned once (generic plans): planning the lease took
    about as long as running it (0.85 of 1.6 ms for one step), on the path from a run's start
    to its handler. Generic plans of these statements were once measured 30x slower at a
    million ready steps; that was JIT compiling them (their row estimates cross
    jit_above_cost), off here and for rara's database (migration 0004): the generic lease is
    1.0 ms there against 2.0 ms custom. ``close()`` closes them.
    """

    def __init__(self, pool: Pool, worker: str, own_url: str | None = None) -> None:
        self.pool = pool
        self.worker = worker
        self._lease_conn = _OwnConnection(own_url) if own_url else None
        self._end_conn = _OwnConnection(own_url) if own_url else None

    async def close(self) -> None:
        for own in (self._lease_conn, self._end_conn):
            if own is not None:
                await own.close()

    async def lease(self, pairs: Pairs, limit: int, lease_seconds: float,
                    after: Mapping[str, Sequence[Any] | None] | None = None
                    ) -> list[LeasedStep]:
        """Lease up to ``limit`` steps; ``after``: the per-pair cursors
        (``LeaseCursors.after``), None to scan every range from the start."""
        if after is None:  # NULL arrays: unnest pads them with NULLs
            after = {"after_ranks": None, "after_ats": None, "after_ids": None}
        params = {"capabilities": [c for c, _ in pairs], "executors": [e for _, e in pairs],
                  "limit": limit, "worker": self.worker, "lease_seconds": lease_seconds, **after}
        if self._lease_conn is None:
            async with self.pool.connection() as conn:
                return await _lease(conn, params)
        try:
            return await _lease(await self._lease_conn.get(), params)
        except psycopg.OperationalError:
            await self._lease_conn.close()  # a new connection next time
            raise

    async def next_available(self, pairs: Pairs) -> float | None:
        async with self.pool.connection() as conn:
            return await step_sql.next_available(conn, list(pairs))

    async def heartbeat_all(self, capabilities: Sequence[str], leases: Sequence[tuple[int, UUID]],
                            lease_seconds: float) -> dict[int, bool]:
        """The worker's row and every lease it holds, in one statement. Answer: step id →
        cancel requested, for the leases still held (a lease missing from it is lost)."""
        async with self.pool.connection() as conn:
            held = await amany(conn, "step_heartbeat", class_row(HeldLease), worker=self.worker,
                               capabilities=list(capabilities), step_ids=[s for s, _ in leases],
                               tokens=[t for _, t in leases], lease_seconds=lease_seconds)
            return {r.id: r.cancel_requested for r in held}

    async def write_progress(self, items: Sequence[tuple[int, UUID, int, float | None, str,
                                                         Mapping[str, float]]]) -> set[int]:
        """Progress rows (step, token, seq, fraction, message, metrics); the steps still owned."""
        async with self.pool.connection() as conn:
            owned = await amany(conn, "step_progress_many", scalar_row, worker=self.worker,
                                step_ids=[i[0] for i in items], tokens=[i[1] for i in items],
                                seqs=[i[2] for i in items], fractions=[i[3] for i in items],
                                messages=[i[4] for i in items],
                                metrics=[Jsonb(dict(i[5])) for i in items])
            return {int(r) for r in owned}

    async def write_checkpoint(self, step_id: int, token: UUID, seq: int,
                               state: Mapping[str, Any], ref: ArtifactRef | None) -> bool:
        async with self.pool.connection() as conn:
            return bool(await avalue(
                conn, "step_checkpoint", bool, step_id=step_id, worker=self.worker, token=token,
                seq=seq, state=Jsonb(dict(state)), digest=ref.digest if ref else None,
                size=ref.size if ref else None))

    # -- the end of an attempt: rara.lifecycle, one transaction each --------------------------

    async def complete(self, fence: lifecycle.Fence, result: Any,
                       artifacts: Sequence[Mapping[str, Any]]) -> bool:
        async with self.pool.connection() as conn:
            return await lifecycle.complete(conn, fence, result, artifacts)

    async def end_many(self, endings: Sequence[lifecycle.Ending]) -> list[StepStatus | None]:
        """Many attempts' ends in one transaction (the completion batcher's flush)."""
        if self._end_conn is None:
            async with self.pool.connection() as conn:
                return await lifecycle.end_many(conn, endings)
        try:
            return await lifecycle.end_many(await self._end_conn.get(), endings)
        except psycopg.OperationalError:
            await self._end_conn.close()  # a new connection next time
            raise

    async def fail(self, fence: lifecycle.Fence, error: Mapping[str, Any], *, retryable: bool,
                   jitter: float, outcome: AttemptOutcome) -> StepStatus | None:
        async with self.pool.connection() as conn:
            return await lifecycle.fail(conn, fence, error, retryable=retryable, jitter=jitter,
                                        outcome=outcome)

    async def cancelled(self, fence: lifecycle.Fence) -> bool:
        async with self.pool.connection() as conn:
            return await lifecycle.cancelled(conn, fence)

    async def release(self, leases: Sequence[tuple[int, UUID]]) -> list[int]:
        async with self.pool.connection() as conn:
            return await lifecycle.release(conn, self.worker, leases)

    async def reap(self, limit: int, jitter: float) -> list[tuple[int, StepStatus]]:
        async with self.pool.connection() as conn:
            return await lifecycle.reap(conn, self.worker, limit=limit, jitter=jitter)

    # -- the worker's own row -------------------------------------------------------------

    async def register(self, capabilities: Sequence[str]) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(sql("worker_register"),
                               {"worker": self.worker, "capabilities": list(capabilities)})

    async def stop(self) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(sql("worker_stop"), {"worker": self.worker})
