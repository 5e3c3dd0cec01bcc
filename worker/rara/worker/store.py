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
from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from rara import lifecycle
from rara.artifacts.ref import ArtifactRef
from rara.context import Checkpoint
from rara.pg.queries import async_queries, fetch_all
from rara.worker.dispatch import LeasedStep, inputs_from_rows

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
        self.q = async_queries()
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
                cur = await conn.execute(self.q.step_lease_routed.sql, params)
                return [LeasedStep.from_row(r) for r in await cur.fetchall()]
        try:
            conn = await self._lease_conn.get()
            cur = await conn.execute(self.q.step_lease_routed.sql, params)
            return [LeasedStep.from_row(r) for r in await cur.fetchall()]
        except psycopg.OperationalError:
            await self._lease_conn.close()  # a new connection next time
            raise

    async def next_available(self, pairs: Pairs) -> float | None:
        async with self.pool.connection() as conn:
            value = await self.q.steps_next_available(
                conn, capabilities=[c for c, _ in pairs], executors=[e for _, e in pairs])
            return None if value is None else float(value)

    async def heartbeat_all(self, capabilities: Sequence[str], leases: Sequence[tuple[int, UUID]],
                            lease_seconds: float) -> dict[int, bool]:
        """The worker's row and every lease it holds, in one statement. Answer: step id →
        cancel requested, for the leases still held (a lease missing from it is lost)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(self.q.worker_heartbeat_steps.sql, {
                "worker": self.worker, "capabilities": list(capabilities),
                "step_ids": [s for s, _ in leases], "tokens": [t for _, t in leases],
                "lease_seconds": lease_seconds})
            return {r[0]: bool(r[1]) for r in await cur.fetchall()}

    async def write_progress(self, items: Sequence[tuple[int, UUID, int, float | None, str,
                                                         Mapping[str, float]]]) -> set[int]:
        """Progress rows (step, token, seq, fraction, message, metrics); the steps still owned."""
        async with self.pool.connection() as conn:
            rows = await fetch_all(self.q.step_progress_write(
                conn, worker=self.worker, step_ids=[i[0] for i in items],
                tokens=[i[1] for i in items], seqs=[i[2] for i in items],
                fractions=[i[3] for i in items], messages=[i[4] for i in items],
                metrics=[Jsonb(dict(i[5])) for i in items]))
            return {r[0] for r in rows}

    async def write_checkpoint(self, step_id: int, token: UUID, seq: int,
                               state: Mapping[str, Any], ref: ArtifactRef | None) -> bool:
        async with self.pool.connection() as conn:
            return bool(await self.q.step_checkpoint_write(
                conn, step_id=step_id, worker=self.worker, token=token, seq=seq,
                state=Jsonb(dict(state)), digest=ref.digest if ref else None,
                size=ref.size if ref else None))

    async def latest_checkpoint(self, step_id: int, attempt: int) -> Checkpoint | None:
        async with self.pool.connection() as conn:
            row = await self.q.step_checkpoint_latest(conn, step_id=step_id, attempt=attempt)
        if row is None:
            return None
        ref = ArtifactRef(row[3], int(row[4])) if row[3] is not None else None
        return Checkpoint(attempt=row[0], seq=row[1], state=row[2], artifact=ref)

    async def inputs(self, run_id: int, keys: Sequence[str]) -> dict[str, ArtifactRef]:
        """``"<step>/<name>"`` for every upstream artifact, and the bare name when unique."""
        async with self.pool.connection() as conn:
            rows = await fetch_all(self.q.step_inputs(conn, run_id=run_id, keys=list(keys)))
        return inputs_from_rows(rows)

    # -- the end of an attempt: rara.lifecycle, one transaction each --------------------------

    async def complete(self, fence: lifecycle.Fence, result: Any,
                       artifacts: Sequence[Mapping[str, Any]]) -> bool:
        async with self.pool.connection() as conn:
            return await lifecycle.complete(conn, fence, result, artifacts)

    async def end_many(self, endings: Sequence[lifecycle.Ending]) -> list[str | None]:
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
                   jitter: float, outcome: str) -> str | None:
        async with self.pool.connection() as conn:
            return await lifecycle.fail(conn, fence, error, retryable=retryable, jitter=jitter,
                                        outcome=outcome)

    async def cancelled(self, fence: lifecycle.Fence) -> bool:
        async with self.pool.connection() as conn:
            return await lifecycle.cancelled(conn, fence)

    async def release(self, leases: Sequence[tuple[int, UUID]]) -> list[int]:
        async with self.pool.connection() as conn:
            return await lifecycle.release(conn, self.worker, leases)

    async def reap(self, limit: int, jitter: float) -> list[tuple[int, str]]:
        async with self.pool.connection() as conn:
            return await lifecycle.reap(conn, self.worker, limit=limit, jitter=jitter)

    # -- the worker's own row -------------------------------------------------------------

    async def register(self, capabilities: Sequence[str]) -> None:
        async with self.pool.connection() as conn:
            await self.q.worker_register(conn, worker=self.worker, capabilities=list(capabilities))

    async def stop(self) -> None:
        async with self.pool.connection() as conn:
            await self.q.worker_stop(conn, worker=self.worker)
